//===- StageSplitPass.cpp - per-stage programs of a pipelined step --------===//
//
// dist-stage-split: splits a partitioned, microbatched train step whose ops
// carry pipeline stages (dist-pipeline-split) into each stage's forward,
// backward and once-per-step functions, with the values that cross stages
// as explicit results and arguments (see Passes.td).
//
// Algorithm: a microbatch runs as the chain of segments F0 F1 .. F(P-1)
// B(P-1) .. B0. Every op of the per-microbatch function gets a segment (its
// stage, and backward when nn-autodiff built it for a gradient or one of its
// operands is backward); an op may read only values of its own or earlier
// segments. A value read in another segment travels: forward from stage to
// stage in the activation messages up to the last stage that reads it, kept
// on a stage from its forward to its backward (the stash) where a backward
// reads it, and down from stage to stage in the gradient messages to the
// lowest stage whose backward reads it. The once-per-step function is cut
// by the stage of what each op reads (accumulators and parameters belong to
// the stage that uses them); ops that read nothing staged (the AdamW step
// counter) are repeated on every stage that needs them.
//
//===----------------------------------------------------------------------===//

#include "passes/pipeline/Passes.h"

#include "dialects/dist/IR/DistDialect.h"
#include "dialects/dist/IR/DistOps.h"
#include "dialects/dist/IR/ShardingAdapters.h"
#include "dialects/dist/IR/TensorBuilder.h"
#include "dialects/nn/IR/NNAttributes.h"
#include "partita/runtime/PipelineSchedule.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

#include <set>

namespace partita::pipeline {
#define GEN_PASS_DEF_DISTSTAGESPLIT
#include "passes/pipeline/Passes.h.inc"
} // namespace partita::pipeline

using namespace mlir;
using namespace partita;

namespace {

// The names of the values stages exchange, which the executor and
// `partita explain` read.
using runtime::pipeline::kActivationValuePrefix;
using runtime::pipeline::kDeferredValuePrefix;
using runtime::pipeline::kGradientValuePrefix;
using runtime::pipeline::kStashValuePrefix;
using runtime::pipeline::kWeightStashValuePrefix;

/// An op with no operands (a constant, an axis index): cloned into every
/// function that reads it instead of travelling between stages.
bool isFree(Operation *op) {
  return op->getNumOperands() == 0 && op->getNumRegions() == 0 &&
         !op->hasTrait<OpTrait::IsTerminator>();
}

/// The name of a parameter or optimizer state argument or result of
/// `func` (nn.param, else nn.state), or null.
StringAttr persistentArgName(func::FuncOp func, unsigned i) {
  if (StringAttr name = nn::paramAttr.getArg(func, i))
    return name;
  return nn::stateAttr.getArg(func, i);
}
StringAttr persistentResultName(func::FuncOp func, unsigned i) {
  if (StringAttr name = nn::paramAttr.getResult(func, i))
    return name;
  return nn::stateAttr.getResult(func, i);
}

/// Whether nn-autodiff built `op` for the backward pass.
bool isBackwardOp(Operation *op) {
  std::optional<nn::GradKind> kind = nn::getGradKind(op);
  return kind == nn::GradKind::Input || kind == nn::GradKind::Weight ||
         nn::isRecomputed(op);
}

/// The types and attributes of `func`'s arguments `indices`, appended.
void appendArguments(func::FuncOp func, ArrayRef<unsigned> indices,
                     SmallVectorImpl<Type> &types,
                     SmallVectorImpl<DictionaryAttr> &attrs) {
  for (unsigned i : indices) {
    types.push_back(func.getArgument(i).getType());
    attrs.push_back(func.getArgAttrDict(i));
  }
}

/// The function a segment becomes, being built.
struct Piece {
  func::FuncOp func;
  IRMapping map;
  OpBuilder builder;
  SmallVector<Value> results;
  SmallVector<DictionaryAttr> resultAttrs;
  explicit Piece(MLIRContext *ctx) : builder(ctx) {}
};

class StageSplitter {
public:
  StageSplitter(ModuleOp module, func::FuncOp step, func::FuncOp micro,
                int64_t stages, StringRef schedule, int64_t chunks,
                bool splitBackward)
      : module(module), step(step), micro(micro), P(stages),
        schedule(schedule), chunks(chunks), ctx(module.getContext()),
        splitBackward(splitBackward || schedule == "zb-h1") {}

  LogicalResult run();

private:
  // Segment numbers: F s is s, B s is 2P-1-s (the order a microbatch runs).
  int64_t segment(bool backward, int64_t s) const {
    return backward ? 2 * P - 1 - s : s;
  }
  int64_t stageOfSegment(int64_t seg) const {
    return seg < P ? seg : 2 * P - 1 - seg;
  }
  bool isBackwardSegment(int64_t seg) const { return seg >= P; }
  std::string segmentName(int64_t seg) const {
    return (isBackwardSegment(seg) ? "the backward of stage "
                                   : "the forward of stage ") +
           std::to_string(stageOfSegment(seg));
  }

