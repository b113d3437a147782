//===- Strategies.cpp - classic parallelism recipes as data ---------------===//
//
// The recipes are tables, not code: a recipe is a list of parameter-name
// patterns, each with the axis role of every dimension. Adding a model family
// or a recipe means adding rows; docs/strategies.md must list the same rows.
//
// Known limits: a Megatron split needs the split dimension to be divisible by
// the tensor axis (grouped-query attention with fewer kv heads than the
// tensor axis is an error, not a replication of kv heads); sub-axes are never
// written.
//
//===----------------------------------------------------------------------===//

#include "passes/sharding/Strategies.h"

#include "dialects/dist/IR/DistOps.h"
#include "dialects/dist/IR/ShardingAdapters.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Debug.h"
#include "llvm/Support/raw_ostream.h"

#define DEBUG_TYPE "dist-annotate"

using namespace mlir;
using namespace partita;
using namespace partita::sharding;

//===----------------------------------------------------------------------===//
// The tables
//===----------------------------------------------------------------------===//

namespace {
constexpr AxisRole R = AxisRole::Replicated;
constexpr AxisRole T = AxisRole::Tensor;

// Dimension layouts, named after the weight shapes of the model convention.
constexpr AxisRole kVec[] = {R};            // [H] norms, row-parallel biases
constexpr AxisRole kVecSplit[] = {T};       // [F] column-parallel bias
constexpr AxisRole kMat[] = {R, R};         // replicated matrix
constexpr AxisRole kSplitRows[] = {T, R};   // [V,H] vocab, [F,H] row parallel
constexpr AxisRole kSplitCols[] = {R, T};   // [H,F] column parallel
constexpr AxisRole kHeadsIn[] = {R, T, R};  // [H,n,d] q/k/v projections
constexpr AxisRole kHeadsOut[] = {T, R, R}; // [n,d,H] output projection
} // namespace

/// Megatron-LM (Shoeybi et al. 2019): in each block, the first matmul is
/// split on its output columns and the second on its input rows, so the
/// block needs one all-reduce forward; attention is split by heads; the
/// embedding and LM head are split by vocabulary. Rows are for the GPT,
/// Llama and MLP models of `partita model` (names in docs/strategies.md).
static const ParamRecipe kMegatronParams[] = {
    // Embeddings and head (GPT, Llama).
    {"wte", "V,H", kSplitRows},
    {"lm_head", "V,H", kSplitRows},
    {"wpe", "S,H", kMat},
    // Attention (GPT; Llama's wk/wv are [H,k,d] with k kv heads).
    {"layers.{i}.attn.wq", "H,heads,d", kHeadsIn},
    {"layers.{i}.attn.wk", "H,heads,d", kHeadsIn},
    {"layers.{i}.attn.wv", "H,heads,d", kHeadsIn},
    {"layers.{i}.attn.bq", "heads,d", kSplitRows},
    {"layers.{i}.attn.bk", "heads,d", kSplitRows},
    {"layers.{i}.attn.bv", "heads,d", kSplitRows},
    {"layers.{i}.attn.wo", "heads,d,H", kHeadsOut},
    {"layers.{i}.attn.bo", "H", kVec},
    // MLP block (GPT; Llama's w1 is the gate, w3 the up projection).
    {"layers.{i}.mlp.w1", "H,F", kSplitCols},
    {"layers.{i}.mlp.w3", "H,F", kSplitCols},
    {"layers.{i}.mlp.b1", "F", kVecSplit},
    {"layers.{i}.mlp.w2", "F,H", kSplitRows},
    {"layers.{i}.mlp.b2", "H", kVec},
    // Norms (GPT layer norms, Llama RMS norms).
    {"layers.{i}.ln1.gamma", "H", kVec},
    {"layers.{i}.ln1.beta", "H", kVec},
    {"layers.{i}.ln2.gamma", "H", kVec},
    {"layers.{i}.ln2.beta", "H", kVec},
    {"ln_f.gamma", "H", kVec},
    {"ln_f.beta", "H", kVec},
    {"layers.{i}.attn_norm.gamma", "H", kVec},
    {"layers.{i}.mlp_norm.gamma", "H", kVec},
    {"norm_f.gamma", "H", kVec},
    // MLP model: residual blocks, then a classifier head. The head stays
    // replicated: its V is a class count, usually too small to split.
    {"layers.{i}.w1", "H,F", kSplitCols},
    {"layers.{i}.b1", "F", kVecSplit},
    {"layers.{i}.w2", "F,H", kSplitRows},
    {"layers.{i}.b2", "H", kVec},
    {"head.w", "H,V", kMat},
    {"head.b", "V", kVec},
};

