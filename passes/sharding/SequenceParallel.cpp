//===- SequenceParallel.cpp - Megatron sequence parallelism as constraints ===//

#include "passes/sharding/SequenceParallel.h"

#include "dialects/dist/IR/DistOps.h"
#include "dialects/dist/IR/ShardingAdapters.h"
#include "dialects/nn/IR/NNAttributes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace partita;
using namespace partita::sharding;

/// Whether `op`'s results are partial sums over `axis` when its operands
/// that are arguments of `func` keep their shardings: one of them is split
/// over `axis` on a dimension the op's rule contracts (a reduction factor:
/// a row-parallel linear, or in backward the input gradient of a
/// column-parallel one) or looks up without carrying it to a result (a
/// collective factor that the op's local form splits, leaving its results
/// partial: a vocabulary-parallel lookup). Asked of the op's interfaces
/// alone, so any dialect's op with a rule takes part.
static bool leavesPartialOver(FunctionOpInterface func, Operation *op,
                              StringRef axis) {
  auto ruleOp = dyn_cast<dist::ShardingRuleOpInterface>(op);
  if (!ruleOp)
    return false;
  FailureOr<dist::ShardingRule> rule = ruleOp.getShardingRule();
  if (failed(rule))
    return false;
  auto hook = dyn_cast<dist::PartitionOpInterface>(op);
  dist::PartitionHookOptions hookOptions;
  auto leavesPartial = [&](int64_t f) {
    const dist::Factor &factor = rule->getFactor(f);
    if (factor.kind == dist::FactorKind::Reduction)
      return true;
    return factor.kind == dist::FactorKind::Collective && hook &&
           hook.canSplitCollectiveFactor(f, /*fromOperand=*/true,
                                         hookOptions) &&
           hook.leavesResultsPartial(*rule, f);
  };
  Block &entry = func.getFunctionBody().front();
  for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
    auto arg = dyn_cast<BlockArgument>(operand);
    if (!arg || arg.getOwner() != &entry)
      continue;
    auto sharding = func.getArgAttrOfType<dist::ShardingAttr>(
        arg.getArgNumber(), dist::DistDialect::kShardingAttrName);
    if (!sharding)
      continue;
    const dist::TensorFactors &dims = rule->getOperand(i);
    for (auto [dim, dimSharding] : llvm::enumerate(sharding.getDims())) {
      if (dim >= dims.size())
        break;
      bool split = llvm::any_of(dimSharding.getAxes(), [&](dist::AxisRefAttr r) {
        return r.getName() == axis;
      });
      if (split && llvm::any_of(dims[dim], leavesPartial))
        return true;
    }
  }
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
    if (op->hasTrait<dist::RowNormalization>() && op->getNumOperands() >= 1) {
      auto type = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
      if (type && type.getRank() == 3)
        norms.push_back(op);
      return;
    }
    if (op->getNumResults() != 1)
      return;
    auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
    if (type && type.getRank() == 3 &&
        leavesPartialOver(func, op, options.tensorAxis))
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
    // The backward reads a forward norm's output (the weight gradients of
    // the column-parallel linears it feeds) from its sequence shard, as
    // Megatron stores it (Korthikanti et al. 2022, section 4.2.2): the
    // gathered output dies in the forward and the backward gathers it
    // again, instead of the whole sequence staying live in between. Two
    // constraints before the first backward reader: the shard (a value of
    // its own, so the forward's gather is not reused), then the whole
    // sequence, which the partitioner makes with a new all_gather there.
    if (nn::getGradKind(norm) || !options.regatherNormOutputs)
      continue;
    Value output = norm->getResult(0);
    SmallVector<OpOperand *> backwardUses;
    Operation *first = nullptr;
    for (OpOperand &use : output.getUses()) {
      Operation *user = use.getOwner();
      if (!nn::getGradKind(user) || user->getBlock() != norm->getBlock())
        continue;
      backwardUses.push_back(&use);
      if (!first || user->isBeforeInBlock(first))
        first = user;
    }
    if (backwardUses.empty())
      continue;
    builder.setInsertionPoint(first);
    auto shard = dist::ConstraintOp::create(
        builder, norm->getLoc(), output.getType(), output,
        makeSharding(/*rank=*/3, /*splitSeq=*/true, /*partial=*/false));
    auto whole = dist::ConstraintOp::create(
        builder, norm->getLoc(), output.getType(), shard.getResult(),
        makeSharding(/*rank=*/3, /*splitSeq=*/false, /*partial=*/false));
    for (OpOperand *use : backwardUses)
      use->set(whole.getResult());
  }
  return success();
}
