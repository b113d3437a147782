//===- NNCost.cpp - CostOpInterface of the nn ops -------------------------===//
//
// Each nn op's cost for given (local) operand and result shapes, in the units
// of dialects/dist/IR/CostInterface.h: FLOPs with a multiply-add as 2
// (2*m*n*k per matmul, Kaplan et al. 2020; Narayanan et al. 2021),
// transcendentals apart, and compulsory bytes (each operand read once, each
// result written once; embedding reads only the rows it looks up).
//
// Formulas (N = result elements, E = operand elements, R = rows of a norm
// or of the loss, i.e. N / last dimension, V = vocabulary):
//   einsum, two operands   2 * product of the sizes of all its letters
//   einsum, one operand    product of all its letters when it sums one
//                          (one add per input element), else 0 (a transpose)
//   add sub mul div max neg relu greater_equal   N; exp log tanh sqrt rsqrt
//   N transcendentals; the composite elementwise ops count the operations of
//   the formula in their NNOps.td description, per element:
//     silu 3 + 1 exp, gelu 4 + 1 erf (tanh form 8 + 1 tanh), relu_grad 2,
//     silu_grad 8 + 1 exp, gelu_grad 9 + erf and exp (tanh form 17 + 1 tanh)
//   broadcast transpose reshape convert constant   0 (data movement only)
//   reduce sum/max   E; mean E + N (the division)
//   softmax          4N (max, subtract, sum, divide) + N exp
//   layer_norm       7N + 3R, R rsqrt      layer_norm_grad  13N + 5R, R rsqrt
//   rms_norm         4N + 2R, R rsqrt      rms_norm_grad     9N + 4R, R rsqrt
//   rotary(_grad)    3N (a 2x2 rotation per pair: 4 mul, 2 add) and S*D
//                    sin/cos (one table per position and pair, shared by
//                    batch and heads)
//   attention        with P = batch * heads * (query, key) pairs and D the
//                    head dim: 4*P*D (Q K^T and P V) + 5P (scale, max,
//                    subtract, sum, normalize) and P exp
//   attention_grad   recomputes the probabilities (2PD + 5P, P exp), then
//                    wrt q or k: O = P V, dP = dy V^T and the result's own
//                    contraction (6PD), dS = P * (dP - rowsum(dy * O)) (2P,
//                    rowsum 2 * batch*seq_q*heads*D), scaling the result (its
//                    elements): 8PD + 7P + 2*B*Sq*Hq*D + result elements;
//                    wrt v: P^T dy only, 4PD + 5P. Several members share
//                    the probabilities, dP and dS: each adds only its own
//                    contraction (2PD) and scaling. With the forward's O
//                    and lse saved: P = exp(S - lse) is 2PD + 2P, and O =
//                    P V is not recomputed (2PD less for dq and dk)
//   attention's lse  one log and one add per query row
//   embedding        0; reads the ids and the looked-up rows (tokens * hidden)
//   embedding_grad   tokens * hidden adds; writes the whole table
//   cross_entropy    3RV + 3R + 1 (max, subtract, sum per logit; add back the
//                    max, subtract the label's logit, accumulate per row; one
//                    division), RV exp + R log
//   cross_entropy_grad  5RV + R + 1 (softmax 4RV, subtract the one-hot R,
//                    scale RV, dloss / N once), RV exp
//   sgd              6N     adamw  14N + N sqrt (step-wide scalars not counted)
//
// Causal attention: half the (query, key) pairs, Sq * Skv / 2, are counted,
// as a kernel that skips masked blocks (FlashAttention, Dao et al. 2022)
// performs. The diagonal's extra Sq / 2 pairs are ignored (relative error
// 1/Sq), and so is the imbalance between the shards of a split sequence: an
// op sees only local shapes, not a shard's offset, so it charges every shard
// the average.
//
// Known limits: the counts are of an ideal fused kernel, not of the CPU
// runtime's (which materializes the attention scores and copies for einsum
// layouts); per-op launch overheads and step-wide scalars are not counted.
//
//===----------------------------------------------------------------------===//

#include "dialects/nn/IR/NNCost.h"

#include "dialects/dist/IR/CostInterface.h"
#include "dialects/nn/IR/NNOps.h"

#include "llvm/ADT/DenseMap.h"

#include <tuple>

using namespace mlir;
using namespace partita;
using namespace partita::nn;

using dist::OpCost;
using dist::TensorShape;

