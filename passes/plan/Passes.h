//===- Passes.h - plan passes -----------------------------------*- C++ -*-===//

#ifndef PARTITA_PASSES_PLAN_PASSES_H
#define PARTITA_PASSES_PLAN_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace partita::plan_lowering {
#define GEN_PASS_DECL
#include "passes/plan/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/plan/Passes.h.inc"
} // namespace partita::plan_lowering

#endif // PARTITA_PASSES_PLAN_PASSES_H
