//===- Autodiff.cpp - reverse-mode differentiation of @forward ------------===//
//
// The algorithm, on a copy of @forward's body in the new function:
//  1. Activity: a value gets a cotangent when it is a float that depends on
//     a parameter and the loss depends on it.
//  2. Reverse sweep from the loss (cotangent 1.0): each op with a cotangent
//     on its result builds its active operands' cotangents through
//     VJPOpInterface; a value used several times sums them (nn.add). The
//     ops built for an operand that depends on parameters only are weight
//     gradients ("W"), the others input gradients ("B").
//  3. Recompute (optional): per layer, the forward ops whose results stay
//     inside the layer and that the backward reads are cloned just before
//     their first backward reader.
//  4. Clipping by global norm and the optimizer ("update").
// Known limits: the forward is one block of single-result ops; a layer is
// the ops declaring one nn.layer index (as `partita model` writes them),
// ops without one are never recomputed; clipping needs every parameter of
// one element type.
//
//===----------------------------------------------------------------------===//

#include "passes/autodiff/Autodiff.h"

#include "dialects/dist/IR/DistDialect.h"
#include "dialects/nn/IR/NNAttributes.h"
#include "dialects/nn/IR/NNOps.h"
#include "dialects/nn/Interfaces/VJPInterface.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"

#include <cmath>

using namespace mlir;

namespace partita::autodiff {
namespace {

bool isFloatTensor(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && isa<FloatType>(tensor.getElementType());
}

Value splat(OpBuilder &b, Location loc, Type like, double value) {
  auto type = cast<RankedTensorType>(like);
  return nn::ConstantOp::create(
      b, loc, type,
      DenseElementsAttr::get(type,
                             b.getFloatAttr(type.getElementType(), value)));
}

/// An op's pipeline stage (an i64, dist-pipeline-split's), copied from a
/// forward op onto the backward ops built for it.
constexpr llvm::StringLiteral kStageAttrName =
    dist::DistDialect::kStageAttrName;

/// Collects the ops a builder inserts, to tag them.
struct Collector : public OpBuilder::Listener {
  void notifyOperationInserted(Operation *op, OpBuilder::InsertPoint) override {
    ops.push_back(op);
  }
  /// `origin`: the forward op these ops differentiate; its pipeline stage
  /// (dist.stage), if it has one, goes onto them, so backward ops run on
  /// their forward op's stage.
  void tag(nn::GradKind kind, Operation *origin = nullptr) {
    Attribute stage =
        origin ? origin->getAttr(kStageAttrName) : nullptr;
    for (Operation *op : ops) {
      nn::setGradKind(op, kind);
      if (stage)
        op->setAttr(kStageAttrName, stage);
    }
    ops.clear();
  }
  SmallVector<Operation *> ops;
};

/// "-0.5", "1e-08", "inf": options read back as the user wrote them.
std::string formatNumber(double value) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::format("%g", value);
  return text;
}

LogicalResult checkOptions(ModuleOp module, const AutodiffOptions &options) {
  auto check = [&](bool ok, StringRef name, double value,
                   StringRef expected) -> LogicalResult {
    if (ok && std::isfinite(value))
      return success();
    return module.emitError("nn-autodiff: ") << name << " must be " << expected
                                             << ", got " << formatNumber(value);
  };
  if (failed(check(options.lr >= 0, "lr", options.lr, "finite and >= 0")) ||
      failed(check(options.momentum >= 0, "momentum", options.momentum,
                   "finite and >= 0")) ||
      failed(check(options.beta1 >= 0 && options.beta1 < 1, "beta1",
                   options.beta1, "in [0, 1)")) ||
      failed(check(options.beta2 >= 0 && options.beta2 < 1, "beta2",
                   options.beta2, "in [0, 1)")) ||
      failed(check(options.eps > 0, "eps", options.eps, "finite and > 0")) ||
      failed(check(options.weightDecay >= 0, "weight-decay",
                   options.weightDecay, "finite and >= 0")) ||
      failed(check(options.clipNorm >= 0, "clip-norm", options.clipNorm,
                   "finite and >= 0")) ||
      failed(check(options.lossScale > 0, "loss-scale", options.lossScale,
                   "finite and > 0")))
    return failure();
  if (options.lossScaleGrowthInterval < 1)
    return module.emitError("nn-autodiff: loss-scale-growth-interval must "
                            "be at least 1, got ")
           << options.lossScaleGrowthInterval;
  if (options.precision == Precision::FP16Mixed &&
      options.optimizer == Optimizer::SGD)
    return module.emitError(
        "nn-autodiff: precision=fp16-mixed trains with adamw only: its "
        "dynamic loss scaling skips a step through the update's step count, "
        "which sgd has not");
  return success();
}

bool scalesLoss(const AutodiffOptions &options) {
  return options.precision == Precision::FP16Mixed &&
         options.optimizer == Optimizer::AdamW;
}

struct Param {
  unsigned argIndex;
  StringAttr name;
  /// The parameter as @forward declares it (f32 under a mixed recipe: the
  /// master copy's type).
  RankedTensorType type;
};

bool isMixed(const AutodiffOptions &options) {
  return options.precision != Precision::FP32;
}

/// The element type a mixed recipe computes in.
FloatType computeType(MLIRContext *context, const AutodiffOptions &options) {
  if (options.precision == Precision::FP16Mixed)
    return Float16Type::get(context);
  return BFloat16Type::get(context);
}

StringRef precisionName(Precision precision) {
  switch (precision) {
  case Precision::FP32:
    return "fp32";
  case Precision::BF16Mixed:
    return "bf16-mixed";
  case Precision::FP16Mixed:
    return "fp16-mixed";
  }
  return "fp32";
}

/// `type` with an f32 element type replaced by `low`; other types as they
/// are.
Type narrowed(Type type, FloatType low) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.getElementType().isF32())
    return type;
  return tensor.clone(low);
}

