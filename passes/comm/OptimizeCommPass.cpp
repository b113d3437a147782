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
#include "dialects/nn/IR/NNAttributes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"

namespace partita::comm {
#define GEN_PASS_DEF_DISTOPTIMIZECOMM
#include "passes/comm/Passes.h.inc"
} // namespace partita::comm

using namespace mlir;
using namespace partita;

namespace {

/// Whether nn-autodiff tagged `op` as backward ("B" or "W").
bool isBackward(Operation *op) {
  std::optional<nn::GradKind> kind = nn::getGradKind(op);
  return kind == nn::GradKind::Input || kind == nn::GradKind::Weight;
}

/// Whether `value` is produced by a backward op.
bool isGradient(Value value) {
  Operation *def = value.getDefiningOp();
  return def && isBackward(def);
}

bool isGradientReduction(Operation *op) {
  return isa<dist::AllReduceOp, dist::ReduceScatterOp>(op) &&
         llvm::any_of(op->getOperands(), isGradient);
}

/// Whether a backward op (tagged "B" or "W") reads a result of `op`: an
/// activation gradient's reduction (a tensor-parallel backward's), which
/// the backward waits for at once. It is not bucketed: a bucket would make
/// the weight gradients riding with it wait too, and nothing can run behind
/// it.
bool feedsBackward(Operation *op) {
  return llvm::any_of(op->getUsers(), isBackward);
}

/// Whether `op` is a reduce_scatter whose result an optimizer update reads
/// (a ZeRO gradient scattered into its sharded update).
bool scattersIntoUpdate(Operation *op) {
  return isa<dist::ReduceScatterOp>(op) &&
         llvm::any_of(op->getUsers(), [](Operation *user) {
           return nn::getGradKind(user) == nn::GradKind::Update;
         });
}

/// `keepScatters`: a ZeRO stage-1 step (dist.zero_stage = 1) holds its full
/// gradients until the updates, where their reduce_scatters are (ZeRO's
/// P_os; stage 2 frees each gradient as soon as it is scattered). Other
/// reductions (a sequence-parallel backward's) are issued early as usual.
void hoistInBlock(Block &block, bool keepScatters) {
  SmallVector<Operation *> reductions;
  for (Operation &op : block)
    if (isGradientReduction(&op) && !(keepScatters && scattersIntoUpdate(&op)))
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
  struct Bucket {
    BucketKey key;
    SmallVector<Operation *> members;
    int64_t bytes = 0;
    bool open = true;
  };
  // At most one open bucket per key: reductions of other axes (a
  // tensor-parallel backward's activation gradients) interleave without
  // closing it.
  SmallVector<Bucket> buckets;
  llvm::DenseMap<Operation *, size_t> bucketOf; // member -> buckets[] index
  for (Operation &op : block) {
    // Reading a member's result must come after the bucket has run.
    for (Value v : op.getOperands()) {
      auto it = bucketOf.find(v.getDefiningOp());
      if (it != bucketOf.end())
        buckets[it->second].open = false;
    }
    if (!isGradientReduction(&op) || feedsBackward(&op))
      continue;
    BucketKey key = keyOf(&op);
    int64_t bytes = operandBytes(&op);
    auto *bucket = llvm::find_if(
        buckets, [&](const Bucket &b) { return b.open && b.key == key; });
    if (bucket != buckets.end() && bucket->bytes + bytes > capBytes) {
      bucket->open = false;
      bucket = buckets.end();
    }
    if (bucket == buckets.end()) {
      buckets.push_back({key, {}, 0, true});
      bucket = buckets.end() - 1;
    }
    bucket->members.push_back(&op);
    bucket->bytes += bytes;
    bucketOf[&op] = bucket - buckets.begin();
  }
  // Numbered in program order of their last members.
  llvm::sort(buckets, [](const Bucket &a, const Bucket &b) {
    return a.members.back()->isBeforeInBlock(b.members.back());
  });
  MLIRContext *ctx = block.getParentOp()->getContext();
  int64_t id = 0;
  for (Bucket &bucket : buckets) {
    Operation *last = bucket.members.back();
    IntegerAttr attr = IntegerAttr::get(IntegerType::get(ctx, 64), ++id);
    for (Operation *member : bucket.members) {
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
      auto stage = func->getAttrOfType<IntegerAttr>(
          dist::DistDialect::kZeroStageAttrName);
      bool keepScatters = stage && stage.getInt() == 1;
      for (Block &block : func.getBody()) {
        hoistInBlock(block, keepScatters);
        if (bucketBytes > 0)
          bucketInBlock(block, bucketBytes);
      }
    });
  }
};

} // namespace
