//===- BlockEmulatorTest.cpp - the CPU block emulator's barriers and checks
//===//
//
// Kernels written against the execution context, run on the emulator: the
// barrier and the warp shuffle behave as on a GPU, and the mistakes a GPU
// leaves undefined are caught: a missing barrier (a shared-memory race), a
// barrier some threads skip, a read of shared memory nobody wrote, and an
// off-by-one index (the results differ from a reference at a size that
// does not divide by the block). The fibers under the simulated threads
// are tested on their own. Depends only on BlockEmulator.cpp and
// Fibers.cpp, so it also builds alone under ThreadSanitizer (docs/gpu.md).
//
//===----------------------------------------------------------------------===//

#include "runtime/lib/cuda/BlockEmulator.h"
#include "runtime/lib/cuda/Fibers.h"
#include "runtime/lib/cuda/Kernels.h"

#include "partita/runtime/Tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
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

// Tests that launches from several host threads at once (one per emulated
// stream) each run their own fibers: every launch's barriers and shuffles
// give its own right sums.
TEST(BlockEmulatorTest, ConcurrentLaunchesFromSeveralHostThreads) {
  const int threads = 4, rows = 5, cols = 300;
  std::vector<std::vector<double>> x(threads), out(threads);
  for (int t = 0; t < threads; ++t) {
    x[t] = iota(rows * cols);
    for (double &v : x[t])
      v += t;
    out[t].assign(rows, 0);
  }
  std::vector<std::string> errors(threads);
  std::vector<std::thread> hosts;
  for (int t = 0; t < threads; ++t)
    hosts.emplace_back([&, t] {
      try {
        for (int repeat = 0; repeat < 3; ++repeat)
          emulateLaunch({2, 64 + 32 * t, kReduceSharedBytes},
                        [&](EmuContext &c) {
                          rowSums(c, x[t].data(), out[t].data(), rows, cols);
                        });
      } catch (const Error &e) {
        errors[t] = e.what();
      }
    });
  for (std::thread &h : hosts)
    h.join();
  for (int t = 0; t < threads; ++t)
    EXPECT_EQ(errors[t], "") << "host thread " << t;
  for (int t = 0; t < threads; ++t)
    for (int r = 0; r < rows; ++r) {
      double want = std::accumulate(x[t].begin() + r * cols,
                                    x[t].begin() + (r + 1) * cols, 0.0);
      EXPECT_NEAR(out[t][r], want, 1e-12 * (1 + std::fabs(want)))
          << "host thread " << t << ", row " << r;
    }
}

// Tests the fibers' round-robin: each round runs every unfinished fiber up
// to its next yield, in index order.
TEST(FibersTest, RoundsRunEveryFiberToItsNextYield) {
  std::vector<int> order;
  runFibers(
      3,
      [&](int i) {
        for (int round = 0; round < 2; ++round) {
          order.push_back(10 * round + i);
          yieldFiber();
        }
      },
      [&] { return uint64_t(order.size()); }, [] {});
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 10, 11, 12}));
}

// Tests that fibers which only yield, moving nothing, are a stall: onStall
// runs once and can release them; if it does not, runFibers fails instead
// of spinning forever.
TEST(FibersTest, StallsAreReportedNotSpun) {
  bool released = false;
  int stalls = 0;
  runFibers(
      4,
      [&](int) {
        while (!released)
          yieldFiber();
      },
      [] { return uint64_t(0); },
      [&] {
        ++stalls;
        released = true;
      });
  EXPECT_EQ(stalls, 1);
  try {
    runFibers(
        2,
        [&](int) {
          while (true)
            yieldFiber();
        },
        [] { return uint64_t(0); }, [] {});
    ADD_FAILURE() << "a stall that onStall does not end was not reported";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("2 simulated threads neither return "
                                         "nor get past their barriers"),
              std::string::npos)
        << e.what();
  }
}

// Tests that an exception escaping a fiber comes out of runFibers after the
// other fibers finished, and that yielding outside a fiber and running
// fibers from inside one are refused.
TEST(FibersTest, ExceptionsAndMisuseAreReported) {
  int finished = 0;
  try {
    runFibers(
        3,
        [&](int i) {
          yieldFiber();
          if (i == 1)
            throw std::runtime_error("fiber 1 failed");
          ++finished;
        },
        [] { return uint64_t(0); }, [] {});
    ADD_FAILURE() << "the exception did not come out";
  } catch (const std::runtime_error &e) {
    EXPECT_STREQ(e.what(), "fiber 1 failed");
  }
  EXPECT_EQ(finished, 2);
  EXPECT_THROW(yieldFiber(), Error);
  std::string nested;
  runFibers(
      1,
      [&](int) {
        try {
          runFibers(
              1, [](int) {}, [] { return uint64_t(0); }, [] {});
        } catch (const Error &e) {
          nested = e.what();
        }
      },
      [] { return uint64_t(0); }, [] {});
  EXPECT_NE(nested.find("a launch from inside a simulated thread"),
            std::string::npos)
      << nested;
}

} // namespace
} // namespace partita::runtime::gpu
