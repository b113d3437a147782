//===- LowerToPlanPass.cpp - dist-lower-to-plan ---------------------------===//

#include "passes/plan/Passes.h"
#include "passes/plan/PlanLowering.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/ToolOutputFile.h"

namespace partita::plan_lowering {
#define GEN_PASS_DEF_DISTLOWERTOPLAN
#include "passes/plan/Passes.h.inc"

namespace {
struct DistLowerToPlanPass
    : public impl::DistLowerToPlanBase<DistLowerToPlanPass> {
  using Base::Base;

  void runOnOperation() final {
    LowerToPlanOptions options;
    options.function = function;
    options.reference = reference;
    options.seed = seed;
    options.initStd = initStd;
    options.fuseAdds = fuseAdds;
    mlir::FailureOr<partita::plan::Plan> plan =
        lowerToPlan(getOperation(), options);
    if (mlir::failed(plan))
      return signalPassFailure();
    markAllAnalysesPreserved();
    if (output.empty())
      return;
    std::string message;
    std::unique_ptr<llvm::ToolOutputFile> file =
        mlir::openOutputFile(output, &message);
    if (!file) {
      getOperation().emitError() << "cannot write the plan: " << message;
      return signalPassFailure();
    }
    file->os() << plan->SerializeAsString();
    file->keep();
  }
};
} // namespace
} // namespace partita::plan_lowering