class Differentiator {
public:
  Differentiator(ModuleOp module, func::FuncOp forward,
                 const AutodiffOptions &options)
      : module(module), forward(forward), options(options),
        b(module.getContext()) {}

  FailureOr<AutodiffStats> run();

private:
  LogicalResult checkForward();
  void createFunction();
  void narrowForward();
  void computeActivity();
  LogicalResult sweep();
  void widenGradients();
  void recompute();
  void clip();
  void finish();

  Location nameLoc(const Twine &name) {
    return NameLoc::get(b.getStringAttr(name));
  }

  ModuleOp module;
  func::FuncOp forward;
  const AutodiffOptions &options;
  OpBuilder b;
  Collector collector;

  SmallVector<Param> params;
  /// The indices of @forward's input arguments.
  SmallVector<unsigned> inputs;
  unsigned lossIndex = 0;

  func::FuncOp function;
  SmallVector<Value> paramArgs, inputArgs;
  /// Optimizer state arguments: per parameter (m, v) or (momentum), then
  /// the step count.
  SmallVector<Value> stateArgs;
  SmallVector<std::string> stateNames;
  Value loss;
  SmallVector<Operation *> forwardOps;
  DenseSet<Operation *> forwardSet;
  DenseSet<Value> dependsOnParam, dependsOnInput, active;
  DenseMap<Value, Value> cotangents;
  SmallVector<Value> grads;
  /// The gradients' global norm before clipping (only with clip-norm).
  Value gradNorm;
  /// fp16-mixed: the loss-scale state arguments, and `found` (0, or NaN
  /// when a gradient overflowed) and `finite` (1 or 0).
  Value lossScaleArg, cleanStepsArg, found, finite;
};

