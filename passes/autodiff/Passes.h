//===- Passes.h - automatic differentiation passes --------------*- C++ -*-===//

#ifndef PARTITA_PASSES_AUTODIFF_PASSES_H
#define PARTITA_PASSES_AUTODIFF_PASSES_H

#include "dialects/nn/IR/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace partita::autodiff {
#define GEN_PASS_DECL
#include "passes/autodiff/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/autodiff/Passes.h.inc"
} // namespace partita::autodiff

#endif // PARTITA_PASSES_AUTODIFF_PASSES_H
