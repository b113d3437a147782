//===- Partitioner.cpp - SPMD partitioning of one function ----------------===//
//
// One generic path for every op, driven by its factor rule
// (ShardingRuleOpInterface):
//
// 1. Factor shardings. Each result's propagated sharding is projected onto
//    the rule's factors: per dimension, its axes go to its factors major to
//    minor, a factor taking axes while their product divides its size, and a
//    minor factor taking axes only once every factor before it in the
//    dimension is split completely (a dimension's shard is one contiguous
//    block). Whole and collective factors take no axes, except collective
//    factors the op's partition hook says it can split
//    (dist::PartitionOpInterface::canSplitCollectiveFactor). A reduction
//    factor takes the axes its operand is split on, when the result's
//    propagated sharding is partial over them with the factor's kind.
// 2. Operands. Each operand must have, per dimension, the axes of its
//    factors, and no partial axes; the resharding planner (Reshard.h) turns
//    the operand's current sharding into that one, and each of its steps
//    becomes a dist op (dist.slice, all_gather, all_to_all, reduce_scatter,
//    all_reduce, collective_permute). Padded dimensions (Padding.h) an op
//    reduces over are masked as its hook says (getPaddingMask).
// 3. The op's partition hook builds its local form on the local operands
//    with local result types (dist::PartitionOpInterface::partition; an op
//    without one is cloned, dist::partitionByClone). Its results have the
//    sharding the factors give: per dimension the axes of its factors,
//    partial over the axes of the split reduction factors and of the split
//    collective factors that no result carries. This is usually the
//    propagated sharding; where it is not, consumers reshard from what the
//    value really is, so the program stays exact.
//
// The partitioner names no op of any dialect: what an op means globally
// (a mean over split dimensions, positions along a split sequence, a
// softmax over a split dimension, a lookup in a split vocabulary) is its
// hook's business; the nn ops' hooks are in dialects/nn/IR/NNPartition.cpp.
//
// Values are tracked as (local value, sharding it has). Function arguments
// get local types; return operands are resharded to the function result's
// sharding (or keep a partial sharding, see PartitionOptions). Resharding of
// one value to one target is emitted once and reused by later consumers.
//
//===----------------------------------------------------------------------===//

#include "passes/partition/Partitioner.h"

#include "dialects/dist/IR/DistOps.h"
#include "dialects/dist/IR/ShardingAdapters.h"
#include "passes/partition/Padding.h"
#include "passes/partition/Reshard.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>
#include <limits>
#include <map>
#include <string>

using namespace mlir;

namespace partita::partition {

/// The resharding planner's fixed cost of a collective, in bytes
/// (ReshardOptions::stepCost): about 10 us of a call's latency at 100 GB/s.
/// A plan of more collectives must save this much traffic per extra one:
/// e.g. a data-parallel gradient that is replicated over tp is all-reduced
/// on a 1/tp slice and all-gathered over tp (3/8 of its bytes saved at
/// dp = tp = 4) only from a few MiB on, where the saving is worth the call.
constexpr double kReshardStepCost = 1 << 20;
namespace {

using AxisList = SmallVector<std::string, 2>;

std::string describeValue(Value value) {
  std::string text;
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    text = "argument #" + std::to_string(arg.getArgNumber());
    if (auto name = dyn_cast<NameLoc>(arg.getLoc()))
      text += " (\"" + name.getName().str() + "\")";
    return text;
  }
  auto result = cast<OpResult>(value);
  text = "result #" + std::to_string(result.getResultNumber()) + " of '" +
         result.getOwner()->getName().getStringRef().str() + "'";
  if (auto name = dyn_cast<NameLoc>(result.getOwner()->getLoc()))
    text += " (\"" + name.getName().str() + "\")";
  return text;
}

/// The axis names of a dimension (or of partial axes) of a sharding that
/// checkPreconditions accepted: whole axes only.
AxisList namesOf(const dist::DimSharding &dim) {
  AxisList names;
  for (const dist::AxisRef &axis : dim.axes)
    names.push_back(axis.name);
  return names;
}

/// A closed dimension (or list of partial axes) of whole axes `names`.
std::vector<dist::AxisRef> axisRefs(ArrayRef<std::string> names) {
  return std::vector<dist::AxisRef>(names.begin(), names.end());
}

/// Reads a sharding that checkPreconditions already read successfully, as
/// the layout alone (open dimensions and priorities are propagation's).
Sharding readChecked(dist::ShardingAttr attr) {
  FailureOr<Sharding> sharding = dist::shardingFromAttr(
      attr, [&] { return emitError(UnknownLoc::get(attr.getContext())); });
  return succeeded(sharding) ? sharding->layoutOnly() : Sharding();
}

class FuncPartitioner {
public:
  FuncPartitioner(func::FuncOp func, const PartitionOptions &options)
      : func(func), options(options), ctx(func.getContext()) {
    hookOptions.vocabParallelCrossEntropy = options.vocabParallelCrossEntropy;
    hookOptions.splitKeyAttention = options.splitKeyAttention;
  }