  LogicalResult assignSegments();
  LogicalResult findTransfers();
  /// zb-h1: splits each backward segment into the input gradient B (what
  /// the gradients sent down need, and every op nn-autodiff built for an
  /// input gradient, with what they read there) and the weight gradient W
  /// (the rest), and finds what W reads of the forward (the weight stash)
  /// and of B (the deferred values).
  void splitBackwards();
  /// Whether `op` (of a backward segment) is in W.
  bool inWeight(Operation *op) const {
    return splitBackward && weightOps.contains(op);
  }
  LogicalResult buildMicroPieces();
  LogicalResult splitStep();
  LogicalResult addPipelineAxis();

  /// A new function after `step`, named `name`, taking `types`.
  func::FuncOp createFunc(StringRef name, ArrayRef<Type> types,
                          ArrayRef<DictionaryAttr> attrs, Piece &piece);
  /// `v` in `piece`, cloning free ops (and, in the step, stageless ones) it
  /// is made of.
  Value lookupOrClone(Piece &piece, Value v,
                      const llvm::DenseSet<Operation *> &clonable);
  void finish(Piece &piece, Location loc);
  /// In `piece`: an all_reduce over the pipeline axis of `mine` (this
  /// stage's value), or, null, of zeros of `type`: the stage holding a
  /// value sends it to every stage, each of which runs the same collective.
  Value shareOverPipeline(Piece &piece, Value mine, Type type, Location loc);

  ModuleOp module;
  func::FuncOp step, micro;
  int64_t P; // stages
  StringRef schedule;
  int64_t chunks; // per pipeline rank: P / chunks ranks
  MLIRContext *ctx;
  // Builds the zeros, copies and sums the pieces need (the model dialect's).
  const dist::TensorBuilderInterface *tensors = nullptr;
  // zb-h1 (or a hand-written schedule with B and W actions): the backward
  // segments are split into B and W.
  bool splitBackward;

