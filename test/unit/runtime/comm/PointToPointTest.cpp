//===- PointToPointTest.cpp - send and recv on local and emulated nccl ----===//
//
// Point-to-point calls between ranks as threads: the local communicator
// (blocking and start/wait, peers as positions in a group, tags, ordering,
// rendezvous sends) and the nccl communicator on its emulated layer (headers
// checked before ncclRecv, messages in send order). Every expected value is
// a formula of the sending rank, tag and index, computed here; every error
// is compared in full.
//
//===----------------------------------------------------------------------===//

#include "FailingRanks.h"
#include "Messages.h"
#include "partita/runtime/Communicator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <numeric>
#include <random>
#include <regex>
#include <thread>

using namespace partita::runtime;
using namespace std::chrono_literals;
using namespace partita::runtime::test;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<int> iota(int n) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}


CollectiveArgs sendArgs(const void *data, size_t count, DType dtype, int peer,
                        int tag) {
  CollectiveArgs a{CollectiveKind::Send, data, nullptr, count, dtype};
  a.peer = peer;
  a.tag = tag;
  return a;
}

CollectiveArgs recvArgs(void *data, size_t count, DType dtype, int peer,
                        int tag) {
  CollectiveArgs a{CollectiveKind::Recv, nullptr, data, count, dtype};
  a.peer = peer;
  a.tag = tag;
  return a;
}

/// Failures seen on the rank threads, checked on the main thread.
class Failures {
public:
  void expect(bool ok, int rank, const std::string &what) {
    if (ok)
      return;
    std::lock_guard<std::mutex> lock(mutex);
    list.push_back("rank " + std::to_string(rank) + ": " + what);
  }
  std::string text() const {
    std::string s;
    for (const std::string &f : list)
      s += f + "\n";
    return s;
  }
  bool empty() const { return list.empty(); }

private:
  std::mutex mutex;
  std::vector<std::string> list;
};

// --- local: results ------------------------------------------------------

// Tests a ping-pong of 50 round trips between ranks 3 and 1 of 4, addressed
// as positions of the group [3,1] (made ahead) and of the rank list [1,3]:
// every message is the previous one plus one, so a lost or repeated message
// shows in the final value.
TEST(PointToPoint, PingPongBetweenPositionsOfAGroup) {
  const int rounds = 50;
  std::vector<int64_t> last(4, -1);
  runLocalRanks(4, [&](Communicator &c) {
    std::shared_ptr<CommGroup> pair =
        c.rank() % 2 ? c.createGroup({3, 1}) : c.createGroup({0, 2});
    if (c.rank() % 2 == 0)
      return; // ranks 0 and 2 take no part
    int64_t value = 0;
    bool serves = c.rank() == 3; // position 0 of [3,1]
    for (int k = 0; k < rounds; ++k) {
      if (serves) {
        c.run(sendArgs(&value, 1, DType::I64, /*peer=*/1, /*tag=*/7), *pair);
        c.run(recvArgs(&value, 1, DType::I64, 1, 8), *pair);
      } else {
        // Blocking calls on the rank list [1,3]: rank 3 is position 1.
        c.recv(&value, 1, DType::I64, 1, 7, {1, 3});
        ++value;
        c.send(&value, 1, DType::I64, 1, 8, {1, 3});
      }
    }
    last[c.rank()] = value;
  });
  EXPECT_EQ(last[3], rounds);
  EXPECT_EQ(last[1], rounds);
}

