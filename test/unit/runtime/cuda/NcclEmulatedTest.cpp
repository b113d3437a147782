//===- NcclEmulatedTest.cpp - the nccl communicator on its emulated layer --===//
//
// The nccl communicator over the emulated NCCL layer (NCCL's buffer layouts
// carried out by the local communicator's threads): the unique id reaches
// every rank; groups split per mesh axis give each collective NCCL's layout
// (rank-major all-gather, reduce-scatter blocks by rank, all-to-all, send /
// recv pairs); a rank that stops makes the others fail within the timeout,
// naming rank, collective, group and axes, with every communicator aborted.
// Calls enqueued on a stream (the executor's path inside a step) start after
// the stream's earlier work and before its later work, without the host
// waiting, and one that never completes fails the communicator from its
// watchdog, with no call of the host's waiting for it.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Communicator.h"
#include "partita/runtime/Device.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <numeric>
#include <thread>

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

// Tests that ranks that make their groups in different orders get an error
// naming the group instead of a communicator of the wrong ranks: ranks 0
// and 1 ask for their row of a 2x2 mesh while ranks 2 and 3 ask for their
// column, so one ncclCommSplit gathers {0, 1, 2} under one color.
TEST(NcclEmulatedTest, GroupsMadeInDifferentOrdersAreAnError) {
  std::vector<std::string> errors(4);
  EXPECT_THROW(runLocalRanks(4,
                             [&](Communicator &local) {
                               auto comm = emulatedNccl(local);
                               int r = comm->rank();
                               std::vector<int> ranks =
                                   r < 2 ? std::vector<int>{0, 1}
                                         : std::vector<int>{r % 2, r % 2 + 2};
                               try {
                                 comm->createGroup(ranks);
                               } catch (const Error &e) {
                                 errors[r] = e.what();
                                 throw;
                               }
                             }),
               Error);
  // Each rank reports the size it got, unless another rank's report
  // reached it first (the first failure aborts the others' calls).
  int sized = 0;
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE(errors[r]);
    EXPECT_NE(errors[r].find("rank " + std::to_string(r) + ": create_group"),
              std::string::npos)
        << errors[r];
    bool size = errors[r].find("ncclCommSplit made a communicator of " +
                               std::string(r == 3 ? "1" : "3") +
                               " ranks, not 2 (every rank must make the "
                               "same groups in the same order)") !=
                std::string::npos;
    sized += size;
    EXPECT_TRUE(size || errors[r].find("aborted") != std::string::npos)
        << errors[r];
  }
  EXPECT_GE(sized, 1);
}

/// A gate a stream item waits at until the test opens it (or 5 s pass: a
/// host that waits for the stream then fails the test instead of hanging).
struct Gate {
  std::mutex mutex;
  std::condition_variable opened;
  bool open = false;
  void wait() {
    std::unique_lock<std::mutex> lock(mutex);
    opened.wait_for(lock, std::chrono::seconds(5), [&] { return open; });
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      open = true;
    }
    opened.notify_all();
  }
};

// Tests that an all_reduce enqueued on a stream reads what the stream's
// earlier work wrote and is read by its later work, while enqueue() itself
// returns at once: the stream's first item is held at a gate until after
// the host has enqueued the call and the item that reads its result. (The
// streams are the cpu device's worker streams, host streams as the emulated
// device's are.)
TEST(NcclEmulatedTest, EnqueuedCallIsOrderedOnItsStream) {
  std::vector<float> results(2, -1);
  std::vector<int> readBeforeOpen(2, -1);
  runLocalRanks(2, [&](Communicator &local) {
    auto comm = emulatedNccl(local);
    ASSERT_TRUE(comm->ordersOnStreams());
    std::shared_ptr<CommGroup> world = comm->createGroup({0, 1});
    std::unique_ptr<Device> device = createCpuDevice();
    std::unique_ptr<Stream> stream = device->createStream();
    int r = comm->rank();
    float x = 0, seen = -1;
    Gate gate;
    stream->enqueue([&] {
      gate.wait();
      x = float(r + 1);
    });
    comm->enqueue({CollectiveKind::AllReduce, nullptr, &x, 1}, *world,
                  *stream);
    stream->enqueue([&] { seen = x; });
    // Nothing has run yet: the host did not wait for the stream.
    readBeforeOpen[r] = seen == -1 && x == 0;
    gate.release();
    stream->synchronize();
    comm->waitEnqueued();
    results[r] = seen;
  });
  EXPECT_EQ(readBeforeOpen, (std::vector<int>{1, 1}));
  EXPECT_EQ(results, (std::vector<float>{3, 3}));
}

