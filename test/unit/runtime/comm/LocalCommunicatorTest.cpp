//===- LocalCommunicatorTest.cpp - ranks as threads: results and failures -===//
//
// Every expected value is computed here from the inputs each rank is known to
// hold (a formula of rank and index), never read back from a communicator.
// Checks run on the main thread after runLocalRanks has joined the ranks.
//
//===----------------------------------------------------------------------===//

#include "FailingRanks.h"
#include "partita/runtime/Communicator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>

using namespace partita::runtime;
using namespace std::chrono_literals;
using partita::runtime::test::Outcome;
using partita::runtime::test::runFailing;
using Clock = std::chrono::steady_clock;

namespace {

const int kSizes[] = {1, 2, 3, 4, 8};
const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min};

std::vector<int> iota(int n) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

/// What rank `r` holds at element `i`: small integers, exact in every dtype,
/// different per rank so that sums, maxima and minima all differ.
int64_t valueAt(int r, size_t i) {
  return static_cast<int64_t>((r * 7 + i * 3) % 11) - 5 + r;
}

int64_t combine(ReduceOp op, int64_t a, int64_t b) {
  switch (op) {
  case ReduceOp::Sum:
    return a + b;
  case ReduceOp::Max:
    return std::max(a, b);
  case ReduceOp::Min:
    return std::min(a, b);
  }
  return 0;
}

/// Runs `body` on `n` local ranks and returns what each rank returned.
template <typename R>
std::vector<R> runRanks(int n, const std::function<R(Communicator &)> &body,
                        std::chrono::milliseconds timeout = 20s) {
  std::vector<R> results(n);
  runLocalRanks(
      n, [&](Communicator &c) { results[c.rank()] = body(c); }, timeout);
  return results;
}

template <typename T>
void checkAllReduce(DType dtype, int n, size_t count, ReduceOp op) {
  SCOPED_TRACE(std::string(toString(dtype)) + " " + toString(op) +
               " n=" + std::to_string(n) + " count=" + std::to_string(count));
  std::vector<int> group = iota(n);
  auto results = runRanks<std::vector<T>>(n, [&](Communicator &c) {
    std::vector<T> data(count);
    for (size_t i = 0; i < count; ++i)
      data[i] = static_cast<T>(valueAt(c.rank(), i));
    c.allReduce(data.data(), count, dtype, op, group);
    return data;
  });
  for (size_t i = 0; i < count; ++i) {
    int64_t expected = valueAt(0, i);
    for (int r = 1; r < n; ++r)
      expected = combine(op, expected, valueAt(r, i));
    for (int r = 0; r < n; ++r)
      ASSERT_EQ(results[r][i], static_cast<T>(expected))
          << "rank " << r << " element " << i;
  }
}

TEST(LocalCommunicator, AllReduceEveryDtypeOpAndGroupSize) {
  for (int n : kSizes)
    for (size_t count : {size_t(0), size_t(1), size_t(37), size_t(20000)})
      for (ReduceOp op : kOps) {
        checkAllReduce<float>(DType::F32, n, count, op);
        checkAllReduce<double>(DType::F64, n, count, op);
        checkAllReduce<int32_t>(DType::I32, n, count, op);
        checkAllReduce<int64_t>(DType::I64, n, count, op);
      }
}

TEST(LocalCommunicator, AllGatherPlacesBlocksInGroupOrder) {
  for (int n : kSizes)
    for (size_t count : {size_t(0), size_t(1), size_t(5), size_t(3000)}) {
      SCOPED_TRACE("n=" + std::to_string(n) +
                   " count=" + std::to_string(count));
      std::vector<int> group = iota(n);
      auto results = runRanks<std::vector<int64_t>>(n, [&](Communicator &c) {
        std::vector<int64_t> send(count), recv(n * count, -1);
        for (size_t i = 0; i < count; ++i)
          send[i] = valueAt(c.rank(), i) + 100 * c.rank();
        c.allGather(send.data(), recv.data(), count, DType::I64, group);
        return recv;
      });
      for (int r = 0; r < n; ++r)
        for (int q = 0; q < n; ++q)
          for (size_t i = 0; i < count; ++i)
            ASSERT_EQ(results[r][q * count + i], valueAt(q, i) + 100 * q)
                << "rank " << r << " block " << q << " element " << i;
    }
}

