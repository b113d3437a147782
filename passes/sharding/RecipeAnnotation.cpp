//===- RecipeAnnotation.cpp - write a recipe's shardings on a function ----===//

#include "passes/sharding/RecipeAnnotation.h"

#include "dialects/dist/IR/DistOps.h"
#include "dialects/dist/IR/ShardingAdapters.h"
#include "dialects/nn/IR/NNAttributes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "dist-annotate"

using namespace mlir;
using namespace partita;
using namespace partita::sharding;

/// The location of argument `index`: the block argument's where the function
/// has a body (`partita model` names it after the parameter), else the
/// function's.
static Location getArgLoc(FunctionOpInterface func, unsigned index) {
  if (!func.isExternal())
    return func.getArgument(index).getLoc();
  return func->getLoc();
}

namespace {
/// What the recipe wants for one argument.
struct ArgPlan {
  /// "parameter" or "input", for diagnostics.
  StringRef kind;
  StringRef name;
  /// Null for inputs and for parameters replicated by `replicatesAllParams`.
  const ParamRecipe *recipe = nullptr;
  /// One role per dimension once the rank is known.
  SmallVector<AxisRole> roles;
};
} // namespace

/// Decides what `strategy` writes on argument `index`; std::nullopt when it
/// leaves the argument alone.
static FailureOr<std::optional<ArgPlan>>
planArgument(FunctionOpInterface func, unsigned index,
             const Strategy &strategy) {
  // The nn dialect has checked that both are strings.
  StringAttr param = nn::paramAttr.getArg(func, index);
  StringAttr input = nn::inputAttr.getArg(func, index);
  if (!param && !input)
    return std::optional<ArgPlan>();
  Location loc = getArgLoc(func, index);
  if (param && input) {
    emitError(loc) << "argument #" << index << " of @" << func.getName()
                   << " carries both " << nn::paramAttr.getName() << " and "
                   << nn::inputAttr.getName();
    return failure();
  }
  StringAttr name = param ? param : input;

  ArgPlan plan;
  plan.kind = param ? "parameter" : "input";
  plan.name = name.getValue();
  if (param) {
    plan.recipe = lookupParamRecipe(strategy, plan.name);
    if (!plan.recipe && !strategy.replicatesAllParams) {
      LLVM_DEBUG(llvm::dbgs() << "dist-annotate: strategy '" << strategy.name
                              << "' does not know parameter '" << plan.name
                              << "'; left unannotated\n");
      return std::optional<ArgPlan>();
    }
  }

  auto type = dyn_cast<RankedTensorType>(func.getArgumentTypes()[index]);
  if (!type) {
    emitError(loc) << plan.kind << " '" << plan.name << "' has type "
                   << func.getArgumentTypes()[index] << "; strategy '"
                   << strategy.name << "' annotates ranked tensors only";
    return failure();
  }
  int64_t rank = type.getRank();
  if (plan.recipe) {
    if ((int64_t)plan.recipe->roles.size() != rank) {
      emitError(loc) << "parameter '" << plan.name << "' has rank " << rank
                     << " (" << type << "); strategy '" << strategy.name
                     << "' expects rank " << plan.recipe->roles.size() << " ["
                     << plan.recipe->dimNames << "]";
      return failure();
    }
    plan.roles.assign(plan.recipe->roles.begin(), plan.recipe->roles.end());
    return std::optional<ArgPlan>(std::move(plan));
  }
  plan.roles.assign(rank, AxisRole::Replicated);
  if (input && strategy.splitsBatch) {
    if (rank == 0) {
      emitError(loc) << "input '" << plan.name << "' is a scalar; strategy '"
                     << strategy.name
                     << "' splits dimension 0 (the batch) of every input";
      return failure();
    }
    plan.roles[0] = AxisRole::Data;
  }
  if (input && strategy.splitsSequence) {
    if (rank < 2) {
      emitError(loc) << "input '" << plan.name << "' has rank " << rank
                     << " (" << type << "); strategy '" << strategy.name
                     << "' splits dimension 1 (the sequence) of every input";
      return failure();
    }
    plan.roles[1] = AxisRole::Context;
  }
  return std::optional<ArgPlan>(std::move(plan));
}

