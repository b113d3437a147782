//===- Partitioner.h - SPMD partitioning of one function --------*- C++ -*-===//
//
// Turns a function whose every tensor has a closed `dist.sharding` (the
// output of dist-propagate) into the program each device runs: local shapes,
// explicit dist collectives, and the function's global signature recorded as
// attributes. The algorithm and the output contract are described at the top
// of Partitioner.cpp and in Passes.td.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_PARTITION_PARTITIONER_H
#define PARTITA_PASSES_PARTITION_PARTITIONER_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/StringRef.h"

namespace partita::partition {

/// Attribute names written on a partitioned function.
/// On the function: the mesh symbol it runs on.
inline constexpr llvm::StringLiteral kMeshAttrName = "dist.mesh";
/// On each argument and result: the global (unpartitioned) tensor type.
inline constexpr llvm::StringLiteral kGlobalTypeAttrName = "dist.global_type";
/// On each argument and result: its sharding, relative to the global type
/// (`dist.sharding` itself is checked against the local type, so it is
/// removed).
inline constexpr llvm::StringLiteral kGlobalShardingAttrName =
    "dist.global_sharding";

struct PartitionOptions {
  /// A function result whose value is partial where the result's sharding
  /// is not keeps the partial sharding (the runtime reduces it when it
  /// gathers the output) instead of an all_reduce in the program.
  bool keepPartialResults = true;
  /// nn.cross_entropy with its logits split on the vocabulary runs its
  /// vocabulary-parallel form (dialects/nn/IR/NNCollectiveLowerings.h)
  /// instead of gathering the logits. Off by default: the plan lowering bounds generated label
  /// inputs by the largest embedding table, which the form's lookup in the
  /// flattened logits would enlarge.
  bool vocabParallelCrossEntropy = false;
  /// nn.attention with its keys split (on axes its queries are not split
  /// on) merges per-shard partial outputs by log-sum-exp and leaves the
  /// output partial over the key axes (NNCollectiveLowerings.h) instead of
  /// gathering the keys.
  bool splitKeyAttention = false;
  // Both are forwarded to the ops' partition hooks
  // (dist::PartitionHookOptions).
};

/// Partitions `func` in place. Checks every precondition before changing
/// anything: on failure the diagnostics name the value or op at fault and
/// `func` is left unchanged, except where a resharding step turns out to be
/// impossible midway (then the function is left partly rewritten and the
/// caller must fail the pass).
mlir::LogicalResult partitionFunction(mlir::func::FuncOp func,
                                      const PartitionOptions &options);

} // namespace partita::partition

#endif // PARTITA_PASSES_PARTITION_PARTITIONER_H
