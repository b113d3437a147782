//===- VJPRules.cpp - the nn ops' vector-Jacobian products ----------------===//
//
// One rule per nn op, attached as an external model of VJPOpInterface. Each
// rule builds the cotangent of one operand from the result's cotangent `dy`
// with nn ops, at the forward op's location:
//
//   add/sub/mul/div   dy, -dy, dy*r and dy*l, dy/r and -(dy*y)/r
//   max               dy*greater_equal(l, r) and dy minus that (ties: lhs)
//   neg/exp/log/tanh  -dy, dy*y, dy/x, dy*(1 - y*y)
//   rsqrt/sqrt        dy*(-0.5*y*y*y), dy*0.5/y
//   relu/silu/gelu    relu_grad, silu_grad, gelu_grad
//   einsum            einsums (the result's term takes the operand's place),
//                     broadcast over operand letters found nowhere else
//   broadcast         reduce sum over the new and the expanded dimensions
//   reduce            broadcast back (mean: times 1/count; max: times
//                     greater_equal(x, broadcast(y)), every tie gets it)
//   transpose/reshape the inverse transpose, the reshape back
//   softmax           y*(dy - broadcast(sum(dy*y)))
//   layer_norm        layer_norm_grad; gamma: sum over leading dimensions of
//                     dy*layer_norm(x, 1, 0); beta: sum of dy
//   rms_norm          rms_norm_grad; gamma: sum of dy*rms_norm(x, 1)
//   rotary            rotary_grad
//   attention         attention_grad wrt q, k, v
//   embedding         embedding_grad for the table; ids none
//   cross_entropy     cross_entropy_grad for the logits; labels none
//   convert           the cotangent converted back
//   greater_equal     none (a step function)
//
// Integer operands have no cotangent (a null value).
//
//===----------------------------------------------------------------------===//

#include "passes/autodiff/VJPRules.h"
#include "dialects/nn/IR/NNOps.h"
#include "dialects/nn/Interfaces/VJPInterface.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/ErrorHandling.h"

using namespace mlir;

