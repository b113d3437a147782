//===- StageAssignment.cpp - cutting a sequence into pipeline stages ------===//
//
// best[k][i]: the smallest possible largest-run sum of the first i items cut
// into k runs; best[k][i] = min over j < i of max(best[k-1][j], sum(j..i)).
// Exact; O(stages * n^2) time, which is small for the op counts of a step
// (thousands of ops, a handful of stages).
//
//===----------------------------------------------------------------------===//

#include "passes/pipeline/StageAssignment.h"

#include <algorithm>
#include <cassert>
#include <limits>
#include <vector>

namespace partita::pipeline {

llvm::SmallVector<int> partitionByCost(llvm::ArrayRef<double> costs,
                                       int stages) {
  size_t n = costs.size();
  assert(stages >= 1 && size_t(stages) <= n && "stages must be in [1, n]");
  std::vector<double> prefix(n + 1, 0);
  for (size_t i = 0; i < n; ++i)
    prefix[i + 1] = prefix[i] + costs[i];
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1,
                                        std::vector<double>(n + 1, inf));
  std::vector<std::vector<size_t>> cut(stages + 1,
                                       std::vector<size_t>(n + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k)
    for (size_t i = k; i <= n; ++i)
      for (size_t j = k - 1; j < i; ++j) {
        double v = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (v < best[k][i]) {
          best[k][i] = v;
          cut[k][i] = j;
        }
      }
  llvm::SmallVector<int> stage(n, 0);
  size_t end = n;
  for (int k = stages; k >= 1; --k) {
    size_t begin = cut[k][end];
    for (size_t i = begin; i < end; ++i)
      stage[i] = k - 1;
    end = begin;
  }
  return stage;
}

double slowestStage(llvm::ArrayRef<double> costs, llvm::ArrayRef<int> stage) {
  std::vector<double> sum;
  for (size_t i = 0; i < costs.size(); ++i) {
    if (size_t(stage[i]) >= sum.size())
      sum.resize(stage[i] + 1, 0);
    sum[stage[i]] += costs[i];
  }
  return sum.empty() ? 0 : *std::max_element(sum.begin(), sum.end());
}

} // namespace partita::pipeline
