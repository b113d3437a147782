//===- NNShardingRules.cpp - sharding rules of the nn ops -----------------===//
//
// Each nn op's ShardingRuleOpInterface implementation: which operand and
// result dimensions are made of which factors, and what splitting a factor
// costs (parallel, reduction, whole, or collective).
//
// Every rule re-checks the shape relations it relies on and returns failure
// (the op stays replicated) rather than a wrong rule when they do not hold,
// so a rule is never built from IR the verifier would reject.
//
// What the partitioner must know about the kernels these rules promise:
// - reduce mean: the mean is a sum reduction whose kernel divides by the
//   *global* count of reduced elements; splitting a reduced dimension then
//   leaves per-shard partial sums of the global mean (the local kernel must
//   be given the global count, not the local one).
// - cross_entropy: likewise, the mean over tokens divides by the global
//   token count, so split token dimensions leave a partial sum.
// - rotary: the angle depends on the *global* position along seq; when seq is
//   split the partitioner must offset each shard's positions by its start.
// - attention with causal masking and a split query or key seq: the mask
//   compares global positions, so shards need their offsets too.
// - attention (grouped-query): query head h reads kv head h / (heads /
//   kv_heads) (the Llama / repeat_interleave convention), so the query heads
//   dimension is [kv_heads, group] with the kv-heads factor major.
// - cross_entropy_grad: divides by the *global* label count, so a shard of
//   split token dimensions must be given the global count (meanCount).
// - attention_grad wrt k or v with a split query seq: each shard's causal
//   mask needs its query offset, and its dk / dv is a partial sum.
// - embedding_grad with split tokens: each shard scatter-adds its own tokens
//   into a full [V, H] table, a partial sum.
//
//===----------------------------------------------------------------------===//

#include "dialects/nn/IR/NNAttributes.h"
#include "dialects/nn/IR/NNOps.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"

#include <numeric>
#include <optional>
#include <string>

using namespace mlir;
using namespace partita;
using namespace partita::nn;

using dist::FactorKind;
using dist::FactorRole;
using dist::ShardingRule;
using dist::TensorFactors;

namespace {

/// The shape of a value of static-shaped ranked tensor type, or nothing.
std::optional<ArrayRef<int64_t>> staticShape(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type || !type.hasStaticShape())
    return std::nullopt;
  return type.getShape();
}

/// The shape of attention's lse for a rank-4 `query` ([batch, heads,
/// seq_q]).
ArrayRef<int64_t> lseShape(Value query) {
  return AttentionOp::getLseType(cast<RankedTensorType>(query.getType()))
      .getShape();
}

/// Names for factors that have no conventional letter: i, j, k, ...
std::string genericName(int64_t index) {
  static constexpr StringLiteral letters = "ijklmnopqrstuvwxyz";
  if (index < (int64_t)letters.size())
    return std::string(1, letters[index]);
  return "x" + std::to_string(index);
}

/// Names of the token (leading) dimensions of embedding ids and
/// cross-entropy labels: b, s, then i, j, ...
std::string tokenName(int64_t index) {
  if (index == 0)
    return "b";
  if (index == 1)
    return "s";
  return genericName(index - 2);
}

/// One factor of `kind` per dimension of `shape`, named i, j, k, ...
TensorFactors addFactorPerDim(ShardingRule &rule, ArrayRef<int64_t> shape,
                              FactorKind kind = FactorKind::Parallel) {
  TensorFactors dims;
  for (auto [d, size] : llvm::enumerate(shape))
    dims.push_back({rule.addFactor(size, kind, genericName(d))});
  return dims;
}

/// Elementwise ops: every operand and the result have `shape`, each
/// dimension one parallel factor shared by all.
FailureOr<ShardingRule> elementwiseRule(Operation *op) {
  std::optional<ArrayRef<int64_t>> shape = staticShape(op->getResult(0));
  if (!shape)
    return failure();
  for (Value operand : op->getOperands())
    if (staticShape(operand) != shape)
      return failure();
  ShardingRule rule;
  TensorFactors dims = addFactorPerDim(rule, *shape);
  for (unsigned i = 0, e = op->getNumOperands(); i < e; ++i)
    rule.addOperand(dims);
  rule.addResult(dims);
  return rule;
}

/// The product of `shape`, or nothing when it overflows int64_t.
std::optional<int64_t> elementCount(ArrayRef<int64_t> shape) {
  int64_t count = 1;
  for (int64_t size : shape)
    if (size < 0 || llvm::MulOverflow(count, size, count))
      return std::nullopt;
  return count;
}

