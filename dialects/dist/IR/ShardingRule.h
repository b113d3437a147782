//===- ShardingRule.h - factor-based sharding rules -------------*- C++ -*-===//
//
// The value that ShardingRuleOpInterface returns: how an op's operand and
// result dimensions decompose into factors, and what splitting each factor
// means. Propagation and partitioning read only this, never the op itself.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_DIST_IR_SHARDINGRULE_H
#define PARTITA_DIALECTS_DIST_IR_SHARDINGRULE_H

#include "mlir/IR/Operation.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>

namespace partita::dist {

enum class ReductionKind : uint32_t;
/// Defined by ODS (DistAttrs.td, DistEnums.h.inc): None, Sequence,
/// KeySequence, ValueHeadDim, Vocabulary. Value-initialized it is None.
enum class FactorRole : uint32_t;

enum class FactorKind : uint8_t {
  /// Splitting it splits every operand and result that carries it alike.
  Parallel,
  /// Carried by operands only; splitting it leaves the results partial.
  Reduction,
  /// Must stay whole for the op to run locally.
  Whole,
  /// Whole for a purely local lowering, but the op has an exact
  /// collective-aware lowering that allows splitting it.
  Collective,
};

llvm::StringRef stringifyFactorKind(FactorKind kind);

struct Factor {
  int64_t size = 1;
  FactorKind kind = FactorKind::Parallel;
  /// For reduction factors: how the partial results combine (sum or max).
  /// Value-initialized it is a sum.
  ReductionKind partialKind{};
  /// A short readable name ("b", "h"); rules built from a spec use its letters.
  /// For printing only: passes find factors by kind and role.
  std::string name;
  /// What the factor is to the op's collective-aware lowering (None mostly).
  FactorRole role{};
};

/// The factors of one tensor: for each dimension, the factor indices it is
/// composed of, major to minor. A dimension of size 1 may have no factor.
using TensorFactors = llvm::SmallVector<llvm::SmallVector<int64_t, 2>, 4>;

class ShardingRule {
public:
  /// Adds a factor and returns its index.
  int64_t addFactor(int64_t size, FactorKind kind, llvm::StringRef name = {},
                    FactorRole role = {});
  void addOperand(TensorFactors dims) { operands.push_back(std::move(dims)); }
  void addResult(TensorFactors dims) { results.push_back(std::move(dims)); }

  /// Builds a rule from an einsum-like spec such as "bsh,hf->bsf": one letter
  /// per dimension, the same letter the same factor. Letters that appear in a
  /// result are parallel, the others reduction (sum). Sizes are read from the
  /// shapes; fails (with no diagnostic) when the spec and shapes disagree or
  /// a term names a letter twice.
  static mlir::FailureOr<ShardingRule>
  fromSpec(llvm::StringRef spec, llvm::ArrayRef<llvm::ArrayRef<int64_t>> operandShapes,
           llvm::ArrayRef<llvm::ArrayRef<int64_t>> resultShapes);

  /// Overrides the kind of the factor named `name` (which must exist).
  void setKind(llvm::StringRef name, FactorKind kind,
               ReductionKind partialKind = {});

  /// The first factor with `role` (not None), if any.
  std::optional<int64_t> findFactor(FactorRole role) const;

  /// Marks the op additive: its result is a sum (or difference) of its
  /// operands, element by element, every operand and the result sharing
  /// every factor. Operands that are each a partial sum over the same axes
  /// then give a result that is a partial sum over them, so propagation and
  /// the partitioner keep it partial and the sum is reduced once, after
  /// the local additions (the input gradients of Megatron's q, k and v
  /// projections; a tied embedding's two weight gradients).
  void setAdditive(bool value = true) { additive = value; }
  bool isAdditive() const { return additive; }

  llvm::ArrayRef<Factor> getFactors() const { return factors; }
  const Factor &getFactor(int64_t i) const { return factors[i]; }
  int64_t getNumFactors() const { return factors.size(); }
  llvm::ArrayRef<TensorFactors> getOperands() const { return operands; }
  llvm::ArrayRef<TensorFactors> getResults() const { return results; }
  const TensorFactors &getOperand(unsigned i) const { return operands[i]; }
  const TensorFactors &getResult(unsigned i) const { return results[i]; }

  /// Checks that the rule fits `op`: one entry per operand and result, one
  /// per dimension, and factor sizes multiplying to each dimension's size;
  /// and that it is well formed: no negative factor size, no factor twice in
  /// one tensor, no reduction factor in a result. Reports at `op`.
  mlir::LogicalResult verify(mlir::Operation *op) const;

  /// Compact form, e.g. "([b,s,h],[h,f])->([b,s,f]) {b=2,s=8,h=16,f=64}
  /// reduction={h}". A dimension with several factors prints as "i*j", one
  /// with none as "1". Factors with a role end it, e.g.
  /// " roles={s:sequence,t:key_sequence}".
  std::string toString() const;

private:
  llvm::SmallVector<Factor> factors;
  llvm::SmallVector<TensorFactors> operands;
  llvm::SmallVector<TensorFactors> results;
  bool additive = false;
};

} // namespace partita::dist

#endif // PARTITA_DIALECTS_DIST_IR_SHARDINGRULE_H