namespace partita::nn {
namespace {

RankedTensorType tensorType(Value value) {
  return cast<RankedTensorType>(value.getType());
}

bool isFloatTensor(Value value) {
  return isa<FloatType>(tensorType(value).getElementType());
}

/// A splat constant of `like`'s type.
Value splat(OpBuilder &b, Location loc, Type like, double value) {
  auto type = cast<RankedTensorType>(like);
  auto element = cast<FloatType>(type.getElementType());
  return ConstantOp::create(
      b, loc, type,
      DenseElementsAttr::get(type, b.getFloatAttr(element, value)));
}

Value mul(OpBuilder &b, Location loc, Value lhs, Value rhs) {
  return MulOp::create(b, loc, lhs.getType(), lhs, rhs);
}
Value div(OpBuilder &b, Location loc, Value lhs, Value rhs) {
  return DivOp::create(b, loc, lhs.getType(), lhs, rhs);
}
Value sub(OpBuilder &b, Location loc, Value lhs, Value rhs) {
  return SubOp::create(b, loc, lhs.getType(), lhs, rhs);
}
Value neg(OpBuilder &b, Location loc, Value value) {
  return NegOp::create(b, loc, value.getType(), value);
}

/// Sums `value` over `dims` (sorted), dropping them.
Value reduceSum(OpBuilder &b, Location loc, Value value,
                ArrayRef<int64_t> dims) {
  RankedTensorType type = tensorType(value);
  SmallVector<int64_t> shape;
  for (auto [i, size] : llvm::enumerate(type.getShape()))
    if (!llvm::is_contained(dims, static_cast<int64_t>(i)))
      shape.push_back(size);
  return ReduceOp::create(b, loc, type.clone(shape), ReduceKind::Sum, value,
                          dims);
}

/// Sums `value` ([..., H]) over all its leading dimensions, giving [H].
Value sumLeading(OpBuilder &b, Location loc, Value value) {
  return reduceSum(
      b, loc, value,
      llvm::to_vector(llvm::seq<int64_t>(0, tensorType(value).getRank() - 1)));
}

Value greaterEqual(OpBuilder &b, Location loc, Value lhs, Value rhs) {
  return GreaterEqualOp::create(b, loc, lhs.getType(), lhs, rhs);
}

//===----------------------------------------------------------------------===//
// Rules
//===----------------------------------------------------------------------===//

FailureOr<Value> vjp(AddOp op, OpBuilder &, unsigned, Value dy) { return dy; }

FailureOr<Value> vjp(SubOp op, OpBuilder &b, unsigned index, Value dy) {
  return index == 0 ? dy : neg(b, op.getLoc(), dy);
}

FailureOr<Value> vjp(MulOp op, OpBuilder &b, unsigned index, Value dy) {
  return mul(b, op.getLoc(), dy, index == 0 ? op.getRhs() : op.getLhs());
}

FailureOr<Value> vjp(DivOp op, OpBuilder &b, unsigned index, Value dy) {
  Location loc = op.getLoc();
  if (index == 0)
    return div(b, loc, dy, op.getRhs());
  // y = l / r: dr = -dy * y / r.
  return neg(b, loc, div(b, loc, mul(b, loc, dy, op.getResult()), op.getRhs()));
}

FailureOr<Value> vjp(MaxOp op, OpBuilder &b, unsigned index, Value dy) {
  Location loc = op.getLoc();
  Value toLhs = mul(b, loc, dy, greaterEqual(b, loc, op.getLhs(), op.getRhs()));
  return index == 0 ? toLhs : sub(b, loc, dy, toLhs);
}

FailureOr<Value> vjp(NegOp op, OpBuilder &b, unsigned, Value dy) {
  return neg(b, op.getLoc(), dy);
}

FailureOr<Value> vjp(ExpOp op, OpBuilder &b, unsigned, Value dy) {
  return mul(b, op.getLoc(), dy, op.getResult());
}

FailureOr<Value> vjp(LogOp op, OpBuilder &b, unsigned, Value dy) {
  return div(b, op.getLoc(), dy, op.getInput());
}

FailureOr<Value> vjp(TanhOp op, OpBuilder &b, unsigned, Value dy) {
  Location loc = op.getLoc();
  Value y = op.getResult();
  // Built one statement at a time: argument order is unspecified in C++.
  Value square = mul(b, loc, y, y);
  Value one = splat(b, loc, y.getType(), 1.0);
  return mul(b, loc, dy, sub(b, loc, one, square));
}

FailureOr<Value> vjp(RsqrtOp op, OpBuilder &b, unsigned, Value dy) {
  // y = x^(-1/2): dy/dx = -0.5 * x^(-3/2) = -0.5 * y^3.
  Location loc = op.getLoc();
  Value y = op.getResult();
  Value cube = mul(b, loc, mul(b, loc, y, y), y);
  Value minusHalf = splat(b, loc, y.getType(), -0.5);
  return mul(b, loc, dy, mul(b, loc, minusHalf, cube));
}

FailureOr<Value> vjp(SqrtOp op, OpBuilder &b, unsigned, Value dy) {
  // y = x^(1/2): dy/dx = 0.5 / y.
  Location loc = op.getLoc();
  Value y = op.getResult();
  Value half = splat(b, loc, y.getType(), 0.5);
  return div(b, loc, mul(b, loc, dy, half), y);
}

FailureOr<Value> vjp(ReluOp op, OpBuilder &b, unsigned, Value dy) {
  return ReluGradOp::create(b, op.getLoc(), dy.getType(), op.getInput(), dy)
      .getResult();
}

FailureOr<Value> vjp(SiluOp op, OpBuilder &b, unsigned, Value dy) {
  return SiluGradOp::create(b, op.getLoc(), dy.getType(), op.getInput(), dy)
      .getResult();
}

FailureOr<Value> vjp(GeluOp op, OpBuilder &b, unsigned, Value dy) {
  return GeluGradOp::create(b, op.getLoc(), dy.getType(), op.getInput(), dy,
                            op.getTanh())
      .getResult();
}

/// For "A,B->C", the cotangent of A is einsum("C,B->A'") with A' the letters
/// of A found in B or C, broadcast to A where A' lacks letters (summed in
/// A alone, so every element of A gets the same cotangent).
FailureOr<Value> vjp(EinsumOp op, OpBuilder &b, unsigned index, Value dy) {
  Location loc = op.getLoc();
  // The verifier has checked the spec: one term per operand, then "->".
  SmallVector<StringRef, 2> terms = op.getOperandTerms();
  StringRef resultTerm = op.getResultTerm();
  StringRef own = terms[index];
  std::string others = resultTerm.str();
  SmallVector<Value> operands{dy};
  std::string spec2 = resultTerm.str();
  for (auto [i, term] : llvm::enumerate(terms)) {
    if (i == index)
      continue;
    spec2 += "," + term.str();
    others += term.str();
    operands.push_back(op.getInputs()[i]);
  }
  RankedTensorType ownType = tensorType(op.getInputs()[index]);
  std::string kept;
  SmallVector<int64_t> keptShape, keptDims;
  for (auto [i, letter] : llvm::enumerate(own)) {
    if (others.find(letter) == std::string::npos)
      continue;
    kept.push_back(letter);
    keptShape.push_back(ownType.getDimSize(i));
    keptDims.push_back(i);
  }
  spec2 += "->" + kept;
  Value grad;
  if (operands.size() == 1 && kept == resultTerm)
    grad = dy;
  else
    grad = EinsumOp::create(b, loc, ownType.clone(keptShape), spec2, operands);
  if (kept.size() == own.size())
    return grad;
  return BroadcastOp::create(b, loc, ownType, grad, keptDims).getResult();
}

FailureOr<Value> vjp(BroadcastOp op, OpBuilder &b, unsigned, Value dy) {
  Location loc = op.getLoc();
  RankedTensorType inType = tensorType(op.getInput());
  RankedTensorType outType = tensorType(op.getResult());
  ArrayRef<int64_t> dims = op.getDims();
  SmallVector<int64_t> summed;
  for (int64_t d = 0; d < outType.getRank(); ++d) {
    auto *it = llvm::find(dims, d);
    if (it == dims.end()) {
      summed.push_back(d);
      continue;
    }
    int64_t inDim = it - dims.begin();
    if (inType.getDimSize(inDim) != outType.getDimSize(d))
      summed.push_back(d);
  }
  Value grad = summed.empty() ? dy : reduceSum(b, loc, dy, summed);
  if (grad.getType() != inType)
    grad = ReshapeOp::create(b, loc, inType, grad);
  return grad;
}

FailureOr<Value> vjp(ReduceOp op, OpBuilder &b, unsigned, Value dy) {
  Location loc = op.getLoc();
  RankedTensorType inType = tensorType(op.getInput());
  ArrayRef<int64_t> reduced = op.getDims();
  SmallVector<int64_t> keptDims;
  int64_t count = 1;
  for (int64_t d = 0; d < inType.getRank(); ++d) {
    if (llvm::is_contained(reduced, d))
      count *= inType.getDimSize(d);
    else
      keptDims.push_back(d);
  }
  auto wide = [&](Value value) -> Value {
    return BroadcastOp::create(b, loc, inType, value, keptDims);
  };
  switch (op.getKind()) {
  case ReduceKind::Sum:
    return wide(dy);
  case ReduceKind::Mean: {
    Value spread = wide(dy);
    return mul(b, loc, spread,
               splat(b, loc, inType, 1.0 / static_cast<double>(count)));
  }
  case ReduceKind::Max: {
    Value spread = wide(dy);
    Value isMax = greaterEqual(b, loc, op.getInput(), wide(op.getResult()));
    return mul(b, loc, spread, isMax);
  }
  }
  llvm_unreachable("every reduction kind is handled above");
}

FailureOr<Value> vjp(TransposeOp op, OpBuilder &b, unsigned, Value dy) {
  ArrayRef<int64_t> perm = op.getPerm();
  SmallVector<int64_t> inverse(perm.size());
  for (auto [i, p] : llvm::enumerate(perm))
    inverse[p] = i;
  return TransposeOp::create(b, op.getLoc(), op.getInput().getType(), dy,
                             inverse)
      .getResult();
}

FailureOr<Value> vjp(ReshapeOp op, OpBuilder &b, unsigned, Value dy) {
  return ReshapeOp::create(b, op.getLoc(), op.getInput().getType(), dy)
      .getResult();
}

FailureOr<Value> vjp(SoftmaxOp op, OpBuilder &b, unsigned, Value dy) {
  Location loc = op.getLoc();
  Value y = op.getResult();
  int64_t dim = op.getDim();
  Value dot = reduceSum(b, loc, mul(b, loc, dy, y), {dim});
  SmallVector<int64_t> keptDims;
  for (int64_t d = 0; d < tensorType(y).getRank(); ++d)
    if (d != dim)
      keptDims.push_back(d);
  Value wide = BroadcastOp::create(b, loc, y.getType(), dot, keptDims);
  return mul(b, loc, y, sub(b, loc, dy, wide));
}

FailureOr<Value> vjp(LayerNormOp op, OpBuilder &b, unsigned index, Value dy) {
  Location loc = op.getLoc();
  Type gammaType = op.getGamma().getType();
  switch (index) {
  case 0:
    return LayerNormGradOp::create(b, loc, dy.getType(), op.getInput(),
                                   op.getGamma(), dy, op.getEpsilonAttr())
        .getResult();
  case 1:
    // The sum over rows of dy * xhat, in one op.
    return LayerNormGammaGradOp::create(b, loc, gammaType, op.getInput(), dy,
                                        op.getEpsilonAttr())
        .getResult();
  default:
    return sumLeading(b, loc, dy);
  }
}

FailureOr<Value> vjp(RMSNormOp op, OpBuilder &b, unsigned index, Value dy) {
  Location loc = op.getLoc();
  if (index == 0)
    return RMSNormGradOp::create(b, loc, dy.getType(), op.getInput(),
                                 op.getGamma(), dy, op.getEpsilonAttr())
        .getResult();
  Value normalized = RMSNormOp::create(
      b, loc, op.getType(), op.getInput(),
      splat(b, loc, op.getGamma().getType(), 1.0), op.getEpsilonAttr());
  return sumLeading(b, loc, mul(b, loc, dy, normalized));
}

FailureOr<Value> vjp(RotaryOp op, OpBuilder &b, unsigned, Value dy) {
  return RotaryGradOp::create(b, op.getLoc(), dy.getType(), dy,
                              op.getThetaAttr())
      .getResult();
}

FailureOr<Value> vjp(AttentionOp op, OpBuilder &b, unsigned index, Value dy) {
  static constexpr AttentionGradWrt wrt[] = {
      AttentionGradWrt::Query, AttentionGradWrt::Key, AttentionGradWrt::Value};
  return AttentionGradOp::create(b, op.getLoc(),
                                 op->getOperand(index).getType(), op.getQuery(),
                                 op.getKey(), op.getValue(), dy, wrt[index],
                                 op.getCausal(), op.getScaleAttr())
      .getResult(0);
}

FailureOr<Value> vjp(EmbeddingOp op, OpBuilder &b, unsigned index, Value dy) {
  if (index != 0)
    return Value();
  return EmbeddingGradOp::create(b, op.getLoc(), op.getTable().getType(), dy,
                                 op.getIds())
      .getResult();
}

FailureOr<Value> vjp(CrossEntropyOp op, OpBuilder &b, unsigned index,
                     Value dy) {
  if (index != 0)
    return Value();
  return CrossEntropyGradOp::create(b, op.getLoc(), op.getLogits().getType(),
                                    op.getLogits(), op.getLabels(), dy)
      .getResult();
}

FailureOr<Value> vjp(ConvertOp op, OpBuilder &b, unsigned, Value dy) {
  return ConvertOp::create(b, op.getLoc(), op.getInput().getType(), dy)
      .getResult();
}

/// A step function: zero derivative almost everywhere, so no cotangent.
FailureOr<Value> vjp(GreaterEqualOp, OpBuilder &, unsigned, Value) {
  return Value();
}

FailureOr<Value> vjp(ConstantOp op, OpBuilder &, unsigned, Value) {
  return Value();
}

template <typename OpT>
struct VJPModel : public VJPOpInterface::ExternalModel<VJPModel<OpT>, OpT> {
  FailureOr<Value> buildOperandCotangent(Operation *op, OpBuilder &b,
                                         unsigned index,
                                         ValueRange resultCotangents) const {
    if (index >= op->getNumOperands() || resultCotangents.empty() ||
        resultCotangents.size() != op->getNumResults())
      return op->emitError("VJP asked for operand #")
             << index << " of " << op->getNumOperands() << " with "
             << resultCotangents.size() << " result cotangents";
    // Only the first result has a rule (attention's lse has none): the
    // others must not reach the loss, i.e. their cotangents are zeros.
    for (auto [i, cotangent] : llvm::enumerate(resultCotangents.drop_front()))
      if (!matchPattern(cotangent, m_AnyZeroFloat()))
        return op->emitError("nn-autodiff: the loss depends on result #")
               << i + 1 << " of '" << op->getName()
               << "', which has no VJP rule (only result #0 has one)";
    if (!isFloatTensor(op->getOperand(index)) ||
        !isFloatTensor(op->getResult(0)))
      return Value();
    return vjp(cast<OpT>(op), b, index, resultCotangents.front());
  }
};

template <typename... OpTs> void attach(MLIRContext *context) {
  (OpTs::template attachInterface<VJPModel<OpTs>>(*context), ...);
}
} // namespace

void registerVJPExternalModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *context, NNDialect *) {
    attach<AddOp, SubOp, MulOp, DivOp, MaxOp, NegOp, ExpOp, LogOp, TanhOp,
           RsqrtOp, SqrtOp, ReluOp, SiluOp, GeluOp, EinsumOp, BroadcastOp,
           ReduceOp, TransposeOp, ReshapeOp, SoftmaxOp, LayerNormOp, RMSNormOp,
           RotaryOp, AttentionOp, EmbeddingOp, CrossEntropyOp, ConvertOp,
           GreaterEqualOp, ConstantOp>(context);
  });
}
} // namespace partita::nn