// Tests enqueued sends and receives (pipeline messages): the send reads
// what its stream's earlier work wrote, the receive's stream reads the
// message after it, neither host waits for its stream; messages between
// two ranks arrive in the order they were sent. A receive of another size
// than its send fails at the receiver's enqueue, naming both, from the
// headers alone; a send whose receiver never posts fails from the
// watchdog, naming the send.
TEST(NcclEmulatedTest, EnqueuedSendsAndReceivesMoveMessagesInOrder) {
  std::vector<float> got(2, -1);
  int hostRanAhead = 0;
  runLocalRanks(2, [&](Communicator &local) {
    auto comm = emulatedNccl(local);
    std::shared_ptr<CommGroup> world = comm->createGroup({0, 1});
    std::unique_ptr<Device> device = createCpuDevice();
    std::unique_ptr<Stream> stream = device->createStream();
    float a = 0, b = 0;
    Gate gate;
    if (comm->rank() == 0) {
      stream->enqueue([&] {
        gate.wait();
        a = 7;
        b = 9;
      });
      for (float *x : {&a, &b}) {
        CollectiveArgs send{CollectiveKind::Send, x, nullptr, 1};
        send.peer = 1;
        send.tag = x == &a ? 3 : 4; // tags of their own: NCCL has none
        comm->enqueue(send, *world, *stream);
      }
      hostRanAhead = a == 0 && b == 0;
      gate.release();
    } else {
      for (float *x : {&a, &b}) {
        CollectiveArgs recv{CollectiveKind::Recv, nullptr, x, 1};
        recv.peer = 0;
        recv.tag = x == &a ? 3 : 4;
        comm->enqueue(recv, *world, *stream);
      }
      stream->enqueue([&] {
        got[0] = a;
        got[1] = b;
      });
    }
    stream->synchronize();
    comm->waitEnqueued();
  });
  EXPECT_EQ(hostRanAhead, 1);
  EXPECT_EQ(got, (std::vector<float>{7, 9}));

  std::string mismatch;
  EXPECT_THROW(runLocalRanks(
                   2,
                   [&](Communicator &local) {
                     auto comm = emulatedNccl(local);
                     std::shared_ptr<CommGroup> world =
                         comm->createGroup({0, 1});
                     std::unique_ptr<Stream> stream =
                         createCpuDevice()->createStream();
                     float x[2] = {1, 2};
                     bool sender = comm->rank() == 0;
                     CollectiveArgs args{sender ? CollectiveKind::Send
                                                : CollectiveKind::Recv,
                                         x, x, sender ? 2u : 1u};
                     args.peer = sender ? 1 : 0;
                     try {
                       comm->enqueue(args, *world, *stream);
                       comm->waitEnqueued();
                     } catch (const Error &e) {
                       if (!sender)
                         mismatch = e.what();
                       throw;
                     }
                   },
                   std::chrono::milliseconds(2000)),
               Error);
  EXPECT_NE(mismatch.find("rank 1: recv of 1 x f32 from rank 0 with tag 0"),
            std::string::npos)
      << mismatch;
  EXPECT_NE(mismatch.find("2 x f32 that rank 0 sent"), std::string::npos)
      << mismatch;

  std::string lost;
  EXPECT_THROW(runLocalRanks(
                   2,
                   [&](Communicator &local) {
                     auto comm = emulatedNccl(local);
                     comm->setTimeout(std::chrono::milliseconds(200));
                     std::shared_ptr<CommGroup> world =
                         comm->createGroup({0, 1});
                     world->setLabel("pipeline axis pp");
                     if (comm->rank() == 1)
                       return; // never receives
                     std::unique_ptr<Stream> stream =
                         createCpuDevice()->createStream();
                     float x = 1;
                     CollectiveArgs send{CollectiveKind::Send, &x, nullptr, 1};
                     send.peer = 1;
                     send.tag = 5;
                     comm->enqueue(send, *world, *stream);
                     try {
                       comm->waitEnqueued();
                     } catch (const Error &e) {
                       lost = e.what();
                       throw;
                     }
                   },
                   std::chrono::milliseconds(2000)),
               Error);
  EXPECT_NE(lost.find("rank 0: send of 1 x f32 to rank 1 with tag 5 "
                      "(pipeline axis pp) on nccl timed out after 200 ms "
                      "(enqueued on a device stream); aborted every nccl "
                      "communicator of this rank"),
            std::string::npos)
      << lost;
}

