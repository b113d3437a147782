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

#include "runtime/lib/core/HalfFloat.h"
#include "runtime/lib/cuda/BlockEmulator.h"
#include "runtime/lib/cuda/Fibers.h"
#include "runtime/lib/cuda/Kernels.h"

#include "partita/runtime/Tensor.h"

#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>
#include <cstring>
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

// Tests shuffle(v, lane): every lane of each warp reads the given lane's
// value, and a lane beyond the warp is refused.
TEST(BlockEmulatorTest, ShuffleReadsTheGivenLane) {
  std::vector<int> got(64, -1);
  emulateLaunch({1, 64, 0}, [&](EmuContext &c) {
    int lane = c.threadIndex() % kWarpSize;
    got[c.threadIndex()] = c.shuffle(c.threadIndex() * 10, (lane * 7) % 32);
  });
  for (int t = 0; t < 64; ++t)
    EXPECT_EQ(got[t], ((t / 32) * 32 + (t % 32 * 7) % 32) * 10);
  EXPECT_THROW(emulateLaunch({1, 32, 0},
                             [](EmuContext &c) { (void)c.shuffle(1.0, 32); }),
               Error);
}

// Tests the emulated mma against a plain matrix product: each lane places
// its fragments by the PTX ISA's m16n8k8 .tf32 layout, written out here
// independently of MmaTf32Layout (a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3
// (g+8, t+4); b0 (t, g), b1 (t+4, g); c0 (g, 2t), c1 (g, 2t+1), c2 (g+8,
// 2t), c3 (g+8, 2t+1)). The values are small multiples of 1/8, exact in
// TF32, so D = A B + C must come out exactly. Two warps, different
// matrices, so a mix-up between warps shows.
TEST(BlockEmulatorTest, MmaTf32MatchesAMatrixProduct) {
  auto A = [](int w, int r, int k) { return float((r * 3 + k * 5 + w) % 11 - 5) / 8; };
  auto B = [](int w, int k, int n) { return float((k * 7 + n * 2 + 3 * w) % 9 - 4) / 4; };
  auto C = [](int w, int r, int n) { return float((r + n * 3 + w) % 5) - 2; };
  std::vector<float> d(2 * 16 * 8, NAN);
  emulateLaunch({1, 64, 0}, [&](EmuContext &c) {
    int w = c.threadIndex() / 32, lane = c.threadIndex() % 32;
    int g = lane / 4, t = lane % 4;
    uint32_t a[4] = {half::toTF32Bits(A(w, g, t)), half::toTF32Bits(A(w, g + 8, t)),
                     half::toTF32Bits(A(w, g, t + 4)), half::toTF32Bits(A(w, g + 8, t + 4))};
    uint32_t b[2] = {half::toTF32Bits(B(w, t, g)), half::toTF32Bits(B(w, t + 4, g))};
    float acc[4] = {C(w, g, 2 * t), C(w, g, 2 * t + 1), C(w, g + 8, 2 * t),
                    C(w, g + 8, 2 * t + 1)};
    c.mmaTf32(acc, a, b);
    d[w * 128 + g * 8 + 2 * t] = acc[0];
    d[w * 128 + g * 8 + 2 * t + 1] = acc[1];
    d[w * 128 + (g + 8) * 8 + 2 * t] = acc[2];
    d[w * 128 + (g + 8) * 8 + 2 * t + 1] = acc[3];
  });
  for (int w = 0; w < 2; ++w)
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 8; ++n) {
        double want = C(w, r, n);
        for (int k = 0; k < 8; ++k)
          want += double(A(w, r, k)) * B(w, k, n);
        EXPECT_EQ(d[w * 128 + r * 8 + n], float(want))
            << "warp " << w << ", D[" << r << "][" << n << "]";
      }
}