TEST(LocalCommunicator, ReduceScatterGivesEachPositionItsBlock) {
  for (int n : kSizes)
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(9000)})
      for (ReduceOp op : kOps) {
        SCOPED_TRACE("n=" + std::to_string(n) +
                     " count=" + std::to_string(count) + " " + toString(op));
        std::vector<int> group = iota(n);
        auto results = runRanks<std::vector<float>>(n, [&](Communicator &c) {
          std::vector<float> send(n * count), recv(count, -1.0f);
          for (size_t i = 0; i < send.size(); ++i)
            send[i] = static_cast<float>(valueAt(c.rank(), i));
          c.reduceScatter(send.data(), recv.data(), count, DType::F32, op,
                          group);
          return recv;
        });
        for (int p = 0; p < n; ++p)
          for (size_t i = 0; i < count; ++i) {
            int64_t expected = valueAt(0, p * count + i);
            for (int r = 1; r < n; ++r)
              expected = combine(op, expected, valueAt(r, p * count + i));
            ASSERT_EQ(results[p][i], static_cast<float>(expected))
                << "position " << p << " element " << i;
          }
      }
}

TEST(LocalCommunicator, ReduceScatterIntoTheRanksOwnBlock) {
  const int n = 4;
  const size_t count = 5000;
  auto results = runRanks<std::vector<int32_t>>(n, [&](Communicator &c) {
    std::vector<int32_t> buffer(n * count);
    for (size_t i = 0; i < buffer.size(); ++i)
      buffer[i] = static_cast<int32_t>(valueAt(c.rank(), i));
    int32_t *own = buffer.data() + c.rank() * count;
    c.reduceScatter(buffer.data(), own, count, DType::I32, ReduceOp::Sum,
                    iota(n));
    return std::vector<int32_t>(own, own + count);
  });
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < count; ++i) {
      int64_t expected = 0;
      for (int r = 0; r < n; ++r)
        expected += valueAt(r, p * count + i);
      ASSERT_EQ(results[p][i], expected) << "rank " << p << " element " << i;
    }
}

/// Element k of the block that rank `from` sends to position `to`.
int64_t allToAllValue(int from, int to, size_t k) {
  return from * 1000000 + to * 1000 + static_cast<int64_t>(k);
}

TEST(LocalCommunicator, AllToAllTransposesBlocks) {
  for (int n : kSizes)
    for (size_t count : {size_t(0), size_t(1), size_t(3), size_t(700)}) {
      SCOPED_TRACE("n=" + std::to_string(n) +
                   " count=" + std::to_string(count));
      auto results = runRanks<std::vector<int64_t>>(n, [&](Communicator &c) {
        std::vector<int64_t> send(n * count), recv(n * count, -1);
        for (int j = 0; j < n; ++j)
          for (size_t k = 0; k < count; ++k)
            send[j * count + k] = allToAllValue(c.rank(), j, k);
        c.allToAll(send.data(), recv.data(), count, DType::I64, iota(n));
        return recv;
      });
      for (int p = 0; p < n; ++p)
        for (int i = 0; i < n; ++i)
          for (size_t k = 0; k < count; ++k)
            ASSERT_EQ(results[p][i * count + k], allToAllValue(i, p, k))
                << "rank " << p << " block " << i << " element " << k;
    }
}

TEST(LocalCommunicator, BarrierWaitsForEveryRank) {
  for (int n : kSizes) {
    std::vector<std::atomic<int>> arrived(n);
    auto sawAll = runRanks<bool>(n, [&](Communicator &c) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5 * c.rank()));
      arrived[c.rank()] = 1;
      c.barrier(iota(n));
      return std::all_of(arrived.begin(), arrived.end(),
                         [](const std::atomic<int> &a) { return a == 1; });
    });
    for (int r = 0; r < n; ++r)
      EXPECT_TRUE(sawAll[r]) << "n=" << n << " rank " << r;
  }
}

