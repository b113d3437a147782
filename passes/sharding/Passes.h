//===- Passes.h - sharding passes -------------------------------*- C++ -*-===//

#ifndef PARTITA_PASSES_SHARDING_PASSES_H
#define PARTITA_PASSES_SHARDING_PASSES_H

#include "dialects/dist/IR/DistOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace partita::sharding {
#define GEN_PASS_DECL
#include "passes/sharding/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/sharding/Passes.h.inc"
} // namespace partita::sharding

#endif // PARTITA_PASSES_SHARDING_PASSES_H