// Tests that mmaTf32x3 is the three mmas of a split product in order
// (small*big, big*small, big*big), bit for bit, and that it recovers a
// product of f32 values far better than one TF32 mma.
TEST(BlockEmulatorTest, MmaTf32x3IsThreeMmas) {
  auto A = [](int r, int k) { return 1.0f + 0.013579f * float(r * 8 + k); };
  auto B = [](int k, int n) { return 0.7f - 0.0024681f * float(k * 8 + n); };
  std::vector<float> once(128), three(128), split(128);
  emulateLaunch({1, 32, 0}, [&](EmuContext &c) {
    int lane = c.threadIndex();
    uint32_t aBig[4], aSmall[4], bBig[2], bSmall[2];
    for (int r = 0; r < 4; ++r) {
      float x = A(MmaTf32Layout::aRow(lane, r), MmaTf32Layout::aCol(lane, r));
      aBig[r] = half::toTF32Bits(x);
      aSmall[r] = half::toTF32Bits(x - half::floatOf(aBig[r]));
    }
    for (int r = 0; r < 2; ++r) {
      float x = B(MmaTf32Layout::bRow(lane, r), MmaTf32Layout::bCol(lane, r));
      bBig[r] = half::toTF32Bits(x);
      bSmall[r] = half::toTF32Bits(x - half::floatOf(bBig[r]));
    }
    float d1[4] = {}, d3[4] = {}, dx[4] = {};
    c.mmaTf32(d1, aBig, bBig);
    c.mmaTf32(d3, aSmall, bBig);
    c.mmaTf32(d3, aBig, bSmall);
    c.mmaTf32(d3, aBig, bBig);
    c.mmaTf32x3(dx, aBig, aSmall, bBig, bSmall);
    for (int r = 0; r < 4; ++r) {
      int at = MmaTf32Layout::cRow(lane, r) * 8 + MmaTf32Layout::cCol(lane, r);
      once[at] = d1[r];
      three[at] = d3[r];
      split[at] = dx[r];
    }
  });
  double errOnce = 0, errSplit = 0;
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      double want = 0;
      for (int k = 0; k < 8; ++k)
        want += double(A(r, k)) * B(k, n);
      int at = r * 8 + n;
      EXPECT_EQ(split[at], three[at]) << "D[" << r << "][" << n << "]";
      errOnce = std::max(errOnce, std::fabs(once[at] - want) / std::fabs(want));
      errSplit = std::max(errSplit, std::fabs(split[at] - want) / std::fabs(want));
    }
  EXPECT_GT(errOnce, 1e-4);  // TF32's 10 mantissa bits
  EXPECT_LT(errSplit, 1e-6); // about f32's
}

