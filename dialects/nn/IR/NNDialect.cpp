//===- NNDialect.cpp - the nn dialect -------------------------------------===//
//
// Registers the nn dialect's attributes and operations, and verifies the
// discardable attributes it declares (NNAttributes.h).
//
//===----------------------------------------------------------------------===//

#include "dialects/nn/IR/NNOps.h"
#include "dialects/nn/IR/NNAttributes.h"
#include "dialects/nn/IR/NNCost.h"
#include "dialects/nn/IR/NNKernels.h"
#include "dialects/nn/IR/NNPartition.h"
#include "dialects/nn/IR/NNTensorBuilder.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace partita::nn;

#include "dialects/nn/IR/NNDialect.cpp.inc"
#include "dialects/nn/IR/NNEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/nn/IR/NNAttrs.cpp.inc"

void NNDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/nn/IR/NNAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "dialects/nn/IR/NNOps.cpp.inc"
      >();
  attachNNCostModels(*getContext());
  attachNNPartitionModels(*getContext());
  attachNNKernelModels(*getContext());
  addNNTensorBuilder(*this);
}

//===----------------------------------------------------------------------===//
// Declared attributes
//===----------------------------------------------------------------------===//

namespace partita::nn {

std::optional<int64_t> getLayerIndex(Operation *op) {
  if (auto layer = op->getAttrOfType<IntegerAttr>(kLayerAttrName))
    return layer.getInt();
  return std::nullopt;
}

void setLayerIndex(Operation *op, int64_t layer) {
  op->setAttr(kLayerAttrName,
              IntegerAttr::get(IntegerType::get(op->getContext(), 64), layer));
}

std::optional<GradKind> getGradKind(Operation *op) {
  if (auto kind = op->getAttrOfType<StringAttr>(kGradKindAttrName))
    return symbolizeGradKind(kind.getValue());
  return std::nullopt;
}

void setGradKind(Operation *op, GradKind kind) {
  op->setAttr(kGradKindAttrName,
              StringAttr::get(op->getContext(), stringifyGradKind(kind)));
}

bool isRecomputed(Operation *op) {
  return op->hasAttrOfType<UnitAttr>(kRecomputeAttrName);
}

void setRecomputed(Operation *op) {
  op->setAttr(kRecomputeAttrName, UnitAttr::get(op->getContext()));
}

std::optional<int64_t> getMeanCount(Operation *op) {
  if (auto count = op->getAttrOfType<IntegerAttr>(kMeanCountAttrName))
    return count.getInt();
  return std::nullopt;
}

void setMeanCount(Operation *op, int64_t count) {
  op->setAttr(kMeanCountAttrName,
              IntegerAttr::get(IntegerType::get(op->getContext(), 64), count));
}

} // namespace partita::nn

/// "@f": the symbol name of a function, for diagnostics.
static std::string describeOwner(Operation *op) {
  if (auto name = op->getAttrOfType<StringAttr>(
          SymbolTable::getSymbolAttrName()))
    return ("@" + name.getValue()).str();
  return ("'" + op->getName().getStringRef() + "'").str();
}

LogicalResult NNDialect::verifyRegionArgAttribute(Operation *op,
                                                  unsigned regionIndex,
                                                  unsigned argIndex,
                                                  NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kInitValueAttrName) {
    if (isa<FloatAttr>(attr.getValue()))
      return success();
    return op->emitError() << name << " of argument #" << argIndex << " of "
                           << describeOwner(op) << " must be a float, not "
                           << attr.getValue();
  }
  if (name != paramAttr.getName() && name != stateAttr.getName() &&
      name != inputAttr.getName() && name != masterAttr.getName())
    return op->emitError() << "argument #" << argIndex << " of "
                           << describeOwner(op) << " carries " << name
                           << ", which is not an nn argument attribute "
                              "(nn.param, nn.state, nn.master, "
                              "nn.init_value or nn.input)";
  if (isa<StringAttr>(attr.getValue()))
    return success();
  // At the argument, where the name was written.
  Location loc = op->getLoc();
  Region &region = op->getRegion(regionIndex);
  if (!region.empty() && argIndex < region.front().getNumArguments())
    loc = region.front().getArgument(argIndex).getLoc();
  return emitError(loc) << name << " of argument #" << argIndex << " of "
                        << describeOwner(op) << " must be a string, not "
                        << attr.getValue();
}

LogicalResult NNDialect::verifyRegionResultAttribute(Operation *op,
                                                     unsigned regionIndex,
                                                     unsigned resultIndex,
                                                     NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name != paramAttr.getName() && name != stateAttr.getName() &&
      name != outputAttr.getName() && name != gradAttr.getName())
    return op->emitError() << "result #" << resultIndex << " of "
                           << describeOwner(op) << " carries " << name
                           << ", which is not an nn result attribute "
                              "(nn.param, nn.state, nn.output or nn.grad)";
  if (isa<StringAttr>(attr.getValue()))
    return success();
  return op->emitError() << name << " of result #" << resultIndex << " of "
                         << describeOwner(op) << " must be a string, not "
                         << attr.getValue();
}

LogicalResult NNDialect::verifyOperationAttribute(Operation *op,
                                                  NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  Attribute value = attr.getValue();
  auto integer = dyn_cast<IntegerAttr>(value);
  bool isInteger = integer && integer.getType().isSignlessInteger();
  if (name == kLayerAttrName) {
    if (!isInteger || integer.getValue().isNegative())
      return op->emitError() << name << " must be a layer index (an integer "
                             << ">= 0), not " << value;
    return success();
  }
  if (name == kGradKindAttrName) {
    auto kind = dyn_cast<StringAttr>(value);
    if (!kind || !symbolizeGradKind(kind.getValue()))
      return op->emitError() << name << " must be \"B\" (input gradient), "
                             << "\"W\" (weight gradient) or \"update\", not "
                             << value;
    return success();
  }
  if (name == kRecomputeAttrName) {
    if (!isa<UnitAttr>(value))
      return op->emitError() << name << " is a unit attribute, not " << value;
    return success();
  }
  if (name == kWideSumAttrName) {
    if (!isa<UnitAttr>(value))
      return op->emitError() << name << " is a unit attribute, not " << value;
    return success();
  }
  if (name == kMeanCountAttrName) {
    if (!isInteger)
      return op->emitError() << name << " must be an integer count, not "
                             << value;
    if (integer.getInt() < 1)
      return op->emitError() << "has " << name << " " << integer.getInt()
                             << "; a token count is at least 1";
    return success();
  }
  return op->emitError() << "unknown nn attribute " << name
                         << " (nn.layer, nn.grad_kind, nn.recompute, "
                            "nn.mean_count or nn.wide_sum)";
}