  LogicalResult checkPreconditions();
  LogicalResult run();

private:
  int64_t axisSize(StringRef name) const { return mesh.axisSize(name); }
  int64_t groupSize(ArrayRef<std::string> axes) const {
    int64_t size = 1;
    for (const std::string &axis : axes)
      size *= axisSize(axis);
    return size;
  }
  SmallVector<int64_t> localShape(ArrayRef<int64_t> global,
                                  const Sharding &sharding) const {
    SmallVector<int64_t> shape(global);
    for (auto [d, dim] : llvm::enumerate(sharding.dims))
      if (d < shape.size())
        shape[d] /= dim.shardCount(mesh);
    return shape;
  }
  RankedTensorType localType(Type global, const Sharding &sharding) const {
    auto type = cast<RankedTensorType>(global);
    return RankedTensorType::get(localShape(type.getShape(), sharding),
                                 type.getElementType());
  }
  /// The global type of a value in the padded program (Padding.h):
  /// arguments already have their local types, so their global types were
  /// recorded by the padding analysis.
  RankedTensorType globalTypeOf(Value value) const {
    return padding.paddedType(value);
  }
  std::string describePaddedDim(Operation *op, Value value, unsigned d) const {
    RankedTensorType real = padding.realType(value);
    return "dimension " + std::to_string(d) + " of " +
           (value.getDefiningOp() == op
                ? "result #" +
                      std::to_string(cast<OpResult>(value).getResultNumber())
                : describeValue(value)) +
           " (size " + std::to_string(real.getDimSize(d)) + ", padded to " +
           std::to_string(padding.paddedSize(value, d)) + " because of " +
           padding.reason(value, d) + ")";
  }
  LogicalResult maskPadding(OpBuilder &builder, Operation *op,
                            const dist::ShardingRule &r,
                            ArrayRef<Sharding> required,
                            SmallVectorImpl<Value> &operands, bool splitVocab);
  dist::ShardingAttr toAttr(const Sharding &sharding) const {
    return dist::shardingToAttr(ctx, sharding, meshName.getValue());
  }
  ArrayAttr axesAttr(ArrayRef<std::string> axes) const {
    SmallVector<StringRef> names(axes.begin(), axes.end());
    return Builder(ctx).getStrArrayAttr(names);
  }

  /// Reads the sharding of a value whose annotation was checked.
  FailureOr<Sharding> readSharding(dist::ShardingAttr attr, Operation *at,
                                   const Twine &what);

  FailureOr<Value> reshard(OpBuilder &builder, Value global,
                           const Sharding &target, Operation *user,
                           const Twine &what);
  FailureOr<Value> emitStep(OpBuilder &builder, Location loc, Value local,
                            RankedTensorType globalType,
                            const Sharding &before, const ReshardStep &step,
                            Operation *user);
  LogicalResult partitionRuleOp(Operation *op);
  LogicalResult partitionReturn(func::ReturnOp op);