LogicalResult Differentiator::checkForward() {
  if (forward.isExternal() || !forward.getBody().hasOneBlock())
    return forward.emitError(
        "nn-autodiff: @forward must have a body of one block");
  for (unsigned i = 0, e = forward.getNumArguments(); i < e; ++i) {
    StringAttr param = nn::paramAttr.getArg(forward, i);
    StringAttr input = nn::inputAttr.getArg(forward, i);
    Type type = forward.getArgument(i).getType();
    if (param) {
      if (!isFloatTensor(type))
        return forward.emitError("nn-autodiff: parameter '")
               << param.getValue() << "' must be a float tensor, got " << type;
      auto tensor = cast<RankedTensorType>(type);
      // A mixed recipe narrows an f32 model (its values become masters).
      if (isMixed(options) && !tensor.getElementType().isF32())
        return forward.emitError("nn-autodiff: precision=")
               << precisionName(options.precision) << " starts from an f32 "
               << "model (it keeps the f32 values as master weights), but "
               << "parameter '" << param.getValue() << "' is " << tensor;
      params.push_back({i, param, tensor});
    } else if (input) {
      inputs.push_back(i);
    } else {
      return forward.emitError("nn-autodiff: argument #")
             << i << " of @forward is neither a parameter (nn.param) nor "
             << "an input (nn.input)";
    }
  }
  llvm::StringSet<> names;
  for (const Param &param : params)
    if (!names.insert(param.name.getValue()).second)
      return forward.emitError("nn-autodiff: two parameters are named '")
             << param.name.getValue() << "'";
  if (params.empty())
    return forward.emitError(
        "nn-autodiff: @forward has no parameter (nn.param) to train");
  std::optional<unsigned> lossResult;
  for (unsigned i = 0, e = forward.getNumResults(); i < e; ++i) {
    StringAttr output = nn::outputAttr.getResult(forward, i);
    if (!output || output.getValue() != "loss")
      continue;
    if (lossResult)
      return forward.emitError("nn-autodiff: results #")
             << *lossResult << " and #" << i
             << " of @forward are both marked nn.output = \"loss\"";
    lossResult = i;
  }
  if (!lossResult)
    return forward.emitError("nn-autodiff: @forward has no result marked "
                             "nn.output = \"loss\"");
  lossIndex = *lossResult;
  Type lossType = forward.getResultTypes()[lossIndex];
  auto lossTensor = dyn_cast<RankedTensorType>(lossType);
  if (!isFloatTensor(lossType) || lossTensor.getRank() != 0)
    return forward.emitError(
               "nn-autodiff: the loss must be a rank-0 float tensor, got ")
           << lossType;
  if (isMixed(options)) {
    Value lossValue = forward.getBody().front().getTerminator()->getOperand(
        lossIndex);
    if (!lossValue.getDefiningOp() || !lossTensor.getElementType().isF32())
      return forward.emitError("nn-autodiff: precision=")
             << precisionName(options.precision)
             << " computes the loss in f32 with the op that produces it; "
             << "the loss must be an f32 result of an op, got " << lossType;
  }
  if (options.clipNorm > 0)
    for (const Param &param : params)
      if (param.type.getElementType() != params[0].type.getElementType())
        return forward.emitError("nn-autodiff: clip-norm needs parameters "
                                 "of one element type; '")
               << params[0].name.getValue() << "' is "
               << params[0].type.getElementType() << " and '"
               << param.name.getValue() << "' is "
               << param.type.getElementType();
  return success();
}

void Differentiator::createFunction() {
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  SmallVector<Location> argLocs;
  auto addArg = [&](Type type, const nn::NameAttrDecl &attr, StringRef name,
                    Location loc) {
    argTypes.push_back(type);
    argAttrs.push_back(b.getDictionaryAttr(attr.get(b.getContext(), name)));
    argLocs.push_back(loc);
  };
  FloatType low = computeType(b.getContext(), options);
  // Parameters and inputs keep all their attributes (annotations too).
  Block &body = forward.getBody().front();
  auto addForwardArg = [&](unsigned index) {
    argTypes.push_back(body.getArgument(index).getType());
    argAttrs.push_back(forward.getArgAttrDict(index));
    argLocs.push_back(body.getArgument(index).getLoc());
  };
  for (const Param &param : params) {
    addForwardArg(param.argIndex);
    // Under a mixed recipe the parameter is the compute-type copy.
    if (isMixed(options))
      argTypes.back() = narrowed(argTypes.back(), low);
  }
  if (options.optimizer != Optimizer::None) {
    for (const Param &param : params) {
      if (isMixed(options)) {
        std::string name = (param.name.getValue() + ".master").str();
        addArg(param.type, nn::stateAttr, name, nameLoc(name));
        SmallVector<NamedAttribute> attrs(argAttrs.back().getValue());
        attrs.push_back(
            nn::masterAttr.get(b.getContext(), param.name.getValue()));
        argAttrs.back() = b.getDictionaryAttr(attrs);
        stateNames.push_back(name);
      }
      SmallVector<StringRef, 2> suffixes;
      if (options.optimizer == Optimizer::AdamW)
        suffixes = {"m", "v"};
      else
        suffixes = {"momentum"};
      for (StringRef suffix : suffixes) {
        std::string name = (param.name.getValue() + "." + suffix).str();
        addArg(param.type, nn::stateAttr, name, nameLoc(name));
        stateNames.push_back(name);
      }
    }
    if (options.optimizer == Optimizer::AdamW) {
      addArg(RankedTensorType::get({}, b.getF32Type()), nn::stateAttr, "step",
             nameLoc("step"));
      stateNames.push_back("step");
    }
    if (scalesLoss(options)) {
      addArg(RankedTensorType::get({}, b.getF32Type()), nn::stateAttr,
             "loss_scale", nameLoc("loss_scale"));
      SmallVector<NamedAttribute> attrs(argAttrs.back().getValue());
      attrs.push_back(b.getNamedAttr(nn::kInitValueAttrName,
                                     b.getF64FloatAttr(options.lossScale)));
      argAttrs.back() = b.getDictionaryAttr(attrs);
      stateNames.push_back("loss_scale");
      addArg(RankedTensorType::get({}, b.getF32Type()), nn::stateAttr,
             "loss_scale_clean_steps", nameLoc("loss_scale_clean_steps"));
      stateNames.push_back("loss_scale_clean_steps");
    }
  }
  for (unsigned input : inputs)
    addForwardArg(input);

  StringRef name =
      options.optimizer == Optimizer::None ? "grads" : "train_step";
  b.setInsertionPoint(forward);
  function = func::FuncOp::create(b, forward.getLoc(), name,
                                  b.getFunctionType(argTypes, {}));
  function->setDiscardableAttrs(forward->getDiscardableAttrDictionary());
  Block *entry = function.addEntryBlock();
  for (auto [arg, loc] : llvm::zip(entry->getArguments(), argLocs))
    arg.setLoc(loc);
  function.setAllArgAttrs(argAttrs);

  unsigned next = 0;
  IRMapping mapping;
  for (const Param &param : params) {
    paramArgs.push_back(entry->getArgument(next));
    mapping.map(body.getArgument(param.argIndex), entry->getArgument(next++));
  }
  for (size_t i = 0; i < stateNames.size(); ++i)
    stateArgs.push_back(entry->getArgument(next++));
  if (scalesLoss(options)) {
    cleanStepsArg = stateArgs.pop_back_val();
    lossScaleArg = stateArgs.pop_back_val();
  }
  b.setInsertionPointToEnd(entry);
  for (unsigned input : inputs) {
    Value arg = entry->getArgument(next++);
    inputArgs.push_back(arg);
    // A mixed recipe computes on float inputs narrowed where they enter.
    Type narrow = isMixed(options) ? narrowed(arg.getType(), low) : Type();
    if (narrow && narrow != arg.getType()) {
      // A forward op like the others (activity flows through it).
      auto convert = nn::ConvertOp::create(b, arg.getLoc(), narrow, arg);
      forwardOps.push_back(convert);
      forwardSet.insert(convert);
      mapping.map(body.getArgument(input), convert);
    } else
      mapping.map(body.getArgument(input), arg);
  }

  for (Operation &op : body.without_terminator()) {
    Operation *clone = b.clone(op, mapping);
    forwardOps.push_back(clone);
    forwardSet.insert(clone);
  }
  loss = mapping.lookup(body.getTerminator()->getOperand(lossIndex));
  narrowForward();
}

