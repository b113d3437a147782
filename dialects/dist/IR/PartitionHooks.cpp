//===- PartitionHooks.cpp - the default partition hook --------------------===//
//
// See PartitionHooks.h.
//
//===----------------------------------------------------------------------===//

#include "dialects/dist/IR/PartitionHooks.h"

#include "dialects/dist/IR/DistOps.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Verifier.h"

#include <limits>

using namespace mlir;

namespace partita::dist {

AxisNames PartitionState::axesOf(FactorRole role) const {
  if (!rule)
    return {};
  if (std::optional<int64_t> f = rule->findFactor(role))
    return factorAxes[*f];
  return {};
}

int64_t PartitionState::groupSize(ArrayRef<std::string> axes) const {
  int64_t size = 1;
  for (const std::string &axis : axes)
    size *= mesh.axisSize(axis);
  return size;
}

ArrayAttr PartitionState::axesAttr(ArrayRef<std::string> axes) const {
  SmallVector<StringRef> names(axes.begin(), axes.end());
  return builder.getStrArrayAttr(names);
}

double PartitionState::meanScale(unsigned operand,
                                 ArrayRef<int64_t> dims) const {
  double scale = 1.0 / static_cast<double>(meanShards);
  if (!padded)
    return scale;
  auto local = cast<RankedTensorType>(operands[operand].getType());
  RankedTensorType real = realOperandTypes[operand];
  int64_t localCount = 1, realCount = 1;
  for (int64_t d : dims) {
    localCount *= local.getDimSize(d);
    realCount *= real.getDimSize(d);
  }
  return realCount > 0 ? static_cast<double>(localCount) / realCount : scale;
}

PaddingMask defaultPaddingMask(const Factor &factor) {
  if (factor.kind == FactorKind::Reduction)
    return PaddingMask::fill(factor.partialKind == ReductionKind::Max
                                 ? -std::numeric_limits<double>::infinity()
                                 : 0.0);
  return PaddingMask::reject(
      "masking its padding does not make the op exact over it (a " +
      stringifyFactorKind(factor.kind).str() + " factor)");
}

bool carriedByNoResult(const ShardingRule &rule, int64_t factor) {
  return llvm::none_of(rule.getResults(), [&](const TensorFactors &dims) {
    return llvm::any_of(dims, [&](const auto &factors) {
      return llvm::is_contained(factors, factor);
    });
  });
}

FailureOr<SmallVector<Value>> partitionByClone(Operation *op,
                                               PartitionState &state) {
  IRMapping mapping;
  for (auto [operand, local] : llvm::zip(op->getOperands(), state.operands))
    mapping.map(operand, local);
  Operation *clone = state.builder.clone(*op, mapping);
  // One value used twice may be resharded twice (attention's query and
  // key): the mapping keeps one, so set each operand from its own reshard.
  clone->setOperands(state.operands);
  for (auto [result, type] : llvm::zip(clone->getResults(), state.resultTypes))
    result.setType(type);
  clone->removeAttr(DistDialect::kShardingAttrName);
  // A safety net: a rule that promises more than the op's verifier accepts
  // on local types is a diagnostic, never wrong IR.
  std::string why;
  bool verified;
  {
    ScopedDiagnosticHandler capture(op->getContext(), [&](Diagnostic &diag) {
      if (why.empty())
        why = diag.str();
      return success();
    });
    verified = succeeded(mlir::verify(clone, /*verifyRecursively=*/false));
  }
  if (!verified) {
    clone->erase();
    return op->emitError() << "cannot partition '" << op->getName()
                           << "': its local form does not verify (" << why
                           << ")";
  }
  return SmallVector<Value>(clone->getResults());
}

} // namespace partita::dist