  func::FuncOp func;
  const PartitionOptions &options;
  MLIRContext *ctx;
  FlatSymbolRefAttr meshName;
  dist::MeshAttr meshAttr;
  Mesh mesh;
  /// Global value -> the local value that replaces it and its sharding.
  DenseMap<Value, Value> localOf;
  DenseMap<Value, Sharding> shardingOf;
  /// Reshards already emitted: (global value, target) -> local value.
  std::map<std::pair<void *, std::string>, Value> reshardCache;
  /// The rule of every op, read before any type changes (rules read their
  /// operands' global shapes).
  DenseMap<Operation *, FailureOr<dist::ShardingRule>> rules;
  /// What the partition hooks build once per function (rotary tables,
  /// causal biases; dist::PartitionState::functionCache).
  llvm::StringMap<Value> functionCache;
  /// The partitioner's options that the hooks read.
  dist::PartitionHookOptions hookOptions;
  PaddingAnalysis padding;
};

FailureOr<Sharding> FuncPartitioner::readSharding(dist::ShardingAttr attr,
                                                  Operation *at,
                                                  const Twine &what) {
  FailureOr<Sharding> sharding = dist::shardingFromAttr(attr, [&] {
    return at->emitError() << "cannot partition " << what << ": ";
  });
  if (failed(sharding))
    return failure();
  for (const dist::AxisRef &axis : sharding->axesUsed())
    if (axis.isSubAxis())
      return at->emitError()
             << "cannot partition " << what << ": sub-axis of '" << axis.name
             << "' is not supported by the resharding planner";
  return sharding->layoutOnly();
}

LogicalResult FuncPartitioner::checkPreconditions() {
  if (!func.getBody().hasOneBlock())
    return func.emitError()
           << "dist-partition expects a function body of one block, '"
           << func.getSymName() << "' has "
           << func.getBody().getBlocks().size();
  auto useMesh = [&](dist::ShardingAttr attr, Operation *at,
                     const Twine &what) -> LogicalResult {
    if (!meshName) {
      meshName = attr.getMeshName();
      meshAttr = dist::lookupMeshAttr(func, attr);
      if (!meshAttr)
        return at->emitError() << what << " names unknown mesh " << meshName;
      return success();
    }
    if (attr.getMeshName() != meshName)
      return at->emitError()
             << what << " is sharded on mesh " << attr.getMeshName()
             << ", but the function is already partitioned for " << meshName
             << "; dist-partition supports one mesh per function";
    return success();
  };
  auto checkValue = [&](Value value, dist::ShardingAttr attr, Operation *at,
                        const Twine &what) -> LogicalResult {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    if (!type || !type.hasStaticShape())
      return at->emitError() << "cannot partition " << what << " of type "
                             << value.getType()
                             << ": only statically shaped tensors are supported";
    if (!attr)
      return at->emitError() << "cannot partition " << what
                             << ": it has no 'dist.sharding' (run "
                                "dist-propagate first)";
    if (failed(useMesh(attr, at, what)))
      return failure();
    return readSharding(attr, at, what);
  };

  bool ok = true;
  for (BlockArgument arg : func.getArguments())
    ok &= succeeded(checkValue(arg, dist::getSharding(arg), func,
                               describeValue(arg)));
  for (unsigned i = 0, e = func.getNumResults(); i < e; ++i)
    if (dist::ShardingAttr attr = dist::getFuncResultSharding(func, i))
      ok &= succeeded(useMesh(attr, func,
                              "function result #" + std::to_string(i)) ) &&
            succeeded(readSharding(attr, func,
                                   "function result #" + std::to_string(i)));
  for (Operation &op : func.getBody().front()) {
    if (op.getNumRegions() != 0) {
      op.emitError() << "dist-partition does not support ops with regions";
      ok = false;
      continue;
    }
    if (isa<func::ReturnOp>(op))
      continue;
    if (auto constraint = dyn_cast<dist::ConstraintOp>(op)) {
      ok &= succeeded(checkValue(constraint.getResult(),
                                 constraint.getSharding(), &op,
                                 "the constraint"));
      continue;
    }
    if (!isa<dist::ShardingRuleOpInterface>(op)) {
      op.emitError() << "cannot partition '" << op.getName()
                     << "': it has no sharding rule";
      ok = false;
      continue;
    }
    for (Value result : op.getResults())
      ok &= succeeded(checkValue(result, dist::getSharding(result), &op,
                                 describeValue(result)));
  }
  if (ok && !meshName)
    return func.emitError() << "cannot partition '" << func.getSymName()
                            << "': no value names a mesh";
  if (!ok)
    return failure();
  FailureOr<Mesh> read = dist::meshFromAttr(meshAttr, meshName.getValue(), [&] {
    return func.emitError() << "cannot partition on mesh " << meshName << ": ";
  });
  if (failed(read))
    return failure();
  mesh = std::move(*read);
  return success();
}

FailureOr<Value> FuncPartitioner::emitStep(OpBuilder &builder, Location loc,
                                           Value local,
                                           RankedTensorType globalType,
                                           const Sharding &before,
                                           const ReshardStep &step,
                                           Operation *user) {
  RankedTensorType type = localType(globalType, step.result);
  ArrayAttr axes = axesAttr(step.axes);
  auto kind = dist::ReductionKindAttr::get(
      ctx, static_cast<dist::ReductionKind>(
               static_cast<uint32_t>(step.reduction)));
  IntegerAttr dim = builder.getI64IntegerAttr(step.dim);
  switch (step.kind) {
  case StepKind::LocalSlice:
    return dist::SliceOp::create(builder, loc, type, local, meshName, axes,
                                 dim)
        .getResult();
  case StepKind::AllGather:
    return dist::AllGatherOp::create(builder, loc, type, local, meshName, axes,
                                     dim)
        .getResult();
  case StepKind::ReduceScatter:
    return dist::ReduceScatterOp::create(builder, loc, type, local, meshName,
                                         axes, dim, kind)
        .getResult();
  case StepKind::AllReduce:
    return dist::AllReduceOp::create(builder, loc, type, local, meshName, axes,
                                     kind)
        .getResult();
  case StepKind::AllToAll:
    // The source dimension gains the pieces (concatenated), the destination
    // dimension is split among the group.
    return dist::AllToAllOp::create(builder, loc, type, local, meshName, axes,
                                    builder.getI64IntegerAttr(step.dstDim),
                                    dim)
        .getResult();
  case StepKind::CollectivePermute: {
    // Position p of the group holds, per dimension, the block whose index is
    // the mixed-radix number of its coordinates on that dimension's axes.
    // Axes outside the group keep their place, so they are held at 0.
    int64_t group = groupSize(step.axes);
    auto blocks = [&](const Sharding &sharding, int64_t position) {
      std::map<std::string, int64_t> coord;
      for (const std::string &axis : llvm::reverse(step.axes)) {
        coord[axis] = position % axisSize(axis);
        position /= axisSize(axis);
      }
      SmallVector<int64_t> index;
      for (const dist::DimSharding &dim : sharding.dims) {
        int64_t i = 0;
        for (const dist::AxisRef &axis : dim.axes)
          i = i * axisSize(axis.name) + coord[axis.name];
        index.push_back(i);
      }
      return index;
    };
    // Each target takes the block it needs from a distinct source: itself
    // when it already holds it, else the first holder not yet sending. With
    // equal shard counts per dimension every block has as many holders as
    // devices that need it, so this pairs every device.
    SmallVector<SmallVector<int64_t>> held, needed;
    for (int64_t p = 0; p < group; ++p) {
      held.push_back(blocks(before, p));
      needed.push_back(blocks(step.result, p));
    }
    SmallVector<int64_t> sourceOf(group, -1);
    SmallVector<bool> sending(group, false);
    for (int64_t q = 0; q < group; ++q)
      if (held[q] == needed[q]) {
        sourceOf[q] = q;
        sending[q] = true;
      }
    for (int64_t q = 0; q < group; ++q) {
      if (sourceOf[q] >= 0)
        continue;
      for (int64_t p = 0; p < group; ++p)
        if (!sending[p] && held[p] == needed[q]) {
          sourceOf[q] = p;
          sending[p] = true;
          break;
        }
    }
    SmallVector<int64_t> pairs;
    for (int64_t p = 0; p < group; ++p)
      for (int64_t q = 0; q < group; ++q)
        if (sourceOf[q] == p) {
          pairs.push_back(p);
          pairs.push_back(q);
        }
    if (static_cast<int64_t>(pairs.size()) != 2 * group)
      return user->emitError()
             << "cannot emit " << step.toString() << " from "
             << before.toString() << ": not every block has a target";
    return dist::CollectivePermuteOp::create(
               builder, loc, type, local, meshName, axes,
               builder.getDenseI64ArrayAttr(pairs))
        .getResult();
  }
  }
  llvm_unreachable("unknown step kind");
}

FailureOr<Value> FuncPartitioner::reshard(OpBuilder &builder, Value global,
                                          const Sharding &target,
                                          Operation *user, const Twine &what) {
  Value local = localOf.lookup(global);
  const Sharding &source = shardingOf.find(global)->second;
  if (source == target)
    return local;
  auto key = std::make_pair(global.getAsOpaquePointer(), target.toString());
  if (auto it = reshardCache.find(key); it != reshardCache.end())
    return it->second;
  RankedTensorType globalType = globalTypeOf(global);
  TensorInfo info;
  info.shape.assign(globalType.getShape().begin(), globalType.getShape().end());
  unsigned bits = globalType.getElementType().getIntOrFloatBitWidth();
  info.elementBytes = std::max<int64_t>(1, bits / 8);
  ReshardOptions options;
  options.stepCost = kReshardStepCost;
  llvm::Expected<ReshardPlan> plan =
      planReshard(mesh, info, source, target, options);
  if (!plan)
    return user->emitError() << "cannot reshard " << what << " from "
                             << source.toString() << " to "
                             << target.toString() << ": "
                             << llvm::toString(plan.takeError());
  Sharding before = source;
  Location loc = user->getLoc();
  for (const ReshardStep &step : plan->steps) {
    FailureOr<Value> next =
        emitStep(builder, loc, local, globalType, before, step, user);
    if (failed(next))
      return failure();
    local = *next;
    before = step.result;
  }
  reshardCache[key] = local;
  return local;
}

/// The factor-level sharding of one op.
struct FactorAxes {
  SmallVector<AxisList> axes;
  SmallVector<bool> assigned;
  llvm::StringSet<> used;
};

LogicalResult FuncPartitioner::partitionRuleOp(Operation *op) {
  OpBuilder builder(op);
  const FailureOr<dist::ShardingRule> &rule = rules.find(op)->second;

  SmallVector<Sharding, 2> propagated;
  for (Value result : op->getResults())
    propagated.push_back(readChecked(dist::getSharding(result)));

  // The op's own local form, if it has one (else partitionByClone).
  auto hook = dyn_cast<dist::PartitionOpInterface>(op);
  bool runsWhole = hook && hook.runsWhole();

  AxisList collectiveAxes;
  SmallVector<AxisList> factorAxes;
  SmallVector<Sharding, 2> required(op->getNumOperands());
  SmallVector<Sharding, 2> actual(op->getNumResults());
  int64_t meanShards = 1;

  // Padded dimensions (Padding.h) need a factor of their own to be masked
  // or kept as they are; an op run on whole values cannot take them.
  auto paddedDimOf = [&](Value value, unsigned d) {
    return describePaddedDim(op, value, d);
  };
  if (!padding.empty()) {
    SmallVector<std::pair<Value, const dist::TensorFactors *>> tensors;
    for (auto [i, operand] : llvm::enumerate(op->getOperands()))
      tensors.push_back({operand, succeeded(rule) && !runsWhole
                                      ? &rule->getOperand(i)
                                      : nullptr});
    for (auto [i, result] : llvm::enumerate(op->getResults()))
      tensors.push_back({result, succeeded(rule) && !runsWhole
                                     ? &rule->getResult(i)
                                     : nullptr});
    for (auto [value, dims] : tensors)
      for (unsigned d = 0; d < padding.realType(value).getRank(); ++d) {
        if (!padding.isPadded(value, d))
          continue;
        if (!dims)
          return op->emitError()
                 << "cannot partition '" << op->getName() << "': "
                 << paddedDimOf(value, d)
                 << " is padded, but the op runs on whole values; split "
                    "it over axes that divide its size";
        if (d >= dims->size() || (*dims)[d].size() != 1)
          return op->emitError()
                 << "cannot partition '" << op->getName() << "': "
                 << paddedDimOf(value, d)
                 << " is padded, but the op merges or splits it with other "
                    "dimensions; split it over axes that divide its size";
      }
  }

  if (failed(rule) || runsWhole) {
    // No rule (or an op that must run whole): run on whole values.
    for (auto [i, operand] : llvm::enumerate(op->getOperands()))
      required[i].dims.resize(
          cast<RankedTensorType>(operand.getType()).getRank());
    for (auto [i, result] : llvm::enumerate(op->getResults()))
      actual[i].dims.resize(
          cast<RankedTensorType>(result.getType()).getRank());
  } else {
    const dist::ShardingRule &r = *rule;
    // Factor sizes in the padded program.
    SmallVector<int64_t> factorSize;
    for (const dist::Factor &factor : r.getFactors())
      factorSize.push_back(factor.size);
    SmallVector<std::pair<Value, unsigned>> paddedBy(r.getNumFactors());
    auto padFactors = [&](Value value, const dist::TensorFactors &dims) {
      for (auto [d, factors] : llvm::enumerate(dims))
        if (factors.size() == 1 && padding.isPadded(value, d)) {
          factorSize[factors.front()] = padding.paddedSize(value, d);
          paddedBy[factors.front()] = {value, unsigned(d)};
        }
    };
    for (auto [i, operand] : llvm::enumerate(op->getOperands()))
      padFactors(operand, r.getOperand(i));
    for (auto [i, result] : llvm::enumerate(op->getResults()))
      padFactors(result, r.getResult(i));
    // A padded factor merged with others into one dimension (a reshape)
    // would interleave padding with real elements.
    auto checkMerged = [&](const dist::TensorFactors &dims,
                           const Twine &tensor) -> LogicalResult {
      for (auto [d, factors] : llvm::enumerate(dims)) {
        if (factors.size() < 2)
          continue;
        for (int64_t f : factors)
          if (paddedBy[f].first)
            return op->emitError()
                   << "cannot partition '" << op->getName() << "': "
                   << describePaddedDim(op, paddedBy[f].first,
                                        paddedBy[f].second)
                   << " is padded, but dimension " << d << " of " << tensor
                   << " merges it with other dimensions; split it over axes "
                      "that divide its size";
      }
      return success();
    };
    for (unsigned i = 0; i < op->getNumOperands(); ++i)
      if (failed(checkMerged(r.getOperand(i), "operand #" + Twine(i))))
        return failure();
    for (unsigned i = 0; i < op->getNumResults(); ++i)
      if (failed(checkMerged(r.getResult(i), "result #" + Twine(i))))
        return failure();
    FactorAxes fa;
    fa.axes.resize(r.getNumFactors());
    fa.assigned.assign(r.getNumFactors(), false);

    auto eligibleKind = [&](int64_t f, bool fromOperand) {
      dist::FactorKind kind = r.getFactor(f).kind;
      // Attention's result has the query's type, whose last dimension is
      // the whole factor "d": the value head dimension must stay whole too.
      if (r.getFactor(f).role == dist::FactorRole::ValueHeadDim)
        return false;
      if (kind == dist::FactorKind::Parallel)
        return !fromOperand;
      // Ops with a collective-aware local form (their partition hook) say
      // whether they split it as the result wants (softmax, norms), or as
      // the operand is (the embedding's vocabulary, which leaves the result
      // partial).
      if (kind == dist::FactorKind::Collective)
        return hook &&
               hook.canSplitCollectiveFactor(f, fromOperand, hookOptions);
      if (kind == dist::FactorKind::Reduction)
        return fromOperand;
      return false;
    };
    // Distributes the axes of each dimension of `sharding` over the
    // dimension's factors, major to minor.
    auto project = [&](const dist::TensorFactors &dims,
                       const Sharding &sharding, bool fromOperand,
                       function_ref<bool(int64_t, StringRef)> allowed) {
      for (auto [d, factors] : llvm::enumerate(dims)) {
        if (d >= sharding.dims.size())
          break;
        AxisList names = namesOf(sharding.dims[d]);
        ArrayRef<std::string> dimAxes = names;
        size_t next = 0;
        for (int64_t f : factors) {
          int64_t size = factorSize[f];
          if (fa.assigned[f]) {
            // Decided by an earlier tensor: go on only if it matches.
            ArrayRef<std::string> taken = fa.axes[f];
            if (dimAxes.size() - next < taken.size() ||
                !llvm::equal(taken, dimAxes.slice(next, taken.size())))
              break;
            next += taken.size();
            if (groupSize(taken) != size)
              break;
            continue;
          }
          if (!eligibleKind(f, fromOperand))
            break;
          int64_t product = 1;
          AxisList taken;
          while (next < dimAxes.size() && !fa.used.contains(dimAxes[next]) &&
                 allowed(f, dimAxes[next]) &&
                 size % (product * axisSize(dimAxes[next])) == 0) {
            product *= axisSize(dimAxes[next]);
            taken.push_back(dimAxes[next++]);
          }
          if (taken.empty())
            break;
          for (const std::string &axis : taken)
            fa.used.insert(axis);
          fa.axes[f] = std::move(taken);
          fa.assigned[f] = true;
          if (product != size)
            break;
        }
      }
    };

    for (auto [i, result] : llvm::enumerate(op->getResults()))
      project(r.getResult(i), propagated[i], /*fromOperand=*/false,
              [](int64_t, StringRef) { return true; });
    // Reduction factors: split where the operand is split and the result is
    // partial over the same axes with the factor's kind.
    for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
      const Sharding &current = shardingOf.find(operand)->second;
      project(r.getOperand(i), current, /*fromOperand=*/true,
              [&](int64_t f, StringRef axis) {
                if (r.getFactor(f).kind == dist::FactorKind::Collective)
                  return true; // the embedding's or cross_entropy's vocabulary
                if (propagated.empty())
                  return false;
                const Sharding &res = propagated.front();
                return res.partialKind == r.getFactor(f).partialKind &&
                       llvm::is_contained(res.partialAxes,
                                          dist::AxisRef(axis.str()));
              });
    }

    // A dimension's shard must be one block: a factor may be split only
    // when every factor before it in the dimension is split completely.
    bool changed = true;
    auto fixTensor = [&](const dist::TensorFactors &dims) {
      for (const auto &factors : dims) {
        bool whole = true;
        for (int64_t f : factors) {
          if (!whole && !fa.axes[f].empty()) {
            fa.axes[f].clear();
            changed = true;
          }
          if (groupSize(fa.axes[f]) != factorSize[f])
            whole = false;
        }
      }
    };
    while (changed) {
      changed = false;
      for (const dist::TensorFactors &dims : r.getOperands())
        fixTensor(dims);
      for (const dist::TensorFactors &dims : r.getResults())
        fixTensor(dims);
    }

    auto tensorSharding = [&](const dist::TensorFactors &dims) {
      Sharding sharding;
      for (const auto &factors : dims) {
        AxisList axes;
        for (int64_t f : factors)
          axes.append(fa.axes[f].begin(), fa.axes[f].end());
        sharding.dims.emplace_back(axisRefs(axes));
      }
      return sharding;
    };

    // A partial operand that the op reduces over: reduce-scatter it along a
    // reduction factor that only it carries, rather than all-reduce it
    // whole, and leave the result partial over those axes, to be reduced
    // after the reduction has made it small (a norm's bias gradient, the
    // sum over batch and sequence of a partial input gradient, then
    // all-reduces [hidden] rather than [batch, seq, hidden]). A factor whose
    // split an earlier consumer already made is preferred (the reshard is
    // then reused); an operand whose whole reduction was already emitted is
    // left to reuse it.
    for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
      const Sharding &current = shardingOf.find(operand)->second;
      if (current.partialAxes.empty() ||
          reshardCache.count({operand.getAsOpaquePointer(),
                              tensorSharding(r.getOperand(i)).toString()}))
        continue;
      AxisList free;
      for (const dist::AxisRef &ref : current.partialAxes)
        if (!fa.used.contains(ref.name))
          free.push_back(ref.name);
      if (free.empty())
        continue;
      std::optional<ReductionKind> kind;
      for (int64_t f = 0; f < r.getNumFactors(); ++f)
        if (r.getFactor(f).kind == dist::FactorKind::Reduction &&
            !fa.axes[f].empty())
          kind = r.getFactor(f).partialKind;
      const dist::TensorFactors &dims = r.getOperand(i);
      std::optional<int64_t> chosen;
      for (auto [d, factors] : llvm::enumerate(dims)) {
        if (factors.size() != 1 || d >= current.dims.size() ||
            !current.dims[d].axes.empty())
          continue;
        int64_t f = factors.front();
        const dist::Factor &factor = r.getFactor(f);
        if (factor.kind != dist::FactorKind::Reduction || fa.assigned[f] ||
            (kind && *kind != factor.partialKind) ||
            factorSize[f] % groupSize(free) != 0)
          continue;
        bool onlyHere = true;
        for (auto [j, other] : llvm::enumerate(r.getOperands()))
          if (j != i && llvm::any_of(other, [&](const auto &fs) {
                return llvm::is_contained(fs, f);
              }))
            onlyHere = false;
        if (!onlyHere)
          continue;
        fa.axes[f].assign(free.begin(), free.end());
        bool reused = reshardCache.count(
            {operand.getAsOpaquePointer(),
             tensorSharding(r.getOperand(i)).toString()});
        fa.axes[f].clear();
        if (!chosen || reused)
          chosen = f;
        if (reused)
          break;
      }
      if (!chosen)
        continue;
      fa.axes[*chosen].assign(free.begin(), free.end());
      fa.assigned[*chosen] = true;
      for (const std::string &axis : free)
        fa.used.insert(axis);
    }

