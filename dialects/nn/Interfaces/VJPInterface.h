//===- VJPInterface.h - vector-Jacobian products of nn ops ------*- C++ -*-===//
//
// Declares the VJPOpInterface, through which nn-autodiff differentiates.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_NN_INTERFACES_VJPINTERFACE_H
#define PARTITA_DIALECTS_NN_INTERFACES_VJPINTERFACE_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpDefinition.h"

// The nn ops' rules are attached by partita::nn::registerVJPExternalModels
// (passes/autodiff/VJPRules.h).
#include "dialects/nn/Interfaces/VJPInterface.h.inc"

#endif // PARTITA_DIALECTS_NN_INTERFACES_VJPINTERFACE_H