/// The sharding `plan` asks for on argument `index` (of type `type`), or an
/// error at the argument when a split dimension is too small for its axis.
static FailureOr<dist::ShardingAttr>
buildSharding(FunctionOpInterface func, unsigned index, RankedTensorType type,
              const ArgPlan &plan, const AnnotateOptions &options) {
  MLIRContext *ctx = func->getContext();
  dist::Sharding sharding;
  for (auto [dim, role] : llvm::enumerate(plan.roles)) {
    std::vector<dist::AxisRef> axes;
    if (role != AxisRole::Replicated) {
      StringRef axisName = role == AxisRole::Data      ? options.dataAxis
                           : role == AxisRole::Context ? options.contextAxis
                                                       : options.tensorAxis;
      dist::MeshAxisAttr axis = options.mesh.getAxis(axisName);
      if (!axis) {
        // The pass checks the mesh first; this keeps a direct caller safe.
        emitError(getArgLoc(func, index))
            << "mesh @" << options.meshName << " has no axis \"" << axisName
            << "\"";
        return failure();
      }
      int64_t size = type.getDimSize(dim);
      // A size the axis does not divide is padded by dist-partition
      // (Padding.h); too small to give every shard an element, it is an
      // error.
      if (!ShapedType::isDynamic(size) && size % axis.getSize() != 0 &&
          size < axis.getSize()) {
        InFlightDiagnostic diag = emitError(getArgLoc(func, index));
        diag << plan.kind << " '" << plan.name << "' dimension " << dim;
        if (plan.recipe) {
          SmallVector<StringRef> names;
          plan.recipe->dimNames.split(names, ',');
          if (dim < names.size())
            diag << " (" << names[dim] << ")";
        } else {
          diag << (role == AxisRole::Context ? " (the sequence)"
                                             : " (the batch)");
        }
        diag << " has size " << size << ", which mesh axis \"" << axisName
             << "\" of size " << axis.getSize()
             << " does not divide, and it is too small to pad (a padded "
                "dimension needs at least one element per shard)";
        return failure();
      }
      axes.push_back(axisName.str());
    }
    sharding.dims.emplace_back(std::move(axes), /*closed=*/true,
                               /*priority=*/0);
  }
  return dist::shardingToAttr(ctx, sharding, options.meshName);
}

std::optional<unsigned> sharding::chooseZeroDim(ArrayRef<int64_t> shape,
                                                ArrayRef<bool> taken,
                                                int64_t dataSize) {
  std::optional<unsigned> best;
  if (dataSize < 1)
    return best;
  for (auto [dim, size] : llvm::enumerate(shape)) {
    if ((dim < taken.size() && taken[dim]) || ShapedType::isDynamic(size) ||
        size < dataSize || size % dataSize != 0)
      continue;
    if (!best || size > shape[*best])
      best = dim;
  }
  return best;
}

namespace {
/// A parameter's two layouts under a recipe.
struct ParamLayout {
  Type type;
  /// The recipe's sharding (whole over the data axis).
  dist::ShardingAttr base;
  /// `base` plus the data axis on the ZeRO dimension; `base` when the recipe
  /// has no ZeRO stage or the tensor has no such dimension.
  dist::ShardingAttr sharded;
  /// `base`, partial over the data axis: a data-parallel gradient.
  dist::ShardingAttr partial;
  bool isSharded() const { return base != sharded; }
};
} // namespace

/// `base` with the data axis added to dimension `dim`.
static dist::ShardingAttr addDataAxis(dist::ShardingAttr base, unsigned dim,
                                      StringRef dataAxis) {
  MLIRContext *ctx = base.getContext();
  // `base` was built by buildSharding: reading it back cannot fail.
  dist::Sharding sharding = *dist::shardingFromAttr(
      base, [&] { return emitError(UnknownLoc::get(ctx)); });
  sharding.dims[dim].axes.push_back(dataAxis.str());
  sharding.dims[dim].closed = true;
  sharding.dims[dim].priority = 0;
  sharding.clearPartial();
  return dist::shardingToAttr(ctx, sharding, base.getMeshName().getValue());
}