  llvm::DenseMap<Operation *, int64_t> segOf;
  // Per stage: values sent forward to the next stage, kept from forward to
  // backward (to B when split), sent back to the previous stage (each in
  // program order); when split, kept from forward to W (B may read them
  // too) and from B to W.
  std::vector<SetVector<Value>> forwardOut, stash, backwardOut, weightStash,
      deferred;
  // The ops of W.
  llvm::DenseSet<Operation *> weightOps;
  // The functions, per stage: every stage has a whole backward; a split
  // one also its B (input) and W (weight) halves. The whole one reads the
  // stash and the weight stash and keeps B's deferred values inside: zb-h1
  // runs it on a rank that defers no W, and a stage memory limit of '1f1b'
  // measures 1f1b by it.
  std::vector<func::FuncOp> forwardFuncs, backwardFuncs, inputFuncs,
      weightFuncs, stepFuncs;
  // Accumulators and parameters (by name) -> their stage.
  llvm::StringMap<int64_t> stageOfName;
  // Parameters read per microbatch on several stages (a tied embedding) ->
  // those stages; in name order.
  std::map<std::string, std::set<int64_t>> sharedParams;
};

LogicalResult StageSplitter::assignSegments() {
  Block &body = micro.getBody().front();
  SmallVector<Operation *> deferred;
  for (Operation &op : body) {
    if (isFree(&op) || isa<func::ReturnOp>(op))
      continue;
    int64_t earliest = -1;
    for (Value v : op.getOperands())
      if (Operation *def = v.getDefiningOp(); def && !isFree(def))
        earliest = std::max(earliest, segOf.lookup(def));
    bool backward = isBackwardOp(&op) || isBackwardSegment(earliest);
    int64_t seg;
    if (std::optional<int64_t> s = pipeline::getStage(&op)) {
      if (*s < 0 || *s >= P)
        return op.emitError() << "pipeline stages: dist.stage " << *s
                              << " is outside 0.." << P - 1;
      // No earlier than what it reads: a collective the partitioner built
      // for an op that sums over stages carries the latest stage, which is
      // an early segment in backward. (dist-pipeline-split has checked the
      // forward's stages against dataflow.)
      seg = std::max(segment(backward, *s), earliest);
    } else if (earliest < 0) {
      deferred.push_back(&op);
      continue;
    } else {
      seg = backward && !isBackwardSegment(earliest)
                ? segment(true, stageOfSegment(earliest))
                : earliest;
    }
    segOf[&op] = seg;
  }
  // Ops that read only arguments and constants run where they are read.
  for (Operation *op : llvm::reverse(deferred)) {
    int64_t seg = -1;
    for (Operation *user : op->getUsers())
      if (!isa<func::ReturnOp>(user))
        seg = seg < 0 ? segOf.lookup(user) : std::min(seg, segOf.lookup(user));
    segOf[op] = seg < 0 ? 0 : seg;
  }
  return success();
}

LogicalResult StageSplitter::findTransfers() {
  forwardOut.resize(P);
  stash.resize(P);
  backwardOut.resize(P);
  Block &body = micro.getBody().front();
  for (Operation &op : body) {
    if (isFree(&op) || isa<func::ReturnOp>(op))
      continue;
    int64_t a = segOf.lookup(&op);
    int64_t sa = stageOfSegment(a);
    bool forwardDef = !isBackwardSegment(a);
    for (Value v : op.getResults()) {
      int64_t reach = sa, low = sa;
      std::set<int64_t> keptOn;
      for (Operation *user : v.getUsers()) {
        if (isa<func::ReturnOp>(user))
          continue;
        int64_t b = segOf.lookup(user);
        if (b == a)
          continue;
        int64_t t = stageOfSegment(b);
        if (!isBackwardSegment(b)) {
          reach = std::max(reach, t);
        } else if (forwardDef && t >= sa) {
          reach = std::max(reach, t);
          keptOn.insert(t);
        } else if (forwardDef) {
          keptOn.insert(sa);
          low = std::min(low, t);
        } else {
          low = std::min(low, t);
        }
      }
      for (int64_t u = sa; u < reach; ++u)
        forwardOut[u].insert(v);
      for (int64_t t : keptOn)
        stash[t].insert(v);
      for (int64_t u = sa; u > low; --u)
        backwardOut[u].insert(v);
    }
  }
  return success();
}

void StageSplitter::splitBackwards() {
  weightStash.resize(P);
  deferred.resize(P);
  if (!splitBackward)
    return;
  Block &body = micro.getBody().front();
  for (int64_t t = 0; t < P; ++t) {
    int64_t seg = segment(true, t);
    auto inSeg = [&](Operation *op) {
      return op && !isFree(op) && segOf.lookup(op) == seg;
    };
    // B: the ops that make what is sent down, the input-gradient and
    // recomputed ops, and every op of the segment they read.
    llvm::DenseSet<Operation *> input;
    SmallVector<Operation *> work;
    auto add = [&](Operation *op) {
      if (inSeg(op) && input.insert(op).second)
        work.push_back(op);
    };
    if (t > 0)
      for (Value v : backwardOut[t])
        add(v.getDefiningOp());
    for (Operation &op : body)
      if (inSeg(&op) && (nn::getGradKind(&op) == nn::GradKind::Input ||
                         nn::isRecomputed(&op)))
        add(&op);
    while (!work.empty()) {
      Operation *op = work.pop_back_val();
      for (Value v : op->getOperands())
        add(v.getDefiningOp());
    }
    for (Operation &op : body)
      if (inSeg(&op) && !input.contains(&op))
        weightOps.insert(&op);
    // What W reads: of the stash, moved to the weight stash (B reads it
    // there too); of B, deferred.
    auto readByW = [&](Value v) {
      return llvm::any_of(v.getUsers(), [&](Operation *user) {
        return inSeg(user) && weightOps.contains(user);
      });
    };
    SetVector<Value> keptForB;
    for (Value v : stash[t])
      (readByW(v) ? weightStash[t] : keptForB).insert(v);
    stash[t] = std::move(keptForB);
    for (Operation &op : body)
      if (inSeg(&op) && !weightOps.contains(&op))
        for (Value v : op.getResults())
          if (readByW(v))
            deferred[t].insert(v);
  }
}

func::FuncOp StageSplitter::createFunc(StringRef name, ArrayRef<Type> types,
                                       ArrayRef<DictionaryAttr> attrs,
                                       Piece &piece) {
  OpBuilder b(ctx);
  b.setInsertionPoint(step);
  auto func = func::FuncOp::create(b, step.getLoc(), name,
                                   FunctionType::get(ctx, types, {}));
  // The step's function attributes (its mesh, ...) but the microbatch ones.
  for (NamedAttribute attr : step->getDiscardableAttrs())
    if (attr.getName() != pipeline::kMicrobatchStepAttrName)
      func->setAttr(attr.getName(), attr.getValue());
  Block *entry = func.addEntryBlock();
  for (auto [i, a] : llvm::enumerate(attrs))
    if (a)
      func.setArgAttrs(i, a);
  piece.func = func;
  piece.builder.setInsertionPointToEnd(entry);
  return func;
}

Value StageSplitter::lookupOrClone(
    Piece &piece, Value v, const llvm::DenseSet<Operation *> &clonable) {
  if (Value mapped = piece.map.lookupOrNull(v))
    return mapped;
  Operation *def = v.getDefiningOp();
  if (!def || !(isFree(def) || clonable.contains(def)))
    return {};
  for (Value operand : def->getOperands())
    if (!lookupOrClone(piece, operand, clonable))
      return {};
  piece.builder.clone(*def, piece.map);
  return piece.map.lookup(v);
}

void StageSplitter::finish(Piece &piece, Location loc) {
  func::ReturnOp::create(piece.builder, loc, piece.results);
  SmallVector<Type> types;
  for (Value v : piece.results)
    types.push_back(v.getType());
  piece.func.setType(
      FunctionType::get(ctx, piece.func.getArgumentTypes(), types));
  for (auto [i, a] : llvm::enumerate(piece.resultAttrs))
    if (a)
      piece.func.setResultAttrs(i, a);
}

Value StageSplitter::shareOverPipeline(Piece &piece, Value mine, Type type,
                                       Location loc) {
  OpBuilder &b = piece.builder;
  if (!mine) {
    mine = tensors->buildZeros(b, loc, cast<RankedTensorType>(type));
  }
  return dist::AllReduceOp::create(
      b, loc, type, mine, step->getAttrOfType<FlatSymbolRefAttr>("dist.mesh"),
      b.getStrArrayAttr({pipeline::kPipelineAxis}),
      dist::ReductionKindAttr::get(ctx, dist::ReductionKind::Sum));
}

LogicalResult StageSplitter::buildMicroPieces() {
  Block &body = micro.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  llvm::DenseSet<Operation *> none;
  auto named = [&](StringRef attr, const Twine &name) {
    return DictionaryAttr::get(
        ctx, {NamedAttribute(StringAttr::get(ctx, attr),
                             StringAttr::get(ctx, name))});
  };
  // The pieces: per segment one function, but a split backward two (B,
  // then W).
  enum class Part { Forward, Backward, Input, Weight };
  auto buildPiece = [&](int64_t seg, Part part) -> LogicalResult {
    int64_t t = stageOfSegment(seg);
    bool backward = part != Part::Forward;
    SmallVector<Operation *> ops;
    for (Operation &op : body)
      if (!isFree(&op) && !isa<func::ReturnOp>(op) &&
          segOf.lookup(&op) == seg &&
          (part == Part::Forward || part == Part::Backward ||
           inWeight(&op) == (part == Part::Weight)))
        ops.push_back(&op);
    // What leaves to other pieces (before the accumulators updated) and
    // what arrives, each value named "<prefix><its index in its list>".
    using Named = SmallVector<std::pair<Value, std::string>>;
    auto append = [](Named &to, const SetVector<Value> &values,
                     const std::string &prefix) {
      for (auto [k, v] : llvm::enumerate(values))
        to.push_back({v, prefix + std::to_string(k)});
    };
    Named outgoing;
    if (part == Part::Forward) {
      if (t + 1 < P)
        append(outgoing, forwardOut[t], kActivationValuePrefix);
      append(outgoing, stash[t], kStashValuePrefix);
      append(outgoing, weightStash[t], kWeightStashValuePrefix);
    } else if (part != Part::Weight) {
      if (t > 0)
        append(outgoing, backwardOut[t], kGradientValuePrefix);
      if (part == Part::Input)
        append(outgoing, deferred[t], kDeferredValuePrefix);
    }
    // B and W take only what they read or pass on (filtered below).
    Named incoming;
    if (part == Part::Forward && t > 0)
      append(incoming, forwardOut[t - 1], kActivationValuePrefix);
    if (backward) {
      append(incoming, stash[t], kStashValuePrefix);
      append(incoming, weightStash[t], kWeightStashValuePrefix);
      if (t + 1 < P)
        append(incoming, backwardOut[t + 1], kGradientValuePrefix);
      if (part == Part::Weight)
        append(incoming, deferred[t], kDeferredValuePrefix);
    }
    if (part == Part::Input || part == Part::Weight) {
      llvm::DenseSet<Value> needed;
      for (Operation *op : ops)
        for (Value v : op->getOperands())
          needed.insert(v);
      for (auto &out : outgoing)
        needed.insert(out.first);
      llvm::erase_if(incoming, [&](const auto &in) {
        return !needed.contains(in.first);
      });
    }
    // Arguments: the step's that these ops read, then what arrives.
    llvm::SetVector<unsigned> used;
    for (Operation *op : ops)
      for (Value v : op->getOperands())
        if (auto arg = dyn_cast<BlockArgument>(v))
          used.insert(arg.getArgNumber());
    SmallVector<unsigned> usedArgs(used.begin(), used.end());
    llvm::sort(usedArgs);
    SmallVector<Type> types;
    SmallVector<DictionaryAttr> attrs;
    appendArguments(micro, usedArgs, types, attrs);
    for (auto &[v, name] : incoming) {
      types.push_back(v.getType());
      attrs.push_back(named(nn::inputAttr.getName(), name));
    }
    const char *suffix = part == Part::Forward    ? ".forward"
                         : part == Part::Backward ? ".backward"
                         : part == Part::Input    ? ".backward_input"
                                                  : ".backward_weight";
    std::string name =
        (step.getName() + ".s" + Twine(t) + suffix).str();
    Piece piece(ctx);
    func::FuncOp func = createFunc(name, types, attrs, piece);
    for (auto [n, i] : llvm::enumerate(usedArgs))
      piece.map.map(micro.getArgument(i), func.getArgument(n));
    for (auto [n, in] : llvm::enumerate(incoming))
      piece.map.map(in.first, func.getArgument(usedArgs.size() + n));
    for (Operation *op : ops) {
      for (Value v : op->getOperands())
        if (!lookupOrClone(piece, v, none))
          return op->emitError()
                 << "pipeline stages: internal error: an operand of this op "
                    "in "
                 << segmentName(seg) << " does not reach it";
      piece.builder.clone(*op, piece.map);
    }
    // Results: what leaves (a copy where it is an argument or already
    // returned: each result its own buffer), then the accumulators updated.
    llvm::DenseSet<Value> returned;
    auto addResult = [&](Value v, DictionaryAttr attr) -> LogicalResult {
      Value mapped = lookupOrClone(piece, v, none);
      if (!mapped)
        return micro.emitError()
               << "pipeline stages: internal error: a value leaving "
               << segmentName(seg) << " is not computed there";
      if (isa<BlockArgument>(mapped) || returned.contains(mapped))
        mapped = tensors->buildCopy(piece.builder, v.getLoc(), mapped);
      returned.insert(mapped);
      piece.results.push_back(mapped);
      piece.resultAttrs.push_back(attr);
      return success();
    };
    for (auto &[v, name] : outgoing)
      if (failed(addResult(v, named(nn::outputAttr.getName(), name))))
        return failure();
    for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
      Operation *def = v.getDefiningOp();
      if (!def || isFree(def) || segOf.lookup(def) != seg ||
          (backward && part != Part::Backward &&
           inWeight(def) != (part == Part::Weight)))
        continue;
      if (failed(addResult(v, micro.getResultAttrDict(i))))
        return failure();
      if (StringAttr state = nn::stateAttr.getResult(micro, i))
        stageOfName[state.getValue()] = t;
    }
    finish(piece, ret.getLoc());
    switch (part) {
    case Part::Forward:
      forwardFuncs[t] = func;
      break;
    case Part::Backward:
      backwardFuncs[t] = func;
      break;
    case Part::Input:
      inputFuncs[t] = func;
      break;
    case Part::Weight:
      weightFuncs[t] = func;
      break;
    }
    return success();
  };
  for (int64_t seg = 0; seg < 2 * P; ++seg) {
    if (!isBackwardSegment(seg)) {
      if (failed(buildPiece(seg, Part::Forward)))
        return failure();
    } else if (!splitBackward) {
      if (failed(buildPiece(seg, Part::Backward)))
        return failure();
    } else if (failed(buildPiece(seg, Part::Input)) ||
               failed(buildPiece(seg, Part::Weight)) ||
               failed(buildPiece(seg, Part::Backward))) {
      return failure();
    }
  }
  // Every returned value must have been placed.
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    Operation *def = v.getDefiningOp();
    if (!def || isFree(def))
      return micro.emitError() << "pipeline stages: result #" << i
                               << " of the per-microbatch function is not "
                                  "computed by a stage";
  }
  // Parameters and state read per microbatch belong to the stage reading
  // them; a parameter read on several (a tied embedding) is held by each.
  for (BlockArgument arg : micro.getArguments()) {
    StringAttr name = persistentArgName(micro, arg.getArgNumber());
    if (!name)
      continue;
    std::set<int64_t> stages;
    for (Operation *user : arg.getUsers())
      if (!isa<func::ReturnOp>(user))
        stages.insert(stageOfSegment(segOf.lookup(user)));
    if (stages.size() > 1) {
      if (!nn::paramAttr.getArg(micro, arg.getArgNumber()))
        return micro.emitError()
               << "pipeline stages: state '" << name.getValue()
               << "' is read on stages " << *stages.begin() << " and "
               << *stages.rbegin()
               << "; only parameters may be shared by stages";
      // Each stage that reads it holds a copy (splitStep).
      sharedParams[name.getValue().str()] = stages;
      continue;
    }
    if (!stages.empty()) {
      auto [it, added] = stageOfName.try_emplace(name.getValue(), *stages.begin());
      if (!added && it->second != *stages.begin())
        return micro.emitError()
               << "pipeline stages: accumulator '" << name.getValue()
               << "' is read on stage " << *stages.begin()
               << " and updated on stage " << it->second;
    }
  }
  return success();
}

