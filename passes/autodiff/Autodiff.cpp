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

/// An op's pipeline stage (an i64), declared with dist-pipeline-split
/// (passes/pipeline/Passes.h, kStageAttrName); copied from a forward op
/// onto the backward ops built for it.
constexpr llvm::StringLiteral kStageAttrName = "dist.stage";

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
                   "finite and >= 0")))
    return failure();
  return success();
}

struct Param {
  unsigned argIndex;
  StringAttr name;
  RankedTensorType type;
};

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
  void computeActivity();
  LogicalResult sweep();
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
      params.push_back({i, param, cast<RankedTensorType>(type)});
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
  // Parameters and inputs keep all their attributes (annotations too).
  Block &body = forward.getBody().front();
  auto addForwardArg = [&](unsigned index) {
    argTypes.push_back(body.getArgument(index).getType());
    argAttrs.push_back(forward.getArgAttrDict(index));
    argLocs.push_back(body.getArgument(index).getLoc());
  };
  for (const Param &param : params)
    addForwardArg(param.argIndex);
  if (options.optimizer != Optimizer::None) {
    for (const Param &param : params) {
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
  for (unsigned input : inputs) {
    inputArgs.push_back(entry->getArgument(next));
    mapping.map(body.getArgument(input), entry->getArgument(next++));
  }

  b.setInsertionPointToEnd(entry);
  for (Operation &op : body.without_terminator()) {
    Operation *clone = b.clone(op, mapping);
    forwardOps.push_back(clone);
    forwardSet.insert(clone);
  }
  loss = mapping.lookup(body.getTerminator()->getOperand(lossIndex));
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
  cotangents[loss] = splat(b, loss.getLoc(), loss.getType(), 1.0);
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

void Differentiator::clip() {
  if (options.clipNorm <= 0)
    return;
  b.setInsertionPointToEnd(&function.getBody().front());
  b.setListener(&collector);
  Location loc = nameLoc("clip");
  auto scalarType =
      RankedTensorType::get({}, params.front().type.getElementType());
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
    if (options.optimizer == Optimizer::AdamW) {
      Value oldStep = stateArgs.back();
      step =
          nn::AddOp::create(b, oldStep.getLoc(), oldStep.getType(), oldStep,
                            splat(b, oldStep.getLoc(), oldStep.getType(), 1.0));
    }
    for (auto [i, param] : llvm::enumerate(params)) {
      Value p = paramArgs[i];
      Location loc = p.getLoc();
      if (options.optimizer == Optimizer::SGD) {
        auto sgd = nn::SGDOp::create(
            b, loc, p.getType(), p.getType(), p, grads[i], stateArgs[i],
            f64(options.lr), f64(options.momentum), f64(options.weightDecay));
        results.push_back(sgd.getNewParam());
        newState.push_back(sgd.getNewBuffer());
        continue;
      }
      auto scalar = RankedTensorType::get({}, param.type.getElementType());
      Value &localStep = stepOfType[scalar];
      if (!localStep)
        localStep = scalar == step.getType()
                        ? step
                        : nn::ConvertOp::create(b, step.getLoc(), scalar, step)
                              .getResult();
      auto adamw = nn::AdamWOp::create(
          b, loc, p.getType(), p.getType(), p.getType(), p, grads[i],
          stateArgs[2 * i], stateArgs[2 * i + 1], localStep, f64(options.lr),
          f64(options.beta1), f64(options.beta2), f64(options.eps),
          f64(options.weightDecay));
      results.push_back(adamw.getNewParam());
      newState.push_back(adamw.getNewM());
      newState.push_back(adamw.getNewV());
    }
    if (step)
      newState.push_back(step);
    for (const Param &param : params)
      resultAttrs.push_back(named(nn::paramAttr, param.name.getValue()));
    for (StringRef name : stateNames)
      resultAttrs.push_back(named(nn::stateAttr, name));
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