    for (unsigned i = 0; i < op->getNumOperands(); ++i)
      required[i] = tensorSharding(r.getOperand(i));

    for (int64_t f = 0; f < r.getNumFactors(); ++f)
      if (r.getFactor(f).kind == dist::FactorKind::Collective &&
          !fa.axes[f].empty())
        collectiveAxes = fa.axes[f];

    // Partial axes of the results: split reduction factors, in mesh order.
    std::optional<ReductionKind> partialKind;
    AxisList partial;
    for (int64_t f = 0; f < r.getNumFactors(); ++f) {
      const dist::Factor &factor = r.getFactor(f);
      if (fa.axes[f].empty())
        continue;
      // A split collective factor that no result carries (the vocabulary
      // of the embedding and cross_entropy, attention's key sequence)
      // leaves the results a partial sum, unless the op's hook reduces it.
      bool vocabulary = factor.kind == dist::FactorKind::Collective &&
                        (hook ? hook.leavesResultsPartial(r, f)
                              : dist::carriedByNoResult(r, f));
      if (factor.kind != dist::FactorKind::Reduction && !vocabulary)
        continue;
      if (partialKind && *partialKind != factor.partialKind)
        return op->emitError()
               << "cannot partition: reduction factors '" << factor.name
               << "' and others combine differently (sum and max) and both "
                  "are split";
      partialKind = factor.partialKind;
      partial.append(fa.axes[f].begin(), fa.axes[f].end());
      if (!vocabulary)
        meanShards *= groupSize(fa.axes[f]);
    }
    llvm::sort(partial, [&](const std::string &a, const std::string &b) {
      return *mesh.findAxis(a) < *mesh.findAxis(b);
    });
    for (unsigned i = 0; i < op->getNumResults(); ++i) {
      actual[i] = tensorSharding(r.getResult(i));
      actual[i].partialAxes = axisRefs(partial);
      if (partialKind)
        actual[i].partialKind = *partialKind;
    }

