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

namespace partita::nn {
/// Trait of ops that normalize each row (the last dimension) of their first
/// operand on its own, so the rows may be split over devices (Megatron
/// sequence parallelism splits the sequence entering one). Declared in
/// NNOps.td as NN_RowNormalization.
template <typename ConcreteType>
class RowNormalization
    : public mlir::OpTrait::TraitBase<ConcreteType, RowNormalization> {};
} // namespace partita::nn

#define GET_OP_CLASSES
#include "dialects/nn/IR/NNOps.h.inc"

#endif // PARTITA_DIALECTS_NN_IR_NNOPS_H
