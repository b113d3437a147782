//===- Passes.h - the per-op sharding search --------------------*- C++ -*-===//

#ifndef PARTITA_PASSES_AUTOSHARD_PASSES_H
#define PARTITA_PASSES_AUTOSHARD_PASSES_H

#include "dialects/dist/IR/DistOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace partita::autoshard {
#define GEN_PASS_DECL
#include "passes/autoshard/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/autoshard/Passes.h.inc"
} // namespace partita::autoshard

#endif // PARTITA_PASSES_AUTOSHARD_PASSES_H
