//===- BlockEmulatorTest.cpp - the CPU block emulator's barriers and checks ===//
//
// Kernels written against the execution context, run on the emulator: the
// barrier and the warp shuffle behave as on a GPU, and the mistakes a GPU
// leaves undefined are caught: a missing barrier (a shared-memory race), a
// barrier some threads skip, a read of shared memory nobody wrote, and an
// off-by-one index (the results differ from a reference at a size that
// does not divide by the block). Depends only on BlockEmulator.cpp, so it
// also builds alone under ThreadSanitizer (docs/gpu.md).
//
//===----------------------------------------------------------------------===//

#include "runtime/lib/cuda/BlockEmulator.h"
#include "runtime/lib/cuda/Kernels.h"

#include "partita/runtime/Tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

namespace partita::runtime::gpu {
namespace {

const int kBlockSizes[] = {32, 64, 96, 128, 256};

/// Row sums by the library's blockReduce: one block per row.
template <typename Ctx>
void rowSums(const Ctx &c, const double *x, double *out, int64_t rows,
             int64_t cols) {
  for (int64_t r = c.blockIndex(); r < rows; r += c.gridSize()) {
    double s = 0;
    for (int64_t j = c.threadIndex(); j < cols; j += c.blockSize())
      s += x[r * cols + j];
    s = blockReduce(c, s, SumOp());
    if (c.threadIndex() == 0)
      out[r] = s;
  }
}

/// The planted off-by-one: each thread starts one element late, so element
/// 0 of every row is skipped.
template <typename Ctx>
void rowSumsOffByOne(const Ctx &c, const double *x, double *out, int64_t rows,
                     int64_t cols) {
  for (int64_t r = c.blockIndex(); r < rows; r += c.gridSize()) {
    double s = 0;
    for (int64_t j = c.threadIndex() + 1; j < cols; j += c.blockSize())
      s += x[r * cols + j];
    s = blockReduce(c, s, SumOp());
    if (c.threadIndex() == 0)
      out[r] = s;
  }
}

/// A reduction through shared memory with a tree of barriers; `skipBarrier`
/// plants the classic bug: no barrier after the threads store their values.
template <typename Ctx>
void treeSum(const Ctx &c, const double *x, double *out, bool skipBarrier) {
  auto s = c.template shared<double>();
  int t = c.threadIndex();
  s.store(t, x[c.blockIndex() * c.blockSize() + t]);
  if (!skipBarrier)
    c.barrier();
  for (int half = c.blockSize() / 2; half > 0; half /= 2) {
    if (t < half && t + half < c.blockSize())
      s.store(t, s.load(t) + s.load(t + half));
    c.barrier();
  }
  if (t == 0)
    out[c.blockIndex()] = s.load(0);
}

std::vector<double> iota(int64_t n) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = 0.25 * double(i % 17) - 1.0 + 1e-3 * double(i);
  return v;
}

// Tests that blockReduce sums every row exactly as a sequential loop does
// (to rounding), for block sizes 32..256 and rows not divisible by them.
TEST(BlockEmulatorTest, BlockReduceMatchesSequentialSums) {
  for (int block : kBlockSizes) {
    for (int64_t cols : {1, 31, 33, 100, 257, 1000}) {
      int64_t rows = 5;
      std::vector<double> x = iota(rows * cols), out(rows, -1);
      emulateLaunch({3, block, kReduceSharedBytes}, [&](EmuContext &c) {
        rowSums(c, x.data(), out.data(), rows, cols);
      });
      for (int64_t r = 0; r < rows; ++r) {
        double want = std::accumulate(x.begin() + r * cols,
                                      x.begin() + (r + 1) * cols, 0.0);
        EXPECT_NEAR(out[r], want, 1e-12 * (1 + std::fabs(want)))
            << "block " << block << " cols " << cols << " row " << r;
      }
    }
  }
}

// Tests that the planted off-by-one index is caught: its sums differ from
// the reference (while the correct kernel's agree, above).
TEST(BlockEmulatorTest, OffByOneIndexGivesDifferentSums) {
  for (int block : kBlockSizes) {
    int64_t rows = 3, cols = 77;
    std::vector<double> x = iota(rows * cols), out(rows, 0);
    emulateLaunch({2, block, kReduceSharedBytes}, [&](EmuContext &c) {
      rowSumsOffByOne(c, x.data(), out.data(), rows, cols);
    });
    bool differs = false;
    for (int64_t r = 0; r < rows; ++r) {
      double want = std::accumulate(x.begin() + r * cols,
                                    x.begin() + (r + 1) * cols, 0.0);
      differs |= std::fabs(out[r] - want) > 1e-9 * (1 + std::fabs(want));
    }
    EXPECT_TRUE(differs) << "block " << block;
  }
}

// Tests that the shared-memory tree reduction is right with its barriers,
// and that the race checker reports the planted missing barrier.
TEST(BlockEmulatorTest, MissingBarrierIsASharedMemoryRace) {
  // The tree halves the block: power-of-two sizes only.
  for (int block : {32, 64, 128, 256}) {
    int grid = 3;
    std::vector<double> x = iota(grid * block), out(grid, 0);
    EmulatorOptions checked;
    checked.checkRaces = true;
    LaunchDims dims{grid, block, block * sizeof(double)};
    emulateLaunch(
        dims, [&](EmuContext &c) { treeSum(c, x.data(), out.data(), false); },
        checked);
    for (int b = 0; b < grid; ++b) {
      double want = std::accumulate(x.begin() + b * block,
                                    x.begin() + (b + 1) * block, 0.0);
      EXPECT_NEAR(out[b], want, 1e-9) << "block size " << block;
    }
    try {
      emulateLaunch(
          dims, [&](EmuContext &c) { treeSum(c, x.data(), out.data(), true); },
          checked);
      ADD_FAILURE() << "the missing barrier was not reported (block size "
                    << block << ")";
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find("shared-memory race in block 0"),
                std::string::npos)
          << e.what();
    }
  }
}

