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

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
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
    {"megatron", /*splitsBatch=*/false, /*replicatesAllParams=*/false,
     kMegatronParams},
    {"dp+megatron", /*splitsBatch=*/true, /*replicatesAllParams=*/false,
     kMegatronParams},
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
  return std::optional<ArgPlan>(std::move(plan));
}

LogicalResult sharding::annotateFunction(FunctionOpInterface func,
                                         const Strategy &strategy,
                                         const AnnotateOptions &options) {
  MLIRContext *ctx = func->getContext();
  auto meshRef = FlatSymbolRefAttr::get(ctx, options.meshName);
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
    SmallVector<dist::DimShardingAttr> dims;
    for (auto [dim, role] : llvm::enumerate((*plan)->roles)) {
      SmallVector<dist::AxisRefAttr, 1> axes;
      if (role != AxisRole::Replicated) {
        StringRef axisName =
            role == AxisRole::Data ? options.dataAxis : options.tensorAxis;
        dist::MeshAxisAttr axis = options.mesh.getAxis(axisName);
        if (!axis) {
          // The pass checks the mesh first; this keeps a direct caller safe.
          emitError(getArgLoc(func, index))
              << "mesh @" << options.meshName << " has no axis \"" << axisName
              << "\"";
          return failure();
        }
        int64_t size = type.getDimSize(dim);
        if (!ShapedType::isDynamic(size) && size % axis.getSize() != 0) {
          InFlightDiagnostic diag = emitError(getArgLoc(func, index));
          diag << (*plan)->kind << " '" << (*plan)->name << "' dimension "
               << dim;
          if ((*plan)->recipe) {
            SmallVector<StringRef> names;
            (*plan)->recipe->dimNames.split(names, ',');
            if (dim < names.size())
              diag << " (" << names[dim] << ")";
          } else {
            diag << " (the batch)";
          }
          diag << " has size " << size << ", which mesh axis \"" << axisName
               << "\" of size " << axis.getSize() << " does not divide";
          return failure();
        }
        axes.push_back(dist::AxisRefAttr::get(ctx, axisName, /*preSize=*/1,
                                              /*subSize=*/0));
      }
      dims.push_back(dist::DimShardingAttr::get(ctx, axes, /*isClosed=*/true,
                                                /*priority=*/0));
    }
    auto sharding = dist::ShardingAttr::get(ctx, meshRef, dims, {},
                                            dist::ReductionKind::Sum);
    func.setArgAttr(index, dist::DistDialect::kShardingAttrName, sharding);
  }
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
  auto axisRef = [&](StringRef name) {
    return dist::AxisRefAttr::get(ctx, name, /*preSize=*/1, /*subSize=*/0);
  };
  // [{data?}, {tensor?}, {}...] at p0, optionally partial over the tensor axis.
  auto makeSharding = [&](int64_t rank, bool splitSeq, bool partial) {
    SmallVector<dist::DimShardingAttr> dims;
    for (int64_t dim = 0; dim < rank; ++dim) {
      SmallVector<dist::AxisRefAttr, 1> axes;
      if (dim == 0 && strategy.splitsBatch)
        axes.push_back(axisRef(options.dataAxis));
      if (dim == 1 && splitSeq)
        axes.push_back(axisRef(options.tensorAxis));
      dims.push_back(dist::DimShardingAttr::get(ctx, axes, /*isClosed=*/true,
                                                /*priority=*/0));
    }
    SmallVector<dist::AxisRefAttr, 1> partialAxes;
    if (partial)
      partialAxes.push_back(axisRef(options.tensorAxis));
    return dist::ShardingAttr::get(ctx, meshRef, dims, partialAxes,
                                   dist::ReductionKind::Sum);
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