void Differentiator::narrowForward() {
  if (!isMixed(options))
    return;
  FloatType low = computeType(b.getContext(), options);
  Operation *lossOp = loss.getDefiningOp();
  SmallVector<Operation *> ops;
  for (Operation *op : forwardOps) {
    ops.push_back(op);
    if (op == lossOp) {
      // The loss is computed in f32 from widened operands (the converts are
      // forward ops, differentiated like the others).
      ops.pop_back();
      b.setInsertionPoint(op);
      for (OpOperand &operand : op->getOpOperands()) {
        auto tensor = dyn_cast<RankedTensorType>(operand.get().getType());
        if (!tensor || tensor.getElementType() != low)
          continue;
        auto widen = nn::ConvertOp::create(
            b, op->getLoc(), tensor.clone(b.getF32Type()), operand.get());
        ops.push_back(widen);
        forwardSet.insert(widen);
        operand.set(widen);
      }
      ops.push_back(op);
      continue;
    }
    if (auto constant = dyn_cast<nn::ConstantOp>(op)) {
      auto dense = dyn_cast<DenseFPElementsAttr>(constant.getValue());
      auto type = dyn_cast<RankedTensorType>(constant.getType());
      if (!dense || !type || !type.getElementType().isF32())
        continue;
      auto value = dense.mapValues(low, [&](const APFloat &v) {
        APFloat c = v;
        bool lost;
        c.convert(low.getFloatSemantics(), APFloat::rmNearestTiesToEven,
                  &lost);
        return c.bitcastToAPInt();
      });
      b.setInsertionPoint(op);
      auto replacement = nn::ConstantOp::create(
          b, op->getLoc(), type.clone(low), cast<ElementsAttr>(value));
      replacement->setDiscardableAttrs(op->getDiscardableAttrDictionary());
      op->replaceAllUsesWith(replacement);
      forwardSet.erase(op);
      op->erase();
      ops.back() = replacement;
      forwardSet.insert(replacement);
      continue;
    }
    for (Value result : op->getResults())
      result.setType(narrowed(result.getType(), low));
  }
  forwardOps = std::move(ops);
}

