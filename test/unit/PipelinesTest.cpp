//===- PipelinesTest.cpp - unit tests of the compile API (Pipelines.h) ----===//
//
// compileToPlan and compileModule on models `partita model` builds: the
// stages run in order, a plan holds the step and the reference program,
// and a failing stage reports a diagnostic and stops.
//
//===----------------------------------------------------------------------===//

#include "passes/Pipelines.h"

#include "dialects/InitAllDialects.h"
#include "dialects/nn/Models/ModelBuilder.h"
#include "passes/InitAllPasses.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace partita;

namespace {

class PipelinesTest : public ::testing::Test {
protected:
  PipelinesTest() {
    DialectRegistry registry;
    registerAllDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
  }

  OwningOpRef<ModuleOp> gpt() {
    models::ModelConfig config;
    config.layers = 1;
    config.hidden = 8;
    config.heads = 2;
    config.seq = 4;
    config.vocab = 16;
    FailureOr<OwningOpRef<ModuleOp>> module =
        models::buildModel(context, config);
    EXPECT_TRUE(succeeded(module));
    return std::move(*module);
  }

  MLIRContext context;
};

// Tests that a data-parallel train step compiles to a plan with the
// partitioned @train_step and the unpartitioned one as "reference", and that
// the stages run in order with the callbacks around each.
TEST_F(PipelinesTest, CompilesTrainStepToPlanWithReference) {
  OwningOpRef<ModuleOp> module = gpt();
  CompilerOptions options;
  options.train = true;
  options.autodiff.optimizer = "sgd";
  options.annotate.strategy = "dp";
  options.annotate.mesh = "dp=2";
  std::vector<std::string> events;
  CompileCallbacks callbacks;
  callbacks.beforeStage = [&](CompileStage stage, const OpPassManager &pm) {
    events.push_back("before " + stringifyCompileStage(stage).str() + " " +
                     std::to_string(pm.size()));
  };
  callbacks.afterStage = [&](CompileStage stage) {
    events.push_back("after " + stringifyCompileStage(stage).str());
  };
  FailureOr<plan::Plan> plan = compileToPlan(*module, options, callbacks);
  ASSERT_TRUE(succeeded(plan));
  ASSERT_EQ(plan->programs_size(), 2);
  EXPECT_EQ(plan->programs(0).name(), "train_step");
  EXPECT_EQ(plan->programs(1).name(), "reference");
  ASSERT_EQ(plan->mesh().axes_size(), 1);
  EXPECT_EQ(plan->mesh().axes(0).name(), "dp");
  std::vector<std::string> expected = {
      // nn-absorb-transposes, then dist-annotate.
      "before differentiated 1", "after differentiated", "before annotated 2",
      "after annotated", "before propagated 1", "after propagated",
      // dist-partition, then dist-optimize-comm, nn-fuse-attention-grad
      // and nn-keep-attention-stats (a train step).
      "before partitioned 4", "after partitioned", "before plan 0",
      "after plan"};
  EXPECT_EQ(events, expected);
  // The module is left partitioned.
  auto step = module->lookupSymbol<func::FuncOp>("train_step");
  ASSERT_TRUE(step);
  EXPECT_TRUE(step->hasAttr("dist.mesh"));
}

// Tests that compileModule stops after the stage asked for, and that
// strategy "none" runs no annotation pass.
TEST_F(PipelinesTest, StopsAfterTheStageAskedFor) {
  OwningOpRef<ModuleOp> module = gpt();
  CompilerOptions options;
  SmallVector<CompileStage> ran;
  CompileCallbacks callbacks;
  callbacks.beforeStage = [&](CompileStage stage, const OpPassManager &pm) {
    ran.push_back(stage);
    // nn-absorb-transposes alone.
    if (stage == CompileStage::Annotated) {
      EXPECT_EQ(pm.size(), 1u);
    }
  };
  ASSERT_TRUE(succeeded(
      compileModule(*module, options, CompileStage::Annotated, callbacks)));
  EXPECT_EQ(ran, SmallVector<CompileStage>({CompileStage::Annotated}));
  EXPECT_TRUE(module->lookupSymbol<func::FuncOp>("forward"));
}

// Tests that a failing stage fails the compile with a diagnostic (a strategy
// that does not exist) and runs no later stage.
TEST_F(PipelinesTest, FailingStageStopsWithDiagnostic) {
  OwningOpRef<ModuleOp> module = gpt();
  CompilerOptions options;
  options.annotate.strategy = "no-such-strategy";
  options.annotate.mesh = "dp=2";
  std::string errors;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    errors += diag.str() + "\n";
    return success();
  });
  SmallVector<CompileStage> done;
  CompileCallbacks callbacks;
  callbacks.afterStage = [&](CompileStage stage) { done.push_back(stage); };
  EXPECT_TRUE(failed(compileToPlan(*module, options, callbacks)));
  EXPECT_NE(errors.find("no-such-strategy"), std::string::npos) << errors;
  EXPECT_TRUE(done.empty());
}

// Tests the stage names `partita plan --emit` takes, both ways.
TEST(CompileStageTest, NamesRoundTrip) {
  for (CompileStage stage : {CompileStage::Differentiated,
                             CompileStage::Annotated, CompileStage::Propagated,
                             CompileStage::Partitioned, CompileStage::Plan})
    EXPECT_EQ(symbolizeCompileStage(stringifyCompileStage(stage)), stage);
  EXPECT_FALSE(symbolizeCompileStage("lowered"));
}

// Tests that parseModulePipeline takes what --print-pipeline prints as a
// pass manager on builtin.module running the pass itself (not a nested
// builtin.module pass manager, which would run on nothing), and rejects a
// pipeline on another anchor.
TEST(CompileStageTest, ParsesPrintedPipelines) {
  registerAllPasses();
  std::string message;
  llvm::raw_string_ostream os(message);
  FailureOr<OpPassManager> pm = parseModulePipeline(
      "builtin.module(dist-propagate{record-origins=false})", os);
  ASSERT_TRUE(succeeded(pm)) << message;
  EXPECT_EQ(pm->getOpAnchorName(), ModuleOp::getOperationName());
  ASSERT_EQ(pm->size(), 1u);
  EXPECT_EQ(pm->begin()->getArgument(), "dist-propagate");

  FailureOr<OpPassManager> onFunc = parseModulePipeline("func.func()", os);
  EXPECT_TRUE(failed(onFunc));
  EXPECT_NE(message.find("expected a pipeline anchored on builtin.module"),
            std::string::npos)
      << message;
}

} // namespace
