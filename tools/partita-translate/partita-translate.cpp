//===- partita-translate.cpp - leave or enter MLIR
//-------------------------===//
//
// `partita-translate --to-plan in.mlir -o plan.pb` writes the runtime's plan
// (`--plan-text` prints it in protobuf text format, for tests and reading).
//
//===----------------------------------------------------------------------===//

#include "dialects/InitAllDialects.h"
#include "passes/plan/PlanLowering.h"
#include "test/lib/TestDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/Support/CommandLine.h"

#include <google/protobuf/text_format.h>

using namespace mlir;

namespace {
llvm::cl::opt<std::string>
    planFunction("plan-function",
                 llvm::cl::desc("--to-plan: function to lower (default: "
                                "@train_step, @grads, @forward, or the only "
                                "function)"),
                 llvm::cl::init(""));
llvm::cl::opt<std::string> planReference(
    "plan-reference",
    llvm::cl::desc("--to-plan: unpartitioned function to add as program "
                   "\"reference\" (for partita run --check)"),
    llvm::cl::init(""));
llvm::cl::opt<uint64_t>
    planSeed("plan-seed",
             llvm::cl::desc("--to-plan: seed of the parameter initializer"),
             llvm::cl::init(0));
llvm::cl::opt<bool> planFuseAdds(
    "plan-fuse-adds",
    llvm::cl::desc("--to-plan: fuse an add of an einsum's result into the "
                   "einsum as its addend (default on)"),
    llvm::cl::init(true));
llvm::cl::opt<bool>
    planText("plan-text",
             llvm::cl::desc("--to-plan: write protobuf text format"),
             llvm::cl::init(false));

void registerToPlan() {
  static TranslateFromMLIRRegistration toPlan(
      "to-plan", "Lower a function to the runtime's protobuf plan",
      [](ModuleOp module, llvm::raw_ostream &os) -> LogicalResult {
        partita::plan_lowering::LowerToPlanOptions options;
        options.function = planFunction;
        options.reference = planReference;
        options.seed = planSeed;
        options.fuseAdds = planFuseAdds;
        FailureOr<partita::plan::Plan> plan =
            partita::plan_lowering::lowerToPlan(module, options);
        if (failed(plan))
          return failure();
        std::string out;
        if (planText)
          google::protobuf::TextFormat::PrintToString(*plan, &out);
        else
          out = plan->SerializeAsString();
        os << out;
        return success();
      },
      [](DialectRegistry &registry) {
        partita::registerAllDialects(registry);
        // As partita-opt does: the test-only ops (ptest) lower too.
        partita::test::registerTestDialect(registry);
      });
}
} // namespace

int main(int argc, char **argv) {
  registerToPlan();
  return failed(mlirTranslateMain(argc, argv, "Partita translation driver"));
}
