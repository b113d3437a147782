//===- CollectiveLowerings.cpp - exact local forms of split ops -----------===//
//
// See CollectiveLowerings.h. Reductions of the split dimension are taken
// locally, then all-reduced over the axes splitting it, and broadcast back;
// means divide by the dimension's global size.
//
//===----------------------------------------------------------------------===//

#include "passes/partition/CollectiveLowerings.h"

#include "dialects/dist/IR/DistOps.h"
#include "dialects/nn/IR/NNOps.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Sequence.h"

using namespace mlir;

namespace partita::partition {
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

Value buildVocabParallelEmbedding(OpBuilder &b, Location loc,
                                  FlatSymbolRefAttr mesh, ArrayAttr axes,
                                  Value table, Value ids,
                                  RankedTensorType resultType) {
  auto idsType = cast<RankedTensorType>(ids.getType());
  Type intType = idsType.getElementType();
  int64_t rows = cast<RankedTensorType>(table.getType()).getDimSize(0);
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

  Value rowsOut =
      nn::EmbeddingOp::create(b, loc, resultType, table, clamped);
  Type floatType = resultType.getElementType();
  auto maskTableType = RankedTensorType::get({2, 1}, floatType);
  Value maskTable = nn::ConstantOp::create(
      b, loc, maskTableType,
      DenseElementsAttr::get(maskTableType,
                             ArrayRef<Attribute>{b.getFloatAttr(floatType, 0.0),
                                                 b.getFloatAttr(floatType, 1.0)}));
  SmallVector<int64_t> maskShape(idsType.getShape());
  maskShape.push_back(1);
  auto maskType = RankedTensorType::get(maskShape, floatType);
  Value mask = nn::EmbeddingOp::create(b, loc, maskType, maskTable, keep);
  SmallVector<int64_t> allDims =
      llvm::to_vector(llvm::seq<int64_t>(0, resultType.getRank()));
  Value maskB =
      nn::BroadcastOp::create(b, loc, resultType, mask, allDims);
  return nn::MulOp::create(b, loc, resultType, rowsOut, maskB);
}

} // namespace partita::partition
