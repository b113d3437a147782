//===- MicrobatchSplitPass.cpp - per-microbatch and per-step functions ----===//
//
// dist-microbatch-split: turns the partitioned step's reductions over the
// `microbatch` axis into gradient accumulation and moves the forward and
// backward into a per-microbatch function (see Passes.td).
//
// Algorithm: find the accumulation points (the inputs of the chains of sum
// reductions that end in an all_reduce over `microbatch`, and the results
// partial over it); the per-microbatch part is their backward slice, the
// rest is the once-per-step part. Both functions start as clones of the
// step; each erases the other's ops.
//
//===----------------------------------------------------------------------===//

#include "passes/pipeline/Passes.h"

#include "dialects/dist/IR/DistDialect.h"
#include "dialects/dist/IR/DistOps.h"
#include "dialects/dist/IR/ShardingAdapters.h"
#include "dialects/dist/IR/TensorBuilder.h"
#include "dialects/nn/IR/NNAttributes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

namespace partita::pipeline {
#define GEN_PASS_DEF_DISTMICROBATCHSPLIT
#include "passes/pipeline/Passes.h.inc"
} // namespace partita::pipeline

using namespace mlir;
using namespace partita;

namespace {

constexpr StringLiteral kGlobalSharding = "dist.global_sharding";
constexpr StringLiteral kGlobalType = "dist.global_type";

bool namesMicrobatch(ArrayAttr axes) {
  return llvm::any_of(axes.getAsValueRange<StringAttr>(), [](StringRef a) {
    return a == pipeline::kMicrobatchAxis;
  });
}

ArrayAttr withoutMicrobatch(Builder &b, ArrayAttr axes) {
  SmallVector<Attribute> kept;
  for (Attribute a : axes)
    if (cast<StringAttr>(a).getValue() != pipeline::kMicrobatchAxis)
      kept.push_back(a);
  return b.getArrayAttr(kept);
}

/// The mesh axes attribute of a collective, if it is one.
ArrayAttr collectiveAxes(Operation *op) {
  if (op->getDialect() && op->getDialect()->getNamespace() == "dist")
    return op->getAttrOfType<ArrayAttr>("axes");
  return {};
}

bool isSumReduction(Operation *op) {
  if (auto r = dyn_cast<dist::AllReduceOp>(op))
    return r.getKind() == dist::ReductionKind::Sum;
  if (auto r = dyn_cast<dist::ReduceScatterOp>(op))
    return r.getKind() == dist::ReductionKind::Sum;
  return false;
}

/// `s` without the microbatch axis; `dim0Factor` receives the size the
/// axis split dimension 0 by (1 if it did not).
dist::Sharding dropAxis(dist::Sharding s, int64_t size, int64_t &dimFactor,
                        int64_t &dim) {
  dimFactor = 1;
  dim = -1;
  for (auto [d, ds] : llvm::enumerate(s.dims)) {
    auto it = llvm::find_if(ds.axes, [](const dist::AxisRef &a) {
      return a.name == pipeline::kMicrobatchAxis;
    });
    if (it != ds.axes.end()) {
      ds.axes.erase(it);
      dimFactor = size;
      dim = d;
    }
  }
  llvm::erase_if(s.partialAxes, [](const dist::AxisRef &a) {
    return a.name == pipeline::kMicrobatchAxis;
  });
  return s;
}

struct DistMicrobatchSplitPass
    : public pipeline::impl::DistMicrobatchSplitBase<DistMicrobatchSplitPass> {
  using DistMicrobatchSplitBase::DistMicrobatchSplitBase;

  LogicalResult split(ModuleOp module, func::FuncOp step, int64_t m);
  /// Removes the microbatch axis from `func`'s argument and result
  /// shardings; `microbatchInputs`: an input split over it gets the
  /// microbatch's global shape (else its local type grows to the step's
  /// batch).
  LogicalResult stripShardings(func::FuncOp func, const dist::Mesh &mesh,
                               int64_t m, bool microbatchInputs);

  void runOnOperation() final {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> steps;
    for (func::FuncOp func : module.getOps<func::FuncOp>())
      if (func->hasAttr(pipeline::kMicrobatchesAttrName) &&
          !func->hasAttr(pipeline::kMicrobatchStepAttrName))
        steps.push_back(func);
    for (func::FuncOp step : steps) {
      auto m = step->getAttrOfType<IntegerAttr>(pipeline::kMicrobatchesAttrName);
      if (!m || m.getInt() < 1) {
        step.emitError() << "'" << pipeline::kMicrobatchesAttrName
                         << "' must be a positive integer";
        return signalPassFailure();
      }
      if (failed(split(module, step, m.getInt())))
        return signalPassFailure();
    }
  }
};

LogicalResult DistMicrobatchSplitPass::stripShardings(func::FuncOp func,
                                                      const dist::Mesh &mesh,
                                                      int64_t m,
                                                      bool microbatchInputs) {
  MLIRContext *ctx = func.getContext();
  auto strip = [&](Attribute attr, Type type, Type *localType,
                   TypeAttr *globalType) -> FailureOr<Attribute> {
    auto s = dyn_cast_or_null<dist::ShardingAttr>(attr);
    if (!s)
      return attr;
    FailureOr<dist::Sharding> model =
        dist::shardingFromAttr(s, [&] { return func.emitError(); });
    if (failed(model))
      return failure();
    int64_t factor, dim;
    dist::Sharding out = dropAxis(*model, m, factor, dim);
    if (factor > 1 && globalType && *globalType) {
      auto global = cast<RankedTensorType>(globalType->getValue());
      SmallVector<int64_t> shape(global.getShape());
      if (microbatchInputs) {
        shape[dim] /= factor;
        *globalType = TypeAttr::get(global.clone(shape));
      } else if (localType) {
        auto local = cast<RankedTensorType>(*localType);
        SmallVector<int64_t> lshape(local.getShape());
        lshape[dim] *= factor;
        *localType = local.clone(lshape);
      }
    }
    return Attribute(dist::shardingToAttr(ctx, out, s.getMeshName().getValue()));
  };
  SmallVector<Type> argTypes(func.getArgumentTypes());
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    TypeAttr global = func.getArgAttrOfType<TypeAttr>(i, kGlobalType);
    FailureOr<Attribute> s =
        strip(func.getArgAttr(i, kGlobalSharding), argTypes[i], &argTypes[i],
              &global);
    if (failed(s))
      return failure();
    if (*s)
      func.setArgAttr(i, kGlobalSharding, *s);
    if (global)
      func.setArgAttr(i, kGlobalType, global);
    func.getArgument(i).setType(argTypes[i]);
  }
  SmallVector<Type> resultTypes(func.getResultTypes());
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    FailureOr<Attribute> s = strip(func.getResultAttr(i, kGlobalSharding),
                                   resultTypes[i], nullptr, nullptr);
    if (failed(s))
      return failure();
    if (*s)
      func.setResultAttr(i, kGlobalSharding, *s);
  }
  func.setType(FunctionType::get(ctx, argTypes, resultTypes));
  (void)mesh;
  return success();
}

