//===- Autodiff.h - reverse-mode differentiation of @forward ----*- C++ -*-===//
//
// Builds the training step (forward, backward, optimizer update) or the
// gradient function from a model's @forward; nn-autodiff wires it.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_AUTODIFF_AUTODIFF_H
#define PARTITA_PASSES_AUTODIFF_AUTODIFF_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"

namespace partita::autodiff {

enum class Optimizer { AdamW, SGD, None };
enum class Recompute { None, Full, Selective };

struct AutodiffOptions {
  Optimizer optimizer = Optimizer::AdamW;
  double lr = 1e-3;
  double momentum = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 0.0;
  /// Global-norm gradient clipping; 0 turns it off.
  double clipNorm = 0.0;
  Recompute recompute = Recompute::None;
};

/// What the pass built, by `nn.grad_kind`.
struct AutodiffStats {
  unsigned inputGradientOps = 0;  // "B", recomputed ops included
  unsigned weightGradientOps = 0; // "W"
  unsigned updateOps = 0;         // "update"
  unsigned recomputedOps = 0;     // `nn.recompute`
};

/// Replaces `module`'s @forward with @train_step (or @grads when the
/// optimizer is None) and returns what it built. On failure an error has
/// been emitted and the module is unchanged.
mlir::FailureOr<AutodiffStats> differentiate(mlir::ModuleOp module,
                                             const AutodiffOptions &options);

} // namespace partita::autodiff

#endif // PARTITA_PASSES_AUTODIFF_AUTODIFF_H
