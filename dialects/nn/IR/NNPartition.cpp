//===- NNPartition.cpp - PartitionOpInterface of the nn ops ---------------===//
//
// The local forms of nn ops that cloning on local shards would get wrong:
// - softmax, layer_norm and rms_norm whose reduced dimension is split run
//   as local reductions plus all_reduces (NNCollectiveLowerings.h);
// - an embedding whose table is split on the vocabulary looks up its own
//   rows and leaves the result a partial sum; cross_entropy over a split
//   vocabulary does the same when opted in (PartitionHookOptions);
// - rotary(_grad) with a split sequence and causal attention(_grad) with a
//   split query sequence read global positions; attention over split keys
//   (opted in) merges partial softmaxes;
// - means (reduce mean, cross_entropy's mean over tokens) over split
//   dimensions are rescaled so the partial means sum to the global mean;
// - cross_entropy_grad divides by the global (real) label count;
// - a splat constant is rebuilt at its local shape; any other constant runs
//   whole (its consumers slice it).
//
//===----------------------------------------------------------------------===//

#include "dialects/nn/IR/NNPartition.h"

#include "dialects/dist/IR/DistOps.h"
#include "dialects/nn/IR/NNAttributes.h"
#include "dialects/nn/IR/NNCollectiveLowerings.h"
#include "dialects/nn/IR/NNOps.h"

#include "mlir/IR/BuiltinTypes.h"

#include <cmath>
#include <limits>

using namespace mlir;

