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

#include <optional>

namespace partita::autodiff {

enum class Optimizer { AdamW, SGD, None };
enum class Recompute { None, Full, Selective };
/// The precision recipe of a train step. fp32: everything f32. The mixed
/// recipes (Micikevicius et al. 2018): parameters as used in compute,
/// activations and gradients in bf16 or f16; an f32 master copy of every
/// parameter and f32 optimizer moments, which the update reads and writes,
/// then narrows the new master into the parameter (nn.convert).
enum class Precision { FP32, BF16Mixed, FP16Mixed };
/// The type gradient reductions run in under a mixed recipe: the compute
/// type (the gradient as computed) or f32 (each gradient widened first;
/// dist-partition then reduces the wide value).
enum class ReduceType { Compute, FP32 };

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
  Precision precision = Precision::FP32;
  ReduceType reduceType = ReduceType::Compute;
  /// fp16-mixed's dynamic loss scaling: the initial scale, and the clean
  /// steps after which it doubles.
  double lossScale = 65536.0;
  int64_t lossScaleGrowthInterval = 2000;
};

/// "fp32", "bf16-mixed", "fp16-mixed"; std::nullopt for anything else.
std::optional<Precision> parsePrecision(llvm::StringRef text);

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