void Differentiator::computeActivity() {
  for (Value arg : paramArgs)
    dependsOnParam.insert(arg);
  for (Value arg : inputArgs)
    dependsOnInput.insert(arg);
  for (Operation *op : forwardOps) {
    bool fromParam = llvm::any_of(
        op->getOperands(), [&](Value v) { return dependsOnParam.contains(v); });
    bool fromInput = llvm::any_of(
        op->getOperands(), [&](Value v) { return dependsOnInput.contains(v); });
    for (Value result : op->getResults()) {
      if (fromParam)
        dependsOnParam.insert(result);
      if (fromInput)
        dependsOnInput.insert(result);
    }
  }
  DenseSet<Value> needed{loss};
  for (Operation *op : llvm::reverse(forwardOps)) {
    if (llvm::none_of(op->getResults(),
                      [&](Value v) { return needed.contains(v); }))
      continue;
    for (Value operand : op->getOperands())
      needed.insert(operand);
  }
  for (Value value : needed)
    if (dependsOnParam.contains(value) && isFloatTensor(value.getType()))
      active.insert(value);
}

LogicalResult Differentiator::sweep() {
  b.setListener(&collector);
  // fp16-mixed: the backward of the scaled loss (scale x loss).
  cotangents[loss] = lossScaleArg
                         ? lossScaleArg
                         : splat(b, loss.getLoc(), loss.getType(), 1.0);
  collector.tag(nn::GradKind::Input, loss.getDefiningOp());
  for (Operation *op : llvm::reverse(forwardOps)) {
    if (llvm::none_of(op->getResults(),
                      [&](Value v) { return cotangents.contains(v); }))
      continue;
    auto vjp = dyn_cast<nn::VJPOpInterface>(op);
    if (!vjp)
      return op->emitError("nn-autodiff: '")
             << op->getName() << "' has no VJP rule (VJPOpInterface), but "
             << "the loss depends on a parameter through it";
    SmallVector<Value> resultCotangents;
    for (Value result : op->getResults()) {
      Value cotangent = cotangents.lookup(result);
      if (!cotangent) {
        cotangent = splat(b, op->getLoc(), result.getType(), 0.0);
        collector.tag(nn::GradKind::Input, op);
      }
      resultCotangents.push_back(cotangent);
    }
    for (auto [index, operand] : llvm::enumerate(op->getOperands())) {
      if (!active.contains(operand))
        continue;
      nn::GradKind kind = dependsOnInput.contains(operand)
                              ? nn::GradKind::Input
                              : nn::GradKind::Weight;
      FailureOr<Value> cotangent =
          vjp.buildOperandCotangent(b, index, resultCotangents);
      if (failed(cotangent))
        return failure();
      if (!*cotangent) {
        collector.ops.clear();
        continue;
      }
      Value sum = *cotangent;
      if (Value previous = cotangents.lookup(operand))
        sum = nn::AddOp::create(b, op->getLoc(), previous.getType(), previous,
                                sum);
      collector.tag(kind, op);
      cotangents[operand] = sum;
    }
  }
  for (auto [param, arg] : llvm::zip(params, paramArgs)) {
    Value grad = cotangents.lookup(arg);
    if (!grad) {
      grad = splat(b, arg.getLoc(), arg.getType(), 0.0);
      collector.tag(nn::GradKind::Weight);
    }
    grads.push_back(grad);
  }
  b.setListener(nullptr);
  return success();
}