LogicalResult StageSplitter::splitStep() {
  Block &body = step.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  // The stage of every argument and op: -1 when it reads nothing staged.
  llvm::DenseMap<Value, int64_t> stageOfValue;
  SmallVector<int64_t> argStage(step.getNumArguments(), -1);
  for (BlockArgument arg : step.getArguments()) {
    unsigned i = arg.getArgNumber();
    if (StringAttr name = persistentArgName(step, i))
      if (auto it = stageOfName.find(name.getValue()); it != stageOfName.end())
        argStage[i] = it->second;
    stageOfValue[arg] = argStage[i];
  }
  // A sum over stages (clipping's squared gradient norm: an nn.add of values
  // of two stages, or of one stage's and such a sum) is global: every stage
  // computes it, in the step's order, from its terms ("leaves"), which each
  // stage receives exactly by an all_reduce over pp of the term (its own
  // stage) or zeros (the others). What reads only global and stageless
  // values is global too; kGlobal marks them.
  constexpr int64_t kGlobal = -2;
  llvm::DenseSet<Operation *> stageless; // cloned where needed
  llvm::DenseMap<Operation *, int64_t> opStage;
  SetVector<Value> leaves;
  for (Operation &op : body) {
    if (isa<func::ReturnOp>(op))
      continue;
    std::set<int64_t> stages;
    bool global = false;
    for (Value v : op.getOperands()) {
      int64_t vs = stageOfValue.lookup(v);
      if (vs >= 0)
        stages.insert(vs);
      global |= vs == kGlobal;
    }
    int64_t s = stages.empty() ? (global ? kGlobal : -1) : *stages.begin();
    bool sum = dist::isTensorSum(&op);
    if (stages.size() > 1 || (global && !stages.empty() && sum)) {
      if (!sum) {
        // At the step (the model's function): the op may carry only a name.
        InFlightDiagnostic diag = step.emitError();
        diag << "pipeline stages: '" << op.getName()
             << "' in the once-per-step update reads values of stages "
             << *stages.begin() << " and " << *stages.rbegin()
             << " together; only sums over stages (a global gradient norm) "
                "may span stages";
        diag.attachNote(op.getLoc()) << "the op";
        return diag;
      }
      for (Value v : op.getOperands())
        if (stageOfValue.lookup(v) >= 0)
          leaves.insert(v);
      s = kGlobal;
    }
    for (Value r : op.getResults())
      stageOfValue[r] = s;
    if (s < 0)
      stageless.insert(&op);
    else
      opStage[&op] = s;
  }
  if (chunks > 1 && (!leaves.empty() || !sharedParams.empty()))
    return step.emitError()
           << "pipeline stages: with " << chunks
           << " chunks per rank, "
           << (sharedParams.empty()
                   ? std::string("a sum over stages (clipping by the global "
                                 "gradient norm)")
                   : "parameter '" + sharedParams.begin()->first +
                         "', read on several stages,")
           << " is not supported yet: each chunk of a rank updates apart";
  auto readsGlobal = [&](Operation *op) {
    return llvm::any_of(op->getOperands(), [&](Value v) {
      return stageOfValue.lookup(v) == kGlobal;
    });
  };
  // An argument read by the update but not per microbatch (Adam's moments)
  // takes the stage of its readers.
  for (BlockArgument arg : step.getArguments()) {
    unsigned i = arg.getArgNumber();
    if (argStage[i] >= 0 || nn::inputAttr.getArg(step, i))
      continue;
    std::set<int64_t> stages;
    for (Operation *user : arg.getUsers())
      if (auto it = opStage.find(user); it != opStage.end())
        stages.insert(it->second);
    if (stages.size() == 1)
      argStage[i] = *stages.begin();
  }

  // A shared parameter is updated where its gradient is (its owner), and
  // the new value goes to the other stages that read it: every stage runs
  // an all_reduce over the pipeline axis of it (the owner) or of zeros, so
  // that the collectives match, in name order.
  std::map<std::string, std::pair<unsigned, int64_t>> sharedResult;
  for (auto &[name, readers] : sharedParams) {
    for (unsigned i = 0; i < step.getNumResults(); ++i) {
      StringAttr param = nn::paramAttr.getResult(step, i);
      if (param && param.getValue() == name)
        sharedResult[name] = {i, stageOfValue.lookup(ret.getOperand(i))};
    }
    auto it = sharedResult.find(name);
    if (it == sharedResult.end() || it->second.second < 0)
      return step.emitError()
             << "pipeline stages: parameter '" << name
             << "' is read on several stages but no stage updates it";
  }
  for (int64_t t = 0; t < P; ++t) {
    Piece piece(ctx);
    // Arguments: every input (the whole batch, which the stage's forward and
    // backward read microbatch by microbatch), the stage's parameters and
    // state, and anything stageless its ops read.
    llvm::SetVector<unsigned> args;
    for (BlockArgument arg : step.getArguments())
      if (nn::inputAttr.getArg(step, arg.getArgNumber()) ||
          argStage[arg.getArgNumber()] == t)
        args.insert(arg.getArgNumber());
    std::function<void(Value)> need = [&](Value v) {
      if (auto arg = dyn_cast<BlockArgument>(v)) {
        if (argStage[arg.getArgNumber()] < 0)
          args.insert(arg.getArgNumber());
        return;
      }
      Operation *def = v.getDefiningOp();
      if (def && stageless.contains(def))
        for (Value operand : def->getOperands())
          need(operand);
    };
    for (auto &[op, s] : opStage)
      if (s == t)
        for (Value v : op->getOperands())
          need(v);
    // Stageless state (a step counter) is updated where it is an argument.
    auto keeps = [&](unsigned i) {
      StringAttr name = persistentResultName(step, i);
      if (!name)
        return t == 0; // an output computed from nothing staged
      return llvm::any_of(args, [&](unsigned a) {
        return persistentArgName(step, a) == name;
      });
    };
    // A stage reading a shared parameter holds it.
    for (BlockArgument arg : step.getArguments())
      if (StringAttr name = nn::paramAttr.getArg(step, arg.getArgNumber()))
        if (auto it = sharedParams.find(name.getValue().str());
            it != sharedParams.end() && it->second.count(t))
          args.insert(arg.getArgNumber());
    auto isShared = [&](unsigned i) {
      StringAttr name = nn::paramAttr.getResult(step, i);
      return name && sharedParams.count(name.getValue().str());
    };
    SmallVector<unsigned> resultIndices;
    for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
      int64_t s = stageOfValue.lookup(v);
      if (isShared(i)) {
        if (s == t)
          need(v);
        continue;
      }
      if (s == t || (s < 0 && keeps(i))) {
        resultIndices.push_back(i);
        need(v);
      }
    }
    SmallVector<unsigned> sorted(args.begin(), args.end());
    llvm::sort(sorted);
    SmallVector<Type> types;
    SmallVector<DictionaryAttr> attrs;
    appendArguments(step, sorted, types, attrs);
    std::string name =
        t == 0 ? (step.getName() + ".pipelined").str()
               : (step.getName() + ".s" + Twine(t)).str();
    func::FuncOp func = createFunc(name, types, attrs, piece);
    for (auto [n, i] : llvm::enumerate(sorted))
      piece.map.map(step.getArgument(i), func.getArgument(n));
    // The global sums' terms, on every stage in one order, before the
    // first op that reads a global value (each stage's terms precede it in
    // the step's order).
    bool haveLeaves = false;
    auto shareLeaves = [&]() -> LogicalResult {
      if (haveLeaves)
        return success();
      haveLeaves = true;
      for (Value leaf : leaves) {
        Value mine;
        if (stageOfValue.lookup(leaf) == t) {
          mine = lookupOrClone(piece, leaf, stageless);
          if (!mine)
            return step.emitError() << "pipeline stages: internal error: a "
                                       "term of a sum over stages does not "
                                       "reach stage "
                                    << t;
        }
        piece.map.map(leaf, shareOverPipeline(piece, mine, leaf.getType(),
                                              leaf.getLoc()));
      }
      return success();
    };
    for (Operation &op : body) {
      auto it = opStage.find(&op);
      if (it == opStage.end() || it->second != t)
        continue;
      if (readsGlobal(&op) && failed(shareLeaves()))
        return failure();
      for (Value v : op.getOperands())
        if (!lookupOrClone(piece, v, stageless))
          return op.emitError() << "pipeline stages: internal error: an "
                                   "operand of this update does not reach "
                                   "stage "
                                << t;
      piece.builder.clone(op, piece.map);
    }
    if (failed(shareLeaves()))
      return failure();
    for (unsigned i : resultIndices) {
      Value mapped = lookupOrClone(piece, ret.getOperand(i), stageless);
      if (!mapped)
        return step.emitError() << "pipeline stages: internal error: result #"
                                << i << " does not reach stage " << t;
      piece.results.push_back(mapped);
      piece.resultAttrs.push_back(step.getResultAttrDict(i));
    }
    for (auto &[name, readers] : sharedParams) {
      auto [i, owner] = sharedResult[name];
      Value v = ret.getOperand(i);
      Value mine;
      if (owner == t) {
        mine = lookupOrClone(piece, v, stageless);
        if (!mine)
          return step.emitError() << "pipeline stages: internal error: the "
                                     "update of '"
                                  << name << "' does not reach stage " << t;
      }
      Value received = shareOverPipeline(piece, mine, v.getType(), v.getLoc());
      if (owner == t || readers.count(t)) {
        piece.results.push_back(received);
        piece.resultAttrs.push_back(step.getResultAttrDict(i));
      }
    }
    finish(piece, ret.getLoc());
    stepFuncs[t] = func;
  }
  return success();
}