    // An additive op (add, sub) whose propagated result is a partial sum
    // adds its operands' shares locally where every operand really is a
    // partial sum over the axis: the sum is then reduced once, by its
    // consumer, instead of once per operand.
    if (r.isAdditive() && partial.empty() && !propagated.empty() &&
        propagated.front().partialKind == ReductionKind::Sum) {
      AxisList shared;
      for (const dist::AxisRef &ref : propagated.front().partialAxes) {
        std::string axis = ref.name;
        if (fa.used.contains(axis))
          continue;
        bool everyOperand = llvm::all_of(op->getOperands(), [&](Value v) {
          const Sharding &current = shardingOf.find(v)->second;
          return current.partialKind == ReductionKind::Sum &&
                 llvm::is_contained(current.partialAxes, ref);
        });
        if (everyOperand)
          shared.push_back(axis);
      }
      llvm::sort(shared, [&](const std::string &a, const std::string &b) {
        return *mesh.findAxis(a) < *mesh.findAxis(b);
      });
      if (!shared.empty()) {
        for (Sharding &sharding : required) {
          sharding.partialAxes = axisRefs(shared);
          sharding.partialKind = ReductionKind::Sum;
        }
        for (Sharding &sharding : actual) {
          sharding.partialAxes = axisRefs(shared);
          sharding.partialKind = ReductionKind::Sum;
        }
      }
    }

