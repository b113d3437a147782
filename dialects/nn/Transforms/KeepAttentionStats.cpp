//===- KeepAttentionStats.cpp - attention_grad reads the forward's stats --===//
//
// nn-keep-attention-stats: gives each nn.attention_grad the output and the
// log-sum-exp of the nn.attention it differentiates (Passes.td).
//
//===----------------------------------------------------------------------===//

#include "dialects/nn/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

namespace partita::nn {
#define GEN_PASS_DEF_NNKEEPATTENTIONSTATS
#include "dialects/nn/Transforms/Passes.h.inc"
} // namespace partita::nn

using namespace mlir;
using namespace partita;
using namespace partita::nn;

namespace {

/// Whether `forward` is the attention `grad` differentiates: the same
/// query, key, value, causal and scale.
bool differentiates(AttentionGradOp grad, AttentionOp forward) {
  return forward.getQuery() == grad.getQuery() &&
         forward.getKey() == grad.getKey() &&
         forward.getValue() == grad.getValue() &&
         forward.getCausal() == grad.getCausal() &&
         forward.getScaleAttr() == grad.getScaleAttr();
}

/// The forward op of `grad` in its block, before it, or null. Of several
/// (selective recompute clones the attention into the backward), the last
/// one: keeping the original's output and lse alive would undo recompute.
AttentionOp forwardOf(AttentionGradOp grad) {
  AttentionOp last;
  for (Operation *user : grad.getQuery().getUsers()) {
    auto forward = dyn_cast<AttentionOp>(user);
    if (forward && forward->getBlock() == grad->getBlock() &&
        forward->isBeforeInBlock(grad) && differentiates(grad, forward) &&
        (!last || last->isBeforeInBlock(forward)))
      last = forward;
  }
  return last;
}

/// `forward` with an lse result: the op itself when it has one, else its
/// replacement.
AttentionOp withLse(AttentionOp forward) {
  if (forward.getLse())
    return forward;
  OpBuilder b(forward);
  auto replacement = AttentionOp::create(
      b, forward.getLoc(), forward.getResult().getType(),
      AttentionOp::getLseType(
          cast<RankedTensorType>(forward.getQuery().getType())),
      forward.getQuery(), forward.getKey(), forward.getValue(),
      forward.getCausalAttr(), forward.getScaleAttr());
  replacement->setDiscardableAttrs(forward->getDiscardableAttrDictionary());
  forward.getResult().replaceAllUsesWith(replacement.getResult());
  forward.erase();
  return replacement;
}

void keepStats(AttentionGradOp grad) {
  if (grad.getOut())
    return;
  // 16-bit log-sum-exps would cost the probabilities their precision.
  Type element =
      cast<RankedTensorType>(grad.getQuery().getType()).getElementType();
  if (!element.isF32() && !element.isF64())
    return;
  AttentionOp forward = forwardOf(grad);
  if (!forward)
    return;
  forward = withLse(forward);
  OpBuilder b(grad);
  auto replacement = AttentionGradOp::create(
      b, grad.getLoc(), grad.getResultTypes(), grad.getQuery(),
      grad.getKey(), grad.getValue(), grad.getDy(), forward.getResult(),
      forward.getLse(), grad.getWrtAttr(), grad.getCausalAttr(),
      grad.getScaleAttr());
  replacement->setDiscardableAttrs(grad->getDiscardableAttrDictionary());
  grad.replaceAllUsesWith(replacement.getResults());
  grad.erase();
}

struct NNKeepAttentionStatsPass
    : public nn::impl::NNKeepAttentionStatsBase<NNKeepAttentionStatsPass> {
  void runOnOperation() override {
    SmallVector<AttentionGradOp> grads;
    getOperation()->walk([&](AttentionGradOp grad) { grads.push_back(grad); });
    for (AttentionGradOp grad : grads)
      keepStats(grad);
  }
};

} // namespace