LogicalResult StageSplitter::addPipelineAxis() {
  auto meshName = step->getAttrOfType<FlatSymbolRefAttr>("dist.mesh");
  dist::MeshOp meshOp =
      meshName ? module.lookupSymbol<dist::MeshOp>(meshName.getAttr())
               : dist::MeshOp();
  if (!meshOp)
    return step.emitError() << "pipeline stages: the partitioned step names "
                               "no mesh to add the pipeline axis to";
  FailureOr<dist::Mesh> mesh = dist::meshFromOp(meshOp);
  if (failed(mesh))
    return failure();
  if (llvm::any_of(mesh->axes, [](const dist::MeshAxis &a) {
        return a.name == pipeline::kPipelineAxis;
      }))
    return meshOp.emitError()
           << "pipeline stages: the mesh already has an axis named '"
           << pipeline::kPipelineAxis
           << "'; the pipeline axis is added by the stage split";
  if (!mesh->deviceIds.empty())
    return meshOp.emitError() << "pipeline stages: a mesh with an explicit "
                                 "device order cannot take a pipeline axis";
  mesh->axes.insert(mesh->axes.begin(),
                    dist::MeshAxis{pipeline::kPipelineAxis.str(), P / chunks});
  meshOp.setMeshAttr(dist::meshToAttr(ctx, *mesh));
  return success();
}