TEST(LocalCommunicator, GroupOrderDecidesPositionsNotRankNumbers) {
  // Ranks 3, 1, 0 in that order; rank 2 takes no part.
  const std::vector<int> group = {3, 1, 0};
  const size_t count = 4;
  struct Out {
    std::vector<int64_t> gathered, scattered, exchanged;
  };
  auto results = runRanks<Out>(4, [&](Communicator &c) {
    Out out;
    if (c.rank() == 2)
      return out;
    int position = c.rank() == 3 ? 0 : c.rank() == 1 ? 1 : 2;
    std::vector<int64_t> send(count), all(3 * count);
    for (size_t i = 0; i < count; ++i)
      send[i] = valueAt(c.rank(), i);
    out.gathered.assign(3 * count, -1);
    c.allGather(send.data(), out.gathered.data(), count, DType::I64, group);
    for (size_t i = 0; i < all.size(); ++i)
      all[i] = valueAt(c.rank(), i);
    out.scattered.assign(count, -1);
    c.reduceScatter(all.data(), out.scattered.data(), count, DType::I64,
                    ReduceOp::Sum, group);
    for (int j = 0; j < 3; ++j)
      for (size_t k = 0; k < count; ++k)
        all[j * count + k] = allToAllValue(position, j, k);
    out.exchanged.assign(3 * count, -1);
    c.allToAll(all.data(), out.exchanged.data(), count, DType::I64, group);
    return out;
  });
  for (int p = 0; p < 3; ++p) {
    int r = group[p];
    for (int q = 0; q < 3; ++q)
      for (size_t i = 0; i < count; ++i) {
        EXPECT_EQ(results[r].gathered[q * count + i], valueAt(group[q], i));
        EXPECT_EQ(results[r].exchanged[q * count + i], allToAllValue(q, p, i));
      }
    for (size_t i = 0; i < count; ++i)
      EXPECT_EQ(results[r].scattered[i], valueAt(3, p * count + i) +
                                             valueAt(1, p * count + i) +
                                             valueAt(0, p * count + i));
  }
  EXPECT_TRUE(results[2].gathered.empty());
}