// Tests a ring (each rank sends to rank + 1 and receives from rank - 1) in
// which every rank posts its receive and its send and then waits for both,
// the pattern that cannot deadlock, for 2, 3, 4 and 8 ranks, small and
// 1 MiB messages, three rounds.
TEST(PointToPoint, RingOfPostedCallsDoesNotDeadlock) {
  for (int n : {2, 3, 4, 8})
    for (size_t count : {size_t(3), size_t(1) << 18}) {
      Failures failures;
      runLocalRanks(
          n,
          [&](Communicator &c) {
            int r = c.rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
            std::shared_ptr<CommGroup> world = c.createGroup(iota(n));
            for (int k = 0; k < 3; ++k) {
              std::vector<int32_t> out = message(r, 5, k, count),
                                   in(count, -1);
              auto recv = c.start(recvArgs(in.data(), count, DType::I32, prev,
                                           5),
                                  *world);
              auto send = c.start(sendArgs(out.data(), count, DType::I32,
                                           next, 5),
                                  *world);
              send->wait(Clock::now() + 10s);
              recv->wait(Clock::now() + 10s);
              recv->wait(Clock::now()); // complete: returns at once
              failures.expect(in == message(prev, 5, k, count), r,
                              "round " + std::to_string(k) + " of " +
                                  std::to_string(n) + " ranks, " +
                                  std::to_string(count) + " elements");
            }
          },
          10s);
      EXPECT_TRUE(failures.empty()) << failures.text();
    }
}

// Tests the blocking ring with even ranks sending first and odd ranks
// receiving first (the order that works with rendezvous sends).
TEST(PointToPoint, BlockingRingAlternatingOrder) {
  const int n = 4;
  Failures failures;
  runLocalRanks(n, [&](Communicator &c) {
    int r = c.rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
    std::vector<int32_t> out = message(r, 0, 0, 100), in(100, -1);
    if (r % 2 == 0) {
      c.send(out.data(), 100, DType::I32, next, 0, iota(n));
      c.recv(in.data(), 100, DType::I32, prev, 0, iota(n));
    } else {
      c.recv(in.data(), 100, DType::I32, prev, 0, iota(n));
      c.send(out.data(), 100, DType::I32, next, 0, iota(n));
    }
    failures.expect(in == message(prev, 0, 0, 100), r, "ring");
  });
  EXPECT_TRUE(failures.empty()) << failures.text();
}

// Tests 64 tags in flight between two ranks, three messages per tag: the
// sender posts them tag by tag, the receiver posts its receives in another
// order (tags descending) and waits for them in a shuffled order; each
// receive gets its tag's message, and a tag's messages arrive in the order
// they were sent.
TEST(PointToPoint, ManyTagsInFlight) {
  const int tags = 64, perTag = 3;
  const size_t count = 17;
  Failures failures;
  runLocalRanks(2, [&](Communicator &c) {
    std::shared_ptr<CommGroup> pair = c.createGroup({0, 1});
    std::vector<std::unique_ptr<CommRequest>> requests;
    std::vector<std::vector<int32_t>> buffers;
    std::vector<std::pair<int, int>> what; // tag, k
    buffers.reserve(tags * perTag);
    if (c.rank() == 0) {
      for (int tag = 0; tag < tags; ++tag)
        for (int k = 0; k < perTag; ++k) {
          buffers.push_back(message(0, tag, k, count));
          requests.push_back(c.start(
              sendArgs(buffers.back().data(), count, DType::I32, 1, tag),
              *pair));
        }
    } else {
      for (int tag = tags - 1; tag >= 0; --tag)
        for (int k = 0; k < perTag; ++k) {
          buffers.emplace_back(count, -1);
          what.emplace_back(tag, k);
          requests.push_back(c.start(
              recvArgs(buffers.back().data(), count, DType::I32, 0, tag),
              *pair));
        }
    }
    std::vector<size_t> order(requests.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(c.rank() + 11));
    for (size_t i : order)
      requests[i]->wait(Clock::now() + 10s);
    if (c.rank() == 1)
      for (size_t i = 0; i < buffers.size(); ++i)
        failures.expect(
            buffers[i] == message(0, what[i].first, what[i].second, count), 1,
            "tag " + std::to_string(what[i].first) + " message " +
                std::to_string(what[i].second));
  });
  EXPECT_TRUE(failures.empty()) << failures.text();
}

