//===- Padding.h - padded dimensions of a function to partition -*- C++ -*-===//
//
// Dimensions not divisible by the axes splitting them are padded, as in
// GSPMD (Xu et al. 2021, section 3.2): a dimension of size N split into n
// shards is held as ceil(N / n) elements per device, the last shards ending
// in padding. Dimensions that one op's factor links (e.g. the batch of an
// einsum's operand and result) must be padded alike, so the analysis groups
// (value, dimension) pairs into classes through the ops' factor rules and
// constraints, and gives each class that needs padding one padded size P:
// the smallest multiple of the least common multiple of the class's shard
// counts that is >= N (for one count n, P = n * ceil(N / n)). The
// partitioner then works on padded global shapes, where every split divides,
// and masks the padding before an op that reduces over it (Partitioner.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_PARTITION_PADDING_H
#define PARTITA_PASSES_PARTITION_PADDING_H

#include "dialects/dist/IR/ShardingRule.h"
#include "passes/partition/Reshard.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseMap.h"

#include <string>

namespace partita::partition {

class PaddingAnalysis {
public:
  using Rules =
      llvm::DenseMap<mlir::Operation *, mlir::FailureOr<dist::ShardingRule>>;

  /// Reads every value's sharding (arguments, op results, constraints,
  /// function results) and the ops' `rules`, computed on global types.
  /// Fails with a diagnostic when two shard counts of one class need
  /// different padded sizes that no common size serves (never, with lcm
  /// padding, unless sizes overflow) or a sharding cannot be read.
  static mlir::FailureOr<PaddingAnalysis>
  compute(mlir::func::FuncOp func, const Mesh &mesh, const Rules &rules,
          llvm::function_ref<std::string(mlir::Value)> describe);

  /// Whether any dimension of the function is padded.
  bool empty() const { return padded.empty(); }
  /// The size dimension `dim` of `value` has in the padded program.
  int64_t paddedSize(mlir::Value value, unsigned dim) const;
  bool isPadded(mlir::Value value, unsigned dim) const {
    return padded.count({value, dim});
  }
  /// The (unpadded) global type `value` had when the analysis ran.
  mlir::RankedTensorType realType(mlir::Value value) const;
  /// The global type with every padded dimension at its padded size.
  mlir::RankedTensorType paddedType(mlir::Value value) const;
  /// Why a dimension is padded: the first split in its class that does not
  /// divide it, e.g. `dimension 0 of argument #1 ("x") split over {"dp"}`.
  std::string reason(mlir::Value value, unsigned dim) const;

private:
  using Node = std::pair<mlir::Value, unsigned>;
  llvm::DenseMap<Node, int64_t> padded;
  llvm::DenseMap<Node, std::string> reasons;
  llvm::DenseMap<mlir::Value, mlir::RankedTensorType> realTypes;
};

} // namespace partita::partition

#endif // PARTITA_PASSES_PARTITION_PADDING_H