/// Decomposes `inShape` and `outShape` (same element count) into one common
/// sequence of factors, major to minor, as Shardy does for reshape: at each
/// step the unconsumed parts of the current input and output dimensions
/// share their gcd as a parallel factor. When the gcd is 1 (the dimensions
/// cross without a common factor, e.g. [3,4] -> [2,6]), the shortest run of
/// dimensions on each side whose sizes agree becomes whole factors, one per
/// dimension (piece), and factorization resumes after the run. Size-1
/// dimensions get no factor.
FailureOr<ShardingRule> reshapeRule(ArrayRef<int64_t> inShape,
                                    ArrayRef<int64_t> outShape) {
  std::optional<int64_t> inCount = elementCount(inShape);
  std::optional<int64_t> outCount = elementCount(outShape);
  // Zero elements have no meaningful factorization.
  if (!inCount || !outCount || *inCount != *outCount || *inCount == 0)
    return failure();

  ShardingRule rule;
  TensorFactors inDims(inShape.size()), outDims(outShape.size());
  int64_t nextName = 0;
  auto addFactor = [&](int64_t size, FactorKind kind) {
    return rule.addFactor(size, kind, genericName(nextName++));
  };

  // `i` and `j` index the current input and output dimension; `inRest` and
  // `outRest` are their parts not yet given to factors (always > 1 while the
  // index is in range: size-1 dimensions are skipped).
  size_t i = 0, j = 0;
  int64_t inRest = 1, outRest = 1;
  auto loadIn = [&] {
    while (i < inShape.size() && inShape[i] == 1)
      ++i;
    inRest = i < inShape.size() ? inShape[i] : 1;
  };
  auto loadOut = [&] {
    while (j < outShape.size() && outShape[j] == 1)
      ++j;
    outRest = j < outShape.size() ? outShape[j] : 1;
  };
  loadIn();
  loadOut();
  while (i < inShape.size() && j < outShape.size()) {
    int64_t common = std::gcd(inRest, outRest);
    if (common > 1) {
      int64_t f = addFactor(common, FactorKind::Parallel);
      inDims[i].push_back(f);
      outDims[j].push_back(f);
      inRest /= common;
      outRest /= common;
      if (inRest == 1) {
        ++i;
        loadIn();
      }
      if (outRest == 1) {
        ++j;
        loadOut();
      }
      continue;
    }

    // Misaligned: extend a run on the side with the smaller product until
    // both sides cover the same elements. Both sides have the same element
    // count left, so the smaller side always has a dimension to add.
    SmallVector<std::pair<size_t, int64_t>> inRun = {{i, inRest}};
    SmallVector<std::pair<size_t, int64_t>> outRun = {{j, outRest}};
    int64_t inProduct = inRest, outProduct = outRest;
    ++i;
    ++j;
    while (inProduct != outProduct) {
      if (inProduct < outProduct) {
        if (i >= inShape.size())
          return failure();
        inRun.push_back({i, inShape[i]});
        inProduct *= inShape[i++];
      } else {
        if (j >= outShape.size())
          return failure();
        outRun.push_back({j, outShape[j]});
        outProduct *= outShape[j++];
      }
    }
    for (auto [d, size] : inRun)
      if (size > 1)
        inDims[d].push_back(addFactor(size, FactorKind::Whole));
    for (auto [d, size] : outRun)
      if (size > 1)
        outDims[d].push_back(addFactor(size, FactorKind::Whole));
    loadIn();
    loadOut();
  }
  // Equal element counts leave only size-1 dimensions on either side.
  if (i < inShape.size() || j < outShape.size())
    return failure();
  rule.addOperand(std::move(inDims));
  rule.addResult(std::move(outDims));
  return rule;
}

/// Rules of layer_norm and rms_norm: `input` [..., H] normalized over H,
/// `params` (gamma, beta) each [H].
FailureOr<ShardingRule> normRule(Value input, ValueRange params,
                                 Value result) {
  std::optional<ArrayRef<int64_t>> shape = staticShape(input);
  if (!shape || shape->empty() || staticShape(result) != shape)
    return failure();
  for (Value param : params) {
    std::optional<ArrayRef<int64_t>> paramShape = staticShape(param);
    if (!paramShape || paramShape->size() != 1 ||
        (*paramShape)[0] != shape->back())
      return failure();
  }
  ShardingRule rule;
  TensorFactors dims = addFactorPerDim(rule, *shape);
  // The statistics (mean, variance) over H need a sum all-reduce when H is
  // split; gamma and beta are split alike.
  int64_t hidden = dims.back().front();
  rule.setKind(rule.getFactor(hidden).name, FactorKind::Collective);
  rule.addOperand(dims);
  for (size_t p = 0; p < params.size(); ++p)
    rule.addOperand({{hidden}});
  rule.addResult(dims);
  return rule;
}

