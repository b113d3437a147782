//===- AutodiffTest.cpp - unit tests of nn-autodiff's train step ----------===//
//
// Properties of the step function on the models `partita model` builds,
// which later passes rely on.
//
//===----------------------------------------------------------------------===//

#include "passes/autodiff/Autodiff.h"
#include "dialects/nn/IR/NNAttributes.h"
#include "dialects/nn/IR/NNOps.h"
#include "dialects/nn/Models/ModelBuilder.h"
#include "passes/autodiff/VJPRules.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace partita;

namespace {

class AutodiffTest : public ::testing::TestWithParam<models::ModelKind> {
protected:
  AutodiffTest() {
    DialectRegistry registry;
    registry.insert<nn::NNDialect, func::FuncDialect>();
    nn::registerVJPExternalModels(registry);
    context.appendDialectRegistry(registry);
    context.loadDialect<nn::NNDialect, func::FuncDialect>();
  }

  OwningOpRef<ModuleOp> trainStep(const autodiff::AutodiffOptions &options) {
    models::ModelConfig config;
    config.kind = GetParam();
    config.layers = 2;
    config.hidden = 16;
    config.heads = 2;
    config.seq = 4;
    config.vocab = 32;
    FailureOr<OwningOpRef<ModuleOp>> module =
        models::buildModel(context, config);
    EXPECT_TRUE(succeeded(module));
    if (failed(module))
      return nullptr;
    EXPECT_TRUE(succeeded(autodiff::differentiate(module->get(), options)));
    EXPECT_TRUE(succeeded(verify(module->get())));
    return std::move(*module);
  }

  static StringRef kindOf(Operation *op) {
    std::optional<nn::GradKind> kind = nn::getGradKind(op);
    return kind ? nn::stringifyGradKind(*kind) : "";
  }

  MLIRContext context;
};

// Weight gradients ("W") feed only other weight gradients and the update:
// no input-gradient ("B") op waits for one, so a zero-bubble schedule can
// defer every W op.
TEST_P(AutodiffTest, NoInputGradientReadsAWeightGradient) {
  for (autodiff::Recompute recompute :
       {autodiff::Recompute::None, autodiff::Recompute::Full}) {
    autodiff::AutodiffOptions options;
    options.recompute = recompute;
    OwningOpRef<ModuleOp> module = trainStep(options);
    ASSERT_TRUE(module);
    int weightOps = 0, inputOps = 0;
    module->walk([&](Operation *op) {
      StringRef kind = kindOf(op);
      weightOps += kind == "W";
      inputOps += kind == "B";
      if (kind != "B")
        return;
      for (Value operand : op->getOperands()) {
        if (Operation *def = operand.getDefiningOp()) {
          EXPECT_NE(kindOf(def), "W") << "a B op reads a W op's result in "
                                      << op->getName().getStringRef().str();
        }
      }
    });
    EXPECT_GT(weightOps, 0);
    EXPECT_GT(inputOps, 0);
  }
}

// Every op of the step function after the forward is tagged, and only the
// forward's ops are not.
TEST_P(AutodiffTest, EveryBackwardAndUpdateOpIsTagged) {
  autodiff::AutodiffOptions options;
  options.clipNorm = 1.0;
  OwningOpRef<ModuleOp> module = trainStep(options);
  ASSERT_TRUE(module);
  auto step = module->lookupSymbol<func::FuncOp>("train_step");
  ASSERT_TRUE(step);
  bool inBackward = false;
  for (Operation &op : step.getBody().front().without_terminator()) {
    inBackward |= !kindOf(&op).empty();
    if (inBackward) {
      EXPECT_FALSE(kindOf(&op).empty())
          << "untagged " << op.getName().getStringRef().str();
    }
  }
  EXPECT_TRUE(inBackward);
}

INSTANTIATE_TEST_SUITE_P(Models, AutodiffTest,
                         ::testing::Values(models::ModelKind::MLP,
                                           models::ModelKind::GPT,
                                           models::ModelKind::Llama));

} // namespace