/// The parameter a state named `name` belongs to ("layers.0.w1.m" ->
/// "layers.0.w1"); empty for "step" and other names without a '.'.
static StringRef stateOwner(StringRef name) {
  auto [owner, suffix] = name.rsplit('.');
  return suffix.empty() || owner == name ? StringRef() : owner;
}

/// A replicated rank-0 sharding (the "step" counter).
static dist::ShardingAttr scalarSharding(MLIRContext *ctx,
                                         const AnnotateOptions &options) {
  return dist::shardingToAttr(ctx, dist::Sharding::replicated(0),
                              options.meshName);
}

/// What the recipe writes on a value named `stateName` of type `type`
/// (a state argument or result): null to leave it alone.
static FailureOr<dist::ShardingAttr>
stateSharding(StringRef stateName, Type type, Location loc,
              const llvm::StringMap<ParamLayout> &layouts,
              const Strategy &strategy, const AnnotateOptions &options) {
  StringRef owner = stateOwner(stateName);
  if (owner.empty()) {
    auto tensor = dyn_cast<RankedTensorType>(type);
    if (tensor && tensor.getRank() == 0)
      return scalarSharding(type.getContext(), options);
    return dist::ShardingAttr();
  }
  auto it = layouts.find(owner);
  if (it == layouts.end())
    return dist::ShardingAttr();
  // The layout is the shape's: a mixed-precision step's f32 master and
  // moments follow their bf16 or f16 parameter.
  auto stateType = dyn_cast<ShapedType>(type);
  auto paramType = dyn_cast<ShapedType>(it->second.type);
  if (!stateType || !paramType ||
      stateType.getShape() != paramType.getShape()) {
    emitError(loc) << "state '" << stateName << "' has type " << type
                   << " but its parameter '" << owner << "' has type "
                   << it->second.type << "; strategy '" << strategy.name
                   << "' lays state out like its parameter";
    return failure();
  }
  return strategy.zero != ZeroStage::None ? it->second.sharded
                                          : it->second.base;
}

/// Creates `dist.constraint %value <sharding>` before `before`.
static Value constrain(Value value, dist::ShardingAttr sharding,
                       Operation *before) {
  OpBuilder builder(before);
  return dist::ConstraintOp::create(builder, before->getLoc(),
                                    value.getType(), value, sharding)
      .getResult();
}

