//===- NNDialect.cpp - the nn dialect -------------------------------------===//
//
// Registers the nn dialect's attributes and operations.
//
//===----------------------------------------------------------------------===//

#include "dialects/nn/IR/NNOps.h"
#include "dialects/nn/IR/NNCost.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
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
}
