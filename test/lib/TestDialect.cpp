//===- TestDialect.cpp - a test-only dialect for the op hooks -------------===//
//
// Two ops, written in C++ without ODS (they only need generic syntax):
// - ptest.sum_normalize: y[i, j] = x[i, j] / sum_k x[i, k] on a rank-2
//   tensor. Its rule "ij->ij" has `j` collective: split as the result asks,
//   its partition hook takes the row sums locally and all-reduces them
//   (dist.all_reduce sum), so the input is never gathered. Its cost is one
//   addition and one division per element.
// - ptest.row_max: y[i] = max_j x[i, j]. Its rule "ij->i" has `j`
//   collective, split as the operand is; its hook takes the local maxima and
//   all-reduces them (max) itself, so it says the result is not left
//   partial (leavesResultsPartial). Its cost is one max per element.
// - ptest.bad_hook: rule "ij->ij", whose hook builds no result: the
//   partitioner must report it rather than crash. It has no runtime kernel
//   (no KernelOpInterface): the plan lowering must say so.
// - ptest.kernel: any operands and results; its KernelOpInterface describes
//   the kernel its attributes spell (`name`, and every other attribute as
//   a kernel attribute: integer, float, bool, string, i64 array), so lit
//   tests drive the plan lowering's handling of kernel descriptions.
//
// sum_normalize and row_max name their runtime kernels through
// dist::KernelOpInterface ("ptest.sum_normalize" with dims = [1],
// "ptest.row_max" with dim = 1): custom kernels, which the kernel library
// built from TestKernels.cpp registers for the runtime.
//
//===----------------------------------------------------------------------===//

#include "test/lib/TestDialect.h"

#include "dialects/dist/IR/CostInterface.h"
#include "dialects/dist/IR/DistOps.h"
#include "dialects/dist/IR/KernelInterface.h"
#include "dialects/nn/IR/NNOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/OpDefinition.h"

using namespace mlir;

