//===- Passes.h - communication passes --------------------------*- C++ -*-===//

#ifndef PARTITA_PASSES_COMM_PASSES_H
#define PARTITA_PASSES_COMM_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace partita::comm {
#define GEN_PASS_DECL
#include "passes/comm/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/comm/Passes.h.inc"
} // namespace partita::comm

#endif // PARTITA_PASSES_COMM_PASSES_H