/// The ZeRO part of annotateFunction (see its comment in Strategies.h).
static void applyZero(FunctionOpInterface func, const Strategy &strategy,
                      const llvm::StringMap<ParamLayout> &layouts) {
  Block &body = func.getFunctionBody().front();
  Operation *terminator = body.getTerminator();
  auto isUpdate = [](Operation *op) {
    return nn::getGradKind(op) == nn::GradKind::Update;
  };
  auto byPosition = [](Operation *a, Operation *b) {
    return a->isBeforeInBlock(b);
  };

  for (unsigned index = 0, e = func.getNumArguments(); index < e; ++index) {
    StringAttr name = nn::paramAttr.getArg(func, index);
    if (!name)
      continue;
    auto it = layouts.find(name.getValue());
    if (it == layouts.end() || !it->second.isSharded())
      continue;
    const ParamLayout &layout = it->second;
    Value param = func.getArgument(index);

    // The update chain, backwards from the updated parameter.
    SmallVector<Operation *> chain;
    llvm::SmallPtrSet<Operation *, 8> inChain;
    SmallVector<Operation *> worklist;
    for (unsigned r = 0, n = func.getNumResults(); r < n; ++r)
      if (nn::paramAttr.getResult(func, r) == name &&
          r < terminator->getNumOperands())
        if (Operation *def = terminator->getOperand(r).getDefiningOp())
          worklist.push_back(def);
    // Shapes, not types: a mixed-precision step's chain also holds the
    // narrowing convert, the update of the f32 master and the widening
    // convert of the gradient (except one that sums in f32, nn.wide_sum:
    // the pin then lands on its wide result, reduced in f32).
    auto sameShape = [&](Type t) {
      auto shaped = dyn_cast<ShapedType>(t);
      return shaped && shaped.getShape() ==
                           cast<ShapedType>(layout.type).getShape();
    };
    while (!worklist.empty()) {
      Operation *op = worklist.pop_back_val();
      if (op->getBlock() != &body || !isUpdate(op) || inChain.contains(op) ||
          op->getNumResults() == 0 || op->hasAttr(nn::kWideSumAttrName) ||
          !llvm::all_of(op->getResultTypes(), sameShape))
        continue;
      inChain.insert(op);
      chain.push_back(op);
      for (Value operand : op->getOperands())
        if (Operation *def = operand.getDefiningOp())
          worklist.push_back(def);
    }
    llvm::sort(chain, byPosition);

    SmallVector<Attribute> results;
    DenseMap<Value, Value> entered;
    for (Operation *op : chain) {
      op->setAttr(dist::DistDialect::kShardingAttrName,
                  ArrayAttr::get(op->getContext(),
                                 SmallVector<Attribute>(op->getNumResults(),
                                                        layout.sharded)));
      for (OpOperand &operand : op->getOpOperands()) {
        Value value = operand.get();
        Operation *def = value.getDefiningOp();
        if (!sameShape(value.getType()) || (def && inChain.contains(def)))
          continue;
        dist::ShardingAttr target;
        if (value == param) {
          // Stage 3 stores the parameter sharded already.
          if (strategy.zero != ZeroStage::Parameters)
            target = layout.sharded;
        } else if (def && !def->hasTrait<OpTrait::ConstantLike>()) {
          // The gradient: partial over the data axis, as the batch split
          // leaves it, so that it is reduce-scattered into the update
          // (ZeRO's 2 Psi per device with the final all-gather, as plain
          // data parallelism; without the pin, propagation would pull the
          // update's split back into the backward's weight-gradient
          // contraction). Stage 1 differs from 2 in when: its full
          // gradients are kept until the updates (dist-optimize-comm does
          // not issue them early, see kZeroStageAttrName).
          target = layout.partial;
        }
        if (!target)
          continue;
        Value &constrained = entered[value];
        if (!constrained)
          constrained = constrain(value, target, op);
        operand.set(constrained);
      }
    }

    if (strategy.zero != ZeroStage::Parameters)
      continue;
    // Stage 3: one gather per phase of the parameter's other uses.
    llvm::MapVector<StringRef, SmallVector<OpOperand *>> phases;
    for (OpOperand &use : param.getUses()) {
      Operation *user = body.findAncestorOpInBlock(*use.getOwner());
      if (!user || inChain.contains(user) || user == terminator)
        continue;
      std::optional<nn::GradKind> kind = nn::getGradKind(user);
      StringRef phase = !kind ? "forward"
                        : *kind == nn::GradKind::Input ||
                                *kind == nn::GradKind::Weight
                            ? "backward"
                            : nn::stringifyGradKind(*kind);
      phases[phase].push_back(&use);
    }
    SmallVector<std::pair<Operation *, SmallVector<OpOperand *>>> ordered;
    for (auto &[phase, uses] : phases) {
      Operation *first = nullptr;
      for (OpOperand *use : uses) {
        Operation *user = body.findAncestorOpInBlock(*use->getOwner());
        if (!first || user->isBeforeInBlock(first))
          first = user;
      }
      ordered.push_back({first, uses});
    }
    llvm::sort(ordered, [&](const auto &a, const auto &b) {
      return byPosition(a.first, b.first);
    });
    for (auto [index, entry] : llvm::enumerate(ordered)) {
      // After the first phase the gather starts from the stored shard (an
      // identity constraint), so the partitioner cannot reuse the earlier
      // phase's gathered copy and keep it alive across.
      Value source = param;
      if (index > 0)
        source = constrain(param, layout.sharded, entry.first);
      Value gathered = constrain(source, layout.base, entry.first);
      for (OpOperand *use : entry.second)
        use->set(gathered);
    }
  }
}

