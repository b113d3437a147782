//===- NNCollectiveLowerings.cpp - exact local forms of split ops ---------===//
//
// See NNCollectiveLowerings.h. Reductions of the split dimension are taken
// locally, then all-reduced over the axes splitting it, and broadcast back;
// means divide by the dimension's global size. Attention's local forms work
// in a grouped layout (query [b, s, k, g, d], scores [b, k, g, s, t]) so
// grouped-query heads need no repeat of the keys. Known limits: the scores
// are materialized per device (s_local x t), not tiled as Flash Attention
// does; the shards are contiguous blocks, so causal work is unbalanced
// (the last shard does the most; zigzag shards would even it out).
//
//===----------------------------------------------------------------------===//

#include "dialects/nn/IR/NNCollectiveLowerings.h"

#include "dialects/dist/IR/DistOps.h"
#include "dialects/nn/IR/NNOps.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Sequence.h"

#include <cmath>
#include <limits>
#include <tuple>

using namespace mlir;

namespace partita::nn {
namespace {

/// A reduction of `input` over dimension `dim` (local).
Value reduceDim(OpBuilder &b, Location loc, nn::ReduceKind kind, Value input,
                int64_t dim) {
  auto type = cast<RankedTensorType>(input.getType());
  SmallVector<int64_t> shape;
  for (auto [d, size] : llvm::enumerate(type.getShape()))
    if (static_cast<int64_t>(d) != dim)
      shape.push_back(size);
  auto resultType = RankedTensorType::get(shape, type.getElementType());
  return nn::ReduceOp::create(b, loc, resultType, kind, input, {dim});
}

/// `value` (the reduction of a tensor of `type` over `dim`) broadcast back.
Value broadcastBack(OpBuilder &b, Location loc, Value value,
                    RankedTensorType type, int64_t dim) {
  SmallVector<int64_t> dims;
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (d != dim)
      dims.push_back(d);
  return nn::BroadcastOp::create(b, loc, type, value, dims);
}

Value allReduce(OpBuilder &b, Location loc, FlatSymbolRefAttr mesh,
                ArrayAttr axes, Value value, dist::ReductionKind kind) {
  return dist::AllReduceOp::create(b, loc, value.getType(), value, mesh, axes,
                                   dist::ReductionKindAttr::get(
                                       b.getContext(), kind));
}

Value splat(OpBuilder &b, Location loc, Type type, double value) {
  auto shaped = cast<RankedTensorType>(type);
  auto attr = DenseElementsAttr::get(
      shaped, b.getFloatAttr(shaped.getElementType(), value));
  return nn::ConstantOp::create(b, loc, shaped, attr);
}

} // namespace

Value buildSplitSoftmax(OpBuilder &b, Location loc, FlatSymbolRefAttr mesh,
                        ArrayAttr axes, Value input, int64_t dim) {
  auto type = cast<RankedTensorType>(input.getType());
  Value max = allReduce(b, loc, mesh, axes,
                        reduceDim(b, loc, nn::ReduceKind::Max, input, dim),
                        dist::ReductionKind::Max);
  Value shifted = nn::SubOp::create(b, loc, type, input,
                                    broadcastBack(b, loc, max, type, dim));
  Value exp = nn::ExpOp::create(b, loc, type, shifted);
  Value sum = allReduce(b, loc, mesh, axes,
                        reduceDim(b, loc, nn::ReduceKind::Sum, exp, dim),
                        dist::ReductionKind::Sum);
  return nn::DivOp::create(b, loc, type, exp,
                           broadcastBack(b, loc, sum, type, dim));
}

Value buildSplitNorm(OpBuilder &b, Location loc, FlatSymbolRefAttr mesh,
                     ArrayAttr axes, Value input, Value gamma,
                     std::optional<Value> beta, double epsilon,
                     int64_t globalSize) {
  auto type = cast<RankedTensorType>(input.getType());
  int64_t last = type.getRank() - 1;
  auto globalMean = [&](Value value) {
    Value sum = allReduce(b, loc, mesh, axes,
                          reduceDim(b, loc, nn::ReduceKind::Sum, value, last),
                          dist::ReductionKind::Sum);
    Value scale = splat(b, loc, sum.getType(), 1.0 / globalSize);
    return nn::MulOp::create(b, loc, sum.getType(), sum, scale).getResult();
  };
  Value centered = input;
  if (beta) {
    Value mean = globalMean(input);
    centered = nn::SubOp::create(b, loc, type, input,
                                 broadcastBack(b, loc, mean, type, last));
  }
  Value square = nn::MulOp::create(b, loc, type, centered, centered);
  Value variance = globalMean(square);
  Value eps = splat(b, loc, variance.getType(), epsilon);
  Value rstd = nn::RsqrtOp::create(
      b, loc, variance.getType(),
      nn::AddOp::create(b, loc, variance.getType(), variance, eps));
  Value normed = nn::MulOp::create(b, loc, type, centered,
                                   broadcastBack(b, loc, rstd, type, last));
  Value scale = nn::BroadcastOp::create(b, loc, type, gamma,
                                        ArrayRef<int64_t>{last});
  Value result = nn::MulOp::create(b, loc, type, normed, scale);
  if (beta) {
    Value shift = nn::BroadcastOp::create(b, loc, type, *beta,
                                          ArrayRef<int64_t>{last});
    result = nn::AddOp::create(b, loc, type, result, shift);
  }
  return result;
}

namespace {
/// For ids into a vocabulary split over `axes` in blocks of `rows`: the ids
/// local to this device's block, clamped into [0, rows), and an integer
/// `keep` that is 1 where the id falls in the block and 0 elsewhere.
std::pair<Value, Value> localIds(OpBuilder &b, Location loc,
                                 FlatSymbolRefAttr mesh, ArrayAttr axes,
                                 Value ids, int64_t rows) {
  auto idsType = cast<RankedTensorType>(ids.getType());
  Type intType = idsType.getElementType();
  auto intSplat = [&](Type type, int64_t value) -> Value {
    auto shaped = cast<RankedTensorType>(type);
    return nn::ConstantOp::create(
        b, loc, shaped,
        DenseElementsAttr::get(shaped, b.getIntegerAttr(intType, value)));
  };
  auto scalar = RankedTensorType::get({}, intType);
  Value index = dist::AxisIndexOp::create(b, loc, scalar, mesh, axes);
  Value start =
      nn::MulOp::create(b, loc, scalar, index, intSplat(scalar, rows));
  Value startB = nn::BroadcastOp::create(b, loc, idsType, start,
                                         ArrayRef<int64_t>{});
  Value local = nn::SubOp::create(b, loc, idsType, ids, startB);
  Value zero = intSplat(idsType, 0);
  Value top = intSplat(idsType, rows - 1);
  Value low = nn::MaxOp::create(b, loc, idsType, local, zero);
  // min(low, top) = top - max(top - low, 0)
  Value clamped = nn::SubOp::create(
      b, loc, idsType, top,
      nn::MaxOp::create(b, loc, idsType,
                        nn::SubOp::create(b, loc, idsType, top, low), zero));
  Value diff = nn::SubOp::create(b, loc, idsType, local, clamped);
  Value absDiff = nn::MaxOp::create(
      b, loc, idsType, diff, nn::SubOp::create(b, loc, idsType, zero, diff));
  Value keep = nn::MaxOp::create(
      b, loc, idsType,
      nn::SubOp::create(b, loc, idsType, intSplat(idsType, 1), absDiff), zero);
  return {clamped, keep};
}

/// `keep` (integers 0 or 1, shape S) as floats of shape S + [1], by a lookup
/// in the table [[0], [1]].
Value floatMask(OpBuilder &b, Location loc, Value keep, Type floatType) {
  auto keepType = cast<RankedTensorType>(keep.getType());
  auto tableType = RankedTensorType::get({2, 1}, floatType);
  Value table = nn::ConstantOp::create(
      b, loc, tableType,
      DenseElementsAttr::get(tableType,
                             ArrayRef<Attribute>{b.getFloatAttr(floatType, 0.0),
                                                 b.getFloatAttr(floatType, 1.0)}));
  SmallVector<int64_t> shape(keepType.getShape());
  shape.push_back(1);
  return nn::EmbeddingOp::create(b, loc,
                                 RankedTensorType::get(shape, floatType),
                                 table, keep);
}
} // namespace

Value buildVocabParallelEmbedding(OpBuilder &b, Location loc,
                                  FlatSymbolRefAttr mesh, ArrayAttr axes,
                                  Value table, Value ids,
                                  RankedTensorType resultType) {
  int64_t rows = cast<RankedTensorType>(table.getType()).getDimSize(0);
  auto [clamped, keep] = localIds(b, loc, mesh, axes, ids, rows);
  Value rowsOut =
      nn::EmbeddingOp::create(b, loc, resultType, table, clamped);
  Value mask = floatMask(b, loc, keep, resultType.getElementType());
  SmallVector<int64_t> allDims =
      llvm::to_vector(llvm::seq<int64_t>(0, resultType.getRank()));
  Value maskB =
      nn::BroadcastOp::create(b, loc, resultType, mask, allDims);
  return nn::MulOp::create(b, loc, resultType, rowsOut, maskB);
}

Value buildVocabParallelCrossEntropy(OpBuilder &b, Location loc,
                                     FlatSymbolRefAttr mesh, ArrayAttr axes,
                                     int64_t vocabShards, Value logits,
                                     Value labels,
                                     RankedTensorType resultType) {
  auto type = cast<RankedTensorType>(logits.getType());
  auto labelsType = cast<RankedTensorType>(labels.getType());
  Type floatType = type.getElementType();
  int64_t last = type.getRank() - 1;
  int64_t rows = type.getDimSize(last);
  auto tokensType = RankedTensorType::get(labelsType.getShape(), floatType);

  // log-sum-exp over the whole vocabulary, the same on every shard.
  Value max = allReduce(b, loc, mesh, axes,
                        reduceDim(b, loc, nn::ReduceKind::Max, logits, last),
                        dist::ReductionKind::Max);
  Value exp = nn::ExpOp::create(
      b, loc, type,
      nn::SubOp::create(b, loc, type, logits,
                        broadcastBack(b, loc, max, type, last)));
  Value sum = allReduce(b, loc, mesh, axes,
                        reduceDim(b, loc, nn::ReduceKind::Sum, exp, last),
                        dist::ReductionKind::Sum);
  Value lse = nn::AddOp::create(b, loc, tokensType,
                                nn::LogOp::create(b, loc, tokensType, sum), max);

  // The label's logit where this shard holds it, else 0: a lookup in the
  // logits flattened to [tokens * rows, 1] at token * rows + local label.
  auto [clamped, keep] = localIds(b, loc, mesh, axes, labels, rows);
  int64_t tokens = labelsType.getNumElements();
  auto flatType = RankedTensorType::get({tokens * rows, 1}, floatType);
  Value flat = nn::ReshapeOp::create(b, loc, flatType, logits);
  SmallVector<APInt> bases;
  unsigned width = labelsType.getElementTypeBitWidth();
  for (int64_t t = 0; t < tokens; ++t)
    bases.push_back(APInt(width, t * rows, /*isSigned=*/true));
  Value base = nn::ConstantOp::create(
      b, loc, labelsType, DenseElementsAttr::get(labelsType, bases));
  Value index = nn::AddOp::create(b, loc, labelsType, base, clamped);
  SmallVector<int64_t> pickedShape(labelsType.getShape());
  pickedShape.push_back(1);
  auto pickedType = RankedTensorType::get(pickedShape, floatType);
  Value picked = nn::EmbeddingOp::create(b, loc, pickedType, flat, index);
  Value masked = nn::MulOp::create(b, loc, pickedType, picked,
                                   floatMask(b, loc, keep, floatType));
  Value label = nn::ReshapeOp::create(b, loc, tokensType, masked);

  // Per token lse / shards - logit[label]: summed over the shards, the loss.
  Value share = nn::MulOp::create(
      b, loc, tokensType, lse,
      splat(b, loc, tokensType, 1.0 / static_cast<double>(vocabShards)));
  Value loss = nn::SubOp::create(b, loc, tokensType, share, label);
  SmallVector<int64_t> allDims =
      llvm::to_vector(llvm::seq<int64_t>(0, labelsType.getRank()));
  return nn::ReduceOp::create(b, loc, resultType, nn::ReduceKind::Mean, loss,
                              allDims);
}

namespace {
/// A constant of `type` (floats) holding `values` (row-major), each rounded
/// to the element type to nearest.
Value floatConstant(OpBuilder &b, Location loc, RankedTensorType type,
                    ArrayRef<double> values) {
  const llvm::fltSemantics &sem =
      cast<FloatType>(type.getElementType()).getFloatSemantics();
  SmallVector<APFloat> elements;
  elements.reserve(values.size());
  for (double v : values) {
    APFloat f(v);
    bool lost = false;
    f.convert(sem, APFloat::rmNearestTiesToEven, &lost);
    elements.push_back(f);
  }
  return nn::ConstantOp::create(b, loc, type,
                                DenseElementsAttr::get(type, elements));
}

/// Global positions of this device's `length` rows of a sequence split over
/// `axes` (none: the whole sequence): iota + axis_index(axes) * length, i32.
Value positions(OpBuilder &b, Location loc, FlatSymbolRefAttr mesh,
                ArrayAttr axes, int64_t length) {
  Type i32 = b.getI32Type();
  auto type = RankedTensorType::get({length}, i32);
  SmallVector<APInt> iota;
  for (int64_t i = 0; i < length; ++i)
    iota.push_back(APInt(32, i, /*isSigned=*/true));
  Value local =
      nn::ConstantOp::create(b, loc, type, DenseElementsAttr::get(type, iota));
  if (axes.empty())
    return local;
  auto scalar = RankedTensorType::get({}, i32);
  Value index = dist::AxisIndexOp::create(b, loc, scalar, mesh, axes);
  Value rows = nn::ConstantOp::create(
      b, loc, scalar,
      DenseElementsAttr::get(scalar, b.getIntegerAttr(i32, length)));
  Value start = nn::MulOp::create(b, loc, scalar, index, rows);
  Value startB =
      nn::BroadcastOp::create(b, loc, type, start, ArrayRef<int64_t>{});
  return nn::AddOp::create(b, loc, type, local, startB);
}

/// The causal bias [s, t] of element type `floatType`: 0 where key position
/// kpos[t] <= query position qpos[s], -inf elsewhere. The integer
/// after = min(max(kpos - qpos, 0), 1) selects a row of [[0], [-inf]].
Value causalBias(OpBuilder &b, Location loc, Value qpos, Value kpos,
                 Type floatType) {
  int64_t s = cast<RankedTensorType>(qpos.getType()).getDimSize(0);
  int64_t t = cast<RankedTensorType>(kpos.getType()).getDimSize(0);
  Type i32 = b.getI32Type();
  auto type = RankedTensorType::get({s, t}, i32);
  auto intSplat = [&](int64_t value) -> Value {
    return nn::ConstantOp::create(
        b, loc, type,
        DenseElementsAttr::get(type, b.getIntegerAttr(i32, value)));
  };
  Value k = nn::BroadcastOp::create(b, loc, type, kpos, ArrayRef<int64_t>{1});
  Value q = nn::BroadcastOp::create(b, loc, type, qpos, ArrayRef<int64_t>{0});
  Value zero = intSplat(0);
  Value one = intSplat(1);
  Value diff = nn::SubOp::create(b, loc, type, k, q);
  Value ahead = nn::MaxOp::create(b, loc, type, diff, zero);
  // min(ahead, 1) = 1 - max(1 - ahead, 0)
  Value behind = nn::SubOp::create(b, loc, type, one, ahead);
  Value after = nn::SubOp::create(
      b, loc, type, one, nn::MaxOp::create(b, loc, type, behind, zero));
  auto tableType = RankedTensorType::get({2, 1}, floatType);
  Value table = floatConstant(b, loc, tableType,
                              {0.0, -std::numeric_limits<double>::infinity()});
  Value picked = nn::EmbeddingOp::create(
      b, loc, RankedTensorType::get({s, t, 1}, floatType), table, after);
  return nn::ReshapeOp::create(b, loc, RankedTensorType::get({s, t}, floatType),
                               picked);
}
} // namespace

namespace {
/// The kernel's rotary tables (runtime/lib/cpu/NNKernels.cpp) for every
/// one of `global` positions, [global, headDim] each (cosines, then sines,
/// negated when `inverse`), sliced to this device's rows over `axes`.
std::pair<Value, Value> slicedRotaryTables(OpBuilder &b, Location loc,
                                           FlatSymbolRefAttr mesh,
                                           ArrayAttr axes, Type floatType,
                                           int64_t global, int64_t seq,
                                           int64_t headDim, double theta,
                                           bool inverse) {
  SmallVector<double> cosines, sines;
  cosines.reserve(global * headDim);
  sines.reserve(global * headDim);
  for (int64_t p = 0; p < global; ++p)
    for (int64_t i = 0; i < headDim / 2; ++i) {
      double angle = static_cast<double>(p) *
                     std::pow(theta, -2.0 * static_cast<double>(i) /
                                         static_cast<double>(headDim));
      double c = std::cos(angle), sn = std::sin(angle);
      if (inverse)
        sn = -sn;
      cosines.append({c, c});
      sines.append({sn, sn});
    }
  auto tableType = RankedTensorType::get({global, headDim}, floatType);
  auto localType = RankedTensorType::get({seq, headDim}, floatType);
  auto rows = [&](ArrayRef<double> values) -> Value {
    Value table = floatConstant(b, loc, tableType, values);
    return dist::SliceOp::create(b, loc, localType, table, mesh, axes,
                                 b.getI64IntegerAttr(0));
  };
  Value cosL = rows(cosines);
  Value sinL = rows(sines);
  return {cosL, sinL};
}
} // namespace

Value buildSplitSeqRotary(OpBuilder &b, Location loc, FlatSymbolRefAttr mesh,
                          ArrayAttr axes, int64_t shards, Value input,
                          double theta, bool inverse,
                          SeqSplitCache &cache) {
  auto type = cast<RankedTensorType>(input.getType());
  Type floatType = type.getElementType();
  int64_t batch = type.getDimSize(0), seq = type.getDimSize(1),
          heads = type.getDimSize(2), headDim = type.getDimSize(3);
  int64_t half = headDim / 2;

  std::string typeKey;
  llvm::raw_string_ostream(typeKey) << floatType;
  std::string key = typeKey + "/" + std::to_string(theta) + "/" +
                    std::to_string(seq) + "x" + std::to_string(headDim) +
                    "/" + std::to_string(shards) + (inverse ? "/-" : "/+");
  for (Attribute axis : axes)
    key += "/" + cast<StringAttr>(axis).getValue().str();
  Value &cosL = cache["nn.rotary/cos/" + key];
  Value &sinL = cache["nn.rotary/sin/" + key];
  if (!cosL)
    std::tie(cosL, sinL) =
        slicedRotaryTables(b, loc, mesh, axes, floatType, seq * shards, seq,
                           headDim, theta, inverse);
  Value cosB =
      nn::BroadcastOp::create(b, loc, type, cosL, ArrayRef<int64_t>{1, 3});
  Value sinB =
      nn::BroadcastOp::create(b, loc, type, sinL, ArrayRef<int64_t>{1, 3});

  auto pairsType =
      RankedTensorType::get({batch, seq, heads, half, 2}, floatType);
  Value pairs = nn::ReshapeOp::create(b, loc, pairsType, input);
  // out[j] = sum_i x[i] Q[i][j]: out[0] = -x[1], out[1] = x[0].
  Value &turn = cache["nn.rotary/turn/" + typeKey];
  if (!turn)
    turn = floatConstant(b, loc, RankedTensorType::get({2, 2}, floatType),
                         {0.0, 1.0, -1.0, 0.0});
  Value turned = nn::EinsumOp::create(b, loc, pairsType,
                                      b.getStringAttr("bsnhi,ij->bsnhj"),
                                      ValueRange{pairs, turn});
  Value swapped = nn::ReshapeOp::create(b, loc, type, turned);
  Value straight = nn::MulOp::create(b, loc, type, input, cosB);
  Value turnedPart = nn::MulOp::create(b, loc, type, swapped, sinB);
  return nn::AddOp::create(b, loc, type, straight, turnedPart);
}

namespace {
/// Attention's operands in the grouped layout: the query (and anything of
/// its type) as [b, s, k, g, d], the scores as [b, k, g, s, t].
struct GroupedAttention {
  RankedTensorType queryType, groupedType, scoresType;
  Value grouped, scores; // the grouped query and the scaled, masked scores
};

GroupedAttention groupedScores(OpBuilder &b, Location loc,
                               FlatSymbolRefAttr mesh, ArrayAttr queryAxes,
                               ArrayAttr keyAxes, Value query, Value key,
                               bool causal, double scale,
                               SeqSplitCache &cache) {
  GroupedAttention a;
  a.queryType = cast<RankedTensorType>(query.getType());
  auto kType = cast<RankedTensorType>(key.getType());
  Type floatType = a.queryType.getElementType();
  int64_t batch = a.queryType.getDimSize(0), seqQ = a.queryType.getDimSize(1),
          heads = a.queryType.getDimSize(2),
          headDim = a.queryType.getDimSize(3);
  int64_t seqKV = kType.getDimSize(1), kvHeads = kType.getDimSize(2);
  int64_t group = heads / kvHeads;

  a.groupedType =
      RankedTensorType::get({batch, seqQ, kvHeads, group, headDim}, floatType);
  a.grouped = nn::ReshapeOp::create(b, loc, a.groupedType, query);
  a.scoresType =
      RankedTensorType::get({batch, kvHeads, group, seqQ, seqKV}, floatType);
  Value scores = nn::EinsumOp::create(b, loc, a.scoresType,
                                      b.getStringAttr("bskgd,btkd->bkgst"),
                                      ValueRange{a.grouped, key});
  scores = nn::MulOp::create(b, loc, a.scoresType, scores,
                             splat(b, loc, a.scoresType, scale));
  if (causal) {
    std::string key;
    llvm::raw_string_ostream os(key);
    os << floatType << "/" << seqQ << "/" << queryAxes << "/" << seqKV << "/"
       << keyAxes;
    Value &bias = cache["nn.attention/causal/" + key];
    if (!bias) {
      Value qpos = positions(b, loc, mesh, queryAxes, seqQ);
      Value kpos = positions(b, loc, mesh, keyAxes, seqKV);
      bias = causalBias(b, loc, qpos, kpos, floatType);
    }
    scores = nn::AddOp::create(
        b, loc, a.scoresType, scores,
        nn::BroadcastOp::create(b, loc, a.scoresType, bias,
                                ArrayRef<int64_t>{3, 4}));
  }
  a.scores = scores;
  return a;
}
} // namespace

Value buildSplitSeqAttention(OpBuilder &b, Location loc,
                             FlatSymbolRefAttr mesh, ArrayAttr queryAxes,
                             ArrayAttr keyAxes, Value query, Value key,
                             Value value, bool causal, double scale,
                             SeqSplitCache &cache) {
  GroupedAttention a = groupedScores(b, loc, mesh, queryAxes, keyAxes, query,
                                     key, causal, scale, cache);
  RankedTensorType scoresType = a.scoresType, groupedType = a.groupedType,
                   qType = a.queryType;
  Value scores = a.scores;

  Value probs;
  if (keyAxes.empty()) {
    probs = nn::SoftmaxOp::create(b, loc, scoresType, scores,
                                  b.getI64IntegerAttr(4));
  } else {
    // The split softmax without its final all_reduce of the output: each
    // device's e / l times its values is its share of the weighted sum.
    probs = buildSplitSoftmax(b, loc, mesh, keyAxes, scores, /*dim=*/4);
  }
  Value out = nn::EinsumOp::create(b, loc, groupedType,
                                   b.getStringAttr("bkgst,btkd->bskgd"),
                                   ValueRange{probs, value});
  return nn::ReshapeOp::create(b, loc, qType, out);
}

Value buildSplitSeqAttentionGrad(OpBuilder &b, Location loc,
                                 FlatSymbolRefAttr mesh, ArrayAttr queryAxes,
                                 Value query, Value key, Value value, Value dy,
                                 AttentionGradWrt wrt, bool causal,
                                 double scale, SeqSplitCache &cache) {
  GroupedAttention a =
      groupedScores(b, loc, mesh, queryAxes, b.getArrayAttr({}), query, key,
                    causal, scale, cache);
  RankedTensorType scoresType = a.scoresType, groupedType = a.groupedType;
  auto kType = cast<RankedTensorType>(key.getType());
  Value probs = nn::SoftmaxOp::create(b, loc, scoresType, a.scores,
                                      b.getI64IntegerAttr(4));
  Value dyG = nn::ReshapeOp::create(b, loc, groupedType, dy);
  auto einsum = [&](Type type, StringRef spec, Value x, Value y) -> Value {
    return nn::EinsumOp::create(b, loc, type, b.getStringAttr(spec),
                                ValueRange{x, y});
  };
  if (wrt == AttentionGradWrt::Value)
    return einsum(kType, "bkgst,bskgd->btkd", probs, dyG);

  // dS = P * (dP - rowsum(dy * O)), dP = dy V^T.
  Value out = einsum(groupedType, "bkgst,btkd->bskgd", probs, value);
  auto rowType = RankedTensorType::get(scoresType.getShape().drop_back(),
                                       scoresType.getElementType());
  Value rowDot = einsum(rowType, "bskgd,bskgd->bkgs", dyG, out);
  Value dP = einsum(scoresType, "bskgd,btkd->bkgst", dyG, value);
  Value centered = nn::SubOp::create(
      b, loc, scoresType, dP,
      nn::BroadcastOp::create(b, loc, scoresType, rowDot,
                              ArrayRef<int64_t>{0, 1, 2, 3}));
  Value dS = nn::MulOp::create(b, loc, scoresType, probs, centered);
  dS = nn::MulOp::create(b, loc, scoresType, dS,
                         splat(b, loc, scoresType, scale));
  if (wrt == AttentionGradWrt::Key)
    return einsum(kType, "bkgst,bskgd->btkd", dS, a.grouped);
  Value dq = einsum(groupedType, "bkgst,btkd->bskgd", dS, key);
  return nn::ReshapeOp::create(b, loc, a.queryType, dq);
}

} // namespace partita::nn
