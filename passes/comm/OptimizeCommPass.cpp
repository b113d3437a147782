//===- OptimizeCommPass.cpp - gradient reductions issued early ------------===//
//
// dist-optimize-comm: moves each gradient all_reduce / reduce_scatter to
// right after its operand's definition (see Passes.td).
//
//===----------------------------------------------------------------------===//

#include "passes/comm/Passes.h"

#include "dialects/dist/IR/DistDialect.h"
#include "dialects/dist/IR/DistOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"

namespace partita::comm {
#define GEN_PASS_DEF_DISTOPTIMIZECOMM
#include "passes/comm/Passes.h.inc"
} // namespace partita::comm

using namespace mlir;
using namespace partita;

namespace {

/// Whether `value` is produced by an op nn-autodiff tagged as backward.
bool isGradient(Value value) {
  Operation *def = value.getDefiningOp();
  if (!def)
    return false;
  auto kind = def->getAttrOfType<StringAttr>("nn.grad_kind");
  return kind && (kind.getValue() == "B" || kind.getValue() == "W");
}

bool isGradientReduction(Operation *op) {
  return isa<dist::AllReduceOp, dist::ReduceScatterOp>(op) &&
         llvm::any_of(op->getOperands(), isGradient);
}

void hoistInBlock(Block &block) {
  SmallVector<Operation *> reductions;
  for (Operation &op : block)
    if (isGradientReduction(&op))
      reductions.push_back(&op);
  // Per definition, the last reduction moved right after it: reductions of
  // one value keep their program order. Every rank runs this same program,
  // so any deterministic order of the reductions is one all ranks share.
  llvm::DenseMap<Operation *, Operation *> lastAfter;
  for (Operation *op : reductions) {
    Operation *def = nullptr;
    for (Value operand : op->getOperands()) {
      Operation *d = operand.getDefiningOp();
      if (d && d->getBlock() == &block && (!def || def->isBeforeInBlock(d)))
        def = d;
    }
    if (!def)
      continue;
    Operation *after = lastAfter.lookup(def);
    if (!after)
      after = def;
    if (after != op && after->isBeforeInBlock(op))
      op->moveAfter(after);
    lastAfter[def] = op;
  }
}

struct DistOptimizeCommPass
    : comm::impl::DistOptimizeCommBase<DistOptimizeCommPass> {
  void runOnOperation() override {
    getOperation()->walk([](func::FuncOp func) {
      for (Block &block : func.getBody())
        hoistInBlock(block);
    });
  }
};

} // namespace