TEST(LocalCommunicator, ConcurrentGroupsOfATwoByFourMesh) {
  // Ranks r = 4 * dp + tp: four dp groups {tp, tp + 4} and two tp groups
  // {4 dp .. 4 dp + 3} run their collectives at the same time, interleaved
  // differently on every rank, for many rounds.
  const int rounds = 200;
  const size_t count = 257;
  auto errors = runRanks<std::string>(8, [&](Communicator &c) -> std::string {
    int r = c.rank(), dp = r / 4, tp = r % 4;
    std::vector<int> tpGroup = {4 * dp, 4 * dp + 1, 4 * dp + 2, 4 * dp + 3};
    std::vector<int> dpGroup = {tp, tp + 4};
    for (int round = 0; round < rounds; ++round) {
      std::vector<float> data(count);
      for (size_t i = 0; i < count; ++i)
        data[i] = static_cast<float>(r * 3 + round + i);
      int64_t mine[2] = {r, round}, both[4] = {-1, -1, -1, -1};
      // Neighbours in a tp group alternate; dp partners share a parity, so
      // the dp-first ranks never wait on a tp-first one.
      if ((r + round) % 2) {
        c.allGather(mine, both, 2, DType::I64, dpGroup);
        c.allReduce(data.data(), count, DType::F32, ReduceOp::Sum, tpGroup);
      } else {
        c.allReduce(data.data(), count, DType::F32, ReduceOp::Sum, tpGroup);
        c.allGather(mine, both, 2, DType::I64, dpGroup);
      }
      for (size_t i = 0; i < count; ++i) {
        float expected = 0;
        for (int member : tpGroup)
          expected += static_cast<float>(member * 3 + round + i);
        if (data[i] != expected)
          return "round " + std::to_string(round) + ": tp sum wrong";
      }
      if (both[0] != tp || both[1] != round || both[2] != tp + 4 ||
          both[3] != round)
        return "round " + std::to_string(round) + ": dp gather wrong";
      if (round % 50 == 49)
        c.barrier(iota(8));
    }
    return "";
  });
  for (int r = 0; r < 8; ++r)
    EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(LocalCommunicator, ConcurrentGroupsIssuedInDifferentOrders) {
  // Rank r belongs to groups A = {0,1,2,3} and B_r = {r % 2, r % 2 + 2};
  // odd ranks call B first, even ranks A first: each group still sees its
  // calls in one order, so nothing waits on anything else.
  auto sums = runRanks<std::vector<int64_t>>(4, [&](Communicator &c) {
    int r = c.rank();
    std::vector<int> a = iota(4), b = {r % 2, r % 2 + 2};
    int64_t x = r + 1, y = 10 * (r + 1);
    if (r % 2) {
      c.allReduce(&y, 1, DType::I64, ReduceOp::Sum, b);
      c.allReduce(&x, 1, DType::I64, ReduceOp::Sum, a);
    } else {
      c.allReduce(&x, 1, DType::I64, ReduceOp::Sum, a);
      c.allReduce(&y, 1, DType::I64, ReduceOp::Sum, b);
    }
    return std::vector<int64_t>{x, y};
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(sums[r][0], 1 + 2 + 3 + 4);
    EXPECT_EQ(sums[r][1], r % 2 ? 20 + 40 : 10 + 30);
  }
}

TEST(LocalCommunicator, FloatSumsAreInGroupOrderAndRepeatBitForBit) {
  for (int n : {3, 4, 8}) {
    const size_t count = 100000;
    auto inputOf = [&](int r) {
      std::mt19937 gen(1234 + r);
      std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
      std::vector<float> v(count);
      for (float &x : v)
        x = dist(gen) * std::pow(10.0f, static_cast<float>(r % 3) - 1);
      return v;
    };
    // The sum in group order, rounding after every addition.
    std::vector<float> expected = inputOf(0);
    for (int r = 1; r < n; ++r) {
      std::vector<float> next = inputOf(r);
      for (size_t i = 0; i < count; ++i)
        expected[i] += next[i];
    }
    for (int run = 0; run < 3; ++run) {
      auto results = runRanks<std::vector<float>>(n, [&](Communicator &c) {
        std::vector<float> data = inputOf(c.rank());
        c.allReduce(data.data(), count, DType::F32, ReduceOp::Sum, iota(n));
        return data;
      });
      for (int r = 0; r < n; ++r)
        EXPECT_EQ(std::memcmp(results[r].data(), expected.data(),
                              count * sizeof(float)),
                  0)
            << "n=" << n << " run " << run << " rank " << r;
    }
  }
}

uint16_t toHalf(DType dtype, float f);
float fromHalf(DType dtype, uint16_t h);

TEST(LocalCommunicator, SixteenBitFloatReductions) {
  // Small integers are exact in f16 and bf16: every reduction is exact.
  for (DType dtype : {DType::F16, DType::BF16})
    for (ReduceOp op : kOps) {
      const int n = 4;
      const size_t count = 300;
      auto results = runRanks<std::vector<uint16_t>>(n, [&](Communicator &c) {
        std::vector<uint16_t> data(count), scattered(count / n);
        for (size_t i = 0; i < count; ++i)
          data[i] = toHalf(dtype, static_cast<float>(valueAt(c.rank(), i)));
        std::vector<uint16_t> original = data;
        c.allReduce(data.data(), count, dtype, op, iota(n));
        c.reduceScatter(original.data(), scattered.data(), count / n, dtype, op,
                        iota(n));
        data.insert(data.end(), scattered.begin(), scattered.end());
        return data;
      });
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i) {
          int64_t expected = valueAt(0, i);
          for (int q = 1; q < n; ++q)
            expected = combine(op, expected, valueAt(q, i));
          ASSERT_EQ(fromHalf(dtype, results[r][i]),
                    static_cast<float>(expected))
              << toString(dtype) << " " << toString(op) << " rank " << r;
          if (i < count / n) {
            size_t j = r * (count / n) + i;
            int64_t block = valueAt(0, j);
            for (int q = 1; q < n; ++q)
              block = combine(op, block, valueAt(q, j));
            ASSERT_EQ(fromHalf(dtype, results[r][count + i]),
                      static_cast<float>(block));
          }
        }
    }
}

// Encodings of the small integers SixteenBitFloatReductions uses, built from
// sign, exponent and mantissa fields (independent of the runtime's
// conversions).
uint16_t toHalf(DType dtype, float f) {
  int mantissaBits = dtype == DType::F16 ? 10 : 7;
  int bias = dtype == DType::F16 ? 15 : 127;
  uint16_t sign = f < 0 ? 0x8000 : 0;
  float a = std::fabs(f);
  if (a == 0)
    return sign;
  int e = static_cast<int>(std::floor(std::log2(a)));
  uint16_t mantissa = static_cast<uint16_t>(
      std::lround((a / std::ldexp(1.0f, e) - 1) * (1 << mantissaBits)));
  return sign | static_cast<uint16_t>((e + bias) << mantissaBits) | mantissa;
}

float fromHalf(DType dtype, uint16_t h) {
  int mantissaBits = dtype == DType::F16 ? 10 : 7;
  int bias = dtype == DType::F16 ? 15 : 127;
  int expMask = dtype == DType::F16 ? 0x1f : 0xff;
  float sign = (h & 0x8000) ? -1.0f : 1.0f;
  int e = (h >> mantissaBits) & expMask;
  int mantissa = h & ((1 << mantissaBits) - 1);
  if (e == 0 && mantissa == 0)
    return sign * 0.0f;
  return sign *
         std::ldexp(1.0f + static_cast<float>(mantissa) / (1 << mantissaBits),
                    e - bias);
}

// --- Failures ------------------------------------------------------------

TEST(LocalCommunicator, ThrowingRankMakesTheOthersFailFast) {
  std::string root;
  auto outcomes = runFailing(
      4, 500ms,
      [](Communicator &c) {
        std::vector<float> data(1000, 1.0f);
        if (c.rank() == 2) {
          std::this_thread::sleep_for(50ms);
          throw std::runtime_error("boom");
        }
        c.allReduce(data.data(), data.size(), DType::F32, ReduceOp::Sum,
                    iota(4));
      },
      root);
  EXPECT_EQ(root, "rank 2: boom");
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(outcomes[r].error,
              "rank " + std::to_string(r) +
                  ": all_reduce over group [0,1,2,3] aborted: rank 2 failed: "
                  "boom");
    // Poison, not the timeout, stopped it.
    EXPECT_GE(outcomes[r].ms, 50);
    EXPECT_LT(outcomes[r].ms, 500) << "rank " << r;
  }
}