/// Ops whose every tensor has one shape (the optimizers): one parallel
/// factor per dimension shared by all operands and results, except rank-0
/// operands listed in `scalars`, which get no factors.
FailureOr<ShardingRule> allParallelRule(Operation *op,
                                        ArrayRef<Value> scalars = {}) {
  std::optional<ArrayRef<int64_t>> shape = staticShape(op->getResult(0));
  if (!shape)
    return failure();
  ShardingRule rule;
  TensorFactors dims = addFactorPerDim(rule, *shape);
  for (Value operand : op->getOperands()) {
    std::optional<ArrayRef<int64_t>> operandShape = staticShape(operand);
    if (llvm::is_contained(scalars, operand) && operandShape &&
        operandShape->empty()) {
      rule.addOperand({});
      continue;
    }
    if (operandShape != shape)
      return failure();
    rule.addOperand(dims);
  }
  for (Value result : op->getResults()) {
    if (staticShape(result) != shape)
      return failure();
    rule.addResult(dims);
  }
  return rule;
}

/// Rules of layer_norm_grad and rms_norm_grad: x [..., H], gamma [H],
/// dy [..., H] -> dx [..., H]. Leading dimensions parallel; H whole (the
/// gradient needs two means over H per row).
FailureOr<ShardingRule> normGradRule(Value input, Value gamma, Value dy,
                                     Value result) {
  std::optional<ArrayRef<int64_t>> shape = staticShape(input);
  std::optional<ArrayRef<int64_t>> gammaShape = staticShape(gamma);
  if (!shape || shape->empty() || staticShape(dy) != shape ||
      staticShape(result) != shape || !gammaShape || gammaShape->size() != 1 ||
      (*gammaShape)[0] != shape->back())
    return failure();
  ShardingRule rule;
  TensorFactors dims = addFactorPerDim(rule, *shape);
  int64_t hidden = dims.back().front();
  rule.setKind(rule.getFactor(hidden).name, FactorKind::Whole);
  rule.addOperand(dims);
  rule.addOperand({{hidden}});
  rule.addOperand(dims);
  rule.addResult(dims);
  return rule;
}

/// Rules of rotary and rotary_grad: [b, s, n, d] -> the same; b, s, n
/// parallel; d whole.
FailureOr<ShardingRule> rotaryRule(Value input, Value result) {
  std::optional<ArrayRef<int64_t>> shape = staticShape(input);
  if (!shape || shape->size() != 4 || staticShape(result) != shape)
    return failure();
  ShardingRule rule;
  static constexpr StringLiteral names[] = {"b", "s", "n", "d"};
  static constexpr FactorRole roles[] = {FactorRole::None, FactorRole::Sequence,
                                         FactorRole::None, FactorRole::None};
  TensorFactors dims;
  for (auto [size, name, role] : llvm::zip(*shape, names, roles))
    dims.push_back({rule.addFactor(size, FactorKind::Parallel, name, role)});
  rule.setKind("d", FactorKind::Whole);
  rule.addOperand(dims);
  rule.addResult(dims);
  return rule;
}

} // namespace

//===----------------------------------------------------------------------===//
// Contraction
//===----------------------------------------------------------------------===//