    // An additive op whose operands are one partial sum (the same layout,
    // partial over the same axes) but whose result is wanted reduced (the
    // sum of the q, k and v input gradients, which sequence parallelism
    // wants on a sequence shard): adding the shares locally and leaving
    // the result partial reduces the sum once, where its consumers want it,
    // instead of once per operand. Only where the op is each operand's one
    // user: an operand read elsewhere is reduced for that reader anyway.
    if (r.isAdditive() && op->getNumResults() == 1 &&
        actual.front().partialAxes.empty()) {
      const Sharding &first = shardingOf.find(op->getOperand(0))->second;
      bool shared =
          !first.partialAxes.empty() &&
          first.partialKind == ReductionKind::Sum && required.front() != first &&
          llvm::all_of(op->getOperands(), [&](Value v) {
            return v.hasOneUse() && shardingOf.find(v)->second == first;
          });
      // Every dimension is one factor shared by every operand and the
      // result (ShardingRule::verify checks it of additive rules).
      SmallVector<AxisList> axes(r.getNumFactors());
      for (auto [d, factors] : llvm::enumerate(r.getResult(0))) {
        if (factors.size() == 1 && d < first.dims.size())
          axes[factors.front()] = namesOf(first.dims[d]);
        else if (factors.size() > 1 ||
                 (d < first.dims.size() && !first.dims[d].axes.empty()))
          shared = false;
      }
      if (shared) {
        for (Sharding &sharding : required)
          sharding = first;
        actual.front() = first;
        fa.axes = std::move(axes);
      }
    }

