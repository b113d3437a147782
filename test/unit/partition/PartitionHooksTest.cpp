//===- PartitionHooksTest.cpp - unit tests of the partition hooks ---------===//
//
// dist's default hooks (PartitionHooks.h) and which nn ops carry a
// PartitionOpInterface of their own (NNPartition.cpp). The local forms
// themselves are checked end to end by the lit tests in
// test/Passes/partition.
//
//===----------------------------------------------------------------------===//

#include "dialects/dist/IR/DistOps.h"
#include "dialects/nn/IR/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <limits>

using namespace mlir;
using namespace partita;
using dist::FactorKind;
using dist::PaddingMask;

namespace {

dist::Factor factor(FactorKind kind, dist::ReductionKind partial = {}) {
  dist::Factor f;
  f.size = 8;
  f.kind = kind;
  f.partialKind = partial;
  return f;
}

TEST(PartitionHooksTest, DefaultPaddingMaskFillsReductionIdentities) {
  PaddingMask sum = dist::defaultPaddingMask(factor(FactorKind::Reduction));
  EXPECT_EQ(sum.action, PaddingMask::Action::Fill);
  EXPECT_EQ(sum.value, 0.0);
  EXPECT_FALSE(sum.onlyOperand.has_value());

  PaddingMask max = dist::defaultPaddingMask(
      factor(FactorKind::Reduction, dist::ReductionKind::Max));
  EXPECT_EQ(max.action, PaddingMask::Action::Fill);
  EXPECT_EQ(max.value, -std::numeric_limits<double>::infinity());
}

TEST(PartitionHooksTest, DefaultPaddingMaskRejectsWholeAndCollective) {
  PaddingMask whole = dist::defaultPaddingMask(factor(FactorKind::Whole));
  EXPECT_EQ(whole.action, PaddingMask::Action::Reject);
  EXPECT_NE(whole.why.find("(a whole factor)"), std::string::npos) << whole.why;
  PaddingMask collective =
      dist::defaultPaddingMask(factor(FactorKind::Collective));
  EXPECT_EQ(collective.action, PaddingMask::Action::Reject);
  EXPECT_NE(collective.why.find("(a collective factor)"), std::string::npos)
      << collective.why;
}

TEST(PartitionHooksTest, CarriedByNoResult) {
  // "ij->i": j (a row's columns) reaches no result, i does.
  SmallVector<int64_t> in{4, 8}, out{4};
  FailureOr<dist::ShardingRule> rule = dist::ShardingRule::fromSpec(
      "ij->i", {ArrayRef<int64_t>(in)}, {ArrayRef<int64_t>(out)});
  ASSERT_TRUE(succeeded(rule));
  EXPECT_FALSE(dist::carriedByNoResult(*rule, 0));
  EXPECT_TRUE(dist::carriedByNoResult(*rule, 1));
}

class PartitionStateTest : public ::testing::Test {
protected:
  PartitionStateTest() : builder(&context) {
    context.loadDialect<dist::DistDialect, nn::NNDialect, func::FuncDialect>();
    mesh.axes = {{"dp", 2}, {"tp", 4}};
  }

  MLIRContext context;
  OpBuilder builder;
  dist::Mesh mesh;
  llvm::StringMap<Value> cache;
  dist::PartitionHookOptions options;
};

TEST_F(PartitionStateTest, MeanScaleUnpaddedIsOneOverShards) {
  dist::PartitionState state{builder, {}, mesh,  nullptr, {},      {},
                             {},      {}, false, 8,       options, cache};
  EXPECT_EQ(state.meanScale(0, {0}), 1.0 / 8);
  EXPECT_EQ(state.groupSize({"dp", "tp"}), 8);
  EXPECT_EQ(state.groupSize({}), 1);
  EXPECT_TRUE(state.axesOf(dist::FactorRole::Sequence).empty());
}

TEST_F(PartitionStateTest, MeanScalePaddedIsLocalOverRealCount) {
  // A padded [8 x 6] tensor split 4 ways on its first dimension: the local
  // shard [2 x 6] holds 2 of the 7 real rows' worth of the mean's count.
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(
      "func.func @f(%x: tensor<2x6xf32>) { return }", &context);
  ASSERT_TRUE(module);
  auto func = cast<func::FuncOp>(module->getBody()->front());
  SmallVector<Value> operands{func.getArgument(0)};
  SmallVector<RankedTensorType> real{
      RankedTensorType::get({7, 6}, builder.getF32Type())};
  dist::PartitionState state{builder, {},   mesh, nullptr, {},      operands,
                             {},      real, true, 4,       options, cache};
  EXPECT_EQ(state.meanScale(0, {0}), 2.0 / 7);
  EXPECT_EQ(state.meanScale(0, {0, 1}), 12.0 / 42);
  EXPECT_EQ(state.meanScale(0, {}), 1.0);
}

TEST_F(PartitionStateTest, NNOpsWithLocalFormsCarryTheHook) {
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(
      R"mlir(
  func.func @f(%x: tensor<4x8xf32>, %ids: tensor<4xi32>,
               %t: tensor<8x8xf32>, %labels: tensor<4xi64>) {
    %s = nn.softmax %x dim = 1 : tensor<4x8xf32>
    %e = nn.embedding %t[%ids] : tensor<8x8xf32>, tensor<4xi32> -> tensor<4x8xf32>
    %l = nn.cross_entropy %x, %labels : tensor<4x8xf32>, tensor<4xi64> -> tensor<f32>
    %a = nn.add %x, %x : tensor<4x8xf32>
    return
  })mlir",
      &context);
  ASSERT_TRUE(module);
  auto func = cast<func::FuncOp>(module->getBody()->front());
  SmallVector<Operation *> ops;
  for (Operation &op : func.getBody().front().without_terminator())
    ops.push_back(&op);
  ASSERT_EQ(ops.size(), 4u);
  auto softmax = dyn_cast<dist::PartitionOpInterface>(ops[0]);
  auto embedding = dyn_cast<dist::PartitionOpInterface>(ops[1]);
  auto loss = dyn_cast<dist::PartitionOpInterface>(ops[2]);
  ASSERT_TRUE(softmax && embedding && loss);
  // A plain elementwise op needs no hook: the partitioner clones it.
  EXPECT_FALSE(isa<dist::PartitionOpInterface>(ops[3]));

  // Softmax splits its dimension as the result asks; the embedding its
  // vocabulary as the table is; cross entropy only when opted in.
  EXPECT_TRUE(softmax.canSplitCollectiveFactor(1, false, options));
  EXPECT_FALSE(softmax.canSplitCollectiveFactor(1, true, options));
  EXPECT_TRUE(embedding.canSplitCollectiveFactor(0, true, options));
  EXPECT_FALSE(embedding.canSplitCollectiveFactor(0, false, options));
  EXPECT_FALSE(loss.canSplitCollectiveFactor(1, true, options));
  dist::PartitionHookOptions vocab;
  vocab.vocabParallelCrossEntropy = true;
  EXPECT_TRUE(loss.canSplitCollectiveFactor(1, true, vocab));
  EXPECT_FALSE(softmax.runsWhole());
}

} // namespace
