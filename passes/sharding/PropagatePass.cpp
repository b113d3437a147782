//===- PropagatePass.cpp - dist-propagate ---------------------------------===//
//
// Wires ModulePropagation into a pass; the algorithm lives in Propagation.cpp.
//
//===----------------------------------------------------------------------===//

#include "passes/sharding/ModulePropagation.h"
#include "passes/sharding/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace partita::sharding {
#define GEN_PASS_DEF_DISTPROPAGATE
#include "passes/sharding/Passes.h.inc"

namespace {
struct DistPropagatePass : public impl::DistPropagateBase<DistPropagatePass> {
  using Base::Base;

  void runOnOperation() final {
    mlir::ModuleOp module = getOperation();
    if (module.getOps<mlir::func::FuncOp>().empty())
      return;
    PropagateOptions options;
    options.recordOrigins = recordOrigins;
    mlir::FailureOr<int64_t> sweeps = propagateModule(module, options);
    if (mlir::failed(sweeps)) {
      signalPassFailure();
      return;
    }
    numIterations += *sweeps;
  }
};
} // namespace
} // namespace partita::sharding