namespace partita::nn {
namespace {

using dist::PartitionHookOptions;
using dist::PartitionState;
using Results = FailureOr<SmallVector<Value>>;

Results single(Value value) { return SmallVector<Value>{value}; }

/// The axes of the split collective factor (at most one is split), and its
/// global size.
dist::AxisNames collectiveAxes(const PartitionState &state,
                               int64_t *size = nullptr) {
  dist::AxisNames axes;
  if (!state.rule)
    return axes;
  for (int64_t f = 0; f < state.rule->getNumFactors(); ++f)
    if (state.rule->getFactor(f).kind == dist::FactorKind::Collective &&
        !state.factorAxes[f].empty()) {
      axes = state.factorAxes[f];
      if (size)
        *size = state.rule->getFactor(f).size;
    }
  return axes;
}

/// `result` times `scale` (a mean's correction), unless the scale is 1.
Value scaled(PartitionState &state, Location loc, Value result, double scale) {
  if (scale == 1.0)
    return result;
  auto type = cast<RankedTensorType>(result.getType());
  auto attr = DenseElementsAttr::get(
      type, state.builder.getFloatAttr(type.getElementType(), scale));
  Value factor = ConstantOp::create(state.builder, loc, type, attr);
  return MulOp::create(state.builder, loc, type, result, factor);
}

double defaultScale(std::optional<APFloat> scale, Value query) {
  int64_t headDim = cast<RankedTensorType>(query.getType()).getDimSize(3);
  return scale ? scale->convertToDouble()
               : 1.0 / std::sqrt(static_cast<double>(headDim));
}

// Fallbacks: no collective factor split, never whole, cloned.
bool canSplit(Operation *, int64_t, bool, const PartitionHookOptions &) {
  return false;
}
bool whole(Operation *) { return false; }
Results local(Operation *op, PartitionState &state) {
  return dist::partitionByClone(op, state);
}

// Softmax and the norms: split as the result asks.
bool canSplit(SoftmaxOp, int64_t, bool fromOperand,
              const PartitionHookOptions &) {
  return !fromOperand;
}
bool canSplit(LayerNormOp, int64_t, bool fromOperand,
              const PartitionHookOptions &) {
  return !fromOperand;
}
bool canSplit(RMSNormOp, int64_t, bool fromOperand,
              const PartitionHookOptions &) {
  return !fromOperand;
}
Results local(SoftmaxOp op, PartitionState &state) {
  dist::AxisNames axes = collectiveAxes(state);
  if (axes.empty())
    return dist::partitionByClone(op, state);
  return single(buildSplitSoftmax(state.builder, op.getLoc(), state.meshSymbol,
                                  state.axesAttr(axes), state.operands[0],
                                  op.getDim()));
}
Results local(LayerNormOp op, PartitionState &state) {
  int64_t size = 1;
  dist::AxisNames axes = collectiveAxes(state, &size);
  if (axes.empty())
    return dist::partitionByClone(op, state);
  return single(buildSplitNorm(state.builder, op.getLoc(), state.meshSymbol,
                               state.axesAttr(axes), state.operands[0],
                               state.operands[1], state.operands[2],
                               op.getEpsilon().convertToDouble(), size));
}
Results local(RMSNormOp op, PartitionState &state) {
  int64_t size = 1;
  dist::AxisNames axes = collectiveAxes(state, &size);
  if (axes.empty())
    return dist::partitionByClone(op, state);
  return single(buildSplitNorm(state.builder, op.getLoc(), state.meshSymbol,
                               state.axesAttr(axes), state.operands[0],
                               state.operands[1], std::nullopt,
                               op.getEpsilon().convertToDouble(), size));
}

// The vocabulary of the embedding (always) and cross_entropy (opted in):
// split as the operand is, leaving the result partial.
bool canSplit(EmbeddingOp, int64_t, bool fromOperand,
              const PartitionHookOptions &) {
  return fromOperand;
}
bool canSplit(CrossEntropyOp, int64_t, bool fromOperand,
              const PartitionHookOptions &options) {
  return fromOperand && options.vocabParallelCrossEntropy;
}
Results local(EmbeddingOp op, PartitionState &state) {
  dist::AxisNames axes = collectiveAxes(state);
  if (axes.empty())
    return dist::partitionByClone(op, state);
  return single(buildVocabParallelEmbedding(
      state.builder, op.getLoc(), state.meshSymbol, state.axesAttr(axes),
      state.operands[0], state.operands[1],
      cast<RankedTensorType>(state.resultTypes.front())));
}
Results local(CrossEntropyOp op, PartitionState &state) {
  dist::AxisNames axes = collectiveAxes(state);
  Results results =
      axes.empty() ? dist::partitionByClone(op, state)
                   : single(buildVocabParallelCrossEntropy(
                         state.builder, op.getLoc(), state.meshSymbol,
                         state.axesAttr(axes), state.groupSize(axes),
                         state.operands[0], state.operands[1],
                         cast<RankedTensorType>(state.resultTypes.front())));
  if (failed(results))
    return failure();
  // The mean over the tokens (every dimension of the labels).
  SmallVector<int64_t> dims;
  for (int64_t d = 0; d < state.realOperandTypes[1].getRank(); ++d)
    dims.push_back(d);
  results->front() =
      scaled(state, op.getLoc(), results->front(), state.meanScale(1, dims));
  return results;
}

Results local(ReduceOp op, PartitionState &state) {
  Results results = dist::partitionByClone(op, state);
  if (failed(results) || op.getKind() != ReduceKind::Mean)
    return results;
  results->front() = scaled(state, op.getLoc(), results->front(),
                            state.meanScale(0, op.getDims()));
  return results;
}

Results local(CrossEntropyGradOp op, PartitionState &state) {
  Results results = dist::partitionByClone(op, state);
  // With the tokens split, each shard must still divide by the global
  // (real, unpadded) count, which the kernel reads from nn.mean_count.
  if (succeeded(results) && !getMeanCount(op))
    setMeanCount(results->front().getDefiningOp(),
                 state.realOperandTypes[1].getNumElements());
  return results;
}

// Global positions along a split sequence, and split keys.
bool canSplit(AttentionOp, int64_t, bool fromOperand,
              const PartitionHookOptions &options) {
  return fromOperand && options.splitKeyAttention;
}
Results local(AttentionOp op, PartitionState &state) {
  dist::AxisNames seq = op.getCausal()
                            ? state.axesOf(dist::FactorRole::Sequence)
                            : dist::AxisNames();
  dist::AxisNames keys = state.axesOf(dist::FactorRole::KeySequence);
  if (seq.empty() && keys.empty())
    return dist::partitionByClone(op, state);
  return single(buildSplitSeqAttention(
      state.builder, op.getLoc(), state.meshSymbol, state.axesAttr(seq),
      state.axesAttr(keys), state.operands[0], state.operands[1],
      state.operands[2], op.getCausal(),
      defaultScale(op.getScale(), state.operands[0]), state.functionCache));
}
Results local(AttentionGradOp op, PartitionState &state) {
  dist::AxisNames seq = op.getCausal()
                            ? state.axesOf(dist::FactorRole::Sequence)
                            : dist::AxisNames();
  if (seq.empty())
    return dist::partitionByClone(op, state);
  // The split form recomputes P and rowsum(dy * O) from q and k; a saved
  // output and lse (operands 4 and 5) are left unread, which is correct.
  SmallVector<Value> results;
  for (AttentionGradWrt member : op.getWrtMembers())
    results.push_back(buildSplitSeqAttentionGrad(
        state.builder, op.getLoc(), state.meshSymbol, state.axesAttr(seq),
        state.operands[0], state.operands[1], state.operands[2],
        state.operands[3], member, op.getCausal(),
        defaultScale(op.getScale(), state.operands[0]), state.functionCache));
  return results;
}
Results rotary(Operation *op, PartitionState &state, double theta,
               bool inverse) {
  dist::AxisNames seq = state.axesOf(dist::FactorRole::Sequence);
  if (seq.empty())
    return dist::partitionByClone(op, state);
  return single(buildSplitSeqRotary(state.builder, op->getLoc(),
                                    state.meshSymbol, state.axesAttr(seq),
                                    state.groupSize(seq), state.operands[0],
                                    theta, inverse, state.functionCache));
}
Results local(RotaryOp op, PartitionState &state) {
  return rotary(op, state, op.getTheta().convertToDouble(), false);
}
Results local(RotaryGradOp op, PartitionState &state) {
  return rotary(op, state, op.getTheta().convertToDouble(), true);
}

// Constants: a splat is rebuilt at its local shape; any other runs whole.
DenseElementsAttr splatOf(ConstantOp op) {
  auto dense = dyn_cast<DenseElementsAttr>(op.getValue());
  return dense && dense.isSplat() ? dense : DenseElementsAttr();
}
bool whole(ConstantOp op) { return !splatOf(op); }
Results local(ConstantOp op, PartitionState &state) {
  DenseElementsAttr splat = splatOf(op);
  if (!splat)
    return dist::partitionByClone(op, state);
  auto type = cast<ShapedType>(state.resultTypes.front());
  return single(ConstantOp::create(state.builder, op.getLoc(), type,
                                   splat.resizeSplat(type)));
}

// Padding (passes/partition/Padding.h) of a dimension a non-parallel
// factor makes up alone. Reductions mask it to their identity (the
// default); these ops read or skip it in their own way.
const double kInf = std::numeric_limits<double>::infinity();
using dist::PaddingMask;
PaddingMask mask(Operation *, const dist::ShardingRule &rule, int64_t f, bool) {
  return dist::defaultPaddingMask(rule.getFactor(f));
}
// cross_entropy: padded tokens get the label -1, which its kernel skips;
// the padded vocabulary gets -inf, whose exp adds 0.
PaddingMask mask(CrossEntropyOp, const dist::ShardingRule &rule, int64_t f,
                 bool collectiveSplit) {
  const dist::Factor &factor = rule.getFactor(f);
  if (factor.kind == dist::FactorKind::Reduction)
    return collectiveSplit
               ? PaddingMask::reject("the vocabulary-parallel cross_entropy "
                                     "cannot skip padded tokens")
               : PaddingMask::fill(-1.0, /*onlyOperand=*/1);
  if (factor.role == dist::FactorRole::Vocabulary)
    return PaddingMask::fill(-kInf, /*onlyOperand=*/0);
  return dist::defaultPaddingMask(factor);
}
// cross_entropy_grad's softmax then gives the padding 0 gradient.
PaddingMask mask(CrossEntropyGradOp, const dist::ShardingRule &rule, int64_t f,
                 bool) {
  const dist::Factor &factor = rule.getFactor(f);
  if (factor.kind != dist::FactorKind::Reduction &&
      factor.role == dist::FactorRole::Vocabulary)
    return PaddingMask::fill(-kInf, /*onlyOperand=*/0);
  return dist::defaultPaddingMask(factor);
}
PaddingMask mask(ReduceOp op, const dist::ShardingRule &rule, int64_t f, bool) {
  if (rule.getFactor(f).kind == dist::FactorKind::Reduction)
    return PaddingMask::fill(op.getKind() == ReduceKind::Max ? -kInf : 0.0);
  return dist::defaultPaddingMask(rule.getFactor(f));
}
PaddingMask mask(SoftmaxOp, const dist::ShardingRule &rule, int64_t f, bool) {
  if (rule.getFactor(f).kind == dist::FactorKind::Reduction)
    return dist::defaultPaddingMask(rule.getFactor(f));
  return PaddingMask::fill(-kInf, /*onlyOperand=*/0);
}
// No id reaches the padded vocabulary, and embedding_grad's rows start at
// 0: nothing to mask.
PaddingMask embeddingMask(const dist::ShardingRule &rule, int64_t f) {
  const dist::Factor &factor = rule.getFactor(f);
  if (factor.kind != dist::FactorKind::Reduction &&
      factor.role == dist::FactorRole::Vocabulary)
    return PaddingMask::ignore();
  return dist::defaultPaddingMask(factor);
}
PaddingMask mask(EmbeddingOp, const dist::ShardingRule &rule, int64_t f, bool) {
  return embeddingMask(rule, f);
}
PaddingMask mask(EmbeddingGradOp, const dist::ShardingRule &rule, int64_t f,
                 bool) {
  return embeddingMask(rule, f);
}
// Padded keys sit at positions past every real query, so the causal mask
// drops them; zeroed, no garbage reaches the products with them.
PaddingMask attentionMask(bool causal, const dist::ShardingRule &rule,
                          int64_t f) {
  const dist::Factor &factor = rule.getFactor(f);
  if (causal && factor.kind != dist::FactorKind::Reduction &&
      factor.role == dist::FactorRole::KeySequence)
    return PaddingMask::fill(0.0);
  return dist::defaultPaddingMask(factor);
}
PaddingMask mask(AttentionOp op, const dist::ShardingRule &rule, int64_t f,
                 bool) {
  return attentionMask(op.getCausal(), rule, f);
}
PaddingMask mask(AttentionGradOp op, const dist::ShardingRule &rule, int64_t f,
                 bool) {
  return attentionMask(op.getCausal(), rule, f);
}

template <typename OpT>
struct NNPartitionModel
    : public dist::PartitionOpInterface::ExternalModel<NNPartitionModel<OpT>,
                                                       OpT> {
  bool canSplitCollectiveFactor(Operation *op, int64_t factor, bool fromOperand,
                                const PartitionHookOptions &options) const {
    return canSplit(cast<OpT>(op), factor, fromOperand, options);
  }
  bool runsWhole(Operation *op) const { return whole(cast<OpT>(op)); }
  PaddingMask getPaddingMask(Operation *op, const dist::ShardingRule &rule,
                             int64_t factor, bool collectiveSplit) const {
    return mask(cast<OpT>(op), rule, factor, collectiveSplit);
  }
  Results partition(Operation *op, PartitionState &state) const {
    return local(cast<OpT>(op), state);
  }
};

template <typename... OpTs> void attach(MLIRContext &context) {
  (OpTs::template attachInterface<NNPartitionModel<OpTs>>(context), ...);
}
} // namespace

void attachNNPartitionModels(MLIRContext &context) {
  attach<ConstantOp, SoftmaxOp, LayerNormOp, RMSNormOp, EmbeddingOp,
         CrossEntropyOp, CrossEntropyGradOp, EmbeddingGradOp, ReduceOp,
         AttentionOp, AttentionGradOp, RotaryOp, RotaryGradOp>(context);
}

} // namespace partita::nn