void Differentiator::recompute() {
  if (options.recompute == Recompute::None)
    return;
  // Layers as the model builder declared them (nn.layer), in order.
  llvm::MapVector<int64_t, SmallVector<Operation *>> layers;
  for (Operation *op : forwardOps)
    if (std::optional<int64_t> layer = nn::getLayerIndex(op))
      layers[*layer].push_back(op);
  for (auto &entry : layers) {
    // Named, not bound: a lambda below captures `layer` (clang before 16
    // cannot capture structured bindings).
    int64_t layer = entry.first;
    SmallVector<Operation *> &ops = entry.second;
    // What the backward may recompute: ops of the layer whose results no
    // forward op of another layer reads (the layer's outputs are kept).
    llvm::SetVector<Operation *> candidates;
    for (Operation *op : ops) {
      if (options.recompute == Recompute::Selective &&
          !isa<nn::AttentionOp>(op))
        continue;
      bool escapes = llvm::any_of(op->getUsers(), [&](Operation *user) {
        return forwardSet.contains(user) && nn::getLayerIndex(user) != layer;
      });
      if (!escapes && op->getNumRegions() == 0)
        candidates.insert(op);
    }
    // The candidates the backward reads, and those they need in turn.
    Operation *first = nullptr;
    DenseSet<Operation *> needed;
    for (Operation *op : candidates)
      for (Operation *user : op->getUsers())
        if (!forwardSet.contains(user)) {
          needed.insert(op);
          if (!first || user->isBeforeInBlock(first))
            first = user;
        }
    if (!first)
      continue;
    for (Operation *op : llvm::reverse(candidates)) {
      if (!needed.contains(op))
        continue;
      for (Value operand : op->getOperands())
        if (Operation *def = operand.getDefiningOp();
            def && candidates.contains(def))
          needed.insert(def);
    }
    b.setInsertionPoint(first);
    IRMapping mapping;
    DenseSet<Operation *> clones;
    for (Operation *op : candidates) {
      if (!needed.contains(op))
        continue;
      Operation *clone = b.clone(*op, mapping);
      nn::setGradKind(clone, nn::GradKind::Input);
      nn::setRecomputed(clone);
      clones.insert(clone);
    }
    for (Operation *op : candidates) {
      if (!needed.contains(op))
        continue;
      for (Value result : op->getResults())
        result.replaceUsesWithIf(mapping.lookup(result), [&](OpOperand &use) {
          return !forwardSet.contains(use.getOwner()) &&
                 !clones.contains(use.getOwner());
        });
    }
  }
}

void Differentiator::widenGradients() {
  if (!isMixed(options) || options.optimizer == Optimizer::None)
    return;
  // The update runs on the f32 master: each gradient is widened once, and
  // clipping and the optimizer read the wide value. Under reduce-dtype=fp32
  // the convert keeps a partial sum partial (nn.wide_sum), so the reduction
  // runs on the wide value.
  b.setInsertionPointToEnd(&function.getBody().front());
  b.setListener(&collector);
  Value inverse;
  auto scalar = RankedTensorType::get({}, b.getF32Type());
  if (lossScaleArg) {
    Location loc = nameLoc("loss_scale");
    inverse = nn::DivOp::create(b, loc, scalar, splat(b, loc, scalar, 1.0),
                                lossScaleArg);
  }
  for (auto [param, grad] : llvm::zip(params, grads)) {
    auto convert =
        nn::ConvertOp::create(b, grad.getLoc(), param.type, grad);
    if (options.reduceType == ReduceType::FP32)
      convert->setAttr(nn::kWideSumAttrName, b.getUnitAttr());
    grad = convert;
    if (!inverse)
      continue;
    // Unscaled, and its overflow test: g * 0 is 0, or NaN for inf or NaN.
    Location loc = grad.getLoc();
    Value wide = nn::BroadcastOp::create(b, loc, grad.getType(), inverse,
                                         ArrayRef<int64_t>{});
    grad = nn::MulOp::create(b, loc, grad.getType(), grad, wide);
    int64_t rank = cast<RankedTensorType>(grad.getType()).getRank();
    Value zeroed = nn::MulOp::create(b, loc, grad.getType(), grad,
                                     splat(b, loc, grad.getType(), 0.0));
    Value sum =
        nn::ReduceOp::create(b, loc, scalar, nn::ReduceKind::Sum, zeroed,
                             llvm::to_vector(llvm::seq<int64_t>(0, rank)));
    found = found ? nn::AddOp::create(b, loc, scalar, found, sum) : sum;
  }
  if (found) {
    Location loc = nameLoc("loss_scale");
    finite = nn::GreaterEqualOp::create(b, loc, scalar, found,
                                        splat(b, loc, scalar, 0.0));
  }
  collector.tag(nn::GradKind::Update);
  b.setListener(nullptr);
}

