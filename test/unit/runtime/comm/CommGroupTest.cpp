//===- CommGroupTest.cpp - groups made ahead and asynchronous calls -------===//
//
// The local communicator through Communicator::createGroup and start/wait:
// results are computed here from what each rank holds, and bad groups are
// errors naming the group.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Communicator.h"

#include <gtest/gtest.h>

#include <mutex>
#include <numeric>

using namespace partita::runtime;
using namespace std::chrono_literals;

namespace {

// Tests that a group made ahead carries its ranks and this rank's position,
// and that start/wait on it gives the blocking calls' results.
TEST(CommGroup, StartAndWaitOnGroupsMadeAhead) {
  std::mutex mutex;
  std::vector<std::string> failures;
  runLocalRanks(4, [&](Communicator &c) {
    // Two groups of two: [0,1] and [2,3], made in the same order everywhere.
    std::vector<int> pair = c.rank() < 2 ? std::vector<int>{0, 1}
                                         : std::vector<int>{2, 3};
    std::shared_ptr<CommGroup> world = c.createGroup({0, 1, 2, 3});
    std::shared_ptr<CommGroup> half = c.createGroup(pair);
    auto check = [&](bool ok, const std::string &what) {
      if (!ok) {
        std::lock_guard<std::mutex> lock(mutex);
        failures.push_back("rank " + std::to_string(c.rank()) + ": " + what);
      }
    };
    check(world->position() == c.rank() && world->size() == 4, "world");
    check(half->position() == c.rank() % 2 && half->ranks() == pair, "half");

    int32_t x = c.rank() + 1;
    auto request = c.start(
        {CollectiveKind::AllReduce, nullptr, &x, 1, DType::I32, ReduceOp::Sum,
         {}},
        *half);
    request->wait(CommRequest::Clock::now() + 5s);
    request->wait(CommRequest::Clock::now()); // complete: returns at once
    check(x == (c.rank() < 2 ? 1 + 2 : 3 + 4), "all_reduce gave " +
                                                   std::to_string(x));

    int64_t mine = 10 * c.rank();
    std::vector<int64_t> all(4, -1);
    c.run({CollectiveKind::AllGather, &mine, all.data(), 1, DType::I64,
           ReduceOp::Sum, {}},
          *world);
    check(all == std::vector<int64_t>{0, 10, 20, 30}, "all_gather");

    std::vector<float> send(2, float(c.rank())), recv(1, -1);
    c.run({CollectiveKind::ReduceScatter, send.data(), recv.data(), 1,
           DType::F32, ReduceOp::Max, {}},
          *half);
    check(recv[0] == float(pair[1]), "reduce_scatter");

    int32_t token = c.rank(), got = -1;
    c.run({CollectiveKind::CollectivePermute, &token, &got, 1, DType::I32,
           ReduceOp::Sum, {{0, 1}, {1, 0}}},
          *half);
    check(got == pair[1 - half->position()], "collective_permute");
    c.run({CollectiveKind::Barrier, nullptr, nullptr, 0, DType::F32,
           ReduceOp::Sum, {}},
          *world);
  });
  EXPECT_TRUE(failures.empty()) << failures.front();
}

// Tests that a group the caller is not in, or that names a rank twice or out
// of range, is refused at createGroup with a message naming it.
TEST(CommGroup, InvalidGroupsAreNamed) {
  std::mutex mutex;
  std::vector<std::string> errors;
  runLocalRanks(2, [&](Communicator &c) {
    if (c.rank() != 0)
      return;
    for (const std::vector<int> &bad :
         {std::vector<int>{1}, std::vector<int>{0, 0}, std::vector<int>{0, 5},
          std::vector<int>{}}) {
      try {
        c.createGroup(bad);
        errors.push_back("accepted");
      } catch (const Error &e) {
        errors.push_back(e.what());
      }
    }
  });
  ASSERT_EQ(errors.size(), 4u);
  EXPECT_EQ(errors[0], "rank 0: create_group over group [1]: the group does "
                       "not contain the calling rank");
  EXPECT_EQ(errors[1], "rank 0: create_group over group [0,0]: the group "
                       "names rank 0 twice");
  EXPECT_EQ(errors[2], "rank 0: create_group over group [0,5]: the group "
                       "names rank 5, but ranks are 0..1");
  EXPECT_EQ(errors[3],
            "rank 0: create_group over group []: the group is empty");
}

// Tests that a collective started on a group still fails at the deadline
// with the blocking call's message when a member never comes.
TEST(CommGroup, StartedCollectiveTimesOutNamingTheMissingRank) {
  EXPECT_THROW(
      {
        try {
          runLocalRanks(
              2,
              [](Communicator &c) {
                std::shared_ptr<CommGroup> g = c.createGroup({0, 1});
                if (c.rank() == 1)
                  return;
                int32_t x = 1;
                c.run({CollectiveKind::AllReduce, nullptr, &x, 1, DType::I32,
                       ReduceOp::Sum, {}},
                      *g);
              },
              300ms);
        } catch (const Error &e) {
          EXPECT_STREQ(e.what(), "rank 0: all_reduce over group [0,1] timed "
                                 "out after 300 ms waiting for ranks [1]");
          throw;
        }
      },
      Error);
}

} // namespace