    factorAxes = std::move(fa.axes);
  }

  // Operands.
  SmallVector<Value> operands;
  for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
    FailureOr<Value> local = reshard(builder, operand, required[i], op,
                                     "operand #" + std::to_string(i));
    if (failed(local))
      return failure();
    operands.push_back(*local);
  }
  if (!padding.empty() && succeeded(rule) && !runsWhole &&
      failed(maskPadding(builder, op, *rule, required, operands,
                         !collectiveAxes.empty())))
    return failure();

  SmallVector<Type> resultTypes;
  for (auto [i, result] : llvm::enumerate(op->getResults()))
    resultTypes.push_back(localType(globalTypeOf(result), actual[i]));

  // The op's local form: its partition hook, or a clone on the local
  // operands.
  SmallVector<RankedTensorType> realOperandTypes;
  for (Value operand : op->getOperands())
    realOperandTypes.push_back(padding.realType(operand));
  dist::PartitionState state{builder,
                             meshName,
                             mesh,
                             succeeded(rule) && !runsWhole ? &*rule : nullptr,
                             factorAxes,
                             operands,
                             resultTypes,
                             realOperandTypes,
                             !padding.empty(),
                             meanShards,
                             hookOptions,
                             functionCache};
  FailureOr<SmallVector<Value>> results =
      hook ? hook.partition(state) : dist::partitionByClone(op, state);
  if (failed(results))
    return failure();
  if (results->size() != op->getNumResults())
    return op->emitError() << "cannot partition '" << op->getName()
                           << "': its partition hook built " << results->size()
                           << " results for " << op->getNumResults();

  for (auto [i, result] : llvm::enumerate(op->getResults())) {
    localOf[result] = (*results)[i];
    shardingOf[result] = actual[i];
  }
  return success();
}

/// Masks the padding of padded dimensions an op reduces over, on its local
/// operands, as the op's partition hook says (dist::PaddingMask; the
/// default fills a reduction factor's padding with the identity of its
/// partial kind and rejects any other whole or collective factor).
LogicalResult FuncPartitioner::maskPadding(OpBuilder &builder, Operation *op,
                                           const dist::ShardingRule &r,
                                           ArrayRef<Sharding> required,
                                           SmallVectorImpl<Value> &operands,
                                           bool splitVocab) {
  auto hook = dyn_cast<dist::PartitionOpInterface>(op);
  auto isOnly = [](const dist::TensorFactors &dims, unsigned d, int64_t f) {
    return d < dims.size() && dims[d].size() == 1 && dims[d].front() == f;
  };
  for (int64_t f = 0; f < r.getNumFactors(); ++f) {
    const dist::Factor &factor = r.getFactor(f);
    if (factor.kind == dist::FactorKind::Parallel)
      continue;
    std::optional<std::pair<Value, unsigned>> shown;
    for (auto [i, operand] : llvm::enumerate(op->getOperands()))
      for (unsigned d = 0; d < padding.realType(operand).getRank(); ++d)
        if (!shown && isOnly(r.getOperand(i), d, f) &&
            padding.isPadded(operand, d))
          shown = {operand, d};
    for (auto [i, result] : llvm::enumerate(op->getResults()))
      for (unsigned d = 0; d < padding.realType(result).getRank(); ++d)
        if (!shown && isOnly(r.getResult(i), d, f) &&
            padding.isPadded(result, d))
          shown = {result, d};
    if (!shown)
      continue;
    auto inexact = [&](const std::string &why) {
      return op->emitError()
             << "cannot partition '" << op->getName() << "': "
             << describePaddedDim(op, shown->first, shown->second)
             << " is padded, and " << why
             << "; split it over axes that divide its size";
    };
    dist::PaddingMask mask = hook ? hook.getPaddingMask(r, f, splitVocab)
                                  : dist::defaultPaddingMask(factor);
    if (mask.action == dist::PaddingMask::Action::Ignore)
      continue;
    if (mask.action == dist::PaddingMask::Action::Reject)
      return inexact(mask.why);
    double value = mask.value;
    std::optional<unsigned> only = mask.onlyOperand;
    for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
      if (only && *only != i)
        continue;
      for (unsigned d = 0; d < padding.realType(operand).getRank(); ++d) {
        if (!isOnly(r.getOperand(i), d, f) || !padding.isPadded(operand, d))
          continue;
        operands[i] = dist::MaskOp::create(
            builder, op->getLoc(), operands[i].getType(), operands[i], meshName,
            axesAttr(namesOf(required[i].dims[d])),
            builder.getI64IntegerAttr(d),
            builder.getI64IntegerAttr(padding.realType(operand).getDimSize(d)),
            builder.getF64FloatAttr(value));
      }
    }
  }
  return success();
}