TEST(LocalCommunicator, MissingRankTimesOutNamingIt) {
  std::string root;
  auto outcomes = runFailing(
      4, 500ms,
      [](Communicator &c) {
        int32_t x = c.rank();
        if (c.rank() == 2)
          std::this_thread::sleep_for(1200ms);
        c.allReduce(&x, 1, DType::I32, ReduceOp::Sum, iota(4));
      },
      root);
  const std::string timedOut =
      "all_reduce over group [0,1,2,3] timed out after 500 ms waiting for "
      "ranks [2]";
  // One of ranks 0, 1, 3 timed out first; the others either timed out too
  // or were stopped by its poison.
  ASSERT_EQ(root.size() > 8 ? root.substr(8) : root, timedOut);
  std::string first = root.substr(5, 1);
  EXPECT_NE(first, "2");
  for (int r : {0, 1, 3}) {
    std::string prefix = "rank " + std::to_string(r) + ": ";
    EXPECT_TRUE(outcomes[r].error == prefix + timedOut ||
                outcomes[r].error ==
                    prefix + "all_reduce over group [0,1,2,3] aborted: rank " +
                        first + " failed: " + timedOut)
        << outcomes[r].error;
    EXPECT_GE(outcomes[r].ms, 500);
    EXPECT_LT(outcomes[r].ms, 1100) << "rank " << r;
  }
  // The late rank fails as soon as it arrives.
  EXPECT_EQ(outcomes[2].error,
            "rank 2: all_reduce over group [0,1,2,3] aborted: rank " + first +
                " failed: " + timedOut);
  EXPECT_GE(outcomes[2].ms, 1200);
}

