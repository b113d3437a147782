//===- PartitionPass.cpp - dist-partition ---------------------------------===//
//
// Wires the partitioner into a pass; the algorithm lives in Partitioner.cpp.
//
//===----------------------------------------------------------------------===//

#include "passes/partition/Partitioner.h"
#include "passes/partition/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace partita::partition {
#define GEN_PASS_DEF_DISTPARTITION
#include "passes/partition/Passes.h.inc"

namespace {
struct DistPartitionPass : public impl::DistPartitionBase<DistPartitionPass> {
  using Base::Base;

  void runOnOperation() final {
    PartitionOptions options;
    options.keepPartialResults = keepPartialResults;
    options.vocabParallelCrossEntropy = vocabParallelCrossEntropy;
    options.splitKeyAttention = splitKeyAttention;
    bool failed = false;
    for (auto func : getOperation().getOps<mlir::func::FuncOp>())
      failed |= mlir::failed(partitionFunction(func, options));
    if (failed)
      signalPassFailure();
  }
};
} // namespace
} // namespace partita::partition