// Tests zero-size messages (null buffers) between sized ones on one tag:
// they take their place in the order and leave the buffers alone.
TEST(PointToPoint, ZeroSizeMessages) {
  std::vector<int32_t> got(4, -1);
  runLocalRanks(2, [&](Communicator &c) {
    if (c.rank() == 0) {
      int32_t x = 42;
      c.send(nullptr, 0, DType::F32, 1, 3, {0, 1});
      c.send(&x, 1, DType::I32, 1, 3, {0, 1});
      c.send(nullptr, 0, DType::F32, 1, 3, {0, 1});
    } else {
      c.recv(got.data(), 0, DType::F32, 0, 3, {0, 1});
      c.recv(got.data() + 1, 1, DType::I32, 0, 3, {0, 1});
      c.recv(got.data() + 2, 0, DType::F32, 0, 3, {0, 1});
    }
  });
  EXPECT_EQ(got, (std::vector<int32_t>{-1, 42, -1, -1}));
}

// Tests that a blocking send returns only once its receive has been posted
// (local sends are rendezvous): the receiver sleeps 200 ms after a barrier,
// and the send returns after the moment the receive was posted.
TEST(PointToPoint, BlockingSendWaitsForItsReceive) {
  Clock::time_point sendStarted, sendReturned, recvPosted;
  runLocalRanks(2, [&](Communicator &c) {
    float x = 1.5f;
    c.barrier({0, 1});
    if (c.rank() == 0) {
      sendStarted = Clock::now();
      c.send(&x, 1, DType::F32, 1, 0, {0, 1});
      sendReturned = Clock::now();
    } else {
      std::this_thread::sleep_for(200ms);
      recvPosted = Clock::now();
      c.recv(&x, 1, DType::F32, 0, 0, {0, 1});
    }
  });
  EXPECT_LT(sendStarted, recvPosted); // the send had to wait
  EXPECT_GE(sendReturned, recvPosted);
}

// Tests that a started send's buffer may be reused at once (the message is
// copied when it is posted): the sender overwrites it before the receiver
// has posted anything.
TEST(PointToPoint, StartedSendBufferIsFreeAtOnce) {
  std::vector<int32_t> got(3, -1);
  runLocalRanks(2, [&](Communicator &c) {
    std::shared_ptr<CommGroup> pair = c.createGroup({0, 1});
    if (c.rank() == 0) {
      std::vector<int32_t> buffer = {1, 2, 3};
      auto request = c.start(sendArgs(buffer.data(), 3, DType::I32, 1, 0),
                             *pair);
      std::fill(buffer.begin(), buffer.end(), 0);
      request->wait(Clock::now() + 10s);
    } else {
      std::this_thread::sleep_for(50ms);
      c.run(recvArgs(got.data(), 3, DType::I32, 0, 0), *pair);
    }
  });
  EXPECT_EQ(got, (std::vector<int32_t>{1, 2, 3}));
}

// --- local: errors -------------------------------------------------------

// Tests that a receive of another size or dtype than its message is an
// error naming both ranks, the tag and both sizes, and that the sender
// then fails at once instead of at its timeout.
TEST(PointToPoint, SizeOrDtypeMismatchNamesBothSides) {
  std::string root;
  auto outcomes = runFailing(
      2, 5000ms,
      [](Communicator &c) {
        float x[8] = {};
        if (c.rank() == 0)
          c.send(x, 8, DType::F32, 1, 5, {0, 1});
        else
          c.recv(x, 4, DType::F32, 0, 5, {0, 1});
      },
      root);
  const std::string mismatch = "recv of 4 x f32 from rank 0 with tag 5 does "
                               "not match the 8 x f32 that rank 0 sent";
  EXPECT_EQ(root, "rank 1: " + mismatch);
  EXPECT_EQ(outcomes[0].error,
            "rank 0: send of 8 x f32 to rank 1 with tag 5 aborted: rank 1 "
            "failed: " +
                mismatch);
  EXPECT_LT(outcomes[0].ms, 5000);

  runFailing(
      2, 5000ms,
      [](Communicator &c) {
        int32_t x[4] = {};
        if (c.rank() == 1)
          c.send(x, 4, DType::I32, 0, 0, {0, 1});
        else
          c.recv(x, 4, DType::F32, 1, 0, {0, 1});
      },
      root);
  EXPECT_EQ(root, "rank 0: recv of 4 x f32 from rank 1 with tag 0 does not "
                  "match the 4 x i32 that rank 1 sent");
}