LogicalResult StageSplitter::run() {
  if (chunks < 1 || P % chunks != 0)
    return step.emitError() << "pipeline stages: " << P
                            << " stages do not divide into " << chunks
                            << " chunks per pipeline rank";
  tensors = dist::findTensorBuilder(step);
  if (!tensors)
    tensors = dist::findTensorBuilder(micro);
  if (!tensors)
    return step.emitError()
           << "pipeline stages: no dialect of the step's ops builds the "
              "zeros and copies the stages need "
              "(dist::TensorBuilderInterface)";
  forwardFuncs.resize(P);
  backwardFuncs.resize(P);
  inputFuncs.resize(P);
  weightFuncs.resize(P);
  stepFuncs.resize(P);
  if (failed(assignSegments()) || failed(findTransfers()))
    return failure();
  splitBackwards();
  if (failed(addPipelineAxis()) || failed(buildMicroPieces()) ||
      failed(splitStep()))
    return failure();
  // The pieces replace both functions; stage 0's update takes the step's
  // name and lists every stage's functions.
  std::string stepName = step.getName().str();
  func::FuncOp first = stepFuncs[0];
  SmallVector<Attribute> stages;
  for (int64_t t = 0; t < P; ++t) {
    auto ref = [&](func::FuncOp f) {
      return FlatSymbolRefAttr::get(ctx, t == 0 && f == first
                                             ? StringRef(stepName)
                                             : f.getName());
    };
    SmallVector<NamedAttribute> programs = {
        NamedAttribute(StringAttr::get(ctx, "forward"), ref(forwardFuncs[t])),
        NamedAttribute(StringAttr::get(ctx, "step"), ref(stepFuncs[t]))};
    programs.push_back(NamedAttribute(StringAttr::get(ctx, "backward"),
                                      ref(backwardFuncs[t])));
    if (splitBackward) {
      programs.push_back(NamedAttribute(StringAttr::get(ctx, "backward_input"),
                                        ref(inputFuncs[t])));
      programs.push_back(NamedAttribute(
          StringAttr::get(ctx, "backward_weight"), ref(weightFuncs[t])));
    }
    stages.push_back(DictionaryAttr::get(ctx, programs));
  }
  micro.erase();
  step.erase();
  first.setSymName(stepName);
  first->setAttr(pipeline::kStageProgramsAttrName, ArrayAttr::get(ctx, stages));
  first->setAttr(pipeline::kScheduleAttrName, StringAttr::get(ctx, schedule));
  first->setAttr(pipeline::kPipelineChunksAttrName,
                 IntegerAttr::get(IntegerType::get(ctx, 64), chunks));
  return success();
}

