//===- SequenceParallel.cpp - Megatron sequence parallelism as constraints ===//

#include "passes/sharding/SequenceParallel.h"

#include "dialects/dist/IR/DistOps.h"
#include "dialects/dist/IR/ShardingAdapters.h"
#include "dialects/nn/IR/NNOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"

#include <tuple>

using namespace mlir;
using namespace partita;
using namespace partita::sharding;

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
    if (op->hasTrait<nn::RowNormalization>() && op->getNumOperands() >= 1) {
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
    if (isa<nn::EmbeddingOp>(op)) {
      // The table's every dimension is looked up or copied, none kept in
      // place: a table split over the tensor axis is vocabulary-parallel.
      if (isSplitOverContracted(func, op->getOperand(0), options.tensorAxis,
                                [](unsigned dim) { return dim == 0; }))
        partials.push_back(op);
      return;
    }
    auto einsum = dyn_cast<nn::EinsumOp>(op);
    if (!einsum)
      return;
    // Not a structured binding: the lambda below captures `output` (clang
    // before 16 cannot capture bindings).
    StringRef inputs, output;
    std::tie(inputs, output) = einsum.getSpec().split("->");
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
