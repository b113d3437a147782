//===- Passes.h - partitioning passes ---------------------------*- C++ -*-===//

#ifndef PARTITA_PASSES_PARTITION_PASSES_H
#define PARTITA_PASSES_PARTITION_PASSES_H

#include "dialects/dist/IR/DistOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace partita::partition {
#define GEN_PASS_DECL
#include "passes/partition/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/partition/Passes.h.inc"
} // namespace partita::partition

#endif // PARTITA_PASSES_PARTITION_PASSES_H