TEST(LocalCommunicator, FailureInAnotherGroupStopsEveryRank) {
  // Groups {0,1} and {2,3} loop on their own all-reduces; rank 3 fails
  // outside any collective after a few rounds. Rank 2 is left waiting in its
  // group, ranks 0 and 1 in theirs: all stop at their next wait.
  std::string root;
  auto outcomes = runFailing(
      4, 2000ms,
      [](Communicator &c) {
        std::vector<int> group =
            c.rank() < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
        for (int round = 0;; ++round) {
          if (c.rank() == 3 && round == 10)
            throw std::runtime_error("out of memory in step 10");
          int64_t x = round;
          c.allReduce(&x, 1, DType::I64, ReduceOp::Sum, group);
        }
      },
      root);
  EXPECT_EQ(root, "rank 3: out of memory in step 10");
  EXPECT_EQ(outcomes[0].error,
            "rank 0: all_reduce over group [0,1] aborted: rank 3 failed: out "
            "of memory in step 10");
  EXPECT_EQ(outcomes[2].error,
            "rank 2: all_reduce over group [2,3] aborted: rank 3 failed: out "
            "of memory in step 10");
  for (int r : {0, 1, 2})
    EXPECT_LT(outcomes[r].ms, 2000) << "rank " << r;
}

TEST(LocalCommunicator, TimeoutCoversBarrierAndRecv) {
  std::string root;
  auto outcomes = runFailing(
      3, 300ms,
      [](Communicator &c) {
        if (c.rank() == 0)
          c.barrier({0, 1});
        if (c.rank() == 2) {
          float x[4];
          c.recv(x, 4, DType::F32, 0, 0, {1, 2});
        }
      },
      root);
  // Rank 1 returned at once, so both waits time out; whichever is first
  // poisons the other.
  EXPECT_TRUE(
      outcomes[0].error ==
          "rank 0: barrier over group [0,1] timed out after 300 ms waiting "
          "for ranks [1]" ||
      outcomes[2].error == "rank 2: recv of 4 x f32 from rank 1 with tag 0 "
                           "timed out after 300 ms waiting for rank 1 (it had "
                           "posted 0 sends with tag 0 to rank 2, and this "
                           "receive is number 1)")
      << outcomes[0].error << " / " << outcomes[2].error;
  EXPECT_TRUE(root.find("timed out after 300 ms") != std::string::npos) << root;
}

TEST(LocalCommunicator, MismatchedCallsAreNamed) {
  std::string root;
  auto outcomes = runFailing(
      2, 5000ms,
      [](Communicator &c) {
        float send[4] = {}, recv[8];
        if (c.rank() == 0) {
          c.allReduce(send, 4, DType::F32, ReduceOp::Sum, {0, 1});
        } else {
          std::this_thread::sleep_for(100ms);
          c.allGather(send, recv, 4, DType::F32, {0, 1});
        }
      },
      root);
  const std::string mismatch =
      "all_gather over group [0,1]: call 0 of this group is all_gather of 4 x "
      "f32 here but all_reduce of 4 x f32 (sum) on rank 0";
  EXPECT_EQ(root, "rank 1: " + mismatch);
  EXPECT_EQ(outcomes[1].error, "rank 1: " + mismatch);
  EXPECT_EQ(outcomes[0].error,
            "rank 0: all_reduce over group [0,1] aborted: rank 1 failed: " +
                mismatch);
  EXPECT_LT(outcomes[0].ms, 5000);
}