// Tests that a receive whose sender never sends, and a send whose receiver
// never receives, time out after the communicator's timeout naming the
// rank, the peer and the tag.
TEST(PointToPoint, MissingPeerTimesOutNamingRankPeerAndTag) {
  std::string root;
  auto outcomes = runFailing(
      3, 300ms,
      [](Communicator &c) {
        float x[4] = {};
        if (c.rank() == 1)
          c.recv(x, 4, DType::F32, 0, 9, {0, 1, 2});
      },
      root);
  EXPECT_EQ(root, "rank 1: recv of 4 x f32 from rank 0 with tag 9 timed out "
                  "after 300 ms waiting for rank 0 (it had posted 0 sends "
                  "with tag 9 to rank 1, and this receive is number 1)");
  EXPECT_GE(outcomes[1].ms, 300);
  EXPECT_LT(outcomes[1].ms, 5000);

  outcomes = runFailing(
      3, 300ms,
      [](Communicator &c) {
        int64_t x[2] = {};
        if (c.rank() == 0)
          c.send(x, 2, DType::I64, 1, 4, {0, 2}); // position 1: rank 2
      },
      root);
  EXPECT_EQ(root, "rank 0: send of 2 x i64 to rank 2 with tag 4 timed out "
                  "after 300 ms waiting for rank 2 (it had posted 0 receives "
                  "with tag 4 from rank 0, and this send is number 1)");
  EXPECT_GE(outcomes[0].ms, 300);

  // A message with another tag does not match.
  runFailing(
      2, 300ms,
      [](Communicator &c) {
        float x = 0;
        std::shared_ptr<CommGroup> pair = c.createGroup({0, 1});
        auto request = c.rank() == 0
                           ? c.start(sendArgs(&x, 1, DType::F32, 1, 1), *pair)
                           : c.start(recvArgs(&x, 1, DType::F32, 0, 2), *pair);
        request->wait(Clock::now() + 300ms);
      },
      root);
  EXPECT_TRUE(
      root == "rank 0: send of 1 x f32 to rank 1 with tag 1 timed out after "
              "300 ms waiting for rank 1 (it had posted 0 receives with tag 1 "
              "from rank 0, and this send is number 1)" ||
      root == "rank 1: recv of 1 x f32 from rank 0 with tag 2 timed out after "
              "300 ms waiting for rank 0 (it had posted 0 sends with tag 2 to "
              "rank 1, and this receive is number 1)")
      << root;
}

// Tests that every rank sending first in a ring of blocking sends (which
// only buffered sends survive) times out with a named send instead of
// hanging: local sends are rendezvous, as the pipeline validator assumes.
TEST(PointToPoint, BlockingRingSendingFirstTimesOut) {
  std::string root;
  runFailing(
      3, 200ms,
      [](Communicator &c) {
        int32_t x = c.rank();
        int n = c.size();
        c.send(&x, 1, DType::I32, (c.rank() + 1) % n, 3, iota(n));
        c.recv(&x, 1, DType::I32, (c.rank() + n - 1) % n, 3, iota(n));
      },
      root);
  std::smatch m;
  ASSERT_TRUE(std::regex_match(
      root, m,
      std::regex("rank ([0-2]): send of 1 x i32 to rank ([0-2]) with tag 3 "
                 "timed out after 200 ms waiting for rank ([0-2]) \\(it had "
                 "posted 0 receives with tag 3 from rank \\1, and this send "
                 "is number 1\\)")))
      << root;
  EXPECT_EQ(std::stoi(m[2]), (std::stoi(m[1]) + 1) % 3);
  EXPECT_EQ(m[2], m[3]);
}