static const Strategy kStrategies[] = {
    {"dp", /*splitsBatch=*/true, /*replicatesAllParams=*/true, {}},
    {"zero1", true, true, {}, ZeroStage::OptimizerState},
    {"zero2", true, true, {}, ZeroStage::Gradients},
    {"zero3", true, true, {}, ZeroStage::Parameters},
    // PyTorch FSDP's FULL_SHARD (Zhao et al. 2023) is ZeRO-3's layout.
    {"fsdp", true, true, {}, ZeroStage::Parameters},
    {"megatron", /*splitsBatch=*/false, /*replicatesAllParams=*/false,
     kMegatronParams},
    {"dp+megatron", /*splitsBatch=*/true, /*replicatesAllParams=*/false,
     kMegatronParams},
    {"zero1+megatron", true, false, kMegatronParams,
     ZeroStage::OptimizerState},
    {"zero2+megatron", true, false, kMegatronParams, ZeroStage::Gradients},
    {"zero3+megatron", true, false, kMegatronParams, ZeroStage::Parameters},
    {"fsdp+megatron", true, false, kMegatronParams, ZeroStage::Parameters},
    // Context parallelism (Megatron-LM's context parallel, Korthikanti et
    // al.; ring attention, Liu et al. 2023): the sequence of every input is
    // split, parameters are replicated, attention gathers keys and values.
    {"cp", /*splitsBatch=*/false, /*replicatesAllParams=*/true, {},
     ZeroStage::None, /*splitsSequence=*/true},
    {"dp+cp", true, true, {}, ZeroStage::None, true},
};

ArrayRef<Strategy> sharding::getStrategies() { return kStrategies; }

const Strategy *sharding::lookupStrategy(StringRef name) {
  for (const Strategy &strategy : kStrategies)
    if (strategy.name == name)
      return &strategy;
  return nullptr;
}

bool sharding::matchesParamPattern(StringRef pattern, StringRef name) {
  constexpr StringLiteral kIndex = "{i}";
  while (!pattern.empty()) {
    if (pattern.consume_front(kIndex)) {
      size_t digits = 0;
      while (digits < name.size() && llvm::isDigit(name[digits]))
        ++digits;
      if (digits == 0)
        return false;
      name = name.drop_front(digits);
      continue;
    }
    if (name.empty() || name.front() != pattern.front())
      return false;
    pattern = pattern.drop_front();
    name = name.drop_front();
  }
  return name.empty();
}

