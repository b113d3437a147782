//===- FuseAttentionGrad.cpp - one attention_grad per operand set ---------===//
//
// nn-fuse-attention-grad: merges the nn.attention_grad ops of a block that
// read the same operands with the same attributes into one (Passes.td).
//
//===----------------------------------------------------------------------===//

#include "dialects/nn/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"

namespace partita::nn {
#define GEN_PASS_DEF_NNFUSEATTENTIONGRAD
#include "dialects/nn/Transforms/Passes.h.inc"
} // namespace partita::nn

using namespace mlir;
using namespace partita;
using namespace partita::nn;

namespace {

/// Whether `a` and `b` compute gradients of one attention: the same
/// operands and attributes, `wrt` aside.
bool sameAttention(AttentionGradOp a, AttentionGradOp b) {
  if (a->getOperands() != b->getOperands())
    return false;
  NamedAttrList aAttrs(a->getAttrDictionary()), bAttrs(b->getAttrDictionary());
  StringAttr wrt = a.getWrtAttrName();
  aAttrs.erase(wrt);
  bAttrs.erase(wrt);
  return aAttrs.getDictionary(a.getContext()) ==
         bAttrs.getDictionary(b.getContext());
}

/// Replaces `group` (ops of one block, in order, with disjoint wrt) by one
/// op at the first one's place.
void fuse(ArrayRef<AttentionGradOp> group) {
  AttentionGradOp first = group.front();
  AttentionGradWrt wrt = first.getWrt();
  SmallVector<Location> locs;
  for (AttentionGradOp op : group) {
    wrt = wrt | op.getWrt();
    locs.push_back(op.getLoc());
  }
  OpBuilder b(first);
  OperationState state(FusedLoc::get(first.getContext(), locs),
                       first->getName());
  state.addOperands(first->getOperands());
  state.addAttributes(first->getAttrs());
  state.addAttribute(first.getWrtAttrName(),
                     AttentionGradWrtAttr::get(first.getContext(), wrt));
  for (AttentionGradWrt member : AttentionGradOp::membersOf(wrt))
    state.addTypes(first.getGradientType(member));
  auto fused = cast<AttentionGradOp>(b.create(state));
  for (AttentionGradOp op : group) {
    for (auto [member, result] :
         llvm::zip(op.getWrtMembers(), op.getResults()))
      result.replaceAllUsesWith(fused.getGradient(member));
    op.erase();
  }
}

void fuseInBlock(Block &block) {
  // Groups in order of their first op; an op joins the first group of its
  // attention whose members it does not repeat.
  SmallVector<SmallVector<AttentionGradOp, 3>> groups;
  for (auto op : block.getOps<AttentionGradOp>()) {
    auto joins = [&](ArrayRef<AttentionGradOp> group) {
      return sameAttention(group.front(), op) &&
             llvm::none_of(group, [&](AttentionGradOp member) {
               return bitEnumContainsAny(member.getWrt(), op.getWrt());
             });
    };
    auto *group = llvm::find_if(groups, joins);
    if (group == groups.end())
      groups.push_back({op});
    else
      group->push_back(op);
  }
  for (ArrayRef<AttentionGradOp> group : groups)
    if (group.size() > 1)
      fuse(group);
}

struct NNFuseAttentionGradPass
    : public nn::impl::NNFuseAttentionGradBase<NNFuseAttentionGradPass> {
  void runOnOperation() override {
    getOperation()->walk([](Block *block) { fuseInBlock(*block); });
  }
};

} // namespace