// Tests the errors of bad peers, tags and groups; the other rank, waiting
// for a message, fails at once instead of at its timeout.
TEST(PointToPoint, BadPeerTagOrGroupIsNamed) {
  struct Case {
    std::function<void(Communicator &)> call;
    std::string error;
  };
  float x = 0;
  std::vector<Case> cases = {
      {[&](Communicator &c) { c.send(&x, 1, DType::F32, 2, 0, {0, 1}); },
       "rank 0: send with tag 0 to position 2 of group [0,1]: the group has "
       "positions 0..1"},
      {[&](Communicator &c) { c.recv(&x, 1, DType::F32, -1, 0, {1, 0}); },
       "rank 0: recv with tag 0 from position -1 of group [1,0]: the group "
       "has positions 0..1"},
      {[&](Communicator &c) { c.send(&x, 1, DType::F32, 1, 0, {1, 0}); },
       "rank 0: send with tag 0 to position 1 of group [1,0]: that is rank 0 "
       "itself, and a rank cannot send to itself"},
      {[&](Communicator &c) { c.send(&x, 1, DType::F32, 1, -1, {0, 1}); },
       "rank 0: send with tag -1 to position 1 of group [0,1]: tags are "
       "0..32764"},
      {[&](Communicator &c) { c.recv(&x, 1, DType::F32, 1, 32767, {0, 1}); },
       "rank 0: recv with tag 32767 from position 1 of group [0,1]: tags are "
       "0..32764"},
      {[&](Communicator &c) { c.send(&x, 1, DType::F32, 0, 0, {1}); },
       "rank 0: send over group [1]: the group does not contain the calling "
       "rank"},
      {[&](Communicator &c) { c.recv(&x, 1, DType::F32, 1, 0, {0, 2}); },
       "rank 0: recv over group [0,2]: the group names rank 2, but ranks are "
       "0..1"},
  };
  for (const Case &k : cases) {
    std::string root;
    auto outcomes = runFailing(
        2, 5000ms,
        [&](Communicator &c) {
          float y = 0;
          if (c.rank() == 0)
            k.call(c);
          else
            c.recv(&y, 1, DType::F32, 0, 0, {0, 1});
        },
        root);
    EXPECT_EQ(root, k.error);
    EXPECT_EQ(outcomes[1].error.rfind("rank 1: recv of 1 x f32 from rank 0 "
                                      "with tag 0 aborted: rank 0 failed: ",
                                      0),
              0u)
        << outcomes[1].error;
    EXPECT_LT(outcomes[1].ms, 5000);
  }
}

// --- nccl on its emulated layer ------------------------------------------

std::unique_ptr<Communicator> emulatedNccl(Communicator &local) {
  NcclOptions options;
  options.emulate = true;
  return createNcclCommunicator(local, options);
}

// Tests ncclSend / ncclRecv through start() on split groups of a 2x2 mesh
// (rows [0,1],[2,3]): a ping-pong along each row with two tags, 1 MiB and
// zero-size messages, and the blocking host-memory calls through the
// bootstrap.
TEST(PointToPointNccl, PingPongOnSplitGroups) {
  Failures failures;
  runLocalRanks(4, [&](Communicator &local) {
    auto comm = emulatedNccl(local);
    int r = comm->rank();
    std::shared_ptr<CommGroup> row =
        comm->createGroup({r / 2 * 2, r / 2 * 2 + 1});
    int other = 1 - row->position(), partner = row->ranks()[other];
    for (size_t count : {size_t(0), size_t(5), size_t(1) << 18})
      for (int k = 0; k < 3; ++k) {
        std::vector<int32_t> out = message(r, 2, k, count), in(count, -1);
        if (row->position() == 0) {
          comm->run(sendArgs(out.data(), count, DType::I32, other, 2), *row);
          comm->run(recvArgs(in.data(), count, DType::I32, other, 3), *row);
        } else {
          comm->run(recvArgs(in.data(), count, DType::I32, other, 2), *row);
          comm->run(sendArgs(out.data(), count, DType::I32, other, 3), *row);
        }
        failures.expect(in == message(partner, 2, k, count), r,
                        "nccl message " + std::to_string(k) + " of " +
                            std::to_string(count));
      }
    double host = 0.25 * r, back = -1;
    if (row->position() == 0) {
      comm->send(&host, 1, DType::F64, other, 0, row->ranks());
      comm->recv(&back, 1, DType::F64, other, 0, row->ranks());
    } else {
      comm->recv(&back, 1, DType::F64, other, 0, row->ranks());
      comm->send(&host, 1, DType::F64, other, 0, row->ranks());
    }
    failures.expect(back == 0.25 * partner, r, "blocking nccl send / recv");
  });
  EXPECT_TRUE(failures.empty()) << failures.text();
}

