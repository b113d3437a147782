//===- NNOps.h - the nn dialect and its operations --------------*- C++ -*-===//
//
// Declares the nn dialect, its enums, attributes and operations.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_NN_IR_NNOPS_H
#define PARTITA_DIALECTS_NN_IR_NNOPS_H

#include "dialects/dist/IR/DistOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/nn/IR/NNDialect.h.inc"
#include "dialects/nn/IR/NNEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/nn/IR/NNAttrs.h.inc"

#define GET_OP_CLASSES
#include "dialects/nn/IR/NNOps.h.inc"

#endif // PARTITA_DIALECTS_NN_IR_NNOPS_H
