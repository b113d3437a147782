//===- StageAssignmentTest.cpp - the balanced stage cut against brute force ===//

#include "passes/pipeline/StageAssignment.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>

using namespace partita::pipeline;

namespace {

/// The smallest largest-run sum over every way to cut `costs` into
/// `stages` non-empty contiguous runs.
double bruteForce(const std::vector<double> &costs, int stages) {
  double best = 1e300;
  std::vector<int> stage(costs.size());
  std::function<void(size_t, int)> go = [&](size_t i, int s) {
    if (i == costs.size()) {
      if (s == stages - 1)
        best = std::min(best, slowestStage(costs, stage));
      return;
    }
    // Item i stays in run s, or (not for the first item) opens run s + 1.
    stage[i] = s;
    go(i + 1, s);
    if (i > 0 && s + 1 < stages) {
      stage[i] = s + 1;
      go(i + 1, s + 1);
    }
  };
  go(0, 0);
  return best;
}

TEST(StageAssignment, MatchesBruteForce) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> cost(0, 10);
  for (int n = 1; n <= 12; ++n)
    for (int stages = 1; stages <= std::min(n, 5); ++stages) {
      std::vector<double> costs(n);
      for (double &c : costs)
        c = cost(rng);
      llvm::SmallVector<int> stage = partitionByCost(costs, stages);
      ASSERT_EQ(stage.size(), size_t(n));
      // Contiguous, non-decreasing, every stage used.
      EXPECT_EQ(stage.front(), 0);
      EXPECT_EQ(stage.back(), stages - 1);
      for (int i = 1; i < n; ++i)
        EXPECT_TRUE(stage[i] == stage[i - 1] || stage[i] == stage[i - 1] + 1);
      EXPECT_DOUBLE_EQ(slowestStage(costs, stage), bruteForce(costs, stages))
          << "n=" << n << " stages=" << stages;
    }
}

TEST(StageAssignment, HeavyEndsGetTheirOwnStage) {
  // An embedding and a head much heavier than the layers between them.
  std::vector<double> costs{10, 1, 1, 1, 1, 10};
  llvm::SmallVector<int> stage = partitionByCost(costs, 3);
  EXPECT_EQ(slowestStage(costs, stage), 10);
  EXPECT_EQ(stage[0], 0);
  EXPECT_EQ(stage[5], 2);
}

} // namespace