LogicalResult DistMicrobatchSplitPass::split(ModuleOp module,
                                             func::FuncOp step, int64_t m) {
  MLIRContext *ctx = module.getContext();
  OpBuilder b(ctx);
  Block &body = step.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());

  // Accumulation points, and the ops of the once-per-step reductions.
  SetVector<Value> points;
  DenseMap<Operation *, Value> chainHeadInput; // mb all_reduce -> its point
  llvm::DenseSet<Operation *> reductionOps;
  for (Operation &op : body) {
    ArrayAttr axes = collectiveAxes(&op);
    if (!axes || !namesMicrobatch(axes))
      continue;
    auto reduce = dyn_cast<dist::AllReduceOp>(&op);
    if (!reduce || reduce.getKind() != dist::ReductionKind::Sum)
      return op.emitError()
             << "microbatches: only a sum all_reduce over the '"
             << pipeline::kMicrobatchAxis
             << "' axis (a gradient reduction) can become accumulation; "
                "this op needs the whole batch at once";
    reductionOps.insert(&op);
    Value v = reduce.getInput();
    while (Operation *def = v.getDefiningOp()) {
      ArrayAttr defAxes = collectiveAxes(def);
      if (!defAxes || !isSumReduction(def) || namesMicrobatch(defAxes) ||
          !v.hasOneUse())
        break;
      reductionOps.insert(def);
      v = def->getOperand(0);
    }
    if (isa<BlockArgument>(v))
      return op.emitError() << "microbatches: reduces a function argument, "
                               "not a per-microbatch value";
    points.insert(v);
  }
  for (unsigned i = 0; i < step.getNumResults(); ++i) {
    auto s = step.getResultAttrOfType<dist::ShardingAttr>(i, kGlobalSharding);
    if (!s)
      continue;
    bool partial = llvm::any_of(s.getPartialAxes(), [](dist::AxisRefAttr a) {
      return a.getName() == pipeline::kMicrobatchAxis;
    });
    if (!partial)
      continue;
    Value v = ret.getOperand(i);
    if (isa<BlockArgument>(v))
      return step.emitError() << "microbatches: result #" << i
                              << " is an argument partial over microbatches";
    points.insert(v);
  }

  // One microbatch (a pipelined step's): nothing is partial over the axis
  // of size 1, so the points are where the update begins instead: every
  // value that the update ops (and what reads them) or the results read
  // from the rest, which is then the per-microbatch part. Its reductions
  // run once, as there is one microbatch.
  if (m == 1) {
    points.clear();
    reductionOps.clear();
    // Only what the batch reaches is per microbatch: a slice of a parameter
    // for a sharded update stays in the update.
    llvm::DenseSet<Operation *> update, fromBatch;
    for (Operation &op : body) {
      bool readsUpdate = false, readsBatch = false;
      for (Value v : op.getOperands()) {
        Operation *def = v.getDefiningOp();
        readsUpdate |= def && update.contains(def);
        if (auto arg = dyn_cast<BlockArgument>(v))
          readsBatch |= nn::inputAttr.onArg(step, arg.getArgNumber());
        else
          readsBatch |= fromBatch.contains(def);
      }
      if (nn::getGradKind(&op) == nn::GradKind::Update || readsUpdate)
        update.insert(&op);
      else if (readsBatch)
        fromBatch.insert(&op);
    }
    for (Operation &op : body) {
      if (!update.contains(&op) && !isa<func::ReturnOp>(op))
        continue;
      for (Value v : op.getOperands()) {
        Operation *def = v.getDefiningOp();
        if (def && fromBatch.contains(def))
          points.insert(v);
      }
    }
  }

  const dist::TensorBuilderInterface *tensors = dist::findTensorBuilder(step);
  if (!points.empty() && !tensors)
    return step.emitError()
           << "microbatches: no dialect of the step's ops builds the sums "
              "that accumulate microbatches (dist::TensorBuilderInterface)";

  // The per-microbatch part: the backward slice of the points.
  llvm::DenseSet<Operation *> micro;
  SmallVector<Operation *> work;
  for (Value p : points)
    work.push_back(p.getDefiningOp());
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    if (!op || !micro.insert(op).second)
      continue;
    if (reductionOps.contains(op))
      return op->emitError() << "microbatches: a gradient reduction feeds "
                                "the per-microbatch part";
    if (nn::getGradKind(op) == nn::GradKind::Update)
      return op->emitError() << "microbatches: an optimizer update feeds a "
                                "per-microbatch value";
    for (Value operand : op->getOperands())
      work.push_back(operand.getDefiningOp());
  }
  // The step part may use no per-microbatch value but the points (constants
  // excepted: they are cloned).
  for (Operation &op : body) {
    if (micro.contains(&op))
      continue;
    for (OpOperand &use : op.getOpOperands()) {
      Value v = use.get();
      Operation *def = v.getDefiningOp();
      if (!def || !micro.contains(def) || points.contains(v))
        continue;
      if (def->getNumOperands() == 0)
        continue;
      return op.emitError()
             << "microbatches: uses a per-microbatch value that is not a "
                "gradient or the loss (operand #"
             << use.getOperandNumber() << ")";
    }
  }

  // Order of ops, to find each op in the clone.
  SmallVector<Operation *> order;
  for (Operation &op : body)
    order.push_back(&op);

  // The per-microbatch function.
  b.setInsertionPointAfter(step);
  auto mfunc = cast<func::FuncOp>(b.clone(*step));
  mfunc.setSymName((step.getName() + ".microbatch").str());
  mfunc->removeAttr(pipeline::kMicrobatchesAttrName);
  Block &mbody = mfunc.getBody().front();
  SmallVector<Operation *> morder;
  for (Operation &op : mbody)
    morder.push_back(&op);
  IRMapping toClone;
  for (auto [a, c] : llvm::zip(order, morder))
    for (auto [ra, rc] : llvm::zip(a->getResults(), c->getResults()))
      toClone.map(ra, rc);

  // Accumulator arguments, appended to both functions.
  unsigned firstAcc = step.getNumArguments();
  SmallVector<Value> stepAccs, microAccs;
  for (auto [k, p] : llvm::enumerate(points)) {
    Type type = p.getType();
    std::string name = "microbatch.acc." + std::to_string(k);
    SmallVector<NamedAttribute> attrs{
        nn::stateAttr.get(ctx, name),
        b.getNamedAttr(pipeline::kAccumulatorAttrName, b.getUnitAttr()),
        b.getNamedAttr(kGlobalType, TypeAttr::get(type))};
    DictionaryAttr dict = b.getDictionaryAttr(attrs);
    for (func::FuncOp f : {step, mfunc}) {
      if (failed(f.insertArgument(f.getNumArguments(), type, dict,
                                  p.getLoc())))
        return failure();
    }
    stepAccs.push_back(step.getArgument(firstAcc + k));
    microAccs.push_back(mfunc.getArgument(firstAcc + k));
  }

  // Micro: acc + value, returned to replace each accumulator. Each sum
  // right after its value is made, so a gradient dies as soon as it is
  // added (at the return, every gradient of the microbatch would be live
  // at once: the backward's arena held all of a stage's weight gradients).
  auto mret = cast<func::ReturnOp>(mbody.getTerminator());
  SmallVector<Value> sums;
  for (auto [k, p] : llvm::enumerate(points)) {
    Value v = toClone.lookup(p);
    // After the whole bucket when v is a bucketed reduction's (a bucket's
    // members stay adjacent: they are one communicator call).
    Operation *last = v.getDefiningOp();
    Attribute bucket =
        last ? last->getAttr(dist::DistDialect::kBucketAttrName) : nullptr;
    while (bucket && last->getNextNode() &&
           last->getNextNode()->getAttr(dist::DistDialect::kBucketAttrName) ==
               bucket)
      last = last->getNextNode();
    if (last)
      b.setInsertionPointAfter(last);
    else
      b.setInsertionPointAfterValue(v); // an argument: at the block's start
    sums.push_back(tensors->buildSum(b, p.getLoc(), microAccs[k], v));
  }
  b.setInsertionPoint(mret);
  func::ReturnOp::create(b, mret.getLoc(), sums);
  mret.erase();
  // The clone's ops match the step's by position (the last is the return).
  for (size_t i = morder.size() - 1; i-- > 0;)
    if (!micro.contains(order[i]))
      morder[i]->erase();
  SmallVector<Type> sumTypes;
  SmallVector<DictionaryAttr> sumAttrs;
  for (auto [k, v] : llvm::enumerate(sums)) {
    sumTypes.push_back(v.getType());
    sumAttrs.push_back(b.getDictionaryAttr(
        {nn::stateAttr.get(ctx, "microbatch.acc." + std::to_string(k))}));
  }
  mfunc.setType(FunctionType::get(ctx, mfunc.getArgumentTypes(), sumTypes));
  mfunc.setAllResultAttrs(sumAttrs);

  // Step: read the accumulators; reductions over the microbatch axis lose
  // it (an all_reduce over it alone is the accumulation itself).
  b.setInsertionPoint(ret);
  for (auto [k, p] : llvm::enumerate(points)) {
    Value(p).replaceUsesWithIf(stepAccs[k], [&](OpOperand &use) {
      return !micro.contains(use.getOwner()) && use.getOwner() != ret;
    });
    for (OpOperand &use : ret->getOpOperands())
      if (use.get() == p) {
        // A fresh value, so the result keeps its own sharding.
        use.set(tensors->buildCopy(b, p.getLoc(), stepAccs[k]));
      }
  }
  // (With one microbatch the per-microbatch part may have some too.)
  for (Block *block : {&body, &mbody})
    for (Operation &op : llvm::make_early_inc_range(*block)) {
      ArrayAttr axes = collectiveAxes(&op);
      if (!axes || !namesMicrobatch(axes) ||
          (block == &body && micro.contains(&op))) // erased below
        continue;
      ArrayAttr kept = withoutMicrobatch(b, axes);
      if (kept.empty()) {
        op.getResult(0).replaceAllUsesWith(op.getOperand(0));
        op.erase();
        continue;
      }
      op.setAttr("axes", kept);
    }
  // Constants the step part still reads are cloned before their uses.
  for (Operation *op : order) {
    if (!micro.contains(op) || op->getNumOperands() != 0)
      continue;
    for (OpOperand &use : llvm::make_early_inc_range(op->getUses())) {
      if (micro.contains(use.getOwner()))
        continue;
      b.setInsertionPoint(use.getOwner());
      use.set(b.clone(*op)->getResult(0));
    }
  }
  for (Operation *op : llvm::reverse(order))
    if (micro.contains(op))
      op->erase();

  // The microbatch axis leaves the mesh and every sharding.
  dist::MeshOp meshOp;
  module.walk([&](dist::MeshOp op) {
    if (op.getMesh().getAxis(pipeline::kMicrobatchAxis))
      meshOp = op;
  });
  if (!meshOp)
    return step.emitError() << "microbatches: no mesh has the '"
                            << pipeline::kMicrobatchAxis << "' axis";
  FailureOr<dist::Mesh> mesh = dist::meshFromOp(meshOp);
  if (failed(mesh))
    return failure();
  if (failed(stripShardings(mfunc, *mesh, m, /*microbatchInputs=*/true)) ||
      failed(stripShardings(step, *mesh, m, /*microbatchInputs=*/false)))
    return failure();
  for (func::FuncOp f : {step, mfunc}) {
    WalkResult bad = f.walk([&](Operation *op) {
      ArrayAttr axes = collectiveAxes(op);
      if (axes && namesMicrobatch(axes)) {
        op->emitError() << "microbatches: still names the '"
                        << pipeline::kMicrobatchAxis << "' axis";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (bad.wasInterrupted())
      return failure();
  }
  llvm::erase_if(mesh->axes, [](const dist::MeshAxis &a) {
    return a.name == pipeline::kMicrobatchAxis;
  });
  meshOp.setMeshAttr(dist::meshToAttr(ctx, *mesh));
  step->setAttr(pipeline::kMicrobatchStepAttrName,
                FlatSymbolRefAttr::get(mfunc.getSymNameAttr()));
  return success();
}

} // namespace