struct DistStageSplitPass
    : public pipeline::impl::DistStageSplitBase<DistStageSplitPass> {
  using DistStageSplitBase::DistStageSplitBase;

  void runOnOperation() final {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> steps;
    for (func::FuncOp func : module.getOps<func::FuncOp>())
      if (func->hasAttr(pipeline::kPipelineStagesAttrName) &&
          func->hasAttr(pipeline::kMicrobatchStepAttrName))
        steps.push_back(func);
    for (func::FuncOp step : steps) {
      auto stages =
          step->getAttrOfType<IntegerAttr>(pipeline::kPipelineStagesAttrName);
      auto symbol =
          step->getAttrOfType<FlatSymbolRefAttr>(pipeline::kMicrobatchStepAttrName);
      auto micro = symbol ? module.lookupSymbol<func::FuncOp>(symbol.getAttr())
                          : func::FuncOp();
      if (!stages || stages.getInt() < 1 || !micro) {
        step.emitError() << "pipeline stages: needs a positive "
                         << pipeline::kPipelineStagesAttrName
                         << " and the per-microbatch function it names";
        return signalPassFailure();
      }
      if (failed(StageSplitter(module, step, micro, stages.getInt(), schedule,
                               chunks, splitBackward)
                     .run()))
        return signalPassFailure();
    }
  }
};

} // namespace
