//===- ShardingRuleTest.cpp - unit tests of ShardingRule ------------------===//

#include "dialects/dist/IR/ShardingRule.h"

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

} // namespace