TEST(LocalCommunicator, MismatchedCountsAndOpsAreNamed) {
  std::string root;
  runFailing(
      2, 5000ms,
      [](Communicator &c) {
        int64_t data[3] = {};
        if (c.rank() == 1)
          std::this_thread::sleep_for(100ms);
        c.allReduce(data, c.rank() ? 3 : 2, DType::I64, ReduceOp::Sum, {0, 1});
      },
      root);
  EXPECT_EQ(root, "rank 1: all_reduce over group [0,1]: call 0 of this group "
                  "is all_reduce of 3 x i64 (sum) here but all_reduce of 2 x "
                  "i64 (sum) on rank 0");
  runFailing(
      2, 5000ms,
      [](Communicator &c) {
        double data[2] = {};
        if (c.rank() == 1)
          std::this_thread::sleep_for(100ms);
        c.allReduce(data, 2, DType::F64,
                    c.rank() ? ReduceOp::Max : ReduceOp::Sum, {0, 1});
      },
      root);
  EXPECT_EQ(root, "rank 1: all_reduce over group [0,1]: call 0 of this group "
                  "is all_reduce of 2 x f64 (max) here but all_reduce of 2 x "
                  "f64 (sum) on rank 0");
}

TEST(LocalCommunicator, InvalidGroupPoisonsTheOthers) {
  std::string root;
  auto outcomes = runFailing(
      2, 5000ms,
      [](Communicator &c) {
        float x = 0;
        if (c.rank() == 0)
          c.allReduce(&x, 1, DType::F32, ReduceOp::Sum, {0, 5});
        else
          c.barrier({0, 1});
      },
      root);
  const std::string invalid =
      "all_reduce over group [0,5]: the group names rank 5, but ranks are 0..1";
  EXPECT_EQ(root, "rank 0: " + invalid);
  EXPECT_EQ(outcomes[1].error,
            "rank 1: barrier over group [0,1] aborted: rank 0 failed: " +
                invalid);
  EXPECT_LT(outcomes[1].ms, 5000);
}

TEST(LocalCommunicator, RunLocalRanksReportsEveryKindOfFailure) {
  try {
    runLocalRanks(0, [](Communicator &) {});
    ADD_FAILURE() << "no error";
  } catch (const Error &e) {
    EXPECT_STREQ(e.what(), "runLocalRanks: needs at least one rank, got 0");
  }
  try {
    runLocalRanks(2, [](Communicator &c) {
      if (c.rank() == 1)
        throw 42;
    });
    ADD_FAILURE() << "no error";
  } catch (const Error &e) {
    EXPECT_STREQ(e.what(), "rank 1: an exception that is not a std::exception");
  }
  // A rank that completes is no failure.
  int ran = 0;
  runLocalRanks(1, [&](Communicator &c) {
    EXPECT_EQ(c.size(), 1);
    EXPECT_STREQ(c.kind(), "local");
    EXPECT_EQ(c.getTimeout(), 60000ms);
    ++ran;
  });
  EXPECT_EQ(ran, 1);
}

} // namespace

namespace {

/// What the rank at `position` sends in a collective_permute test.
int64_t permuteValue(int position, size_t i) {
  return 1000 * (position + 1) + static_cast<int64_t>(i);
}

/// Runs one collective_permute over `group` (every rank of the world must be
/// in it) and checks each rank's block against the pairs: its source's
/// values, or zeros when no pair targets it.
void checkPermute(const std::vector<int> &group,
                  const std::vector<std::pair<int, int>> &pairs,
                  size_t count) {
  int n = static_cast<int>(group.size());
  SCOPED_TRACE("n=" + std::to_string(n) + " pairs=" +
               std::to_string(pairs.size()) + " count=" +
               std::to_string(count));
  auto positionOf = [&](int r) {
    return static_cast<int>(std::find(group.begin(), group.end(), r) -
                            group.begin());
  };
  auto results = runRanks<std::vector<int64_t>>(n, [&](Communicator &c) {
    int p = positionOf(c.rank());
    std::vector<int64_t> send(count), recv(count, -7);
    for (size_t i = 0; i < count; ++i)
      send[i] = permuteValue(p, i);
    c.collectivePermute(send.data(), recv.data(), count, DType::I64, pairs,
                        group);
    return recv;
  });
  for (int r = 0; r < n; ++r) {
    int p = positionOf(r), source = -1;
    for (auto [s, t] : pairs)
      if (t == p)
        source = s;
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(results[r][i], source < 0 ? 0 : permuteValue(source, i))
          << "rank " << r << " element " << i;
  }
}

} // namespace