// Tests that a barrier some threads skip (they returned early) is reported
// instead of hanging.
TEST(BlockEmulatorTest, DivergentBarrierIsReported) {
  try {
    emulateLaunch({2, 64, 0}, [&](EmuContext &c) {
      if (c.threadIndex() >= 40)
        return;
      c.barrier();
    });
    ADD_FAILURE() << "the divergent barrier was not reported";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("divergent barrier in block 0"),
              std::string::npos)
        << e.what();
  }
}

// Tests that a shuffle with lanes that returned is reported.
TEST(BlockEmulatorTest, DivergentShuffleIsReported) {
  try {
    emulateLaunch({1, 32, 0}, [&](EmuContext &c) {
      if (c.threadIndex() == 5)
        return;
      (void)c.shuffleXor(1.0, 1);
    });
    ADD_FAILURE() << "the divergent shuffle was not reported";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("divergent warp shuffle"),
              std::string::npos)
        << e.what();
  }
}

// Tests that shuffleXor exchanges values between the lanes of each warp
// (and only within a warp).
TEST(BlockEmulatorTest, ShuffleXorExchangesWithinAWarp) {
  std::vector<int> got(128, -1);
  emulateLaunch({1, 128, 0}, [&](EmuContext &c) {
    got[c.threadIndex()] = c.shuffleXor(c.threadIndex(), 5);
  });
  for (int t = 0; t < 128; ++t)
    EXPECT_EQ(got[t], t ^ 5);
}

// Tests that shared memory starts as NaN in every block, so a kernel that
// reads slots nobody wrote gets NaN rather than a plausible stale value.
TEST(BlockEmulatorTest, UnwrittenSharedMemoryReadsAsNaN) {
  std::vector<double> out(4, 0);
  emulateLaunch({4, 32, 64 * sizeof(double)}, [&](EmuContext &c) {
    auto s = c.template shared<double>();
    if (c.threadIndex() == 0)
      s.store(0, 1.0);
    c.barrier();
    if (c.threadIndex() == 0)
      out[c.blockIndex()] = s.load(0) + s.load(33);
  });
  for (double v : out)
    EXPECT_TRUE(std::isnan(v));
}

// Tests that an exception in a simulated thread fails the launch naming the
// block and thread, and that a bad block size is refused.
TEST(BlockEmulatorTest, FailuresNameTheirThread) {
  try {
    emulateLaunch({3, 32, 0}, [&](EmuContext &c) {
      if (c.blockIndex() == 2 && c.threadIndex() == 7)
        throw Error("boom");
      c.barrier();
    });
    ADD_FAILURE() << "no error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("block 2, thread 7: boom"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(emulateLaunch({1, 48, 0}, [](EmuContext &) {}), Error);
}

} // namespace
} // namespace partita::runtime::gpu