namespace partita::test {
namespace {

/// Verifies a rank-2 tensor operand and a result of the same type.
LogicalResult verifySameRank2(Operation *op) {
  auto type = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
  if (!type || type.getRank() != 2 || op->getResult(0).getType() != type)
    return op->emitOpError()
           << "expects a rank-2 tensor operand and a result of its type";
  return success();
}

class SumNormalizeOp
    : public Op<SumNormalizeOp, OpTrait::ZeroRegions, OpTrait::OneResult,
                OpTrait::OneTypedResult<Type>::Impl, OpTrait::ZeroSuccessors,
                OpTrait::OneOperand> {
public:
  using Op::Op;
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(SumNormalizeOp)
  static StringRef getOperationName() { return "ptest.sum_normalize"; }
  static ArrayRef<StringRef> getAttributeNames() { return {}; }
  LogicalResult verify() { return verifySameRank2(*this); }
};

class RowMaxOp : public Op<RowMaxOp, OpTrait::ZeroRegions, OpTrait::OneResult,
                           OpTrait::OneTypedResult<Type>::Impl,
                           OpTrait::ZeroSuccessors, OpTrait::OneOperand> {
public:
  using Op::Op;
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(RowMaxOp)
  static StringRef getOperationName() { return "ptest.row_max"; }
  static ArrayRef<StringRef> getAttributeNames() { return {}; }
  LogicalResult verify() {
    auto type = dyn_cast<RankedTensorType>(getOperand().getType());
    auto result = dyn_cast<RankedTensorType>(getType());
    if (!type || type.getRank() != 2 || !result ||
        result !=
            RankedTensorType::get({type.getDimSize(0)}, type.getElementType()))
      return emitOpError() << "expects a rank-2 tensor operand and its rows' "
                              "maxima as the result";
    return success();
  }
};

class BadHookOp : public Op<BadHookOp, OpTrait::ZeroRegions, OpTrait::OneResult,
                            OpTrait::OneTypedResult<Type>::Impl,
                            OpTrait::ZeroSuccessors, OpTrait::OneOperand> {
public:
  using Op::Op;
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(BadHookOp)
  static StringRef getOperationName() { return "ptest.bad_hook"; }
  static ArrayRef<StringRef> getAttributeNames() { return {}; }
  LogicalResult verify() { return verifySameRank2(*this); }
};

class KernelOp : public Op<KernelOp, OpTrait::ZeroRegions,
                           OpTrait::VariadicResults, OpTrait::ZeroSuccessors,
                           OpTrait::VariadicOperands> {
public:
  using Op::Op;
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(KernelOp)
  static StringRef getOperationName() { return "ptest.kernel"; }
  static ArrayRef<StringRef> getAttributeNames() { return {}; }
  LogicalResult verify() {
    if (!(*this)->getAttrOfType<StringAttr>("name"))
      return emitOpError() << "needs a string attribute 'name'";
    return success();
  }
};

/// "ij->ij" on the op's own shape; `j` collective when `collective`.
FailureOr<dist::ShardingRule> rank2Rule(Operation *op, bool collective) {
  auto type = cast<RankedTensorType>(op->getOperand(0).getType());
  FailureOr<dist::ShardingRule> rule = dist::ShardingRule::fromSpec(
      "ij->ij", {type.getShape()}, {type.getShape()});
  if (succeeded(rule) && collective)
    rule->setKind("j", dist::FactorKind::Collective);
  return rule;
}

struct SumNormalizeRule
    : public dist::ShardingRuleOpInterface::ExternalModel<SumNormalizeRule,
                                                          SumNormalizeOp> {
  FailureOr<dist::ShardingRule> getShardingRule(Operation *op) const {
    return rank2Rule(op, /*collective=*/true);
  }
};

struct SumNormalizePartition
    : public dist::PartitionOpInterface::ExternalModel<SumNormalizePartition,
                                                       SumNormalizeOp> {
  bool canSplitCollectiveFactor(Operation *, int64_t, bool fromOperand,
                                const dist::PartitionHookOptions &) const {
    return !fromOperand;
  }
  FailureOr<SmallVector<Value>> partition(Operation *op,
                                          dist::PartitionState &state) const {
    dist::AxisNames axes;
    if (state.rule)
      for (int64_t f = 0; f < state.rule->getNumFactors(); ++f)
        if (state.rule->getFactor(f).kind == dist::FactorKind::Collective)
          axes = state.factorAxes[f];
    if (axes.empty())
      return dist::partitionByClone(op, state);
    // The row sums of the local columns, summed over the devices that hold
    // the other columns, broadcast back and divided by.
    OpBuilder &b = state.builder;
    Location loc = op->getLoc();
    Value x = state.operands[0];
    auto type = cast<RankedTensorType>(x.getType());
    auto rowType =
        RankedTensorType::get({type.getDimSize(0)}, type.getElementType());
    Value sums = nn::ReduceOp::create(b, loc, rowType, nn::ReduceKind::Sum, x,
                                      ArrayRef<int64_t>{1});
    sums = dist::AllReduceOp::create(
        b, loc, rowType, sums, state.meshSymbol, state.axesAttr(axes),
        dist::ReductionKindAttr::get(b.getContext(), dist::ReductionKind::Sum));
    Value spread =
        nn::BroadcastOp::create(b, loc, type, sums, ArrayRef<int64_t>{0});
    return SmallVector<Value>{nn::DivOp::create(b, loc, type, x, spread)};
  }
};

struct SumNormalizeCost
    : public dist::CostOpInterface::ExternalModel<SumNormalizeCost,
                                                  SumNormalizeOp> {
  FailureOr<dist::OpCost> getCost(Operation *,
                                  ArrayRef<dist::TensorShape> operands,
                                  ArrayRef<dist::TensorShape> results) const {
    if (operands.size() != 1 || results.size() != 1)
      return failure();
    FailureOr<dist::OpCost> cost = dist::getDataMovementCost(operands, results);
    if (succeeded(cost))
      cost->flops = 2 * operands[0].getNumElements();
    return cost;
  }
};

struct RowMaxRule
    : public dist::ShardingRuleOpInterface::ExternalModel<RowMaxRule,
                                                          RowMaxOp> {
  FailureOr<dist::ShardingRule> getShardingRule(Operation *op) const {
    auto type = cast<RankedTensorType>(op->getOperand(0).getType());
    FailureOr<dist::ShardingRule> rule = dist::ShardingRule::fromSpec(
        "ij->i", {type.getShape()}, {type.getShape().take_front()});
    if (succeeded(rule))
      rule->setKind("j", dist::FactorKind::Collective);
    return rule;
  }
};

struct RowMaxCost
    : public dist::CostOpInterface::ExternalModel<RowMaxCost, RowMaxOp> {
  FailureOr<dist::OpCost> getCost(Operation *,
                                  ArrayRef<dist::TensorShape> operands,
                                  ArrayRef<dist::TensorShape> results) const {
    if (operands.size() != 1 || results.size() != 1)
      return failure();
    FailureOr<dist::OpCost> cost = dist::getDataMovementCost(operands, results);
    if (succeeded(cost))
      cost->flops = operands[0].getNumElements(); // one max per element
    return cost;
  }
};

struct RowMaxPartition
    : public dist::PartitionOpInterface::ExternalModel<RowMaxPartition,
                                                       RowMaxOp> {
  bool canSplitCollectiveFactor(Operation *, int64_t, bool fromOperand,
                                const dist::PartitionHookOptions &) const {
    return fromOperand;
  }
  bool leavesResultsPartial(Operation *, const dist::ShardingRule &,
                            int64_t) const {
    return false;
  }
  FailureOr<SmallVector<Value>> partition(Operation *op,
                                          dist::PartitionState &state) const {
    FailureOr<SmallVector<Value>> local = dist::partitionByClone(op, state);
    if (failed(local) || !state.rule)
      return local;
    dist::AxisNames axes;
    for (int64_t f = 0; f < state.rule->getNumFactors(); ++f)
      if (state.rule->getFactor(f).kind == dist::FactorKind::Collective)
        axes = state.factorAxes[f];
    if (axes.empty())
      return local;
    // The maxima of the local columns, then of every device's.
    Value max = local->front();
    local->front() = dist::AllReduceOp::create(
        state.builder, op->getLoc(), max.getType(), max, state.meshSymbol,
        state.axesAttr(axes),
        dist::ReductionKindAttr::get(op->getContext(),
                                     dist::ReductionKind::Max));
    return local;
  }
};

struct BadHookRule
    : public dist::ShardingRuleOpInterface::ExternalModel<BadHookRule,
                                                          BadHookOp> {
  FailureOr<dist::ShardingRule> getShardingRule(Operation *op) const {
    return rank2Rule(op, /*collective=*/false);
  }
};

struct BadHookPartition
    : public dist::PartitionOpInterface::ExternalModel<BadHookPartition,
                                                       BadHookOp> {
  FailureOr<SmallVector<Value>> partition(Operation *,
                                          dist::PartitionState &) const {
    return SmallVector<Value>();
  }
};

struct SumNormalizeKernel
    : public dist::KernelOpInterface::ExternalModel<SumNormalizeKernel,
                                                    SumNormalizeOp> {
  FailureOr<dist::KernelDescription> getKernel(Operation *) const {
    return dist::KernelDescription("ptest.sum_normalize")
        .setInts("dims", {1});
  }
};

struct RowMaxKernel
    : public dist::KernelOpInterface::ExternalModel<RowMaxKernel, RowMaxOp> {
  FailureOr<dist::KernelDescription> getKernel(Operation *) const {
    return dist::KernelDescription("ptest.row_max").setInt("dim", 1);
  }
};

struct KernelOpKernel
    : public dist::KernelOpInterface::ExternalModel<KernelOpKernel, KernelOp> {
  FailureOr<dist::KernelDescription> getKernel(Operation *op) const {
    dist::KernelDescription kernel(
        op->getAttrOfType<StringAttr>("name").getValue());
    for (NamedAttribute attr : op->getAttrs()) {
      StringRef key = attr.getName().getValue();
      Attribute value = attr.getValue();
      if (key == "name")
        continue;
      if (auto b = dyn_cast<BoolAttr>(value))
        kernel.setBool(key, b.getValue());
      else if (auto i = dyn_cast<IntegerAttr>(value))
        kernel.setInt(key, i.getInt());
      else if (auto f = dyn_cast<FloatAttr>(value))
        kernel.setFloat(key, f.getValueAsDouble());
      else if (auto str = dyn_cast<StringAttr>(value))
        kernel.setString(key, str.getValue());
      else if (auto ints = dyn_cast<DenseI64ArrayAttr>(value))
        kernel.setInts(key, ints.asArrayRef());
      else
        return op->emitOpError()
               << "attribute '" << key << "' is no kernel attribute";
    }
    return kernel;
  }
};

class PTestDialect : public Dialect {
public:
  explicit PTestDialect(MLIRContext *context)
      : Dialect(getDialectNamespace(), context, TypeID::get<PTestDialect>()) {
    getContext()->loadDialect<dist::DistDialect, nn::NNDialect>();
    addOperations<SumNormalizeOp, RowMaxOp, BadHookOp, KernelOp>();
    RowMaxOp::attachInterface<RowMaxRule, RowMaxPartition, RowMaxCost,
                              RowMaxKernel>(*context);
    SumNormalizeOp::attachInterface<SumNormalizeRule, SumNormalizePartition,
                                    SumNormalizeCost, SumNormalizeKernel>(
        *context);
    KernelOp::attachInterface<KernelOpKernel>(*context);
    BadHookOp::attachInterface<BadHookRule, BadHookPartition>(*context);
  }
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(PTestDialect)
  static StringRef getDialectNamespace() { return "ptest"; }
};

} // namespace

void registerTestDialect(DialectRegistry &registry) {
  registry.insert<PTestDialect>();
}

} // namespace partita::test
