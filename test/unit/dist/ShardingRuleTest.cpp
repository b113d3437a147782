//===- ShardingRuleTest.cpp - unit tests of ShardingRule ------------------===//

#include "dialects/dist/IR/ShardingRule.h"

#include "dialects/dist/IR/DistDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Operation.h"

#include <gtest/gtest.h>

using namespace partita::dist;

namespace {

TEST(ShardingRuleTest, FromSpecMarksContractedLettersAsReduction) {
  llvm::SmallVector<int64_t> x = {2, 8, 16}, w = {16, 64}, y = {2, 8, 64};
  auto rule = ShardingRule::fromSpec("bsh,hf->bsf", {x, w}, {y});
  ASSERT_TRUE(mlir::succeeded(rule));
  EXPECT_EQ(rule->toString(),
            "([b,s,h],[h,f])->([b,s,f]) {b=2,s=8,h=16,f=64} reduction={h}");
}

TEST(ShardingRuleTest, FromSpecRejectsInconsistentSizes) {
  llvm::SmallVector<int64_t> x = {2, 8, 16}, w = {32, 64}, y = {2, 8, 64};
  EXPECT_TRUE(mlir::failed(ShardingRule::fromSpec("bsh,hf->bsf", {x, w}, {y})));
}

TEST(ShardingRuleTest, FromSpecRejectsWrongRank) {
  llvm::SmallVector<int64_t> x = {2, 8}, y = {2, 8};
  EXPECT_TRUE(mlir::failed(ShardingRule::fromSpec("bsh->bsh", {x}, {y})));
}

TEST(ShardingRuleTest, MultiFactorDimensionsPrintAsProducts) {
  ShardingRule rule;
  int64_t i = rule.addFactor(4, FactorKind::Parallel, "i");
  int64_t j = rule.addFactor(6, FactorKind::Parallel, "j");
  rule.addOperand({{i}, {j}});
  rule.addResult({{i, j}});
  EXPECT_EQ(rule.toString(), "([i,j])->([i*j]) {i=4,j=6}");
}

// Tests that roles are found by findFactor (the first factor with the role)
// and printed after the kinds, while a rule without roles prints as before.
TEST(ShardingRuleTest, RolesAreFoundAndPrinted) {
  ShardingRule rule;
  int64_t s =
      rule.addFactor(8, FactorKind::Parallel, "s", FactorRole::Sequence);
  int64_t t =
      rule.addFactor(8, FactorKind::Collective, "t", FactorRole::KeySequence);
  int64_t d = rule.addFactor(4, FactorKind::Reduction, "d");
  rule.setKind("d", FactorKind::Reduction, ReductionKind::Max);
  rule.addOperand({{s}, {d}});
  rule.addOperand({{t}, {d}});
  rule.addResult({{s}, {t}});
  EXPECT_EQ(rule.findFactor(FactorRole::Sequence), std::optional<int64_t>(s));
  EXPECT_EQ(rule.findFactor(FactorRole::KeySequence),
            std::optional<int64_t>(t));
  EXPECT_EQ(rule.findFactor(FactorRole::Vocabulary), std::nullopt);
  EXPECT_EQ(rule.findFactor(FactorRole::None), std::nullopt);
  EXPECT_EQ(rule.getFactor(d).role, FactorRole::None);
  EXPECT_EQ(rule.toString(),
            "([s,d],[t,d])->([s,t]) {s=8,t=8,d=4} reduction={d:max} "
            "collective={t} roles={s:sequence,t:key_sequence}");
}

TEST(ShardingRuleTest, FromSpecRejectsLetterTwiceInOneTerm) {
  llvm::SmallVector<int64_t> x = {4, 4}, y = {4};
  EXPECT_TRUE(mlir::failed(ShardingRule::fromSpec("ii->i", {x}, {y})));
}

/// An unregistered op with operands and results of the given shapes (f32),
/// and the diagnostics that ShardingRule::verify emits on it.
class ShardingRuleVerifyTest : public ::testing::Test {
protected:
  ShardingRuleVerifyTest()
      : handler(&context, [this](mlir::Diagnostic &diag) {
          messages.push_back(diag.str());
        }) {
    context.allowUnregisteredDialects();
  }
  ~ShardingRuleVerifyTest() override {
    if (op)
      op->destroy();
  }