// Tests TF32 rounding (cvt.rna: to nearest, ties away from zero): the low
// 13 bits are dropped, a half rounds away, a carry reaches the exponent,
// and infinities and NaN stay.
TEST(BlockEmulatorTest, Tf32Rounding) {
  auto bitsOf = [](float x) { uint32_t u; std::memcpy(&u, &x, 4); return u; };
  EXPECT_EQ(half::toTF32Bits(1.0f), bitsOf(1.0f));
  EXPECT_EQ(half::toTF32Bits(half::floatOf(0x3f800fffu)), 0x3f800000u); // below half
  EXPECT_EQ(half::toTF32Bits(half::floatOf(0x3f801000u)), 0x3f802000u); // half: away
  EXPECT_EQ(half::toTF32Bits(half::floatOf(0xbf801000u)), 0xbf802000u); // negative too
  EXPECT_EQ(half::toTF32Bits(half::floatOf(0x3fffffffu)), 0x40000000u); // carry to 2
  EXPECT_EQ(half::toTF32Bits(INFINITY), bitsOf(INFINITY));
  EXPECT_TRUE(std::isnan(half::floatOf(half::toTF32Bits(NAN))));
  // x = big + small in two TF32 parts recovers x to about 2^-22.
  float x = 1.2345678f;
  float big = half::floatOf(half::toTF32Bits(x));
  float small = half::floatOf(half::toTF32Bits(x - big));
  EXPECT_NE(big, x);
  EXPECT_LE(std::fabs(double(big) + small - x), std::ldexp(1.0, -21));
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

/// The bank counts of one launch of 2 warps whose lanes run `body(c, s,
/// lane)` over 16 KiB of shared floats.
template <typename Body> SharedBankTraffic bankCounts(Body body) {
  SharedBankTraffic stats;
  EmulatorOptions options;
  options.bankStats = &stats;
  emulateLaunch(
      {1, 64, 4096 * sizeof(float)},
      [&](EmuContext &c) {
        body(c, c.template shared<float>(), c.threadIndex() % kWarpSize);
      },
      options);
  return stats;
}

void expectCounts(const SharedBankCounts &c, uint64_t requests,
                  uint64_t wavefronts, uint64_t ideal, const char *what) {
  EXPECT_EQ(c.requests, requests) << what;
  EXPECT_EQ(c.wavefronts, wavefronts) << what;
  EXPECT_EQ(c.ideal, ideal) << what;
}

// Tests the bank counts against patterns whose cost is known: consecutive
// words and a stride of 33 take one wavefront a warp, a stride of 2 two,
// of 32 thirty-two, lanes reading one word share it; 16-byte accesses are
// served a quarter warp at a time (4 wavefronts at best, 32 when each
// quarter's lanes are 32 floats apart); loads and stores are counted
// apart.
TEST(BlockEmulatorTest, SharedBankCountsFollowTheBanks) {
  struct Case {
    const char *what;
    int stride; // floats between lanes; 0: all read word 5
    uint64_t wavefronts;
  };
  for (Case k : {Case{"consecutive", 1, 1}, Case{"stride 33", 33, 1},
                 Case{"stride 2", 2, 2}, Case{"stride 32", 32, 32},
                 Case{"one word", 0, 1}}) {
    SharedBankTraffic t = bankCounts([&](EmuContext &, auto s, int lane) {
      (void)s.load(k.stride ? lane * k.stride : 5);
    });
    expectCounts(t.loads, 2, 2 * k.wavefronts, 2, k.what);
    expectCounts(t.stores, 0, 0, 0, k.what);
  }
  SharedBankTraffic quads = bankCounts([](EmuContext &, auto s, int lane) {
    float v[4] = {1, 2, 3, 4};
    s.store16(4 * lane, v);
    s.load16(32 * lane, v);
  });
  expectCounts(quads.stores, 2, 2 * 4, 2 * 4, "16-byte stores, consecutive");
  expectCounts(quads.loads, 2, 2 * 32, 2 * 4, "16-byte loads, 32 floats apart");
}

// Tests how accesses are paired into requests: the n-th access from one
// line of each lane (lanes that loop fewer times leave later requests
// partial), a new request after a shuffle even from the same line, and
// that a 16-byte access off a 16-byte boundary fails the launch as it
// faults on a GPU.
TEST(BlockEmulatorTest, SharedRequestsAreALinesNthAccessBetweenExchanges) {
  SharedBankTraffic loop = bankCounts([](EmuContext &, auto s, int lane) {
    for (int i = 0; i < (lane < 16 ? 3 : 1); ++i)
      (void)s.load(32 * i + lane);
  });
  // Per warp: all 32 lanes, then lanes 0-15 twice (one wavefront each).
  expectCounts(loop.loads, 2 * 3, 2 * 3, 2 * 3, "a loop of 3 or 1");
  // One line (ld's load), before a shuffle by lanes 0-15 (words 0-15),
  // after it by all (words 32-47, two lanes a word): two requests of one
  // wavefront each. Numbered across the shuffle, lanes 0-15's second
  // access would be a request apart from lanes 16-31's first: 3.
  SharedBankTraffic exchanged = bankCounts([](EmuContext &c, auto s, int lane) {
    auto ld = [&](int i) { return s.load(i); };
    float x = lane < 16 ? ld(lane) : 0.f;
    x = c.shuffleXor(x, 1);
    x += ld(32 + lane % 16);
    (void)x;
  });
  expectCounts(exchanged.loads, 2 * 2, 2 * 2, 2 * 2, "a shuffle between");
  try {
    bankCounts([](EmuContext &, auto s, int) {
      float v[4];
      s.load16(2, v);
    });
    ADD_FAILURE() << "a misaligned 16-byte load was not reported";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find(
                  "read of 16 bytes at offset 8, not a multiple of 16"),
              std::string::npos)
        << e.what();
  }
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

/// The fiber tests run with each switch: the assembly one (x86-64, not
/// under AddressSanitizer) and glibc's swapcontext, which other machines
/// and ASan builds use.
class FibersTest : public ::testing::TestWithParam<FiberSwitch> {
protected:
  void SetUp() override {
    setFiberSwitch(GetParam());
    if (fiberSwitch() != GetParam())
      GTEST_SKIP() << "this build has no assembly switch (not x86-64, or "
                      "AddressSanitizer, under which fibers use swapcontext)";
  }
  void TearDown() override { setFiberSwitch(FiberSwitch::Assembly); }
};
INSTANTIATE_TEST_SUITE_P(Switches, FibersTest,
                         ::testing::Values(FiberSwitch::Assembly,
                                           FiberSwitch::Ucontext),
                         [](const auto &info) {
                           return info.param == FiberSwitch::Assembly
                                      ? std::string("Assembly")
                                      : std::string("Ucontext");
                         });

// Tests the fibers' round-robin: each round runs every unfinished fiber up
// to its next yield, in index order.
TEST_P(FibersTest, RoundsRunEveryFiberToItsNextYield) {
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
TEST_P(FibersTest, StallsAreReportedNotSpun) {
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
TEST_P(FibersTest, ExceptionsAndMisuseAreReported) {
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

// Tests that each fiber keeps its own floating-point control state (the
// SSE rounding mode) and callee-saved registers across switches: fiber 0
// rounds upward while fiber 1, between its yields, still rounds to nearest;
// loop counters and sums held across yieldFiber() stay right.
TEST_P(FibersTest, EachFiberKeepsItsRegistersAndRoundingMode) {
  int modes[2][3] = {};
  volatile double third = 1.0 / 3.0;
  double sums[2] = {};
  uint64_t steps = 0;
  runFibers(
      2,
      [&](int i) {
        if (i == 0)
          std::fesetround(FE_UPWARD);
        double sum = 0;
        for (int k = 0; k < 3; ++k) {
          modes[i][k] = std::fegetround();
          sum += third * (k + 1);
          ++steps;
          yieldFiber();
        }
        sums[i] = sum;
        if (i == 0)
          std::fesetround(FE_TONEAREST);
      },
      [&] { return steps; }, [] {});
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(modes[0][k], FE_UPWARD) << "round " << k;
    EXPECT_EQ(modes[1][k], FE_TONEAREST) << "round " << k;
  }
  EXPECT_EQ(std::fegetround(), FE_TONEAREST);
  EXPECT_NEAR(sums[1], 2.0, 1e-15);
  EXPECT_GE(sums[0], sums[1]); // rounded upward
}

// Tests the emulator itself on each switch: shuffles, barriers and mmas of
// a launch give the same results.
TEST_P(FibersTest, EmulatorRunsOnEachSwitch) {
  std::vector<double> x = iota(3 * 100), out(3, 0);
  emulateLaunch({3, 64, kReduceSharedBytes},
                [&](EmuContext &c) { rowSums(c, x.data(), out.data(), 3, 100); });
  for (int r = 0; r < 3; ++r)
    EXPECT_NEAR(out[r], std::accumulate(x.begin() + r * 100,
                                        x.begin() + (r + 1) * 100, 0.0),
                1e-12);
}

} // namespace
} // namespace partita::runtime::gpu
