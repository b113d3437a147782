//===- Passes.h - nn dialect transforms -------------------------*- C++ -*-===//

#ifndef PARTITA_DIALECTS_NN_TRANSFORMS_PASSES_H
#define PARTITA_DIALECTS_NN_TRANSFORMS_PASSES_H

#include "dialects/nn/IR/NNOps.h"

#include "mlir/Pass/Pass.h"

namespace partita::nn {
#define GEN_PASS_DECL
#include "dialects/nn/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "dialects/nn/Transforms/Passes.h.inc"
} // namespace partita::nn

#endif // PARTITA_DIALECTS_NN_TRANSFORMS_PASSES_H
