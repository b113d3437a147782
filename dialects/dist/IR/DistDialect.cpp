//===- DistDialect.cpp - the dist dialect ---------------------------------===//
//
// Dialect registration and verification of the `dist.sharding` attribute
// wherever it is attached.
//
//===----------------------------------------------------------------------===//

#include "dialects/dist/IR/DistDialect.h"
#include "dialects/dist/IR/CostInterface.h"
#include "dialects/dist/IR/DistOps.h"

using namespace mlir;
using namespace partita::dist;

#include "dialects/dist/IR/DistDialect.cpp.inc"

void DistDialect::initialize() {
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "dialects/dist/IR/DistOps.cpp.inc"
      >();
  attachDistCostModels(*getContext());
}

namespace {

/// `dist.origin` names the annotation(s) a sharding came from.
LogicalResult verifyOrigin(Operation *op, Attribute value, const Twine &where) {
  if (isa<StringAttr>(value))
    return success();
  if (auto array = dyn_cast<ArrayAttr>(value))
    if (llvm::all_of(array, [](Attribute a) { return isa<StringAttr>(a); }))
      return success();
  return op->emitOpError() << "'" << DistDialect::kOriginAttrName << "'"
                           << where
                           << " must be a string or an array of strings, got "
                           << value;
}

/// Checks a single `#dist.sharding` attached to a region argument or result
/// of `op` whose type is `type`; `what` names the value.
LogicalResult verifySingleSharding(Operation *op, Attribute value, Type type,
                                   const Twine &what) {
  auto sharding = dyn_cast<ShardingAttr>(value);
  if (!sharding)
    return op->emitOpError() << what << " must be a #dist.sharding, got "
                             << value;
  return verifyShardingOfValue(op, sharding, type, what);
}

/// A short name for argument `index` of `op`: its index, and the name its
/// location carries when it has one (the parameter names of model IR).
std::string describeArgument(Operation *op, unsigned regionIndex,
                             unsigned index) {
  std::string text = "argument #" + std::to_string(index);
  if (regionIndex >= op->getNumRegions())
    return text;
  Region &region = op->getRegion(regionIndex);
  if (region.empty() || index >= region.getNumArguments())
    return text;
  if (auto name = dyn_cast<NameLoc>(region.getArgument(index).getLoc()))
    text += " (\"" + name.getName().str() + "\")";
  return text;
}

} // namespace

// Other `dist.*` attributes are accepted as they are: later stages (pipeline
// stages, schedules) add their own and verify them where they are used.
LogicalResult DistDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  if (attr.getName() == kOriginAttrName)
    return verifyOrigin(op, attr.getValue(), "");
  if (attr.getName() == kBucketAttrName) {
    auto id = dyn_cast<IntegerAttr>(attr.getValue());
    if (!id || !id.getType().isInteger(64) || id.getInt() < 1)
      return op->emitOpError()
             << "'" << kBucketAttrName << "' must be a positive i64, got "
             << attr.getValue();
    if (!isa<AllReduceOp, ReduceScatterOp>(op))
      return op->emitOpError()
             << "'" << kBucketAttrName
             << "' is only valid on dist.all_reduce and dist.reduce_scatter";
    return success();
  }
  if (attr.getName() == kZeroStageAttrName) {
    auto stage = dyn_cast<IntegerAttr>(attr.getValue());
    if (!stage || !stage.getType().isInteger(64) || stage.getInt() < 1 ||
        stage.getInt() > 3)
      return op->emitOpError()
             << "'" << kZeroStageAttrName
             << "' must be an i64 ZeRO stage 1, 2 or 3, got "
             << attr.getValue();
    return success();
  }
  if (attr.getName() != kShardingAttrName)
    return success();
  auto array = dyn_cast<ArrayAttr>(attr.getValue());
  if (!array)
    return op->emitOpError()
           << "'" << kShardingAttrName
           << "' on an operation must be an array of #dist.sharding, one per "
              "result, got "
           << attr.getValue();
  if (array.size() != op->getNumResults())
    return op->emitOpError() << "'" << kShardingAttrName << "' has "
                             << array.size() << " entries, but the op has "
                             << op->getNumResults() << " results";
  for (auto [i, entry] : llvm::enumerate(array)) {
    std::string what =
        "'" + kShardingAttrName.str() + "' of result #" + std::to_string(i);
    if (failed(verifySingleSharding(op, entry, op->getResult(i).getType(),
                                    what)))
      return failure();
  }
  return success();
}

LogicalResult DistDialect::verifyRegionArgAttribute(Operation *op,
                                                    unsigned regionIndex,
                                                    unsigned argIndex,
                                                    NamedAttribute attr) {
  std::string arg = describeArgument(op, regionIndex, argIndex);
  if (attr.getName() == kOriginAttrName)
    return verifyOrigin(op, attr.getValue(), " of " + arg);
  if (attr.getName() != kShardingAttrName)
    return success();
  Type type;
  if (auto func = dyn_cast<FunctionOpInterface>(op)) {
    if (argIndex < func.getNumArguments())
      type = func.getArgumentTypes()[argIndex];
  } else if (regionIndex < op->getNumRegions()) {
    Region &region = op->getRegion(regionIndex);
    if (!region.empty() && argIndex < region.getNumArguments())
      type = region.getArgument(argIndex).getType();
  }
  std::string what = "'" + kShardingAttrName.str() + "' of " + arg;
  if (!type)
    return op->emitOpError() << what << ": the op has no such argument";
  return verifySingleSharding(op, attr.getValue(), type, what);
}

LogicalResult DistDialect::verifyRegionResultAttribute(Operation *op,
                                                       unsigned regionIndex,
                                                       unsigned resultIndex,
                                                       NamedAttribute attr) {
  std::string result = "result #" + std::to_string(resultIndex);
  if (attr.getName() == kOriginAttrName)
    return verifyOrigin(op, attr.getValue(), " of " + result);
  if (attr.getName() != kShardingAttrName)
    return success();
  std::string what = "'" + kShardingAttrName.str() + "' of " + result;
  auto func = dyn_cast<FunctionOpInterface>(op);
  if (!func)
    return op->emitOpError()
           << what << ": result shardings are only supported on functions";
  if (resultIndex >= func.getNumResults())
    return op->emitOpError() << what << ": the function has no such result";
  return verifySingleSharding(op, attr.getValue(),
                              func.getResultTypes()[resultIndex], what);
}