// Tests that the timeout bounds a wait without progress, not a whole
// step: four all_reduces enqueued at once, the first behind 700 ms of
// stream work, the others 150 ms apart, the last 1150 ms after its
// enqueue, under a timeout of 400 ms; none times out, since the clock of
// each starts when its stream reaches it and its communicator's previous
// call is done. A call whose stream never reaches it fails after 10
// timeouts, saying so. And that the runtime's own tags are refused.
TEST(NcclEmulatedTest, TimeoutCountsFromTheCommunicatorsLastProgress) {
  std::vector<float> results(2, -1);
  runLocalRanks(2, [&](Communicator &local) {
    auto comm = emulatedNccl(local);
    comm->setTimeout(std::chrono::milliseconds(400));
    std::shared_ptr<CommGroup> world = comm->createGroup({0, 1});
    std::unique_ptr<Stream> stream = createCpuDevice()->createStream();
    float x = 1;
    for (int i = 0; i < 4; ++i) {
      stream->enqueue([i] {
        std::this_thread::sleep_for(std::chrono::milliseconds(i ? 150 : 700));
      });
      comm->enqueue({CollectiveKind::AllReduce, nullptr, &x, 1}, *world,
                    *stream);
    }
    stream->synchronize();
    comm->waitEnqueued();
    results[comm->rank()] = x;
  });
  EXPECT_EQ(results, (std::vector<float>{16, 16}));

  std::string stuck;
  EXPECT_THROW(runLocalRanks(
                   2,
                   [&](Communicator &local) {
                     auto comm = emulatedNccl(local);
                     comm->setTimeout(std::chrono::milliseconds(50));
                     std::shared_ptr<CommGroup> world =
                         comm->createGroup({0, 1});
                     std::unique_ptr<Stream> stream =
                         createCpuDevice()->createStream();
                     Gate gate; // opened only once the call has failed
                     float x = 1;
                     stream->enqueue([&] { gate.wait(); });
                     comm->enqueue({CollectiveKind::AllReduce, nullptr, &x, 1},
                                   *world, *stream);
                     try {
                       comm->waitEnqueued();
                     } catch (const Error &e) {
                       if (comm->rank() == 0)
                         stuck = e.what();
                       gate.release();
                       stream->synchronize();
                       throw;
                     }
                   },
                   std::chrono::milliseconds(2000)),
               Error);
  EXPECT_NE(stuck.find("rank 0: all_reduce over group [0,1] on nccl was not "
                       "started 500 ms after its enqueue (enqueued on a device "
                       "stream that did not reach it"),
            std::string::npos)
      << stuck;

  std::string refused;
  runLocalRanks(2, [&](Communicator &local) {
    auto comm = emulatedNccl(local);
    std::shared_ptr<CommGroup> world = comm->createGroup({0, 1});
    if (comm->rank() == 1)
      return;
    std::unique_ptr<Stream> stream = createCpuDevice()->createStream();
    float x = 1;
    CollectiveArgs send{CollectiveKind::Send, &x, nullptr, 1};
    send.peer = 1;
    send.tag = kRuntimePeerTag;
    try {
      comm->enqueue(send, *world, *stream);
    } catch (const Error &e) {
      refused = e.what();
    }
  });
  EXPECT_NE(refused.find("rank 0: send with tag 32766: tags are 0..32764"),
            std::string::npos)
      << refused;
}

