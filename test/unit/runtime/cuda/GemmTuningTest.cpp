//===- GemmTuningTest.cpp - which cuBLASLt algorithm --gemm-autotune keeps ===//
//
// The choice and the log line of the GEMM tuning (GemmTuning.h), apart from
// the device: the real layer times the candidates on a GPU and hands the
// times here.
//
//===----------------------------------------------------------------------===//

#include "runtime/lib/cuda/GemmTuning.h"

#include <gtest/gtest.h>

namespace partita::runtime::gpu {
namespace {

// Tests that the fastest candidate is kept when it beats the heuristic's
// first by more than the margin, and the first otherwise.
TEST(GemmTuning, KeepsTheFastestBeyondTheMargin) {
  EXPECT_EQ(chooseGemmAlgorithm({1.0, 0.9, 0.95}), 1);
  EXPECT_EQ(chooseGemmAlgorithm({1.0, 0.5, 0.2, 0.3}), 2);
  EXPECT_EQ(chooseGemmAlgorithm({1.0, 0.99}), 0);   // 1% faster: noise
  EXPECT_EQ(chooseGemmAlgorithm({1.0, 0.99}, 0), 1); // no margin
  EXPECT_EQ(chooseGemmAlgorithm({0.5, 0.7, 0.6}), 0);
  EXPECT_EQ(chooseGemmAlgorithm({0.4}), 0);
}

// Tests candidates that could not run (negative times): the first failing
// leaves the fastest of the others, with no margin; none running keeps
// nothing.
TEST(GemmTuning, SkipsCandidatesThatDidNotRun) {
  EXPECT_EQ(chooseGemmAlgorithm({-1, 0.8, 0.7}), 2);
  EXPECT_EQ(chooseGemmAlgorithm({-1, 0.8, -1}), 1);
  EXPECT_EQ(chooseGemmAlgorithm({1.0, -1, 0.5}), 2);
  EXPECT_EQ(chooseGemmAlgorithm({-1, -1}), -1);
  EXPECT_EQ(chooseGemmAlgorithm({}), -1);
}

// Tests the log line of each outcome.
TEST(GemmTuning, SaysWhatItKept) {
  EXPECT_EQ(describeGemmTuning("f32 GEMM m 8 n 8 k 8", {1.0, -1, 0.2}, 2),
            "f32 GEMM m 8 n 8 k 8: 2 of 3 algorithms ran; heuristic's first "
            "1.000 ms, kept #2 0.200 ms (5.00x)");
  EXPECT_EQ(describeGemmTuning("s", {0.5, 0.7}, 0),
            "s: 2 of 2 algorithms ran; heuristic's first 0.500 ms, kept");
  EXPECT_EQ(describeGemmTuning("s", {-1, 0.25}, 1),
            "s: 1 of 2 algorithms ran; heuristic's first failed, kept #1 "
            "0.250 ms");
  EXPECT_EQ(describeGemmTuning("s", {-1, -1}, -1),
            "s: 0 of 2 algorithms ran; none kept");
}

} // namespace
} // namespace partita::runtime::gpu
