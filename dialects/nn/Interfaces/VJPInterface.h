//===- VJPInterface.h - vector-Jacobian products of nn ops ------*- C++ -*-===//
//
// Declares the VJPOpInterface and the registration of the nn ops' rules.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_NN_INTERFACES_VJPINTERFACE_H
#define PARTITA_DIALECTS_NN_INTERFACES_VJPINTERFACE_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/OpDefinition.h"

#include "dialects/nn/Interfaces/VJPInterface.h.inc"

namespace partita::nn {
/// Attaches the VJP rules (passes/autodiff/VJPRules.cpp) to the nn ops.
void registerVJPExternalModels(mlir::DialectRegistry &registry);
} // namespace partita::nn

#endif // PARTITA_DIALECTS_NN_INTERFACES_VJPINTERFACE_H
