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
#include "passes/partition/Passes.h"
#include "passes/plan/PlanLowering.h"
#include "passes/sharding/Passes.h"

#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

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
  mlir::OwningOpRef<mlir::ModuleOp> model =
      mlir::parseSourceFile<mlir::ModuleOp>(argv[1], &context);
  if (!model)
    return 1;

  // The stages of `partita plan` (tools/partita/PlanCommand.cpp), on a copy:
  // the model as read is the reference program.
  mlir::OwningOpRef<mlir::ModuleOp> module = model->clone();
  partita::sharding::DistAnnotateOptions annotate;
  annotate.strategy = argv[3];
  annotate.mesh = argv[2];
  mlir::PassManager pm(&context);
  pm.addPass(partita::sharding::createDistAnnotate(annotate));
  pm.addPass(partita::sharding::createDistPropagate());
  pm.addPass(partita::partition::createDistPartition());
  if (mlir::failed(pm.run(*module)))
    return 1;

  partita::plan_lowering::LowerToPlanOptions options;
  options.function = "forward";
  mlir::FailureOr<partita::plan::Plan> plan =
      partita::plan_lowering::lowerToPlan(*module, options);
  auto forward = model->lookupSymbol<mlir::func::FuncOp>("forward");
  if (mlir::failed(plan) || !forward)
    return 1;
  partita::plan::Program *reference = plan->add_programs();
  bool haveMesh = true;
  if (mlir::failed(partita::plan_lowering::lowerFunction(
          forward, options, *plan->mutable_mesh(), haveMesh, *reference)))
    return 1;
  reference->set_name("reference");

  std::ofstream out(argv[4], std::ios::binary);
  if (!plan->SerializeToOstream(&out) || !out.flush()) {
    std::cerr << "cannot write " << argv[4] << "\n";
    return 1;
  }
  std::cout << "wrote " << argv[4] << ": " << plan->programs_size()
            << " programs for " << argv[2] << "\n";
  return 0;
}
