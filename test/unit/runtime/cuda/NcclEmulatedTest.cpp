//===- NcclEmulatedTest.cpp - the nccl communicator on its emulated layer --===//
//
// The nccl communicator over the emulated NCCL layer (NCCL's buffer layouts
// carried out by the local communicator's threads): the unique id reaches
// every rank; groups split per mesh axis give each collective NCCL's layout
// (rank-major all-gather, reduce-scatter blocks by rank, all-to-all, send /
// recv pairs); a rank that stops makes the others fail within the timeout,
// naming rank, collective, group and axes, with every communicator aborted.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Communicator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <numeric>

namespace partita::runtime {
namespace {

std::unique_ptr<Communicator> emulatedNccl(Communicator &local,
                                           std::string *id = nullptr) {
  NcclOptions options;
  options.emulate = true;
  if (id)
    options.afterId = [id](const std::string &text) { *id = text; };
  return createNcclCommunicator(local, options);
}

// Tests that rank 0's unique id reaches every rank.
TEST(NcclEmulatedTest, UniqueIdReachesEveryRank) {
  std::vector<std::string> ids(4);
  runLocalRanks(4, [&](Communicator &local) {
    auto comm = emulatedNccl(local, &ids[local.rank()]);
    EXPECT_STREQ(comm->kind(), "nccl");
  });
  EXPECT_EQ(ids[0].size(), 8u);
  for (const std::string &id : ids)
    EXPECT_EQ(id, ids[0]);
}

// Tests NCCL's layouts on the groups of a 2x2 mesh (rows [0,1],[2,3] and
// columns [0,2],[1,3], split from the world) and on the world.
TEST(NcclEmulatedTest, LayoutsOnSplitGroups) {
  runLocalRanks(4, [&](Communicator &local) {
    auto comm = emulatedNccl(local);
    int r = comm->rank();
    std::vector<int> row = {r / 2 * 2, r / 2 * 2 + 1};
    std::vector<int> col = {r % 2, r % 2 + 2};
    std::shared_ptr<CommGroup> world = comm->createGroup({0, 1, 2, 3});
    std::shared_ptr<CommGroup> rows = comm->createGroup(row);
    std::shared_ptr<CommGroup> cols = comm->createGroup(col);
    rows->setLabel("axes tp");

    // all_reduce over a row, in place.
    std::vector<float> x = {float(r), float(10 * r)};
    comm->run({CollectiveKind::AllReduce, nullptr, x.data(), 2}, *rows);
    EXPECT_EQ(x[0], float(row[0] + row[1]));
    EXPECT_EQ(x[1], float(10 * (row[0] + row[1])));

    // all_gather over a column: rank-major concatenation.
    std::vector<float> mine = {float(r), float(r) + 0.5f}, gathered(4);
    comm->run({CollectiveKind::AllGather, mine.data(), gathered.data(), 2},
              *cols);
    EXPECT_EQ(gathered, (std::vector<float>{float(col[0]), col[0] + 0.5f,
                                            float(col[1]), col[1] + 0.5f}));

    // reduce_scatter over the world: block i to position i.
    std::vector<float> send(4), out(1);
    for (int i = 0; i < 4; ++i)
      send[i] = float(100 * i + r);
    comm->run({CollectiveKind::ReduceScatter, send.data(), out.data(), 1},
              *world);
    EXPECT_EQ(out[0], float(4 * 100 * r + 0 + 1 + 2 + 3));

    // all_to_all over the world: block j of send to position j.
    std::vector<float> recv(4);
    comm->run({CollectiveKind::AllToAll, send.data(), recv.data(), 1}, *world);
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(recv[i], float(100 * r + i));

    // collective_permute over the world as send/recv: a shift by one, and
    // position 3 receives nothing (cleared).
    CollectiveArgs permute{CollectiveKind::CollectivePermute, mine.data(),
                           recv.data(), 2};
    permute.pairs = {{0, 1}, {1, 2}, {2, 0}};
    recv.assign(2, -1);
    comm->run(permute, *world);
    if (r == 3)
      EXPECT_EQ(recv, (std::vector<float>{0, 0}));
    else
      EXPECT_EQ(recv[0], float(r == 0 ? 2 : r - 1));
  });
}

// Tests that a rank that stops before a collective (killed) makes the others
// fail within the timeout, naming rank, collective, group and axes, and that
// the communicator refuses calls afterwards.
TEST(NcclEmulatedTest, StoppedRankFailsOthersWithinTimeout) {
  std::mutex mutex;
  std::vector<std::string> errors(4);
  std::vector<double> seconds(4, 0);
  auto timeout = std::chrono::milliseconds(400);
  EXPECT_THROW(
      runLocalRanks(
          4,
          [&](Communicator &local) {
            auto comm = emulatedNccl(local);
            std::shared_ptr<CommGroup> world = comm->createGroup({0, 1, 2, 3});
            world->setLabel("axes dp");
            if (comm->rank() == 3)
              return; // killed
            float x = 1;
            auto start = std::chrono::steady_clock::now();
            try {
              comm->run({CollectiveKind::AllReduce, nullptr, &x, 1}, *world);
            } catch (const Error &e) {
              std::lock_guard<std::mutex> lock(mutex);
              errors[comm->rank()] = e.what();
              seconds[comm->rank()] =
                  std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - start)
                      .count();
              EXPECT_THROW(
                  comm->run({CollectiveKind::AllReduce, nullptr, &x, 1},
                            *world),
                  Error);
              throw;
            }
          },
          timeout),
      Error);
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(errors[r]);
    EXPECT_NE(errors[r].find("rank " + std::to_string(r) +
                             ": all_reduce over group [0,1,2,3] (axes dp) on "
                             "nccl "),
              std::string::npos);
    EXPECT_NE(errors[r].find("aborted every nccl communicator of this rank"),
              std::string::npos);
    EXPECT_LT(seconds[r], 0.4 + 1.0);
  }
}

} // namespace
} // namespace partita::runtime