TEST(LocalCommunicator, CollectivePermuteShiftsARing) {
  for (int n : kSizes)
    for (size_t count : {size_t(0), size_t(1), size_t(5000)}) {
      std::vector<std::pair<int, int>> ring;
      for (int p = 0; p < n; ++p)
        ring.emplace_back(p, (p + 1) % n);
      checkPermute(iota(n), ring, count);
    }
}

TEST(LocalCommunicator, CollectivePermuteZeroesDevicesThatAreNoTarget) {
  // Positions 1 and 3 receive nothing; 2 keeps its own block (a self pair).
  checkPermute(iota(4), {{0, 2}, {2, 0}}, 17);
  checkPermute(iota(4), {{3, 0}, {2, 2}}, 17);
  checkPermute(iota(4), {}, 9);
  checkPermute(iota(1), {}, 3);
  checkPermute(iota(1), {{0, 0}}, 3);
}

TEST(LocalCommunicator, CollectivePermutePairsArePositionsInTheGroup) {
  // The group lists ranks in reverse: position 0 is rank 3, so the pair
  // (0,1) moves rank 3's block to rank 2.
  checkPermute({3, 2, 1, 0}, {{0, 1}, {1, 3}}, 10);
}

TEST(LocalCommunicator, CollectivePermuteOnConcurrentGroups) {
  // A 2x4 mesh: each row of four shifts left while being the only traffic
  // of its ranks; rows run at once and must not meet.
  auto results = runRanks<std::vector<float>>(8, [](Communicator &c) {
    int row = c.rank() / 4;
    std::vector<int> group;
    for (int k = 0; k < 4; ++k)
      group.push_back(row * 4 + k);
    std::vector<std::pair<int, int>> left{{1, 0}, {2, 1}, {3, 2}, {0, 3}};
    std::vector<float> send(100, float(c.rank())), recv(100);
    for (int round = 0; round < 20; ++round)
      c.collectivePermute(send.data(), recv.data(), 100, DType::F32, left,
                          group);
    return recv;
  });
  for (int r = 0; r < 8; ++r) {
    int expected = r / 4 * 4 + (r % 4 + 1) % 4;
    for (float v : results[r])
      ASSERT_EQ(v, float(expected)) << "rank " << r;
  }
}

TEST(LocalCommunicator, CollectivePermuteErrors) {
  std::string root;
  auto outcomes = runFailing(
      2, 5000ms,
      [](Communicator &c) {
        float x = 0, y = 0;
        if (c.rank() == 0)
          c.collectivePermute(&x, &y, 1, DType::F32, {{0, 1}, {1, 1}}, {0, 1});
        else
          c.barrier({0, 1});
      },
      root);
  const std::string repeated = "collective_permute over group [0,1]: pair "
                               "(1,1) repeats target 1";
  EXPECT_EQ(root, "rank 0: " + repeated);
  EXPECT_EQ(outcomes[1].error,
            "rank 1: barrier over group [0,1] aborted: rank 0 failed: " +
                repeated);

  runFailing(
      2, 5000ms,
      [](Communicator &c) {
        float x = 0, y = 0;
        c.collectivePermute(&x, &y, 1, DType::F32, {{0, 2}}, {0, 1});
      },
      root);
  const std::string outside = "collective_permute over group [0,1]: pair "
                              "(0,2) names a position outside [0, 2)";
  EXPECT_TRUE(root == "rank 0: " + outside || root == "rank 1: " + outside)
      << root;

  // Every member must pass the same pairs.
  runFailing(
      2, 5000ms,
      [](Communicator &c) {
        float x = 0, y = 0;
        if (c.rank() == 1)
          std::this_thread::sleep_for(100ms);
        std::vector<std::pair<int, int>> pairs{{c.rank(), 1 - c.rank()}};
        c.collectivePermute(&x, &y, 1, DType::F32, pairs, {0, 1});
      },
      root);
  EXPECT_EQ(root, "rank 1: collective_permute over group [0,1]: call 0 of "
                  "this group has pairs [(1,0)] here but [(0,1)] on rank 0");
}
