//===- DistCost.cpp - CostOpInterface of the dist ops ---------------------===//
//
// What each dist op that runs on a device costs. For the collectives the
// interesting number is wireBytes: the bytes each device sends (and, for the
// symmetric collectives, receives) under the bandwidth-optimal ring
// algorithms (Patarasuk and Yuan 2009, "Bandwidth optimal all-reduce
// algorithms for clusters of workstations"; Thakur, Rabenseifner and Gropp
// 2005, "Optimization of collective communication operations in MPICH"),
// the same factors NCCL's tests use for "bus bandwidth". With n devices in
// the group and B the bytes of the larger of input and output:
//   all_gather          (n-1)/n * B    (B = the gathered output)
//   reduce_scatter      (n-1)/n * B    (B = the full input)
//   all_reduce         2(n-1)/n * B    (a reduce-scatter, then an all-gather)
//   all_to_all          (n-1)/n * B    (a device keeps 1/n of its input)
//   collective_permute  B              (one send and one receive at most)
//   send / recv         B
// slice, mask and axis_index do not communicate.
//
// Why wire bytes and not time: the op knows its group size and payload, not
// which links the group spans, their latency or which algorithm (ring, tree,
// hierarchical) the library will pick. Those belong to the search's
// communication model, which turns wire bytes into time with its alpha-beta
// parameters per link; the ring volume is the algorithm-independent lower
// bound it starts from (a tree all-reduce moves the same bytes per device).
//
// The reductions' combines are counted as FLOPs: a ring reduce-scatter adds
// n-1 received blocks of 1/n of the input into each device's block, so
// (n-1)/n * elements; an all-reduce does the same in its first half.
// Bytes read and written stay the local compulsory traffic (input read once,
// output written once); the staging copies a library makes are not counted.
//
//===----------------------------------------------------------------------===//

#include "dialects/dist/IR/CostInterface.h"
#include "dialects/dist/IR/DistOps.h"

using namespace mlir;

namespace partita::dist {
namespace {

/// The ring fraction (n-1)/n of a group of n devices.
double ringFraction(int64_t groupSize) {
  return groupSize <= 1 ? 0.0 : double(groupSize - 1) / double(groupSize);
}

/// Adds what `op` costs beyond moving its operands and results once.
LogicalResult addCollectiveCost(AllGatherOp op, ArrayRef<TensorShape>,
                                ArrayRef<TensorShape>, OpCost &cost) {
  cost.wireBytes = ringFraction(op.getGroupSize()) * cost.bytesWritten;
  return success();
}

LogicalResult addCollectiveCost(ReduceScatterOp op,
                                ArrayRef<TensorShape> operands,
                                ArrayRef<TensorShape>, OpCost &cost) {
  double fraction = ringFraction(op.getGroupSize());
  cost.wireBytes = fraction * cost.bytesRead;
  cost.flops = fraction * operands[0].getNumElements();
  return success();
}

LogicalResult addCollectiveCost(AllReduceOp op, ArrayRef<TensorShape> operands,
                                ArrayRef<TensorShape>, OpCost &cost) {
  double fraction = ringFraction(op.getGroupSize());
  cost.wireBytes = 2 * fraction * cost.bytesRead;
  cost.flops = fraction * operands[0].getNumElements();
  return success();
}

LogicalResult addCollectiveCost(AllToAllOp op, ArrayRef<TensorShape>,
                                ArrayRef<TensorShape>, OpCost &cost) {
  cost.wireBytes = ringFraction(op.getGroupSize()) * cost.bytesRead;
  return success();
}

LogicalResult addCollectiveCost(CollectivePermuteOp op, ArrayRef<TensorShape>,
                                ArrayRef<TensorShape>, OpCost &cost) {
  // The busiest device sends or receives the payload once; pairs that map
  // a position to itself move nothing.
  ArrayRef<int64_t> pairs = op.getPairs();
  bool moves = false;
  for (size_t i = 0; i + 1 < pairs.size(); i += 2)
    moves |= pairs[i] != pairs[i + 1];
  cost.wireBytes = moves ? cost.bytesRead : 0;
  return success();
}

LogicalResult addCollectiveCost(SliceOp, ArrayRef<TensorShape>,
                                ArrayRef<TensorShape>, OpCost &cost) {
  // Only the kept block is read.
  cost.bytesRead = cost.bytesWritten;
  return success();
}

LogicalResult addCollectiveCost(MaskOp, ArrayRef<TensorShape>,
                                ArrayRef<TensorShape>, OpCost &) {
  return success();
}

LogicalResult addCollectiveCost(AxisIndexOp, ArrayRef<TensorShape>,
                                ArrayRef<TensorShape>, OpCost &) {
  return success();
}

LogicalResult addCollectiveCost(SendOp, ArrayRef<TensorShape>,
                                ArrayRef<TensorShape>, OpCost &cost) {
  cost.wireBytes = cost.bytesRead;
  return success();
}

LogicalResult addCollectiveCost(RecvOp, ArrayRef<TensorShape>,
                                ArrayRef<TensorShape>, OpCost &cost) {
  cost.wireBytes = cost.bytesWritten;
  return success();
}

template <typename OpT>
struct CollectiveCostModel
    : public CostOpInterface::ExternalModel<CollectiveCostModel<OpT>, OpT> {
  FailureOr<OpCost> getCost(Operation *op, ArrayRef<TensorShape> operands,
                            ArrayRef<TensorShape> results) const {
    if (operands.size() != op->getNumOperands() ||
        results.size() != op->getNumResults())
      return failure();
    FailureOr<OpCost> cost = getDataMovementCost(operands, results);
    if (failed(cost) ||
        failed(addCollectiveCost(cast<OpT>(op), operands, results, *cost)))
      return failure();
    return cost;
  }
};

template <typename... OpTs> void attach(MLIRContext &context) {
  (OpTs::template attachInterface<CollectiveCostModel<OpTs>>(context), ...);
}
} // namespace

void attachDistCostModels(MLIRContext &context) {
  // dist.mesh declares and dist.constraint annotates: neither runs on a
  // device (the partitioner turns a constraint into the resharding
  // collectives above, whose costs these are).
  attach<AllGatherOp, ReduceScatterOp, AllReduceOp, AllToAllOp,
         CollectivePermuteOp, SliceOp, MaskOp, AxisIndexOp, SendOp, RecvOp>(
      context);
}

} // namespace partita::dist
