//===- OptimizeCommPass.cpp - gradient reductions issued early ------------===//
//
// dist-optimize-comm: moves each gradient all_reduce / reduce_scatter to
// right after its operand's definition, then groups adjacent compatible ones
// into size-capped buckets (see Passes.td).
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

/// What must agree for reductions to share one communicator call.
struct BucketKey {
  OperationName name;
  Attribute mesh, axes, kind;
  Type elementType;

  bool operator==(const BucketKey &o) const {
    return name == o.name && mesh == o.mesh && axes == o.axes &&
           kind == o.kind && elementType == o.elementType;
  }
};

BucketKey keyOf(Operation *op) {
  auto type = cast<RankedTensorType>(op->getOperand(0).getType());
  return {op->getName(), op->getAttr("mesh"), op->getAttr("axes"),
          op->getAttr("kind"), type.getElementType()};
}

/// Local bytes of the reduction's operand (what it puts on the wire).
int64_t operandBytes(Operation *op) {
  auto type = cast<RankedTensorType>(op->getOperand(0).getType());
  unsigned bits = type.getElementTypeBitWidth();
  return type.getNumElements() * ((bits + 7) / 8);
}

/// Groups the block's gradient reductions into buckets (see Passes.td),
/// moves each bucket's members together before its last member and tags
/// them `dist.bucket`, numbered in program order.
void bucketInBlock(Block &block, int64_t capBytes) {
  struct Open {
    BucketKey key;
    SmallVector<Operation *> members;
    int64_t bytes = 0;
  };
  // One open bucket per key: reductions of other axes (a tensor-parallel
  // backward's activation gradients) interleave without closing it.
  SmallVector<Open> open;
  SmallVector<SmallVector<Operation *>> buckets;
  llvm::DenseMap<Operation *, size_t> openIndexOf; // member -> open[] slot
  auto close = [&](size_t slot) {
    for (Operation *member : open[slot].members)
      openIndexOf.erase(member);
    buckets.push_back(std::move(open[slot].members));
    open.erase(open.begin() + slot);
    for (auto &entry : openIndexOf)
      if (entry.second > slot)
        --entry.second;
  };
  for (Operation &op : block) {
    // Reading a member's result must come after the bucket has run.
    for (Value v : op.getOperands()) {
      auto it = openIndexOf.find(v.getDefiningOp());
      if (it != openIndexOf.end())
        close(it->second);
    }
    if (!isGradientReduction(&op))
      continue;
    BucketKey key = keyOf(&op);
    int64_t bytes = operandBytes(&op);
    auto slot = llvm::find_if(open, [&](const Open &o) { return o.key == key; });
    if (slot != open.end() && slot->bytes + bytes > capBytes) {
      close(slot - open.begin());
      slot = open.end();
    }
    if (slot == open.end()) {
      open.push_back({key, {}, 0});
      slot = open.end() - 1;
    }
    slot->members.push_back(&op);
    slot->bytes += bytes;
    openIndexOf[&op] = slot - open.begin();
  }
  while (!open.empty())
    close(0);
  llvm::sort(buckets, [](const auto &a, const auto &b) {
    return a.back()->isBeforeInBlock(b.back());
  });
  MLIRContext *ctx = block.getParentOp()->getContext();
  int64_t id = 0;
  for (SmallVector<Operation *> &bucket : buckets) {
    Operation *last = bucket.back();
    IntegerAttr attr = IntegerAttr::get(IntegerType::get(ctx, 64), ++id);
    for (Operation *member : bucket) {
      if (member != last)
        member->moveBefore(last);
      member->setAttr(dist::DistDialect::kBucketAttrName, attr);
    }
  }
}

struct DistOptimizeCommPass
    : comm::impl::DistOptimizeCommBase<DistOptimizeCommPass> {
  using DistOptimizeCommBase::DistOptimizeCommBase;

  void runOnOperation() override {
    if (bucketBytes < 0) {
      getOperation()->emitError()
          << "dist-optimize-comm: bucket-bytes must be >= 0 (0 disables "
             "bucketing), got "
          << static_cast<int64_t>(bucketBytes);
      return signalPassFailure();
    }
    getOperation()->walk([&](func::FuncOp func) {
      for (Block &block : func.getBody()) {
        hoistInBlock(block);
        if (bucketBytes > 0)
          bucketInBlock(block, bucketBytes);
      }
    });
  }
};

} // namespace