LogicalResult sharding::annotateFunction(FunctionOpInterface func,
                                         const Strategy &strategy,
                                         const AnnotateOptions &options) {
  MLIRContext *ctx = func->getContext();
  bool zero = strategy.zero != ZeroStage::None;
  dist::MeshAxisAttr dataAxis =
      zero ? options.mesh.getAxis(options.dataAxis) : dist::MeshAxisAttr();
  llvm::StringMap<ParamLayout> layouts;
  for (unsigned index = 0, e = func.getNumArguments(); index < e; ++index) {
    // An annotation already there is the user's and wins over the recipe.
    if (func.getArgAttr(index, dist::DistDialect::kShardingAttrName))
      continue;
    FailureOr<std::optional<ArgPlan>> plan =
        planArgument(func, index, strategy);
    if (failed(plan))
      return failure();
    if (!*plan)
      continue;

    auto type = cast<RankedTensorType>(func.getArgumentTypes()[index]);
    FailureOr<dist::ShardingAttr> sharding =
        buildSharding(func, index, type, **plan, options);
    if (failed(sharding))
      return failure();
    dist::ShardingAttr written = *sharding;
    if ((*plan)->kind == "parameter") {
      ParamLayout layout{type, *sharding, *sharding, *sharding};
      if (dataAxis) {
        dist::Sharding partial = *dist::shardingFromAttr(
            *sharding, [&] { return emitError(getArgLoc(func, index)); });
        partial.partialAxes = {options.dataAxis.str()};
        layout.partial = dist::shardingToAttr(ctx, partial, options.meshName);
        SmallVector<bool> taken;
        for (dist::DimShardingAttr dim : sharding->getDims())
          taken.push_back(!dim.getAxes().empty());
        if (std::optional<unsigned> dim =
                chooseZeroDim(type.getShape(), taken, dataAxis.getSize()))
          layout.sharded = addDataAxis(*sharding, *dim, options.dataAxis);
      }
      if (strategy.zero == ZeroStage::Parameters)
        written = layout.sharded;
      layouts.try_emplace((*plan)->name, layout);
    }
    func.setArgAttr(index, dist::DistDialect::kShardingAttrName, written);
  }

  // State arguments, then the train step's results, follow their parameter.
  for (unsigned index = 0, e = func.getNumArguments(); index < e; ++index) {
    StringAttr name = nn::stateAttr.getArg(func, index);
    if (!name ||
        func.getArgAttr(index, dist::DistDialect::kShardingAttrName))
      continue;
    FailureOr<dist::ShardingAttr> sharding =
        stateSharding(name.getValue(), func.getArgumentTypes()[index],
                      getArgLoc(func, index), layouts, strategy, options);
    if (failed(sharding))
      return failure();
    if (*sharding)
      func.setArgAttr(index, dist::DistDialect::kShardingAttrName, *sharding);
  }
  for (unsigned index = 0, e = func.getNumResults(); index < e; ++index) {
    if (func.getResultAttr(index, dist::DistDialect::kShardingAttrName))
      continue;
    Type type = func.getResultTypes()[index];
    dist::ShardingAttr sharding;
    if (StringAttr param = nn::paramAttr.getResult(func, index)) {
      auto it = layouts.find(param.getValue());
      if (it == layouts.end())
        continue;
      // The layout is the shape's: a mixed-precision step's f32 master and
  // moments follow their bf16 or f16 parameter.
  auto stateType = dyn_cast<ShapedType>(type);
  auto paramType = dyn_cast<ShapedType>(it->second.type);
  if (!stateType || !paramType ||
      stateType.getShape() != paramType.getShape()) {
        emitError(func->getLoc())
            << "result #" << index << " (parameter '" << param.getValue()
            << "') has type " << type << " but the parameter argument has type "
            << it->second.type;
        return failure();
      }
      sharding = strategy.zero == ZeroStage::Parameters ? it->second.sharded
                                                        : it->second.base;
    } else if (StringAttr state = nn::stateAttr.getResult(func, index)) {
      FailureOr<dist::ShardingAttr> found = stateSharding(
          state.getValue(), type, func->getLoc(), layouts, strategy, options);
      if (failed(found))
        return failure();
      sharding = *found;
    }
    if (sharding)
      func.setResultAttr(index, dist::DistDialect::kShardingAttrName,
                         sharding);
  }
  if (zero && !func.isExternal()) {
    applyZero(func, strategy, layouts);
    func->setAttr(dist::DistDialect::kZeroStageAttrName,
                  IntegerAttr::get(IntegerType::get(ctx, 64),
                                   static_cast<int64_t>(strategy.zero)));
  }
  return success();
}