void Differentiator::clip() {
  if (options.clipNorm <= 0)
    return;
  b.setInsertionPointToEnd(&function.getBody().front());
  b.setListener(&collector);
  Location loc = nameLoc("clip");
  auto scalarType = RankedTensorType::get(
      {}, cast<RankedTensorType>(grads.front().getType()).getElementType());
  Value total;
  for (Value grad : grads) {
    int64_t rank = cast<RankedTensorType>(grad.getType()).getRank();
    Value square = nn::MulOp::create(b, loc, grad.getType(), grad, grad);
    Value sum =
        nn::ReduceOp::create(b, loc, scalarType, nn::ReduceKind::Sum, square,
                             llvm::to_vector(llvm::seq<int64_t>(0, rank)));
    total = total ? nn::AddOp::create(b, loc, scalarType, total, sum) : sum;
  }
  Value norm = nn::SqrtOp::create(b, loc, scalarType, total);
  gradNorm = norm;
  Value limit = splat(b, loc, scalarType, options.clipNorm);
  Value padded = nn::AddOp::create(b, loc, scalarType, norm,
                                   splat(b, loc, scalarType, 1e-6));
  Value denominator = nn::MaxOp::create(b, loc, scalarType, padded, limit);
  Value coefficient = nn::DivOp::create(b, loc, scalarType, limit, denominator);
  for (Value &grad : grads) {
    Value wide = nn::BroadcastOp::create(b, loc, grad.getType(), coefficient,
                                         ArrayRef<int64_t>{});
    grad = nn::MulOp::create(b, loc, grad.getType(), grad, wide);
  }
  collector.tag(nn::GradKind::Update);
  b.setListener(nullptr);
}

void Differentiator::finish() {
  Block &entry = function.getBody().front();
  b.setInsertionPointToEnd(&entry);
  b.setListener(&collector);
  SmallVector<Value> results;
  SmallVector<DictionaryAttr> resultAttrs;
  auto named = [&](const nn::NameAttrDecl &attr, StringRef name) {
    return b.getDictionaryAttr(attr.get(b.getContext(), name));
  };
  if (options.optimizer == Optimizer::None) {
    results.push_back(loss);
    resultAttrs.push_back(named(nn::outputAttr, "loss"));
    for (auto [param, grad] : llvm::zip(params, grads)) {
      results.push_back(grad);
      resultAttrs.push_back(named(nn::gradAttr, param.name.getValue()));
    }
  } else {
    auto f64 = [&](double value) { return b.getF64FloatAttr(value); };
    SmallVector<Value> newState;
    Value step;
    // The new step count in each parameter element type (one convert each).
    DenseMap<Type, Value> stepOfType;
    // The step the update sees: fp16-mixed's is step + found, NaN on an
    // overflow (the update then skips), while the count grows by `finite`.
    Value updateStep;
    if (options.optimizer == Optimizer::AdamW) {
      Value oldStep = stateArgs.back();
      Location loc = oldStep.getLoc();
      Value increment =
          finite ? finite : splat(b, loc, oldStep.getType(), 1.0);
      step = nn::AddOp::create(b, loc, oldStep.getType(), oldStep, increment);
      updateStep = found ? nn::AddOp::create(b, loc, oldStep.getType(), step,
                                             found)
                         : step;
    }
    // Per parameter: its master copy (mixed recipes), then its moments.
    unsigned group = (options.optimizer == Optimizer::AdamW ? 2 : 1) +
                     (isMixed(options) ? 1 : 0);
    for (auto [i, param] : llvm::enumerate(params)) {
      Value p = paramArgs[i];
      Location loc = p.getLoc();
      ValueRange state(stateArgs);
      state = state.slice(group * i, group);
      // The optimizer updates the master under a mixed recipe; the new
      // parameter is the new master narrowed.
      Value updated = p;
      if (isMixed(options)) {
        updated = state.front();
        state = state.drop_front();
        newState.push_back(Value());
      }
      size_t masterSlot = newState.size() - 1;
      auto narrow = [&](Value newMaster) -> Value {
        if (!isMixed(options))
          return newMaster;
        newState[masterSlot] = newMaster;
        return nn::ConvertOp::create(b, loc, p.getType(), newMaster);
      };
      if (options.optimizer == Optimizer::SGD) {
        auto sgd = nn::SGDOp::create(
            b, loc, updated.getType(), updated.getType(), updated, grads[i],
            state[0], f64(options.lr), f64(options.momentum),
            f64(options.weightDecay));
        results.push_back(narrow(sgd.getNewParam()));
        newState.push_back(sgd.getNewBuffer());
        continue;
      }
      Type type = updated.getType();
      auto scalar = RankedTensorType::get(
          {}, cast<RankedTensorType>(type).getElementType());
      Value &localStep = stepOfType[scalar];
      if (!localStep)
        localStep = scalar == updateStep.getType()
                        ? updateStep
                        : nn::ConvertOp::create(b, updateStep.getLoc(), scalar,
                                                updateStep)
                              .getResult();
      auto adamw = nn::AdamWOp::create(
          b, loc, type, type, type, updated, grads[i], state[0], state[1],
          localStep, f64(options.lr), f64(options.beta1), f64(options.beta2),
          f64(options.eps), f64(options.weightDecay));
      results.push_back(narrow(adamw.getNewParam()));
      newState.push_back(adamw.getNewM());
      newState.push_back(adamw.getNewV());
    }
    if (step)
      newState.push_back(step);
    if (lossScaleArg) {
      // clean' = finite (clean + 1); grow when it reaches the interval, then
      // restart; scale' = scale (1 + finite) / 2, doubled when it grows.
      Location loc = nameLoc("loss_scale");
      Type scalar = lossScaleArg.getType();
      auto num = [&](double v) { return splat(b, loc, scalar, v); };
      Value clean = nn::MulOp::create(
          b, loc, scalar, finite,
          nn::AddOp::create(b, loc, scalar, cleanStepsArg, num(1.0)));
      Value grow = nn::GreaterEqualOp::create(
          b, loc, scalar, clean,
          num(double(options.lossScaleGrowthInterval)));
      Value keep = nn::SubOp::create(b, loc, scalar, num(1.0), grow);
      clean = nn::MulOp::create(b, loc, scalar, clean, keep);
      Value factor = nn::MulOp::create(
          b, loc, scalar,
          nn::MulOp::create(b, loc, scalar, num(0.5),
                            nn::AddOp::create(b, loc, scalar, num(1.0), finite)),
          nn::AddOp::create(b, loc, scalar, num(1.0), grow));
      newState.push_back(
          nn::MulOp::create(b, loc, scalar, lossScaleArg, factor));
      newState.push_back(clean);
    }
    for (const Param &param : params)
      resultAttrs.push_back(named(nn::paramAttr, param.name.getValue()));
    for (StringRef name : stateNames)
      resultAttrs.push_back(named(nn::stateAttr, name));
    assert(newState.size() == stateNames.size() && "one result per state");
    llvm::append_range(results, newState);
    results.push_back(loss);
    resultAttrs.push_back(named(nn::outputAttr, "loss"));
    // The norm clipping computed is returned too: a training loop reports
    // it each step at no extra cost.
    if (gradNorm) {
      results.push_back(gradNorm);
      resultAttrs.push_back(named(nn::outputAttr, "grad_norm"));
    }
  }
  collector.tag(nn::GradKind::Update);
  b.setListener(nullptr);
  func::ReturnOp::create(b, forward.getBody().front().getTerminator()->getLoc(),
                         results);
  function.setFunctionType(b.getFunctionType(function.getArgumentTypes(),
                                             ValueRange(results).getTypes()));
  function.setAllResultAttrs(resultAttrs);
}

