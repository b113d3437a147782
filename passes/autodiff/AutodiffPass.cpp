//===- AutodiffPass.cpp - nn-autodiff -------------------------------------===//

#include "passes/autodiff/Autodiff.h"
#include "passes/autodiff/Passes.h"
#include "passes/autodiff/VJPRules.h"

namespace partita::autodiff {
#define GEN_PASS_DEF_NNAUTODIFF
#include "passes/autodiff/Passes.h.inc"

namespace {
struct NNAutodiffPass : public impl::NNAutodiffBase<NNAutodiffPass> {
  using Base::Base;

  void getDependentDialects(mlir::DialectRegistry &registry) const final {
    Base::getDependentDialects(registry);
    // The VJP rules travel with the pass, so every tool running it has them.
    nn::registerVJPExternalModels(registry);
  }

  void runOnOperation() final {
    AutodiffOptions options;
    if (optimizer == "adamw") {
      options.optimizer = Optimizer::AdamW;
    } else if (optimizer == "sgd") {
      options.optimizer = Optimizer::SGD;
    } else if (optimizer == "none") {
      options.optimizer = Optimizer::None;
    } else {
      getOperation().emitError("nn-autodiff: unknown optimizer '")
          << optimizer << "'; expected adamw, sgd or none";
      return signalPassFailure();
    }
    if (recompute == "none") {
      options.recompute = Recompute::None;
    } else if (recompute == "full") {
      options.recompute = Recompute::Full;
    } else if (recompute == "selective") {
      options.recompute = Recompute::Selective;
    } else {
      getOperation().emitError("nn-autodiff: unknown recompute mode '")
          << recompute << "'; expected none, full or selective";
      return signalPassFailure();
    }
    std::optional<Precision> recipe = parsePrecision(precision);
    if (!recipe) {
      getOperation().emitError("nn-autodiff: unknown precision '")
          << precision << "'; expected fp32, bf16-mixed or fp16-mixed";
      return signalPassFailure();
    }
    options.precision = *recipe;
    if (reduceDType == "compute") {
      options.reduceType = ReduceType::Compute;
    } else if (reduceDType == "fp32") {
      options.reduceType = ReduceType::FP32;
    } else {
      getOperation().emitError("nn-autodiff: unknown reduce-dtype '")
          << reduceDType << "'; expected compute or fp32";
      return signalPassFailure();
    }
    options.lossScale = lossScale;
    options.lossScaleGrowthInterval = lossScaleGrowthInterval;
    options.lr = lr;
    options.momentum = momentum;
    options.beta1 = beta1;
    options.beta2 = beta2;
    options.eps = eps;
    options.weightDecay = weightDecay;
    options.clipNorm = clipNorm;
    mlir::FailureOr<AutodiffStats> stats =
        differentiate(getOperation(), options);
    if (mlir::failed(stats))
      return signalPassFailure();
    numInputGradientOps = stats->inputGradientOps;
    numWeightGradientOps = stats->weightGradientOps;
    numUpdateOps = stats->updateOps;
    numRecomputedOps = stats->recomputedOps;
  }
};
} // namespace
} // namespace partita::autodiff