namespace {

using Shapes = ArrayRef<TensorShape>;

/// The product of `shape`'s sizes from `begin` to `end`, as a double.
double product(ArrayRef<int64_t> shape, size_t begin, size_t end) {
  double count = 1;
  for (size_t i = begin; i < end && i < shape.size(); ++i)
    count *= double(shape[i]);
  return count;
}

/// Elementwise ops: `flops` and `transcendentals` per result element.
LogicalResult perElement(Shapes results, OpCost &cost, double flops,
                         double transcendentals = 0) {
  double n = results[0].getNumElements();
  cost.flops = flops * n;
  cost.transcendentals = transcendentals * n;
  return success();
}

//===----------------------------------------------------------------------===//
// Contraction
//===----------------------------------------------------------------------===//

LogicalResult addCompute(EinsumOp op, Shapes operands, Shapes results,
                         OpCost &cost) {
  SmallVector<StringRef, 2> terms = op.getOperandTerms();
  StringRef output = op.getResultTerm();
  if (terms.size() != operands.size() ||
      output.size() != results[0].shape.size())
    return failure();
  llvm::SmallDenseMap<char, int64_t> sizes;
  auto bind = [&](StringRef term, ArrayRef<int64_t> shape) {
    if (term.size() != shape.size())
      return false;
    for (auto [letter, size] : llvm::zip(term, shape)) {
      auto [it, inserted] = sizes.try_emplace(letter, size);
      if (!inserted && it->second != size)
        return false;
    }
    return true;
  };
  for (auto [term, operand] : llvm::zip(terms, operands))
    if (!bind(term, operand.shape))
      return failure();
  if (!bind(output, results[0].shape) || sizes.size() > 52)
    return failure();
  double all = 1;
  for (auto &entry : sizes)
    all *= double(entry.second);
  if (operands.size() == 2) {
    cost.flops = 2 * all;
  } else {
    bool sums = llvm::any_of(
        terms[0], [&](char letter) { return !output.contains(letter); });
    cost.flops = sums ? all : 0;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

template <typename OpT>
LogicalResult addSimpleElementwise(OpT, Shapes, Shapes results, OpCost &cost) {
  return perElement(results, cost, 1);
}
template <typename OpT>
LogicalResult addTranscendental(OpT, Shapes, Shapes results, OpCost &cost) {
  return perElement(results, cost, 0, 1);
}

// x / (1 + exp(-x)): negate, add, divide, and the exp.
LogicalResult addCompute(SiluOp, Shapes, Shapes results, OpCost &cost) {
  return perElement(results, cost, 3, 1);
}

// Exact: 0.5 * x * (1 + erf(x / sqrt(2))): scale, add, two multiplies, erf.
// Tanh: 0.5 * x * (1 + tanh(c * (x + 0.044715 * x^3))): x^3 (2), the
// coefficient, + x, * c, + 1, * 0.5, * x, and the tanh.
LogicalResult addCompute(GeluOp op, Shapes, Shapes results, OpCost &cost) {
  return perElement(results, cost, op.getTanh() ? 8 : 4, 1);
}

// dy * (x > 0): a comparison and a multiply.
LogicalResult addCompute(ReluGradOp, Shapes, Shapes results, OpCost &cost) {
  return perElement(results, cost, 2);
}

// s = sigmoid(x) (3 + exp), then dy * s * (1 + x * (1 - s)) (5).
LogicalResult addCompute(SiluGradOp, Shapes, Shapes results, OpCost &cost) {
  return perElement(results, cost, 8, 1);
}

// Exact: Phi(x) = 0.5 * (1 + erf(x / sqrt(2))) (3 + erf), phi(x) =
// exp(-x^2 / 2) / sqrt(2 pi) (3 + exp), Phi + x * phi (2), times dy (1).
// Tanh: u (x^2, x^3, coefficient, + x, * c: 5), tanh, 0.5 * (1 + t) (2),
// 1 - t^2 (2), du = c * (1 + 3 * 0.044715 * x^2) (3), 0.5 * x (1), the
// product of the three factors (2), the sum (1), times dy (1): 17.
LogicalResult addCompute(GeluGradOp op, Shapes, Shapes results, OpCost &cost) {
  if (op.getTanh())
    return perElement(results, cost, 17, 1);
  return perElement(results, cost, 9, 2);
}

LogicalResult addCompute(AddOp op, Shapes o, Shapes r, OpCost &c) {
  return addSimpleElementwise(op, o, r, c);
}
LogicalResult addCompute(SubOp op, Shapes o, Shapes r, OpCost &c) {
  return addSimpleElementwise(op, o, r, c);
}
LogicalResult addCompute(MulOp op, Shapes o, Shapes r, OpCost &c) {
  return addSimpleElementwise(op, o, r, c);
}
LogicalResult addCompute(DivOp op, Shapes o, Shapes r, OpCost &c) {
  return addSimpleElementwise(op, o, r, c);
}
LogicalResult addCompute(MaxOp op, Shapes o, Shapes r, OpCost &c) {
  return addSimpleElementwise(op, o, r, c);
}
LogicalResult addCompute(NegOp op, Shapes o, Shapes r, OpCost &c) {
  return addSimpleElementwise(op, o, r, c);
}
LogicalResult addCompute(ReluOp op, Shapes o, Shapes r, OpCost &c) {
  return addSimpleElementwise(op, o, r, c);
}
LogicalResult addCompute(GreaterEqualOp op, Shapes o, Shapes r, OpCost &c) {
  return addSimpleElementwise(op, o, r, c);
}
LogicalResult addCompute(ExpOp op, Shapes o, Shapes r, OpCost &c) {
  return addTranscendental(op, o, r, c);
}
LogicalResult addCompute(LogOp op, Shapes o, Shapes r, OpCost &c) {
  return addTranscendental(op, o, r, c);
}
LogicalResult addCompute(TanhOp op, Shapes o, Shapes r, OpCost &c) {
  return addTranscendental(op, o, r, c);
}
LogicalResult addCompute(SqrtOp op, Shapes o, Shapes r, OpCost &c) {
  return addTranscendental(op, o, r, c);
}
LogicalResult addCompute(RsqrtOp op, Shapes o, Shapes r, OpCost &c) {
  return addTranscendental(op, o, r, c);
}

//===----------------------------------------------------------------------===//
// Data movement: the default bytes, no FLOPs.
//===----------------------------------------------------------------------===//

LogicalResult addCompute(BroadcastOp, Shapes, Shapes, OpCost &) {
  return success();
}
LogicalResult addCompute(TransposeOp, Shapes, Shapes, OpCost &) {
  return success();
}
LogicalResult addCompute(ReshapeOp, Shapes, Shapes, OpCost &) {
  return success();
}
LogicalResult addCompute(ConvertOp, Shapes, Shapes, OpCost &) {
  return success();
}
LogicalResult addCompute(ConstantOp, Shapes, Shapes, OpCost &) {
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions and normalizations
//===----------------------------------------------------------------------===//

// One combine per input element (into the initial value); mean divides each
// result element once more.
LogicalResult addCompute(ReduceOp op, Shapes operands, Shapes results,
                         OpCost &cost) {
  cost.flops = operands[0].getNumElements();
  if (op.getKind() == ReduceKind::Mean)
    cost.flops += results[0].getNumElements();
  return success();
}

// max, subtract, sum, divide per element, and one exp.
LogicalResult addCompute(SoftmaxOp op, Shapes operands, Shapes results,
                         OpCost &cost) {
  // getDim() is unsigned: a negative dim (which the verifier rejects) reads
  // as out of range.
  if (op.getDim() >= operands[0].shape.size())
    return failure();
  return perElement(results, cost, 4, 1);
}

/// A norm over the last dimension: `perElement` FLOPs per element,
/// `perRow` per row and one rsqrt per row.
LogicalResult normCost(Shapes operands, OpCost &cost, double perElement,
                       double perRow) {
  ArrayRef<int64_t> shape = operands[0].shape;
  if (shape.empty())
    return failure();
  double n = operands[0].getNumElements();
  double rows = product(shape, 0, shape.size() - 1);
  cost.flops = perElement * n + perRow * rows;
  cost.transcendentals = rows;
  return success();
}

// Mean: sum (1); x - mu (1); variance: square, sum (2); per row the two
// divisions, + eps and the rsqrt; normalize, * gamma, + beta (3).
LogicalResult addCompute(LayerNormOp, Shapes operands, Shapes, OpCost &cost) {
  return normCost(operands, cost, 7, 3);
}

// Square, sum; per row the division, + eps and the rsqrt; normalize and
// * gamma.
LogicalResult addCompute(RMSNormOp, Shapes operands, Shapes, OpCost &cost) {
  return normCost(operands, cost, 4, 2);
}

// Recompute mu and r (sum, subtract, square, sum: 4; per row two divisions,
// + eps, rsqrt), xhat (1), g = dy * gamma (1), mean(g) (sum 1, divide per
// row), mean(g * xhat) (multiply, sum: 2; divide per row), then
// g - mean(g) - xhat * mean(g xhat) (3) and * r (1): 13 per element and 5
// per row.
LogicalResult addCompute(LayerNormGradOp, Shapes operands, Shapes,
                         OpCost &cost) {
  return normCost(operands, cost, 13, 5);
}

// Recompute mu and r (sum, subtract, square, sum: 4; per row two divisions,
// + eps, rsqrt), xhat (1), then dy * xhat added to its column (2): 7 per
// element and 3 per row.
LogicalResult addCompute(LayerNormGammaGradOp, Shapes operands, Shapes,
                         OpCost &cost) {
  return normCost(operands, cost, 7, 3);
}

// r (square, sum: 2; per row divide, + eps, rsqrt), g = dy * gamma (1),
// mean(g * x) (multiply, sum: 2; divide per row), r^2 per row, then
// x * r^2 * mean (2), g - ... (1), * r (1): 9 per element and 4 per row.
LogicalResult addCompute(RMSNormGradOp, Shapes operands, Shapes, OpCost &cost) {
  return normCost(operands, cost, 9, 4);
}

//===----------------------------------------------------------------------===//
// Transformer blocks
//===----------------------------------------------------------------------===//

/// Rotary and its gradient: [batch, seq, heads, head_dim].
LogicalResult rotaryCost(const TensorShape &input, OpCost &cost) {
  if (input.shape.size() != 4)
    return failure();
  cost.flops = 3 * input.getNumElements();
  cost.transcendentals = double(input.shape[1]) * double(input.shape[3]);
  return success();
}

LogicalResult addCompute(RotaryOp, Shapes operands, Shapes, OpCost &cost) {
  return rotaryCost(operands[0], cost);
}
LogicalResult addCompute(RotaryGradOp, Shapes operands, Shapes, OpCost &cost) {
  return rotaryCost(operands[0], cost);
}

/// The sizes attention's cost depends on, from query [B, Sq, Hq, D] and key
/// [B, Skv, Hkv, D].
struct AttentionSizes {
  /// (query, key) score entries over all batches and heads, halved when
  /// causal.
  double pairs;
  double headDim;
  /// B * Sq * Hq * D: the elements of the query (and of dy and O).
  double queryElements;
};

FailureOr<AttentionSizes> attentionSizes(const TensorShape &query,
                                         const TensorShape &key, bool causal) {
  if (query.shape.size() != 4 || key.shape.size() != 4)
    return failure();
  double pairs = double(query.shape[0]) * double(query.shape[2]) *
                 double(query.shape[1]) * double(key.shape[1]);
  if (causal)
    pairs /= 2;
  return AttentionSizes{pairs, double(query.shape[3]), query.getNumElements()};
}

LogicalResult addCompute(AttentionOp op, Shapes operands, Shapes results,
                         OpCost &cost) {
  FailureOr<AttentionSizes> s =
      attentionSizes(operands[0], operands[1], op.getCausal());
  if (failed(s))
    return failure();
  cost.flops = 4 * s->pairs * s->headDim + 5 * s->pairs;
  cost.transcendentals = s->pairs;
  if (op.getLse()) {
    double rows = results[1].getNumElements();
    cost.flops += rows;
    cost.transcendentals += rows;
  }
  return success();
}

LogicalResult addCompute(AttentionGradOp op, Shapes operands, Shapes results,
                         OpCost &cost) {
  FailureOr<AttentionSizes> s =
      attentionSizes(operands[0], operands[1], op.getCausal());
  if (failed(s))
    return failure();
  // The probabilities once (2PD + 5P; from a saved lse 2PD + 2P); dV =
  // P^T dy (2PD); for dq or dk, O = P V (unless saved) with rowsum(dy * O)
  // (2PD + 2 query elements), dP = dy V^T and dS (2PD + 2P), then each of
  // dq and dk (2PD, and its scale).
  bool saved = bool(op.getOut());
  double pd = s->pairs * s->headDim;
  cost.transcendentals = s->pairs;
  cost.flops = 2 * pd + (saved ? 2 : 5) * s->pairs;
  bool scores = false;
  for (auto [member, result] : llvm::zip(op.getWrtMembers(), results)) {
    cost.flops += 2 * pd;
    if (member == AttentionGradWrt::Value)
      continue;
    cost.flops += result.getNumElements();
    if (!scores)
      cost.flops += (saved ? 2 : 4) * pd + 2 * s->pairs + 2 * s->queryElements;
    scores = true;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Embedding and loss
//===----------------------------------------------------------------------===//

// A gather: only the looked-up rows of the table are read.
LogicalResult addCompute(EmbeddingOp, Shapes operands, Shapes results,
                         OpCost &cost) {
  std::optional<double> table = dist::getBytes(operands[0]);
  std::optional<double> ids = dist::getBytes(operands[1]);
  std::optional<double> rows = dist::getBytes(results[0]);
  if (!table || !ids || !rows)
    return failure();
  cost.bytesRead = *ids + *rows;
  return success();
}

// A scatter-add of every dy row into the table.
LogicalResult addCompute(EmbeddingGradOp, Shapes operands, Shapes,
                         OpCost &cost) {
  cost.flops = operands[0].getNumElements();
  return success();
}

/// Rows (tokens) and vocabulary of logits [..., V].
std::optional<std::pair<double, double>> logitRows(const TensorShape &logits) {
  if (logits.shape.empty())
    return std::nullopt;
  size_t rank = logits.shape.size();
  return std::make_pair(product(logits.shape, 0, rank - 1),
                        double(logits.shape[rank - 1]));
}

LogicalResult addCompute(CrossEntropyOp, Shapes operands, Shapes,
                         OpCost &cost) {
  auto rv = logitRows(operands[0]);
  if (!rv)
    return failure();
  auto [rows, vocab] = *rv;
  cost.flops = 3 * rows * vocab + 3 * rows + 1;
  cost.transcendentals = rows * vocab + rows;
  return success();
}

LogicalResult addCompute(CrossEntropyGradOp, Shapes operands, Shapes,
                         OpCost &cost) {
  auto rv = logitRows(operands[0]);
  if (!rv)
    return failure();
  auto [rows, vocab] = *rv;
  cost.flops = 5 * rows * vocab + rows + 1;
  cost.transcendentals = rows * vocab;
  return success();
}

//===----------------------------------------------------------------------===//
// Optimizers
//===----------------------------------------------------------------------===//

// g + wd * p, momentum * buf + g2, p - lr * buf': two each.
LogicalResult addCompute(SGDOp, Shapes operands, Shapes, OpCost &cost) {
  cost.flops = 6 * operands[0].getNumElements();
  return success();
}

// p * (1 - lr * wd) (1), m' (3), v' (4), the two bias corrections (2), the
// sqrt, + eps (1), the division (1), * lr (1), the subtraction (1).
LogicalResult addCompute(AdamWOp, Shapes operands, Shapes, OpCost &cost) {
  double n = operands[0].getNumElements();
  cost.flops = 14 * n;
  cost.transcendentals = n;
  return success();
}

template <typename OpT>
struct NNCostModel
    : public dist::CostOpInterface::ExternalModel<NNCostModel<OpT>, OpT> {
  FailureOr<OpCost> getCost(Operation *op, Shapes operands,
                            Shapes results) const {
    if (operands.size() != op->getNumOperands() ||
        results.size() != op->getNumResults())
      return failure();
    FailureOr<OpCost> cost = dist::getDataMovementCost(operands, results);
    if (failed(cost) ||
        failed(addCompute(cast<OpT>(op), operands, results, *cost)))
      return failure();
    return cost;
  }
};

template <typename... OpTs> void attach(MLIRContext &context) {
  (OpTs::template attachInterface<NNCostModel<OpTs>>(context), ...);
}
} // namespace

void partita::nn::attachNNCostModels(MLIRContext &context) {
  attach<EinsumOp, AddOp, SubOp, MulOp, DivOp, MaxOp, NegOp, ExpOp, LogOp,
         TanhOp, ReluOp, SiluOp, RsqrtOp, SqrtOp, GeluOp, BroadcastOp, ReduceOp,
         TransposeOp, ReshapeOp, SoftmaxOp, LayerNormOp, RMSNormOp, RotaryOp,
         AttentionOp, EmbeddingOp, CrossEntropyOp, ConstantOp, ReluGradOp,
         SiluGradOp, GeluGradOp, GreaterEqualOp, LayerNormGradOp, RMSNormGradOp,
         LayerNormGammaGradOp, RotaryGradOp, AttentionGradOp, EmbeddingGradOp,
         CrossEntropyGradOp, ConvertOp, SGDOp, AdamWOp>(context);
}