LogicalResult FuncPartitioner::partitionReturn(func::ReturnOp op) {
  OpBuilder builder(op);
  SmallVector<Value> operands;
  for (auto [i, operand] : llvm::enumerate(op.getOperands())) {
    const Sharding &current = shardingOf.find(operand)->second;
    Sharding target = current;
    if (!options.keepPartialResults)
      target.clearPartial();
    if (dist::ShardingAttr attr = dist::getFuncResultSharding(func, i)) {
      target = readChecked(attr);
      // A partial value meeting a result that is not partial: keep it partial
      // when that is the only difference and the options allow it.
      if (options.keepPartialResults && !current.partialAxes.empty() &&
          target.partialAxes.empty() && target.dims == current.dims)
        target = current;
    }
    FailureOr<Value> local = reshard(builder, operand, target, op,
                                     "function result #" + std::to_string(i));
    if (failed(local))
      return failure();
    operands.push_back(*local);
    func.removeResultAttr(i, builder.getStringAttr(
                                 dist::DistDialect::kShardingAttrName));
    func.setResultAttr(i, kGlobalTypeAttrName,
                       TypeAttr::get(padding.realType(operand)));
    func.setResultAttr(i, kGlobalShardingAttrName, toAttr(target));
  }
  func::ReturnOp::create(builder, op.getLoc(), operands);
  return success();
}

LogicalResult FuncPartitioner::run() {
  Block &body = func.getBody().front();
  SmallVector<Operation *> original;
  for (Operation &op : body)
    original.push_back(&op);
  for (Operation *op : original)
    if (auto iface = dyn_cast<dist::ShardingRuleOpInterface>(op))
      rules.try_emplace(op, iface.getShardingRule());
  FailureOr<PaddingAnalysis> analysis =
      PaddingAnalysis::compute(func, mesh, rules, describeValue);
  if (failed(analysis))
    return failure();
  padding = std::move(*analysis);

  SmallVector<Type> argTypes;
  for (BlockArgument arg : func.getArguments()) {
    Sharding sharding = readChecked(dist::getSharding(arg));
    Type global = arg.getType();
    localOf[arg] = arg;
    shardingOf[arg] = sharding;
    unsigned i = arg.getArgNumber();
    func.removeArgAttr(i, dist::DistDialect::kShardingAttrName);
    // The real global type: the runtime scatters into the padded blocks.
    func.setArgAttr(i, kGlobalTypeAttrName, TypeAttr::get(global));
    func.setArgAttr(i, kGlobalShardingAttrName, toAttr(sharding));
    argTypes.push_back(localType(globalTypeOf(arg), sharding));
  }
  for (auto [arg, type] : llvm::zip(func.getArguments(), argTypes))
    arg.setType(type);

  for (Operation *op : original) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      if (failed(partitionReturn(ret)))
        return failure();
      continue;
    }
    if (auto constraint = dyn_cast<dist::ConstraintOp>(op)) {
      OpBuilder builder(op);
      Sharding target = readChecked(constraint.getSharding());
      FailureOr<Value> local = reshard(builder, constraint.getInput(), target,
                                       op, "the constrained value");
      if (failed(local))
        return failure();
      localOf[constraint.getResult()] = *local;
      shardingOf[constraint.getResult()] = target;
      continue;
    }
    if (failed(partitionRuleOp(op)))
      return failure();
  }
  // A pipelined step's ops carry their stage (dist.stage): the local ops
  // and collectives built for an op, just before it, take its stage.
  llvm::DenseSet<Operation *> isOriginal(original.begin(), original.end());
  Attribute stage;
  for (Operation &op : llvm::reverse(body)) {
    if (isOriginal.contains(&op)) {
      stage = op.getAttr(dist::DistDialect::kStageAttrName);
      continue;
    }
    if (stage && !op.hasAttr(dist::DistDialect::kStageAttrName))
      op.setAttr(dist::DistDialect::kStageAttrName, stage);
  }
  for (Operation *op : llvm::reverse(original)) {
    op->dropAllUses();
    op->erase();
  }

  SmallVector<Type> resultTypes(
      body.getTerminator()->getOperandTypes().begin(),
      body.getTerminator()->getOperandTypes().end());
  func.setFunctionType(FunctionType::get(ctx, argTypes, resultTypes));
  func->setAttr(kMeshAttrName, meshName);
  return success();
}

/// Whether anything in `func` carries a sharding.
bool hasShardings(func::FuncOp func) {
  for (BlockArgument arg : func.getArguments())
    if (dist::getSharding(arg))
      return true;
  for (unsigned i = 0, e = func.getNumResults(); i < e; ++i)
    if (dist::getFuncResultSharding(func, i))
      return true;
  bool found = false;
  func.walk([&](Operation *op) {
    if (isa<dist::ConstraintOp>(op) ||
        op->hasAttr(dist::DistDialect::kShardingAttrName))
      found = true;
  });
  return found;
}

} // namespace

LogicalResult partitionFunction(func::FuncOp func,
                                const PartitionOptions &options) {
  if (func.isExternal() || !hasShardings(func))
    return success();
  FuncPartitioner partitioner(func, options);
  if (failed(partitioner.checkPreconditions()))
    return failure();
  return partitioner.run();
}

} // namespace partita::partition