FailureOr<ShardingRule> EinsumOp::getShardingRule() {
  SmallVector<ArrayRef<int64_t>> operandShapes;
  for (Value input : getInputs()) {
    std::optional<ArrayRef<int64_t>> shape = staticShape(input);
    if (!shape)
      return failure();
    operandShapes.push_back(*shape);
  }
  std::optional<ArrayRef<int64_t>> resultShape = staticShape(getResult());
  if (!resultShape)
    return failure();
  return ShardingRule::fromSpec(getSpec(), operandShapes, {*resultShape});
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

#define PARTITA_ELEMENTWISE_RULE(Op)                                           \
  FailureOr<ShardingRule> Op::getShardingRule() {                              \
    return elementwiseRule(getOperation());                                    \
  }
// A sum or difference of partial sums is the partial sum of the local sums
// or differences: add and sub keep a common partial sum partial.
#define PARTITA_ADDITIVE_RULE(Op)                                              \
  FailureOr<ShardingRule> Op::getShardingRule() {                              \
    FailureOr<ShardingRule> rule = elementwiseRule(getOperation());            \
    if (succeeded(rule))                                                       \
      rule->setAdditive();                                                     \
    return rule;                                                               \
  }
PARTITA_ADDITIVE_RULE(AddOp)
PARTITA_ADDITIVE_RULE(SubOp)
#undef PARTITA_ADDITIVE_RULE
PARTITA_ELEMENTWISE_RULE(MulOp)
PARTITA_ELEMENTWISE_RULE(DivOp)
PARTITA_ELEMENTWISE_RULE(MaxOp)
PARTITA_ELEMENTWISE_RULE(NegOp)
PARTITA_ELEMENTWISE_RULE(ExpOp)
PARTITA_ELEMENTWISE_RULE(LogOp)
PARTITA_ELEMENTWISE_RULE(TanhOp)
PARTITA_ELEMENTWISE_RULE(ReluOp)
PARTITA_ELEMENTWISE_RULE(SiluOp)
PARTITA_ELEMENTWISE_RULE(RsqrtOp)
PARTITA_ELEMENTWISE_RULE(SqrtOp)
PARTITA_ELEMENTWISE_RULE(GeluOp)
#undef PARTITA_ELEMENTWISE_RULE

//===----------------------------------------------------------------------===//
// Shape
//===----------------------------------------------------------------------===//

// One factor per result dimension (i, j, k, ... in result order). An input
// dimension carries the factor of the result dimension it becomes, unless it
// has size 1 and is repeated: then it has no factor, since splitting the
// result dimension does not split it. New result dimensions carry a factor
// that no operand has.
FailureOr<ShardingRule> BroadcastOp::getShardingRule() {
  std::optional<ArrayRef<int64_t>> inShape = staticShape(getInput());
  std::optional<ArrayRef<int64_t>> outShape = staticShape(getResult());
  ArrayRef<int64_t> map = getDims();
  if (!inShape || !outShape || map.size() != inShape->size())
    return failure();
  ShardingRule rule;
  TensorFactors outDims = addFactorPerDim(rule, *outShape);
  TensorFactors inDims;
  int64_t previous = -1;
  for (auto [d, size] : llvm::enumerate(*inShape)) {
    int64_t to = map[d];
    if (to <= previous || to >= (int64_t)outShape->size())
      return failure();
    previous = to;
    if (size == (*outShape)[to])
      inDims.push_back(outDims[to]);
    else if (size == 1)
      inDims.push_back({});
    else
      return failure();
  }
  rule.addOperand(std::move(inDims));
  rule.addResult(std::move(outDims));
  return rule;
}

// One factor per input dimension; kept ones are parallel, reduced ones
// reduction: partial sums for sum and mean (see the file comment on mean's
// global count), partial maxima for max.
FailureOr<ShardingRule> ReduceOp::getShardingRule() {
  std::optional<ArrayRef<int64_t>> inShape = staticShape(getInput());
  std::optional<ArrayRef<int64_t>> outShape = staticShape(getResult());
  if (!inShape || !outShape)
    return failure();
  SmallVector<bool> reduced(inShape->size(), false);
  for (int64_t d : getDims()) {
    if (d < 0 || d >= (int64_t)inShape->size() || reduced[d])
      return failure();
    reduced[d] = true;
  }
  dist::ReductionKind partialKind = getKind() == ReduceKind::Max
                                        ? dist::ReductionKind::Max
                                        : dist::ReductionKind::Sum;
  ShardingRule rule;
  TensorFactors inDims, outDims;
  SmallVector<int64_t> keptShape;
  for (auto [d, size] : llvm::enumerate(*inShape)) {
    if (reduced[d]) {
      int64_t f = rule.addFactor(size, FactorKind::Reduction, genericName(d));
      rule.setKind(rule.getFactor(f).name, FactorKind::Reduction, partialKind);
      inDims.push_back({f});
      continue;
    }
    int64_t f = rule.addFactor(size, FactorKind::Parallel, genericName(d));
    inDims.push_back({f});
    outDims.push_back({f});
    keptShape.push_back(size);
  }
  if (ArrayRef<int64_t>(keptShape) != *outShape)
    return failure();
  rule.addOperand(std::move(inDims));
  rule.addResult(std::move(outDims));
  return rule;
}

// One factor per input dimension (i, j, k, ... in input order); result
// dimension d carries the factor of input dimension perm[d].
FailureOr<ShardingRule> TransposeOp::getShardingRule() {
  std::optional<ArrayRef<int64_t>> inShape = staticShape(getInput());
  std::optional<ArrayRef<int64_t>> outShape = staticShape(getResult());
  ArrayRef<int64_t> perm = getPerm();
  if (!inShape || !outShape || perm.size() != inShape->size() ||
      outShape->size() != inShape->size())
    return failure();
  ShardingRule rule;
  TensorFactors inDims = addFactorPerDim(rule, *inShape);
  TensorFactors outDims;
  SmallVector<bool> seen(perm.size(), false);
  for (auto [d, from] : llvm::enumerate(perm)) {
    if (from < 0 || from >= (int64_t)perm.size() || seen[from] ||
        (*inShape)[from] != (*outShape)[d])
      return failure();
    seen[from] = true;
    outDims.push_back(inDims[from]);
  }
  rule.addOperand(std::move(inDims));
  rule.addResult(std::move(outDims));
  return rule;
}

FailureOr<ShardingRule> ReshapeOp::getShardingRule() {
  std::optional<ArrayRef<int64_t>> inShape = staticShape(getInput());
  std::optional<ArrayRef<int64_t>> outShape = staticShape(getResult());
  if (!inShape || !outShape)
    return failure();
  return reshapeRule(*inShape, *outShape);
}

//===----------------------------------------------------------------------===//
// Normalization and activation over a dimension
//===----------------------------------------------------------------------===//

// Parallel factors except `dim`, which is collective: split, it needs a max
// and a sum all-reduce (exact, not an approximation).
FailureOr<ShardingRule> SoftmaxOp::getShardingRule() {
  std::optional<ArrayRef<int64_t>> shape = staticShape(getInput());
  if (!shape || staticShape(getResult()) != shape || getDim() >= shape->size())
    return failure();
  ShardingRule rule;
  TensorFactors dims = addFactorPerDim(rule, *shape);
  rule.setKind(genericName(getDim()), FactorKind::Collective);
  rule.addOperand(dims);
  rule.addResult(dims);
  return rule;
}

FailureOr<ShardingRule> LayerNormOp::getShardingRule() {
  return normRule(getInput(), ValueRange{getGamma(), getBeta()}, getResult());
}

FailureOr<ShardingRule> RMSNormOp::getShardingRule() {
  return normRule(getInput(), ValueRange{getGamma()}, getResult());
}

//===----------------------------------------------------------------------===//
// Transformer blocks
//===----------------------------------------------------------------------===//

// [b, s, n, d]: b, s, n parallel; d whole, since pairs of d rotate together
// by an angle that depends on the pair's global index. s is parallel on the
// condition the file comment states (positions offset per shard).
FailureOr<ShardingRule> RotaryOp::getShardingRule() {
  return rotaryRule(getInput(), getResult());
}

// query [b, s, n, d], key [b, t, k, d], value [b, t, k, d] -> [b, s, n, d].
// Factors: b, s parallel; heads parallel (one factor "n" when n == k; for
// grouped-query attention the query heads are [k, g], the key/value heads
// [k]); the head_dim of query and key "d" is whole (the scores contract over
// it, and softmax comes before any sum could be taken); the key seq "t" is
// collective (split keys need a log-sum-exp merge of the partial outputs);
// the head_dim of value and result "v" is parallel: each output column only
// reads its value column. With the lse result [b, n, s] the key seq is
// whole (the merge of split keys is not written for it), and so is a causal
// query seq (its split local form is einsums, which have no lse).
FailureOr<ShardingRule> AttentionOp::getShardingRule() {
  std::optional<ArrayRef<int64_t>> q = staticShape(getQuery());
  std::optional<ArrayRef<int64_t>> k = staticShape(getKey());
  std::optional<ArrayRef<int64_t>> v = staticShape(getValue());
  if (!q || !k || !v || q->size() != 4 || k->size() != 4 || k != v ||
      staticShape(getResult()) != q)
    return failure();
  bool lse = bool(getLse());
  if (lse && staticShape(getLse()) != lseShape(getQuery()))
    return failure();
  int64_t heads = (*q)[2], kvHeads = (*k)[2];
  if ((*k)[0] != (*q)[0] || (*k)[3] != (*q)[3] || kvHeads <= 0 ||
      heads % kvHeads != 0)
    return failure();

  ShardingRule rule;
  int64_t b = rule.addFactor((*q)[0], FactorKind::Parallel, "b");
  int64_t s = rule.addFactor(
      (*q)[1],
      lse && getCausal() ? FactorKind::Whole : FactorKind::Parallel, "s",
      FactorRole::Sequence);
  SmallVector<int64_t, 2> queryHeads, kvHeadFactors;
  if (heads == kvHeads) {
    int64_t n = rule.addFactor(heads, FactorKind::Parallel, "n");
    queryHeads = {n};
    kvHeadFactors = {n};
  } else {
    int64_t kf = rule.addFactor(kvHeads, FactorKind::Parallel, "k");
    int64_t g = rule.addFactor(heads / kvHeads, FactorKind::Parallel, "g");
    queryHeads = {kf, g};
    kvHeadFactors = {kf};
  }
  int64_t d = rule.addFactor((*q)[3], FactorKind::Whole, "d");
  int64_t t = rule.addFactor(
      (*k)[1], lse ? FactorKind::Whole : FactorKind::Collective, "t",
      FactorRole::KeySequence);
  int64_t e = rule.addFactor((*v)[3], FactorKind::Parallel, "v",
                             FactorRole::ValueHeadDim);
  rule.addOperand({{b}, {s}, queryHeads, {d}});
  rule.addOperand({{b}, {t}, kvHeadFactors, {d}});
  rule.addOperand({{b}, {t}, kvHeadFactors, {e}});
  rule.addResult({{b}, {s}, queryHeads, {e}});
  if (lse)
    rule.addResult({{b}, queryHeads, {s}});
  return rule;
}

// table [v, h], ids [b, s, ...] -> [b, s, ..., h]. The vocabulary is
// collective: with the table split by rows each shard looks up the ids in
// its range (zeros elsewhere) and a sum all-reduce completes the rows.
FailureOr<ShardingRule> EmbeddingOp::getShardingRule() {
  std::optional<ArrayRef<int64_t>> table = staticShape(getTable());
  std::optional<ArrayRef<int64_t>> ids = staticShape(getIds());
  std::optional<ArrayRef<int64_t>> out = staticShape(getResult());
  if (!table || !ids || !out || table->size() != 2 ||
      out->size() != ids->size() + 1 || out->drop_back() != *ids ||
      out->back() != (*table)[1])
    return failure();
  ShardingRule rule;
  TensorFactors idDims;
  for (auto [d, size] : llvm::enumerate(*ids))
    idDims.push_back({rule.addFactor(size, FactorKind::Parallel, tokenName(d))});
  int64_t vocab = rule.addFactor((*table)[0], FactorKind::Collective, "v",
                                 FactorRole::Vocabulary);
  int64_t hidden = rule.addFactor((*table)[1], FactorKind::Parallel, "h");
  TensorFactors outDims = idDims;
  outDims.push_back({hidden});
  rule.addOperand({{vocab}, {hidden}});
  rule.addOperand(std::move(idDims));
  rule.addResult(std::move(outDims));
  return rule;
}

// logits [b, s, ..., v], labels [b, s, ...] -> scalar mean loss. Token
// dimensions are reductions (sum: see the file comment on the global count);
// the vocabulary is collective (a max and a sum all-reduce for logsumexp,
// and the label's logit from the shard that holds it).
FailureOr<ShardingRule> CrossEntropyOp::getShardingRule() {
  std::optional<ArrayRef<int64_t>> logits = staticShape(getLogits());
  std::optional<ArrayRef<int64_t>> labels = staticShape(getLabels());
  std::optional<ArrayRef<int64_t>> out = staticShape(getResult());
  if (!logits || !labels || !out || logits->empty() || !out->empty() ||
      logits->drop_back() != *labels)
    return failure();
  ShardingRule rule;
  TensorFactors tokenDims;
  for (auto [d, size] : llvm::enumerate(*labels))
    tokenDims.push_back(
        {rule.addFactor(size, FactorKind::Reduction, tokenName(d))});
  int64_t vocab = rule.addFactor(logits->back(), FactorKind::Collective, "v",
                                 FactorRole::Vocabulary);
  TensorFactors logitDims = tokenDims;
  logitDims.push_back({vocab});
  rule.addOperand(std::move(logitDims));
  rule.addOperand(std::move(tokenDims));
  rule.addResult({});
  return rule;
}

//===----------------------------------------------------------------------===//
// Constants
//===----------------------------------------------------------------------===//

// No operands; every result dimension parallel (each shard materializes its
// slice of the value).
FailureOr<ShardingRule> ConstantOp::getShardingRule() {
  std::optional<ArrayRef<int64_t>> shape = staticShape(getResult());
  if (!shape)
    return failure();
  ShardingRule rule;
  rule.addResult(addFactorPerDim(rule, *shape));
  return rule;
}

//===----------------------------------------------------------------------===//
// Gradients
//===----------------------------------------------------------------------===//

#define PARTITA_ELEMENTWISE_RULE(Op)                                           \
  FailureOr<ShardingRule> Op::getShardingRule() {                              \
    return elementwiseRule(getOperation());                                    \
  }
PARTITA_ELEMENTWISE_RULE(ReluGradOp)
PARTITA_ELEMENTWISE_RULE(SiluGradOp)
PARTITA_ELEMENTWISE_RULE(GeluGradOp)
PARTITA_ELEMENTWISE_RULE(GreaterEqualOp)
#undef PARTITA_ELEMENTWISE_RULE

// A convert keeps a partial sum partial only where nn-autodiff asked for
// the sum in the wider type (nn.wide_sum on a widening convert); otherwise
// the sum is taken in the input type first, as before.
FailureOr<ShardingRule> ConvertOp::getShardingRule() {
  FailureOr<ShardingRule> rule = elementwiseRule(getOperation());
  auto in = cast<FloatType>(getElementTypeOrSelf(getInput().getType()));
  auto out = cast<FloatType>(getElementTypeOrSelf(getResult().getType()));
  if (succeeded(rule) && (*this)->hasAttr(kWideSumAttrName) &&
      out.getWidth() > in.getWidth())
    rule->setAdditive();
  return rule;
}

FailureOr<ShardingRule> LayerNormGradOp::getShardingRule() {
  return normGradRule(getInput(), getGamma(), getDy(), getResult());
}

/// x [..., H], dy [..., H] -> dgamma [H]: H whole (each row's statistics
/// need all of it); the leading dimensions are summed over, so a sharded
/// one leaves a partial sum.
FailureOr<ShardingRule> LayerNormGammaGradOp::getShardingRule() {
  std::optional<ArrayRef<int64_t>> shape = staticShape(getInput());
  std::optional<ArrayRef<int64_t>> outShape = staticShape(getResult());
  if (!shape || shape->empty() || staticShape(getDy()) != shape || !outShape ||
      outShape->size() != 1 || (*outShape)[0] != shape->back())
    return failure();
  ShardingRule rule;
  TensorFactors dims;
  for (auto [d, size] : llvm::enumerate(*shape)) {
    bool last = d + 1 == shape->size();
    // A reduction factor's partials are sums by default.
    dims.push_back({rule.addFactor(
        size, last ? FactorKind::Whole : FactorKind::Reduction,
        genericName(d))});
  }
  rule.addOperand(dims);
  rule.addOperand(dims);
  rule.addResult({dims.back()});
  return rule;
}

FailureOr<ShardingRule> RMSNormGradOp::getShardingRule() {
  return normGradRule(getInput(), getGamma(), getDy(), getResult());
}

// Exactly nn.rotary's rule (the rotation by minus the angle has the same
// dependence on positions and pairs).
FailureOr<ShardingRule> RotaryGradOp::getShardingRule() {
  return rotaryRule(getDy(), getResult());
}

// query [b, s, heads, d], key [b, t, k, d], value [b, t, k, v],
// dy [b, s, heads, v]; heads is one factor "n" when heads == k, else
// [k, g] (kv-heads major, as in nn.attention's rule). One result per member
// of wrt:
// - q -> dq [b, s, heads, d]: b, s and heads parallel; d, t and v whole
//   (each dq row needs its whole softmax row over t and the full
//   contractions over d and v).
// - k or v -> dk [b, t, k, d] / dv [b, t, k, v]: b and kv heads parallel;
//   s and the group g reductions (sum: dk and dv sum over query positions
//   and over the query heads of a group); t, d and v whole.
// The kinds of s and g depend on the members: parallel for dq, reductions
// for dk and dv. An op holding dq beside dk or dv (what
// nn-fuse-attention-grad makes after partitioning) keeps them whole: a
// split there would leave one result split and another partial, which one
// rule cannot say. Without grouping, "n" is the kv heads and parallel.
// The saved forward result is dy's factors, its lse [b, heads, s].
FailureOr<ShardingRule> AttentionGradOp::getShardingRule() {
  std::optional<ArrayRef<int64_t>> q = staticShape(getQuery());
  std::optional<ArrayRef<int64_t>> k = staticShape(getKey());
  std::optional<ArrayRef<int64_t>> v = staticShape(getValue());
  std::optional<ArrayRef<int64_t>> dy = staticShape(getDy());
  if (!q || !k || !v || !dy || q->size() != 4 || k->size() != 4 || k != v ||
      dy != q)
    return failure();
  bool saved = bool(getOut());
  if (saved != bool(getLse()) ||
      (saved && (staticShape(getOut()) != q ||
                 staticShape(getLse()) != lseShape(getQuery()))))
    return failure();
  int64_t heads = (*q)[2], kvHeads = (*k)[2];
  if ((*k)[0] != (*q)[0] || (*k)[3] != (*q)[3] || kvHeads <= 0 ||
      heads % kvHeads != 0)
    return failure();
  SmallVector<AttentionGradWrt, 3> members = getWrtMembers();
  if (members.size() != getNumResults())
    return failure();
  for (auto [member, result] : llvm::zip(members, getResults()))
    if (staticShape(result) != (member == AttentionGradWrt::Query ? q : k))
      return failure();

  bool query = bitEnumContainsAny(getWrt(), AttentionGradWrt::Query);
  bool keyOrValue = bitEnumContainsAny(
      getWrt(), AttentionGradWrt::Key | AttentionGradWrt::Value);
  FactorKind seqKind = !keyOrValue ? FactorKind::Parallel
                       : !query    ? FactorKind::Reduction
                                   : FactorKind::Whole;
  ShardingRule rule;
  int64_t b = rule.addFactor((*q)[0], FactorKind::Parallel, "b");
  int64_t s = rule.addFactor((*q)[1], seqKind, "s", FactorRole::Sequence);
  SmallVector<int64_t, 2> queryHeads, kvHeadFactors;
  if (heads == kvHeads) {
    int64_t n = rule.addFactor(heads, FactorKind::Parallel, "n");
    queryHeads = {n};
    kvHeadFactors = {n};
  } else {
    int64_t kf = rule.addFactor(kvHeads, FactorKind::Parallel, "k");
    int64_t g = rule.addFactor(heads / kvHeads, seqKind, "g");
    queryHeads = {kf, g};
    kvHeadFactors = {kf};
  }
  int64_t d = rule.addFactor((*q)[3], FactorKind::Whole, "d");
  int64_t t =
      rule.addFactor((*k)[1], FactorKind::Whole, "t", FactorRole::KeySequence);
  int64_t e =
      rule.addFactor((*v)[3], FactorKind::Whole, "v", FactorRole::ValueHeadDim);
  rule.addOperand({{b}, {s}, queryHeads, {d}});
  rule.addOperand({{b}, {t}, kvHeadFactors, {d}});
  rule.addOperand({{b}, {t}, kvHeadFactors, {e}});
  rule.addOperand({{b}, {s}, queryHeads, {e}});
  if (saved) {
    rule.addOperand({{b}, {s}, queryHeads, {e}});
    rule.addOperand({{b}, queryHeads, {s}});
  }
  for (AttentionGradWrt member : members) {
    if (member == AttentionGradWrt::Query)
      rule.addResult({{b}, {s}, queryHeads, {d}});
    else if (member == AttentionGradWrt::Key)
      rule.addResult({{b}, {t}, kvHeadFactors, {d}});
    else
      rule.addResult({{b}, {t}, kvHeadFactors, {e}});
  }
  return rule;
}

// dy [b, s, ..., h], ids [b, s, ...] -> dtable [v, h]. Token dimensions are
// reductions (sum: each shard scatter-adds its tokens); the vocabulary is
// whole (a row's sum needs every token that names it); h parallel.
FailureOr<ShardingRule> EmbeddingGradOp::getShardingRule() {
  std::optional<ArrayRef<int64_t>> dy = staticShape(getDy());
  std::optional<ArrayRef<int64_t>> ids = staticShape(getIds());
  std::optional<ArrayRef<int64_t>> out = staticShape(getResult());
  if (!dy || !ids || !out || out->size() != 2 ||
      dy->size() != ids->size() + 1 || dy->drop_back() != *ids ||
      dy->back() != (*out)[1])
    return failure();
  ShardingRule rule;
  TensorFactors idDims;
  for (auto [d, size] : llvm::enumerate(*ids))
    idDims.push_back(
        {rule.addFactor(size, FactorKind::Reduction, tokenName(d))});
  int64_t vocab =
      rule.addFactor((*out)[0], FactorKind::Whole, "v", FactorRole::Vocabulary);
  int64_t hidden = rule.addFactor((*out)[1], FactorKind::Parallel, "h");
  TensorFactors dyDims = idDims;
  dyDims.push_back({hidden});
  rule.addOperand(std::move(dyDims));
  rule.addOperand(std::move(idDims));
  rule.addResult({{vocab}, {hidden}});
  return rule;
}

// logits [b, s, ..., v], labels [b, s, ...], dloss [] -> [b, s, ..., v].
// Token dimensions parallel (see the file comment on the global count);
// the vocabulary whole (each row's softmax); dloss has no factors.
FailureOr<ShardingRule> CrossEntropyGradOp::getShardingRule() {
  std::optional<ArrayRef<int64_t>> logits = staticShape(getLogits());
  std::optional<ArrayRef<int64_t>> labels = staticShape(getLabels());
  std::optional<ArrayRef<int64_t>> dloss = staticShape(getDloss());
  if (!logits || !labels || !dloss || logits->empty() || !dloss->empty() ||
      logits->drop_back() != *labels || staticShape(getResult()) != logits)
    return failure();
  ShardingRule rule;
  TensorFactors tokenDims;
  for (auto [d, size] : llvm::enumerate(*labels))
    tokenDims.push_back(
        {rule.addFactor(size, FactorKind::Parallel, tokenName(d))});
  int64_t vocab = rule.addFactor(logits->back(), FactorKind::Whole, "v",
                                 FactorRole::Vocabulary);
  TensorFactors logitDims = tokenDims;
  logitDims.push_back({vocab});
  rule.addOperand(logitDims);
  rule.addOperand(std::move(tokenDims));
  rule.addOperand({});
  rule.addResult(std::move(logitDims));
  return rule;
}

//===----------------------------------------------------------------------===//
// Optimizers
//===----------------------------------------------------------------------===//

FailureOr<ShardingRule> SGDOp::getShardingRule() {
  return allParallelRule(getOperation());
}

FailureOr<ShardingRule> AdamWOp::getShardingRule() {
  return allParallelRule(getOperation(), {getStep()});
}
