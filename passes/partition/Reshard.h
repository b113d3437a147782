//===- Reshard.h - resharding planner ---------------------------*- C++ -*-===//
//
// Finds the cheapest sequence of local slices and collectives that turns one
// sharding of a tensor into another. It works on the plain sharding model of
// dialects/dist/IR/ShardingModel.h (its adapters read #dist.sharding and
// #dist.mesh), so the search is cheap to unit test. The algorithm, its cost
// formula and its limits are described at the top of Reshard.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_PARTITION_RESHARD_H
#define PARTITA_PASSES_PARTITION_RESHARD_H

#include "dialects/dist/IR/DistDialect.h"
#include "dialects/dist/IR/ShardingModel.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace partita::partition {

// The planner works on the one sharding model (ShardingModel.h); it takes
// whole axes only and rejects sub-axes by name.
using dist::Mesh;
using dist::ReductionKind;
using dist::Sharding;

/// The global (unsharded) shape of a tensor and the bytes of one element.
struct TensorInfo {
  llvm::SmallVector<int64_t, 4> shape;
  int64_t elementBytes = 4;
};

struct ReshardOptions {
  /// Cost weight of each axis by name (e.g. 8.0 for an inter-node axis);
  /// unlisted axes weigh 1.0. A std::map so that validation reports the
  /// first bad entry in a stable order.
  std::map<std::string, double> axisWeights;
  /// The search gives up with an error after expanding this many states.
  unsigned maxStates = 100000;
  /// A fixed cost added to every communicating step (all but local_slice),
  /// in the unit of the byte costs: a collective call's latency as the
  /// bytes a weight-1 link moves meanwhile. 0: bandwidth only. With it, a
  /// plan of more steps must save at least this much traffic per extra
  /// step (a gradient reduced on a slice and gathered, rather than reduced
  /// whole, pays only for large tensors).
  double stepCost = 0;
};

/// Step kinds, in the order used to break ties between equal plans.
enum class StepKind : uint8_t {
  LocalSlice,
  AllReduce,
  ReduceScatter,
  AllGather,
  AllToAll,
  CollectivePermute,
};
llvm::StringRef stringifyStepKind(StepKind kind);

struct ReshardStep {
  StepKind kind = StepKind::LocalSlice;
  /// LocalSlice, AllGather, ReduceScatter: the tensor dimension.
  /// AllToAll: the dimension that loses the axes. Otherwise -1.
  int64_t dim = -1;
  /// AllToAll: the dimension that gains the axes as its minor-most.
  int64_t dstDim = -1;
  /// The mesh axes the step works over: those appended (LocalSlice,
  /// ReduceScatter), removed (AllGather), moved (AllToAll) or reduced
  /// (AllReduce), in order major to minor; for CollectivePermute the axes
  /// along which devices exchange blocks, in mesh order.
  llvm::SmallVector<std::string, 2> axes;
  /// AllReduce, ReduceScatter: how partial values combine.
  ReductionKind reduction = ReductionKind::Sum;
  /// Bytes each device sends, times the largest weight among `axes`.
  double cost = 0;
  /// The sharding after this step (axes of size 1 omitted).
  Sharding result;

  /// E.g. "all_to_all(axes=[x], 0->1)".
  std::string toString() const;
};

struct ReshardPlan {
  llvm::SmallVector<ReshardStep, 4> steps;
  double cost = 0;
  /// How many search states were expanded to find the plan.
  unsigned expandedStates = 0;

  /// The steps joined by " ; ", then the total cost, e.g.
  /// "all_gather(dim=1, axes=[y]) ; all_to_all(axes=[x], 0->1) (cost 96)";
  /// an empty plan prints as "no-op (cost 0)".
  std::string toString() const;
};

/// Finds a plan of minimal cost from `source` to `target` for a tensor of
/// `tensor` on `mesh`. Fails, with a message naming the sharding, tensor
/// dimension and axes at fault, when either sharding is invalid for the
/// tensor and mesh (sub-axes included: the planner does not support them
/// yet), when the target is partial where the source is not, or when the
/// search exceeds `options.maxStates`.
llvm::Expected<ReshardPlan> planReshard(const Mesh &mesh,
                                        const TensorInfo &tensor,
                                        const Sharding &source,
                                        const Sharding &target,
                                        const ReshardOptions &options = {});

/// Formats a cost: an integer when it is one, else up to 3 decimals.
std::string formatCost(double cost);

} // namespace partita::partition

#endif // PARTITA_PASSES_PARTITION_RESHARD_H