const ParamRecipe *sharding::lookupParamRecipe(const Strategy &strategy,
                                               StringRef name) {
  for (const ParamRecipe &recipe : strategy.params)
    if (matchesParamPattern(recipe.pattern, name))
      return &recipe;
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Mesh specs
//===----------------------------------------------------------------------===//

static bool isIdentifier(StringRef name) {
  if (name.empty() || !(llvm::isAlpha(name.front()) || name.front() == '_'))
    return false;
  return llvm::all_of(name,
                      [](char c) { return llvm::isAlnum(c) || c == '_'; });
}

FailureOr<SmallVector<dist::MeshAxisAttr>>
sharding::parseMeshSpec(StringRef spec, MLIRContext *ctx,
                        function_ref<InFlightDiagnostic()> emitError) {
  if (spec.trim().empty()) {
    emitError() << "mesh spec is empty; expected axes like \"dp=2,tp=4\"";
    return failure();
  }
  SmallVector<StringRef> entries;
  spec.split(entries, ',');
  SmallVector<dist::MeshAxisAttr> axes;
  llvm::StringSet<> seen;
  for (StringRef entry : entries) {
    entry = entry.trim();
    auto [name, sizeText] = entry.split('=');
    name = name.trim();
    sizeText = sizeText.trim();
    if (entry.empty()) {
      emitError() << "mesh spec \"" << spec
                  << "\" has an empty axis entry; expected axes like "
                     "\"dp=2,tp=4\"";
      return failure();
    }
    if (!entry.contains('=')) {
      emitError() << "mesh axis '" << entry << "' in mesh spec \"" << spec
                  << "\" has no size; expected name=size, e.g. \"" << entry
                  << "=2\"";
      return failure();
    }
    if (!isIdentifier(name)) {
      emitError() << "mesh axis name '" << name << "' in mesh spec \"" << spec
                  << "\" is not an identifier (letters, digits and '_', "
                     "not starting with a digit)";
      return failure();
    }
    int64_t size;
    if (sizeText.getAsInteger(10, size)) {
      emitError() << "mesh axis '" << name << "' has size '" << sizeText
                  << "', which is not an integer";
      return failure();
    }
    if (size < 1) {
      emitError() << "mesh axis '" << name << "' has size " << size
                  << "; axis sizes must be at least 1";
      return failure();
    }
    if (!seen.insert(name).second) {
      emitError() << "mesh axis '" << name << "' appears twice in mesh spec \""
                  << spec << "\"";
      return failure();
    }
    axes.push_back(dist::MeshAxisAttr::get(ctx, name, size));
  }
  return axes;
}

std::string sharding::printMeshSpec(ArrayRef<dist::MeshAxisAttr> axes) {
  std::string out;
  llvm::raw_string_ostream os(out);
  llvm::interleave(
      axes, os,
      [&](dist::MeshAxisAttr axis) {
        os << axis.getName() << "=" << axis.getSize();
      },
      ",");
  return out;
}

//===----------------------------------------------------------------------===//
// Annotating a function
//===----------------------------------------------------------------------===//

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
  Attribute param = func.getArgAttr(index, kParamAttrName);
  Attribute input = func.getArgAttr(index, kInputAttrName);
  if (!param && !input)
    return std::optional<ArgPlan>();
  Location loc = getArgLoc(func, index);
  if (param && input) {
    emitError(loc) << "argument #" << index << " of @" << func.getName()
                   << " carries both " << kParamAttrName << " and "
                   << kInputAttrName;
    return failure();
  }
  StringLiteral attrName = param ? kParamAttrName : kInputAttrName;
  auto name = dyn_cast<StringAttr>(param ? param : input);
  if (!name) {
    emitError(loc) << attrName << " of argument #" << index << " of @"
                   << func.getName() << " must be a string, not "
                   << (param ? param : input);
    return failure();
  }

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
  if (it->second.type != type) {
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
    auto kind = op->getAttrOfType<StringAttr>(kGradKindAttrName);
    return kind && kind.getValue() == "update";
  };
  auto byPosition = [](Operation *a, Operation *b) {
    return a->isBeforeInBlock(b);
  };

  for (unsigned index = 0, e = func.getNumArguments(); index < e; ++index) {
    auto name = func.getArgAttrOfType<StringAttr>(index, kParamAttrName);
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
      if (func.getResultAttr(r, kParamAttrName) == name &&
          r < terminator->getNumOperands())
        if (Operation *def = terminator->getOperand(r).getDefiningOp())
          worklist.push_back(def);
    while (!worklist.empty()) {
      Operation *op = worklist.pop_back_val();
      if (op->getBlock() != &body || !isUpdate(op) || inChain.contains(op) ||
          op->getNumResults() == 0 ||
          llvm::any_of(op->getResultTypes(),
                       [&](Type t) { return t != layout.type; }))
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
        if (value.getType() != layout.type || (def && inChain.contains(def)))
          continue;
        dist::ShardingAttr target;
        if (value == param) {
          // Stage 3 stores the parameter sharded already.
          if (strategy.zero != ZeroStage::Parameters)
            target = layout.sharded;
        } else if (def && !def->hasTrait<OpTrait::ConstantLike>()) {
          // The gradient. Stage 1: whole (all-reduced) before the sharded
          // update. Stages 2 and 3: partial over the data axis, as the
          // batch split leaves it, so that it is reduce-scattered into the
          // update (without the pin, propagation would pull the update's
          // split back into the backward's weight-gradient contraction).
          target = strategy.zero == ZeroStage::OptimizerState
                       ? layout.base
                       : layout.partial;
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
      auto kind = user->getAttrOfType<StringAttr>(kGradKindAttrName);
      StringRef phase = !kind ? "forward"
                        : kind.getValue() == "B" || kind.getValue() == "W"
                            ? "backward"
                            : kind.getValue();
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
    Attribute state = func.getArgAttr(index, kStateAttrName);
    if (!state ||
        func.getArgAttr(index, dist::DistDialect::kShardingAttrName))
      continue;
    auto name = dyn_cast<StringAttr>(state);
    if (!name) {
      emitError(getArgLoc(func, index))
          << kStateAttrName << " of argument #" << index << " of @"
          << func.getName() << " must be a string, not " << state;
      return failure();
    }
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
    if (auto param =
            func.getResultAttrOfType<StringAttr>(index, kParamAttrName)) {
      auto it = layouts.find(param.getValue());
      if (it == layouts.end())
        continue;
      if (it->second.type != type) {
        emitError(func->getLoc())
            << "result #" << index << " (parameter '" << param.getValue()
            << "') has type " << type << " but the parameter argument has type "
            << it->second.type;
        return failure();
      }
      sharding = strategy.zero == ZeroStage::Parameters ? it->second.sharded
                                                        : it->second.base;
    } else if (auto state = func.getResultAttrOfType<StringAttr>(
                   index, kStateAttrName)) {
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
  if (zero && !func.isExternal())
    applyZero(func, strategy, layouts);
  return success();
}

//===----------------------------------------------------------------------===//
// Sequence parallelism
//===----------------------------------------------------------------------===//

/// Whether `value` is an argument of `func` whose sharding splits, over
/// `axis`, a dimension that `contracted(dim)` says the consumer contracts.
static bool isSplitOverContracted(FunctionOpInterface func, Value value,
                                  StringRef axis,
                                  function_ref<bool(unsigned)> contracted) {
  auto arg = dyn_cast<BlockArgument>(value);
  if (!arg || arg.getOwner() != &func.getFunctionBody().front())
    return false;
  auto sharding = func.getArgAttrOfType<dist::ShardingAttr>(
      arg.getArgNumber(), dist::DistDialect::kShardingAttrName);
  if (!sharding)
    return false;
  for (auto [dim, dimSharding] : llvm::enumerate(sharding.getDims()))
    for (dist::AxisRefAttr ref : dimSharding.getAxes())
      if (ref.getName() == axis && contracted(dim))
        return true;
  return false;
}

LogicalResult sharding::applySequenceParallel(FunctionOpInterface func,
                                              const Strategy &strategy,
                                              const AnnotateOptions &options) {
  if (func.isExternal())
    return success();
  MLIRContext *ctx = func->getContext();
  auto meshRef = FlatSymbolRefAttr::get(ctx, options.meshName);
  dist::MeshAxisAttr tensorAxis = options.mesh.getAxis(options.tensorAxis);
  if (!tensorAxis) {
    emitError(func->getLoc()) << "mesh @" << options.meshName
                              << " has no axis \"" << options.tensorAxis
                              << "\"; sequence-parallel splits over it";
    return failure();
  }
  // [{data?}, {tensor?}, {}...] at p0, optionally partial over the tensor axis.
  auto makeSharding = [&](int64_t rank, bool splitSeq, bool partial) {
    dist::Sharding sharding;
    for (int64_t dim = 0; dim < rank; ++dim) {
      std::vector<dist::AxisRef> axes;
      if (dim == 0 && strategy.splitsBatch)
        axes.push_back(options.dataAxis.str());
      if (dim == 1 && splitSeq)
        axes.push_back(options.tensorAxis.str());
      sharding.dims.emplace_back(std::move(axes), /*closed=*/true,
                                 /*priority=*/0);
    }
    if (partial)
      sharding.partialAxes.push_back(options.tensorAxis.str());
    return dist::shardingToAttr(ctx, sharding, meshRef.getValue());
  };

  SmallVector<Operation *> norms, partials;
  func.walk([&](Operation *op) {
    StringRef name = op->getName().getStringRef();
    if ((name == "nn.layer_norm" || name == "nn.rms_norm") &&
        op->getNumOperands() >= 1) {
      auto type = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
      if (type && type.getRank() == 3)
        norms.push_back(op);
      return;
    }
    if (op->getNumResults() != 1 || op->getNumOperands() != 2)
      return;
    auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
    if (!type || type.getRank() != 3)
      return;
    if (name == "nn.embedding") {
      // The table's every dimension is looked up or copied, none kept in
      // place: a table split over the tensor axis is vocabulary-parallel.
      if (isSplitOverContracted(func, op->getOperand(0), options.tensorAxis,
                                [](unsigned dim) { return dim == 0; }))
        partials.push_back(op);
      return;
    }
    if (name != "nn.einsum")
      return;
    auto spec = op->getAttrOfType<StringAttr>("spec");
    if (!spec)
      return;
    auto [inputs, output] = spec.getValue().split("->");
    StringRef weight = inputs.split(',').second;
    if (isSplitOverContracted(func, op->getOperand(1), options.tensorAxis,
                              [&](unsigned dim) {
                                return dim < weight.size() &&
                                       !output.contains(weight[dim]);
                              }))
      partials.push_back(op);
  });
  if (norms.empty()) {
    emitError(func->getLoc())
        << "sequence-parallel needs [batch, seq, hidden] activations entering "
           "an nn.layer_norm or nn.rms_norm, but @"
        << func.getName() << " has none";
    return failure();
  }

  for (Operation *norm : norms) {
    auto type = cast<RankedTensorType>(norm->getOperand(0).getType());
    int64_t seq = type.getDimSize(1);
    if (!ShapedType::isDynamic(seq) && seq % tensorAxis.getSize() != 0) {
      norm->emitError() << "sequence-parallel splits the sequence (dimension "
                           "1 of "
                        << type << ") over mesh axis \"" << options.tensorAxis
                        << "\" of size " << tensorAxis.getSize()
                        << ", which does not divide sequence length " << seq;
      return failure();
    }
  }
  for (Operation *op : partials) {
    OpBuilder builder(op->getContext());
    builder.setInsertionPointAfter(op);
    Value result = op->getResult(0);
    auto constraint = dist::ConstraintOp::create(
        builder, op->getLoc(), result.getType(), result,
        makeSharding(/*rank=*/3, /*splitSeq=*/false, /*partial=*/true));
    result.replaceAllUsesExcept(constraint.getResult(), constraint);
  }
  for (Operation *norm : norms) {
    OpBuilder builder(norm);
    Value input = norm->getOperand(0);
    auto constraint = dist::ConstraintOp::create(
        builder, norm->getLoc(), input.getType(), input,
        makeSharding(/*rank=*/3, /*splitSeq=*/true, /*partial=*/false));
    norm->setOperand(0, constraint.getResult());
  }
  return success();
}

//===----------------------------------------------------------------------===//
// The ZeRO memory model
//===----------------------------------------------------------------------===//

static int64_t shardBytes(int64_t elements, int64_t shards,
                          int64_t bytesPerElement) {
  shards = std::max<int64_t>(shards, 1);
  return (elements + shards - 1) / shards * bytesPerElement;
}

ModelStateBytes
sharding::computeModelStateBytes(ArrayRef<ModelStateTensor> tensors,
                                 const PrecisionRecipe &recipe) {
  ModelStateBytes bytes;
  for (const ModelStateTensor &t : tensors) {
    bytes.params += shardBytes(t.elements, t.paramShards, recipe.paramBytes);
    bytes.grads += shardBytes(t.elements, t.gradShards, recipe.gradBytes);
    bytes.optimizerState +=
        shardBytes(t.elements, t.stateShards, recipe.optimizerBytes);
  }
  return bytes;
}

ModelStateTensor sharding::zeroShards(int64_t elements, ZeroStage stage,
                                      int64_t dataSize) {
  ModelStateTensor t;
  t.elements = elements;
  if (stage >= ZeroStage::OptimizerState)
    t.stateShards = dataSize;
  if (stage >= ZeroStage::Gradients)
    t.gradShards = dataSize;
  if (stage >= ZeroStage::Parameters)
    t.paramShards = dataSize;
  return t;
}