  mlir::Operation *makeOp(llvm::ArrayRef<llvm::SmallVector<int64_t>> ins,
                          llvm::ArrayRef<llvm::SmallVector<int64_t>> outs) {
    mlir::OpBuilder builder(&context);
    mlir::Location loc = builder.getUnknownLoc();
    llvm::SmallVector<mlir::Value> operands;
    for (const auto &shape : ins)
      operands.push_back(block.addArgument(
          mlir::RankedTensorType::get(shape, builder.getF32Type()), loc));
    mlir::OperationState state(loc, "test.op");
    state.addOperands(operands);
    for (const auto &shape : outs)
      state.addTypes(mlir::RankedTensorType::get(shape, builder.getF32Type()));
    op = mlir::Operation::create(state);
    return op;
  }

  mlir::MLIRContext context;
  std::vector<std::string> messages;
  mlir::ScopedDiagnosticHandler handler;
  mlir::Block block;
  mlir::Operation *op = nullptr;
};

TEST_F(ShardingRuleVerifyTest, AcceptsAFittingRule) {
  llvm::SmallVector<int64_t> x = {2, 8}, w = {8, 4}, y = {2, 4};
  auto rule = ShardingRule::fromSpec("ik,kj->ij", {x, w}, {y});
  ASSERT_TRUE(mlir::succeeded(rule));
  EXPECT_TRUE(mlir::succeeded(rule->verify(makeOp({x, w}, {y}))));
  EXPECT_TRUE(messages.empty());
}

TEST_F(ShardingRuleVerifyTest, RejectsWrongOperandCount) {
  ShardingRule rule;
  rule.addResult({});
  EXPECT_TRUE(mlir::failed(rule.verify(makeOp({{4}}, {{}}))));
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0], "sharding rule has 0 operands, op has 1");
}

TEST_F(ShardingRuleVerifyTest, RejectsWrongRank) {
  ShardingRule rule;
  int64_t i = rule.addFactor(4, FactorKind::Parallel, "i");
  rule.addOperand({{i}});
  EXPECT_TRUE(mlir::failed(rule.verify(makeOp({{4, 2}}, {}))));
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0],
            "sharding rule gives 1 dimensions to operand #0 of rank 2");
}

TEST_F(ShardingRuleVerifyTest, RejectsUnknownFactor) {
  ShardingRule rule;
  rule.addOperand({{3}});
  EXPECT_TRUE(mlir::failed(rule.verify(makeOp({{4}}, {}))));
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0], "sharding rule names factor 3 of 0");
}

TEST_F(ShardingRuleVerifyTest, RejectsSizeMismatch) {
  ShardingRule rule;
  int64_t i = rule.addFactor(2, FactorKind::Parallel, "i");
  int64_t j = rule.addFactor(3, FactorKind::Parallel, "j");
  rule.addOperand({{i, j}});
  EXPECT_TRUE(mlir::failed(rule.verify(makeOp({{8}}, {}))));
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0],
            "sharding rule factors of operand #0 dimension 0 multiply to 6, "
            "not 8");
}

TEST_F(ShardingRuleVerifyTest, RejectsNegativeFactorSize) {
  ShardingRule rule;
  rule.addFactor(-2, FactorKind::Parallel, "i");
  EXPECT_TRUE(mlir::failed(rule.verify(makeOp({}, {}))));
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0], "sharding rule factor 'i' has negative size -2");
}

TEST_F(ShardingRuleVerifyTest, RejectsFactorTwiceInOneTensor) {
  ShardingRule rule;
  int64_t i = rule.addFactor(4, FactorKind::Parallel, "i");
  rule.addOperand({{i}, {i}});
  EXPECT_TRUE(mlir::failed(rule.verify(makeOp({{4, 4}}, {}))));
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0], "sharding rule uses factor 'i' twice in operand #0");
}

TEST_F(ShardingRuleVerifyTest, RejectsReductionFactorInResult) {
  ShardingRule rule;
  int64_t k = rule.addFactor(4, FactorKind::Reduction, "k");
  rule.addOperand({{k}});
  rule.addResult({{k}});
  EXPECT_TRUE(mlir::failed(rule.verify(makeOp({{4}}, {{4}}))));
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0], "sharding rule puts reduction factor 'k' in result "
                         "#0 (reduction factors are carried by operands only)");
}

} // namespace
