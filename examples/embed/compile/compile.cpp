//===- compile.cpp - compiles a model to a plan with Partita's compiler ---===//
//
// Usage: partita-embed-compile MODEL.mlir MESH STRATEGY PLAN.pb
//   e.g. partita-embed-compile mlp.mlir dp=2,tp=2 dp+megatron mlp.pb
// Does what `partita plan MODEL --mesh MESH --strategy STRATEGY -o PLAN.pb`
// does for a forward model: annotate with a strategy, propagate shardings,
// partition into per-device programs and lower to a plan, with the model
// itself as the plan's "reference" program (which `partita run --check` and
// run-plan compare against). Diagnostics go to stderr.
//
//===----------------------------------------------------------------------===//

#include "dialects/InitAllDialects.h"
#include "passes/Pipelines.h"

#include "mlir/Parser/Parser.h"

#include <fstream>
#include <iostream>

int main(int argc, char **argv) {
  if (argc != 5) {
    std::cerr << "usage: " << argv[0] << " MODEL.mlir MESH STRATEGY PLAN.pb\n";
    return 2;
  }
  mlir::DialectRegistry registry;
  partita::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(argv[1], &context);
  if (!module)
    return 1;

  // What `partita plan MODEL --mesh MESH --strategy STRATEGY` compiles: the
  // same stages (passes/Pipelines.h), with the model before annotation as
  // the plan's "reference" program.
  partita::CompilerOptions options;
  options.annotate.mesh = argv[2];
  options.annotate.strategy = argv[3];
  mlir::FailureOr<partita::plan::Plan> plan =
      partita::compileToPlan(*module, options);
  if (mlir::failed(plan))
    return 1;

  std::ofstream out(argv[4], std::ios::binary);
  if (!plan->SerializeToOstream(&out) || !out.flush()) {
    std::cerr << "cannot write " << argv[4] << "\n";
    return 1;
  }
  std::cout << "wrote " << argv[4] << ": " << plan->programs_size()
            << " programs for " << argv[2] << "\n";
  return 0;
}