// Tests that a receive of another size over nccl is refused from its
// header, before ncclRecv is posted, naming both sides.
TEST(PointToPointNccl, SizeMismatchIsRefusedFromTheHeader) {
  std::string root;
  runFailing(
      2, 5000ms,
      [](Communicator &local) {
        auto comm = emulatedNccl(local);
        std::shared_ptr<CommGroup> pair = comm->createGroup({0, 1});
        pair->setLabel("axes pp");
        float x[8] = {};
        if (comm->rank() == 0)
          comm->run(sendArgs(x, 8, DType::F32, 1, 6), *pair);
        else
          comm->run(recvArgs(x, 4, DType::F32, 0, 6), *pair);
      },
      root);
  EXPECT_EQ(root, "rank 1: recv of 4 x f32 from rank 0 with tag 6 (axes pp) "
                  "does not match the 8 x f32 that rank 0 sent; aborted "
                  "every nccl communicator of this rank");
}

// Tests that receiving two messages out of send order over nccl (which has
// no tags and would match them the other way round) is an error saying so.
TEST(PointToPointNccl, ReceivesOutOfSendOrderAreRefused) {
  std::string root;
  runFailing(
      2, 5000ms,
      [](Communicator &local) {
        auto comm = emulatedNccl(local);
        std::shared_ptr<CommGroup> pair = comm->createGroup({0, 1});
        float a = 1, b = 2;
        if (comm->rank() == 0) {
          auto first = comm->start(sendArgs(&a, 1, DType::F32, 1, 1), *pair);
          auto second = comm->start(sendArgs(&b, 1, DType::F32, 1, 2), *pair);
          first->wait(Clock::now() + 5s);
          second->wait(Clock::now() + 5s);
        } else {
          comm->run(recvArgs(&b, 1, DType::F32, 0, 2), *pair);
        }
      },
      root);
  EXPECT_EQ(root, "rank 1: recv of 1 x f32 from rank 0 with tag 2 on nccl: "
                  "rank 0 sent that message as its message 1 to rank 1 on "
                  "this group, but this is the receive of message 0 (nccl "
                  "matches the messages between two ranks in the order they "
                  "are sent: receive them in that order); aborted every nccl "
                  "communicator of this rank");
}

// Tests that an nccl receive whose sender never sends times out naming the
// rank, the peer and the tag.
TEST(PointToPointNccl, MissingSenderTimesOut) {
  std::string root;
  auto outcomes = runFailing(
      2, 300ms,
      [](Communicator &local) {
        auto comm = emulatedNccl(local);
        std::shared_ptr<CommGroup> pair = comm->createGroup({0, 1});
        float x = 0;
        if (comm->rank() == 1)
          comm->run(recvArgs(&x, 1, DType::F32, 0, 4), *pair);
      },
      root);
  // The header's receive timed out on the bootstrap, which reports it first.
  const std::string header = "rank 1: recv of 4 x i64 from rank 0 with tag 4 "
                             "timed out after 300 ms waiting for rank 0 (it "
                             "had posted 0 sends with tag 4 to rank 1, and "
                             "this receive is number 1)";
  EXPECT_EQ(root, header);
  EXPECT_EQ(outcomes[1].error,
            "rank 1: recv of 1 x f32 from rank 0 with tag 4 on nccl: "
            "receiving its header: " +
                header + "; aborted every nccl communicator of this rank");
}

} // namespace
