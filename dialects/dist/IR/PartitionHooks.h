//===- PartitionHooks.h - what an op's partition hook is given --*- C++ -*-===//
//
// The context PartitionOpInterface's hooks receive from the partitioner:
// the local operands (already resharded to what the op's rule asks), the
// local result types, how each factor of the rule is split, and a builder
// placed where the op's local form goes. Hooks build the local form with
// plain ops of their dialect and dist collectives; nothing here depends on
// the partitioning pass (dialects never depend on passes).
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_DIST_IR_PARTITIONHOOKS_H
#define PARTITA_DIALECTS_DIST_IR_PARTITIONHOOKS_H

#include "dialects/dist/IR/ShardingModel.h"
#include "dialects/dist/IR/ShardingRule.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"

#include <optional>
#include <string>

namespace partita::dist {

/// Opt-in local forms that trade one communication pattern for another.
/// They are the partitioner's options (passes/partition/Partitioner.h),
/// forwarded to the hooks that read them.
struct PartitionHookOptions {
  /// A vocabulary split on the operand side of a loss (cross entropy) runs
  /// its vocabulary-parallel form instead of gathering the logits.
  bool vocabParallelCrossEntropy = false;
  /// A key sequence split on the operand side of attention merges partial
  /// softmaxes instead of gathering the keys.
  bool splitKeyAttention = false;
};

using AxisNames = llvm::SmallVector<std::string, 2>;

/// What a partition hook is given for one op.
struct PartitionState {
  mlir::OpBuilder &builder;
  /// The mesh symbol (for the collectives the hook emits) and the mesh.
  mlir::FlatSymbolRefAttr meshSymbol;
  const Mesh &mesh;
  /// The op's rule; null when the op runs on whole values (no rule, or
  /// PartitionOpInterface::runsWhole).
  const ShardingRule *rule = nullptr;
  /// For each factor of `rule`, the mesh axes splitting it, major to minor
  /// (empty: the factor is whole on every device).
  llvm::ArrayRef<AxisNames> factorAxes;
  /// The local operands, in the op's operand order.
  llvm::ArrayRef<mlir::Value> operands;
  /// The local result types, in the op's result order.
  llvm::ArrayRef<mlir::Type> resultTypes;
  /// Each operand's global type before any padding (the real sizes).
  llvm::ArrayRef<mlir::RankedTensorType> realOperandTypes;
  /// Whether the function pads any dimension (a mean then divides by real
  /// counts, see meanScale).
  bool padded = false;
  /// The product of the shard counts of the split reduction factors.
  int64_t meanShards = 1;
  const PartitionHookOptions &options;
  /// Values a hook builds once per function and reuses (position tables,
  /// causal biases), by a key the hook chooses. Keys should start with the
  /// op name so that hooks of different ops never collide.
  llvm::StringMap<mlir::Value> &functionCache;

  /// The axes splitting the first factor with `role`; empty when the rule
  /// has none or it is whole.
  AxisNames axesOf(FactorRole role) const;
  /// The number of devices over `axes`.
  int64_t groupSize(llvm::ArrayRef<std::string> axes) const;
  /// `axes` as the string array attribute dist ops take.
  mlir::ArrayAttr axesAttr(llvm::ArrayRef<std::string> axes) const;
  /// The factor by which a local mean over `dims` of operand `operand`
  /// (whose kernel divides by the local count) must be multiplied for the
  /// partial means to sum to the global one: the local count over the real
  /// global count where the function is padded, else 1 / meanShards.
  double meanScale(unsigned operand, llvm::ArrayRef<int64_t> dims) const;
};

/// What the partitioner does with the padding (passes/partition/Padding.h)
/// of a dimension that one non-parallel factor of an op makes up alone, so
/// that the op stays exact over it.
struct PaddingMask {
  enum class Action {
    /// Set the padding of the local operands to `value` first.
    Fill,
    /// Nothing: the op never reads it (a lookup table's padded rows).
    Ignore,
    /// Report that the op cannot run over the padding (`why`).
    Reject,
  };
  Action action = Action::Fill;
  /// For Fill: the reduction's identity (0 for a sum, -inf for a max), or
  /// what the op's kernel skips.
  double value = 0.0;
  /// For Fill: mask this operand only (else every operand carrying it).
  std::optional<unsigned> onlyOperand;
  /// For Reject: why masking does not make the op exact, as a clause
  /// ("masking its padding does not ...").
  std::string why;

  static PaddingMask fill(double value,
                          std::optional<unsigned> onlyOperand = {}) {
    return {Action::Fill, value, onlyOperand, {}};
  }
  static PaddingMask ignore() { return {Action::Ignore, 0.0, {}, {}}; }
  static PaddingMask reject(std::string why) {
    return {Action::Reject, 0.0, {}, std::move(why)};
  }
};

/// The default: a reduction factor's padding gets the identity of the way
/// its partial results combine (0 for a sum, -inf for a max); padding under
/// a whole or collective factor is rejected.
PaddingMask defaultPaddingMask(const Factor &factor);

/// Whether no result of `rule` carries factor `factor` (the default of
/// PartitionOpInterface::leavesResultsPartial).
bool carriedByNoResult(const ShardingRule &rule, int64_t factor);

/// The default local form: `op` cloned on the local operands with the local
/// result types (partial sums stay partial; the partitioner records them).
/// A clone that its verifier rejects on local types is erased and reported
/// at `op` (a rule that promises more than the op accepts).
mlir::FailureOr<llvm::SmallVector<mlir::Value>>
partitionByClone(mlir::Operation *op, PartitionState &state);

} // namespace partita::dist

#endif // PARTITA_DIALECTS_DIST_IR_PARTITIONHOOKS_H