// Tests that a call enqueued on a stream whose peer never makes it fails
// the communicator from the watchdog after the nccl timeout (shorter here
// than the bootstrap's): the host makes no call meanwhile, and its next
// call and waitEnqueued() throw the error naming rank, collective, group
// and axes, with every communicator aborted. Barriers are not enqueued,
// and the other communicators cannot enqueue.
TEST(NcclEmulatedTest, EnqueuedCallOfAStoppedPeerFailsFromTheWatchdog) {
  std::string next, waited, barrier;
  double seconds = 0;
  // The bootstrap's all_reduce on the NCCL thread still times out later,
  // and runLocalRanks reports that.
  EXPECT_THROW(runLocalRanks(
      2,
      [&](Communicator &local) {
        auto comm = emulatedNccl(local);
        comm->setTimeout(std::chrono::milliseconds(200));
        std::shared_ptr<CommGroup> world = comm->createGroup({0, 1});
        world->setLabel("axes dp");
        if (comm->rank() == 1)
          return; // killed
        std::unique_ptr<Device> device = createCpuDevice();
        std::unique_ptr<Stream> stream = device->createStream();
        float x = 1;
        try {
          comm->enqueue({CollectiveKind::Barrier}, *world, *stream);
        } catch (const Error &e) {
          barrier = e.what();
        }
        auto start = std::chrono::steady_clock::now();
        comm->enqueue({CollectiveKind::AllReduce, nullptr, &x, 1}, *world,
                      *stream);
        std::this_thread::sleep_for(std::chrono::milliseconds(700));
        try {
          comm->barrier({0});
        } catch (const Error &e) {
          next = e.what();
          seconds = std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - start)
                        .count();
        }
        try {
          comm->waitEnqueued();
        } catch (const Error &e) {
          waited = e.what();
        }
      },
      std::chrono::milliseconds(2000)), Error);
  EXPECT_NE(barrier.find("rank 0: barrier over group [0,1] (axes dp): nccl "
                         "enqueues no barrier (start() it)"),
            std::string::npos)
      << barrier;
  SCOPED_TRACE(next);
  EXPECT_NE(next.find("rank 0: nccl communicator unusable after an earlier "
                      "failure: rank 0: all_reduce over group [0,1] (axes "
                      "dp) on nccl timed out after 200 ms (enqueued on a "
                      "device stream); aborted every nccl communicator of "
                      "this rank"),
            std::string::npos);
  EXPECT_LT(seconds, 0.7 + 0.5);
  EXPECT_NE(waited.find("rank 0: all_reduce over group [0,1] (axes dp) on "
                        "nccl timed out after 200 ms"),
            std::string::npos)
      << waited;
  runLocalRanks(1, [&](Communicator &local) {
    std::unique_ptr<Stream> stream = createCpuDevice()->createStream();
    float x = 1;
    EXPECT_FALSE(local.ordersOnStreams());
    try {
      local.enqueue({CollectiveKind::AllReduce, nullptr, &x, 1},
                    CommGroup({0}, 0), *stream);
      ADD_FAILURE() << "the local communicator enqueued a call";
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find(
                    "rank 0: all_reduce over group [0]: the local "
                    "communicator does not order calls on device streams"),
                std::string::npos)
          << e.what();
    }
  });
}

} // namespace
} // namespace partita::runtime