FailureOr<AutodiffStats> Differentiator::run() {
  if (failed(checkOptions(module, options)) || failed(checkForward()))
    return failure();
  createFunction();
  computeActivity();
  if (failed(sweep())) {
    function.erase();
    return failure();
  }
  recompute();
  widenGradients();
  clip();
  finish();
  forward.erase();
  AutodiffStats stats;
  function.walk([&](Operation *op) {
    if (nn::isRecomputed(op))
      ++stats.recomputedOps;
    std::optional<nn::GradKind> kind = nn::getGradKind(op);
    if (!kind)
      return;
    switch (*kind) {
    case nn::GradKind::Input:
      ++stats.inputGradientOps;
      break;
    case nn::GradKind::Weight:
      ++stats.weightGradientOps;
      break;
    case nn::GradKind::Update:
      ++stats.updateOps;
      break;
    }
  });
  return stats;
}

} // namespace

std::optional<Precision> parsePrecision(StringRef text) {
  for (Precision p :
       {Precision::FP32, Precision::BF16Mixed, Precision::FP16Mixed})
    if (text == precisionName(p))
      return p;
  return std::nullopt;
}

FailureOr<AutodiffStats> differentiate(ModuleOp module,
                                       const AutodiffOptions &options) {
  auto forward = module.lookupSymbol<func::FuncOp>("forward");
  if (!forward)
    return module.emitError(
        "nn-autodiff: the module has no func.func @forward");
  if (module.lookupSymbol(options.optimizer == Optimizer::None ? "grads"
                                                               : "train_step"))
    return module.emitError("nn-autodiff: the module already has a @")
           << (options.optimizer == Optimizer::None ? "grads" : "train_step");
  // @forward is replaced: nothing may still call it.
  if (std::optional<SymbolTable::UseRange> uses =
          SymbolTable::getSymbolUses(forward, module);
      uses && !uses->empty())
    return uses->begin()->getUser()->emitError(
        "nn-autodiff: @forward is replaced by the step function, but this "
        "op refers to it");
  return Differentiator(module, forward, options).run();
}

} // namespace partita::autodiff
