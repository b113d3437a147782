//===- MpiCommTest.cpp - the MPI communicator under mpirun -np 4 ----------===//
//
// Run by the lit tests in test/Runtime/mpi:
//   partita-mpi-comm-test collectives
//       every collective (collective_permute too) on the world, on
//       concurrent subgroups, on an ordered subgroup that leaves a rank out
//       and on groups of one, in every dtype, and the errors a bad call
//       gets; each rank prints "rank N: all checks passed" or the first
//       wrong value.
//   partita-mpi-comm-test p2p
//       send and recv on any even number of ranks: ping-pong between ranks
//       2k and 2k+1 as positions of a group, a ring of posted calls waited
//       for in both orders (small and 8 MiB), 64 tags in flight received in
//       another order, zero-size messages; then the errors of a message of
//       another size or dtype (both sizes named) and of a bad peer or tag.
//       Each rank prints "rank N: point-to-point checks passed".
//   partita-mpi-comm-test p2p-stall|p2p-lag|p2p-stop [--timeout-ms T]
//       two ranks: a send (stall) or a receive (lag, stop) that the other
//       rank never matches times out naming rank, peer and tag, and the
//       census of the peer says it is alive but elsewhere (stall, lag) or
//       does not answer (stop: it sleeps); that rank exits 1.
//   partita-mpi-comm-test kill [--abort-on-error] [--timeout-ms T]
//       all ranks loop on all_reduce; rank 2 SIGKILLs itself from a second
//       thread 300 ms in, in the middle of its loop. The others print their
//       error and how long after the kill it came, then exit 1 (or let the
//       communicator call MPI_Abort).
//   partita-mpi-comm-test stall [--timeout-ms T]
//       rank 2 stops taking part (sleeps 120 s) before an all_reduce; the
//       others time out and exit 1.
//   partita-mpi-comm-test lag [--timeout-ms T]
//       rank 2 waits in a barrier over [2,3] (with 4 T to spare) instead of
//       the world's next all_reduce: it is alive and polling but has not
//       reached the call, which the others' timeout messages say.
// Expected values are computed from each rank's known inputs.
//
//===----------------------------------------------------------------------===//

#include "Messages.h"
#include "partita/runtime/Communicator.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <type_traits>

using namespace partita::runtime;
using partita::runtime::test::message;
using Clock = std::chrono::steady_clock;

namespace {

int64_t valueAt(int r, size_t i) {
  return static_cast<int64_t>((r * 7 + i * 3) % 11) - 5 + r;
}

int64_t combine(ReduceOp op, int64_t a, int64_t b) {
  return op == ReduceOp::Sum   ? a + b
         : op == ReduceOp::Max ? std::max(a, b)
                               : std::min(a, b);
}

std::vector<int> iota(int n) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

[[noreturn]] void die(int rank, const std::string &what) {
  std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

// f16 / bf16 encodings of small integers from their fields (exact).
uint16_t encode16(DType dtype, int64_t v) {
  int mantissaBits = dtype == DType::F16 ? 10 : 7;
  int bias = dtype == DType::F16 ? 15 : 127;
  if (v == 0)
    return 0;
  uint16_t sign = v < 0 ? 0x8000 : 0;
  int64_t a = v < 0 ? -v : v;
  int e = 63 - __builtin_clzll(static_cast<unsigned long long>(a));
  int64_t mantissa = (a - (int64_t(1) << e)) << mantissaBits >> e;
  return sign | static_cast<uint16_t>((e + bias) << mantissaBits) |
         static_cast<uint16_t>(mantissa);
}

template <typename T> T encode(DType dtype, int64_t v) {
  if constexpr (std::is_same_v<T, uint16_t>)
    return encode16(dtype, v);
  else
    return static_cast<T>(v);
}

template <typename T>
void checkAllReduce(Communicator &c, DType dtype, ReduceOp op,
                    const std::vector<int> &group, size_t count) {
  std::vector<T> data(count);
  for (size_t i = 0; i < count; ++i)
    data[i] = encode<T>(dtype, valueAt(c.rank(), i));
  c.allReduce(data.data(), count, dtype, op, group);
  for (size_t i = 0; i < count; ++i) {
    int64_t expected = valueAt(group[0], i);
    for (size_t q = 1; q < group.size(); ++q)
      expected = combine(op, expected, valueAt(group[q], i));
    if (data[i] != encode<T>(dtype, expected))
      die(c.rank(), std::string("all_reduce ") + toString(dtype) + " " +
                        toString(op) + " element " + std::to_string(i));
  }
}

void checkAllReduceEveryDtype(Communicator &c, const std::vector<int> &group) {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min})
    for (size_t count : {size_t(0), size_t(1), size_t(1000)}) {
      checkAllReduce<float>(c, DType::F32, op, group, count);
      checkAllReduce<double>(c, DType::F64, op, group, count);
      checkAllReduce<int32_t>(c, DType::I32, op, group, count);
      checkAllReduce<int64_t>(c, DType::I64, op, group, count);
      checkAllReduce<uint16_t>(c, DType::F16, op, group, count);
      checkAllReduce<uint16_t>(c, DType::BF16, op, group, count);
    }
}

int64_t allToAllValue(int from, int to, size_t k) {
  return from * 1000000 + to * 1000 + static_cast<int64_t>(k);
}

/// all_gather, reduce_scatter (also into the rank's own block) and
/// all_to_all over `group`, whose members must all call this.
void checkBlockCollectives(Communicator &c, const std::vector<int> &group) {
  int n = static_cast<int>(group.size()), r = c.rank();
  int p = static_cast<int>(std::find(group.begin(), group.end(), r) -
                           group.begin());
  const size_t count = 300;
  std::vector<int64_t> send(count), gathered(n * count, -1);
  for (size_t i = 0; i < count; ++i)
    send[i] = valueAt(r, i) + 100 * r;
  c.allGather(send.data(), gathered.data(), count, DType::I64, group);
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < count; ++i)
      if (gathered[q * count + i] != valueAt(group[q], i) + 100 * group[q])
        die(r, "all_gather block " + std::to_string(q));

  std::vector<float> blocks(n * count), mine(count, -1.0f);
  for (size_t i = 0; i < blocks.size(); ++i)
    blocks[i] = static_cast<float>(valueAt(r, i));
  c.reduceScatter(blocks.data(), mine.data(), count, DType::F32, ReduceOp::Sum,
                  group);
  c.reduceScatter(blocks.data(), blocks.data() + p * count, count, DType::F32,
                  ReduceOp::Sum, group);
  for (size_t i = 0; i < count; ++i) {
    int64_t expected = 0;
    for (int q = 0; q < n; ++q)
      expected += valueAt(group[q], p * count + i);
    if (mine[i] != static_cast<float>(expected) ||
        blocks[p * count + i] != static_cast<float>(expected))
      die(r, "reduce_scatter element " + std::to_string(i));
  }

  std::vector<int64_t> out(n * count), in(n * count, -1);
  for (int j = 0; j < n; ++j)
    for (size_t k = 0; k < count; ++k)
      out[j * count + k] = allToAllValue(p, j, k);
  c.allToAll(out.data(), in.data(), count, DType::I64, group);
  for (int i = 0; i < n; ++i)
    for (size_t k = 0; k < count; ++k)
      if (in[i * count + k] != allToAllValue(i, p, k))
        die(r, "all_to_all block " + std::to_string(i));
}

/// collective_permute over `group` (whose members must all call this) with
/// `pairs` of positions: each rank gets its source's block, or zeros when it
/// is no target.
void checkPermute(Communicator &c, const std::vector<int> &group,
                  const std::vector<std::pair<int, int>> &pairs,
                  size_t count) {
  int r = c.rank();
  int p = static_cast<int>(std::find(group.begin(), group.end(), r) -
                           group.begin());
  std::vector<int64_t> send(count), recv(count, -7);
  for (size_t i = 0; i < count; ++i)
    send[i] = 1000 * (p + 1) + static_cast<int64_t>(i);
  c.collectivePermute(send.data(), recv.data(), count, DType::I64, pairs,
                      group);
  int source = -1;
  for (auto [s, t] : pairs)
    if (t == p)
      source = s;
  for (size_t i = 0; i < count; ++i)
    if (recv[i] != (source < 0 ? 0 : 1000 * (source + 1) + int64_t(i)))
      die(r, "collective_permute element " + std::to_string(i) + " of " +
                 std::to_string(count));
}

int runCollectives() {
  std::unique_ptr<Communicator> c = createMpiCommunicator();
  int r = c->rank();
  if (c->size() != 4)
    die(r, "needs 4 ranks, got " + std::to_string(c->size()));
  if (std::strcmp(c->kind(), "mpi") != 0)
    die(r, "kind is not mpi");
  c->setTimeout(std::chrono::seconds(20));

  checkAllReduceEveryDtype(*c, iota(4));
  checkBlockCollectives(*c, iota(4));
  // Two pairs at once, then the other pairing (a 2x2 mesh's two axes).
  std::vector<int> pair = {r / 2 * 2, r / 2 * 2 + 1};
  std::vector<int> column = {r % 2, r % 2 + 2};
  for (int round = 0; round < 3; ++round) {
    checkAllReduceEveryDtype(*c, pair);
    checkBlockCollectives(*c, column);
  }
  // An ordered group without rank 2, in which rank 3 comes first.
  if (r != 2) {
    checkAllReduceEveryDtype(*c, {3, 1, 0});
    checkBlockCollectives(*c, {3, 1, 0});
  }
  // collective_permute: a ring (small and 8 MiB), a partial one with a self
  // pair and zeroed ranks, on concurrent pairs, on the ordered group
  // without rank 2, and on a group of one.
  for (size_t count : {size_t(0), size_t(5), size_t(1) << 20})
    checkPermute(*c, iota(4), {{0, 1}, {1, 2}, {2, 3}, {3, 0}}, count);
  checkPermute(*c, iota(4), {{3, 0}, {2, 2}}, 33);
  for (int round = 0; round < 3; ++round)
    checkPermute(*c, pair, {{0, 1}, {1, 0}}, 100);
  if (r != 2)
    checkPermute(*c, {3, 1, 0}, {{0, 2}, {2, 1}}, 50);
  checkPermute(*c, {r}, {{0, 0}}, 7);
  // Groups of one.
  checkAllReduceEveryDtype(*c, {r});
  checkBlockCollectives(*c, {r});
  c->barrier(iota(4));

  // A bad call fails with its reason, and the communicator then refuses
  // further calls (MPI cannot cancel what may be in flight).
  {
    std::unique_ptr<Communicator> bad = createMpiCommunicator();
    float x = 1;
    try {
      bad->allReduce(&x, 1, DType::F32, ReduceOp::Sum, {r, 9});
      die(r, "no error for a group naming rank 9");
    } catch (const Error &e) {
      if (r == 0)
        std::printf("error: %s\n", e.what());
    }
    try {
      bad->barrier(iota(4));
      die(r, "a failed communicator accepted a call");
    } catch (const Error &e) {
      if (r == 0)
        std::printf("error: %s\n", e.what());
    }
    if (r == 0)
      std::fflush(stdout);
  }
  // Groups made ahead and start/wait on them, as the executor issues
  // collectives: each group's communicator is set up in createGroup.
  {
    std::shared_ptr<CommGroup> world = c->createGroup(iota(4));
    std::shared_ptr<CommGroup> half = c->createGroup(pair);
    std::shared_ptr<CommGroup> self = c->createGroup({r});
    if (half->position() != r % 2 || world->position() != r)
      die(r, "group positions");
    for (int round = 0; round < 3; ++round) {
      int32_t x = r + 1;
      std::unique_ptr<CommRequest> request =
          c->start({CollectiveKind::AllReduce, nullptr, &x, 1, DType::I32,
                    ReduceOp::Sum, {}},
                   *half);
      request->wait(Clock::now() + std::chrono::seconds(20));
      request->wait(Clock::now()); // complete: returns at once
      if (x != pair[0] + pair[1] + 2)
        die(r, "started all_reduce gave " + std::to_string(x));
      int64_t mine = 10 * r;
      std::vector<int64_t> all(4, -1);
      c->run({CollectiveKind::AllGather, &mine, all.data(), 1, DType::I64,
              ReduceOp::Sum, {}},
             *world);
      for (int q = 0; q < 4; ++q)
        if (all[q] != 10 * q)
          die(r, "started all_gather block " + std::to_string(q));
      std::vector<float> send(2, float(r)), recv(1, -1);
      c->run({CollectiveKind::ReduceScatter, send.data(), recv.data(), 1,
              DType::F32, ReduceOp::Max, {}},
             *half);
      if (recv[0] != float(pair[1]))
        die(r, "started reduce_scatter");
      std::vector<int32_t> out(4), in(4, -1);
      for (int j = 0; j < 4; ++j)
        out[j] = r * 10 + j;
      c->run({CollectiveKind::AllToAll, out.data(), in.data(), 1, DType::I32,
              ReduceOp::Sum, {}},
             *world);
      for (int i = 0; i < 4; ++i)
        if (in[i] != i * 10 + r)
          die(r, "started all_to_all block " + std::to_string(i));
      float alone = 3;
      c->run({CollectiveKind::AllReduce, nullptr, &alone, 1, DType::F32,
              ReduceOp::Sum, {}},
             *self);
      if (alone != 3)
        die(r, "started all_reduce on a group of one");
      c->run({CollectiveKind::Barrier, nullptr, nullptr, 0, DType::F32,
              ReduceOp::Sum, {}},
             *world);
    }
  }
  c->barrier(iota(4));
  std::printf("rank %d: all checks passed\n", r);
  std::fflush(stdout);
  return 0;
}


CollectiveArgs peerArgs(CollectiveKind kind, const void *send, void *recv,
                        size_t count, DType dtype, int peer, int tag) {
  CollectiveArgs a{kind, send, recv, count, dtype};
  a.peer = peer;
  a.tag = tag;
  return a;
}

/// Runs `call` with a fresh communicator (a failure ends its communicator);
/// `call` returns whether this rank expected an Error, which rank `printer`
/// prints.
template <typename Call> void expectPeerError(int r, int printer, Call call) {
  std::unique_ptr<Communicator> fresh = createMpiCommunicator();
  fresh->setTimeout(std::chrono::seconds(20));
  try {
    if (call(*fresh))
      die(r, "no error");
  } catch (const Error &e) {
    if (r == printer) {
      std::printf("error: %s\n", e.what());
      std::fflush(stdout);
    }
  }
}

int runPointToPoint() {
  std::unique_ptr<Communicator> c = createMpiCommunicator();
  int r = c->rank(), n = c->size();
  if (n % 2)
    die(r, "needs an even number of ranks, got " + std::to_string(n));
  c->setTimeout(std::chrono::seconds(20));
  auto deadline = [] { return Clock::now() + std::chrono::seconds(20); };

  // Ping-pong between 2k and 2k+1: the group [2k+1, 2k] made ahead, and
  // blocking calls on the rank list [2k, 2k+1].
  std::vector<int> pair = {r / 2 * 2, r / 2 * 2 + 1};
  std::shared_ptr<CommGroup> forward = c->createGroup(pair);
  std::shared_ptr<CommGroup> reversed = c->createGroup({pair[1], pair[0]});
  int64_t value = 0;
  for (int k = 0; k < 50; ++k) {
    if (r % 2) { // position 0 of [2k+1, 2k]
      c->run(peerArgs(CollectiveKind::Send, &value, nullptr, 1, DType::I64, 1,
                      7),
             *reversed);
      c->run(peerArgs(CollectiveKind::Recv, nullptr, &value, 1, DType::I64, 1,
                      8),
             *reversed);
    } else {
      c->recv(&value, 1, DType::I64, 1, 7, pair);
      ++value;
      c->send(&value, 1, DType::I64, 1, 8, pair);
    }
  }
  if (value != 50)
    die(r, "ping-pong ended at " + std::to_string(value));

  // A ring of posted calls, waited for send first and receive first.
  std::shared_ptr<CommGroup> world = c->createGroup(iota(n));
  int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (size_t count : {size_t(3), size_t(1) << 21})
    for (int k = 0; k < 2; ++k) {
      std::vector<int32_t> out = message(r, 5, k, count), in(count, -1);
      auto recv = c->start(peerArgs(CollectiveKind::Recv, nullptr, in.data(),
                                    count, DType::I32, prev, 5),
                           *world);
      auto send = c->start(peerArgs(CollectiveKind::Send, out.data(), nullptr,
                                    count, DType::I32, next, 5),
                           *world);
      if (k == 0) {
        send->wait(deadline());
        recv->wait(deadline());
      } else {
        recv->wait(deadline());
        send->wait(deadline());
      }
      if (in != message(prev, 5, k, count))
        die(r, "ring message of " + std::to_string(count));
    }

  // 64 tags in flight from 2k to 2k+1, three messages each: sent tag by tag,
  // received with the tags descending, waited for in a shuffled order.
  {
    const int tags = 64, perTag = 3;
    const size_t count = 17;
    std::vector<std::unique_ptr<CommRequest>> requests;
    std::vector<std::vector<int32_t>> buffers;
    std::vector<std::pair<int, int>> what; // tag, k
    buffers.reserve(tags * perTag);
    for (int t = 0; t < tags; ++t)
      for (int k = 0; k < perTag; ++k) {
        if (r % 2) {
          int tag = tags - 1 - t;
          buffers.emplace_back(count, -1);
          what.emplace_back(tag, k);
          requests.push_back(c->start(peerArgs(CollectiveKind::Recv, nullptr,
                                               buffers.back().data(), count,
                                               DType::I32, 1, tag),
                                      *reversed));
        } else {
          buffers.push_back(message(r, t, k, count));
          requests.push_back(c->start(peerArgs(CollectiveKind::Send,
                                               buffers.back().data(), nullptr,
                                               count, DType::I32, 1, t),
                                      *forward));
        }
      }
    std::vector<size_t> order(requests.size());
    std::iota(order.begin(), order.end(), 0);
    for (size_t i = order.size(); i > 1; --i) // a fixed shuffle
      std::swap(order[i - 1], order[(i * 7919) % i]);
    for (size_t i : order)
      requests[i]->wait(deadline());
    if (r % 2)
      for (size_t i = 0; i < buffers.size(); ++i)
        if (buffers[i] != message(r - 1, what[i].first, what[i].second, count))
          die(r, "tag " + std::to_string(what[i].first) + " message " +
                     std::to_string(what[i].second));
  }

  // Zero-size messages between sized ones on one tag.
  {
    int32_t got[3] = {-1, -1, -1}, x = 42 + r;
    if (r % 2 == 0) {
      c->send(nullptr, 0, DType::F32, 1, 3, pair);
      c->send(&x, 1, DType::I32, 1, 3, pair);
      c->send(nullptr, 0, DType::F32, 1, 3, pair);
    } else {
      c->recv(got, 0, DType::F32, 0, 3, pair);
      c->recv(got + 1, 1, DType::I32, 0, 3, pair);
      c->recv(got + 2, 0, DType::F32, 0, 3, pair);
      if (got[0] != -1 || got[1] != 42 + r - 1 || got[2] != -1)
        die(r, "zero-size messages");
    }
  }
  c->barrier(iota(n));

  // A message of another size (shorter, longer) or dtype than its receive:
  // the receiver's error names both; rank 1 prints them.
  for (size_t sent : {size_t(2), size_t(8)})
    expectPeerError(r, 1, [&](Communicator &f) {
      float x[8] = {};
      if (r % 2 == 0) {
        f.send(x, sent, DType::F32, 1, 0, pair);
        return false;
      }
      f.recv(x, 4, DType::F32, 0, 0, pair);
      return true;
    });
  expectPeerError(r, 1, [&](Communicator &f) {
    int32_t x[4] = {};
    if (r % 2 == 0) {
      f.send(x, 4, DType::I32, 1, 1, pair);
      return false;
    }
    f.recv(x, 4, DType::F32, 0, 1, pair);
    return true;
  });
  // A bad peer and a bad tag, on every rank; rank 0 prints them.
  expectPeerError(r, 0, [&](Communicator &f) {
    float x = 0;
    f.send(&x, 1, DType::F32, 2, 0, pair);
    return true;
  });
  expectPeerError(r, 0, [&](Communicator &f) {
    float x = 0;
    f.recv(&x, 1, DType::F32, 1 - r % 2, kMaxTag + 3, pair);
    return true;
  });

  c->barrier(iota(n));
  std::printf("rank %d: point-to-point checks passed\n", r);
  std::fflush(stdout);
  return 0;
}

/// Two ranks; one call that no one matches times out, and the census of its
/// peer says what the peer is doing:
///   stall: rank 0 sends 8 MiB with tag 4 while rank 1, alive, waits (with
///          4 T to spare) for a message with tag 9;
///   lag:   rank 1 waits for a message with tag 9 while rank 0, alive, waits
///          (with 4 T to spare) for one with tag 5;
///   stop:  rank 1 waits for a message with tag 9 while rank 0 sleeps 4 T
///          (not polling, as a stopped process).
int runPointToPointStall(const std::string &how, int timeoutMs) {
  std::unique_ptr<Communicator> c = createMpiCommunicator();
  int r = c->rank();
  if (c->size() != 2)
    die(r, "needs 2 ranks, got " + std::to_string(c->size()));
  c->setTimeout(std::chrono::milliseconds(timeoutMs));
  c->barrier({0, 1});
  // The rank whose call times out; the other waits longer.
  int failing = how == "stall" ? 0 : 1;
  if (r != failing)
    c->setTimeout(std::chrono::milliseconds(4 * timeoutMs));
  try {
    if (r == failing && how == "stall") {
      // Large enough that MPI does not buffer it.
      std::vector<int32_t> x(size_t(1) << 21);
      c->send(x.data(), x.size(), DType::I32, 1, 4, {0, 1});
    } else if (r == 0 && how == "stop") {
      std::this_thread::sleep_for(std::chrono::milliseconds(4 * timeoutMs));
      return 0;
    } else {
      float x[4];
      c->recv(x, 4, DType::F32, 1 - r, r == failing ? 9 : 5, {0, 1});
    }
    die(r, "no timeout");
  } catch (const Error &e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::fflush(stderr);
    std::_Exit(1);
  }
}

/// `started`: the all_reduces go through a group made ahead and start/wait.
int runFailure(bool kill, bool abortOnError, int timeoutMs,
               bool started = false, bool lag = false) {
  MpiOptions options;
  options.abortOnError = abortOnError;
  std::unique_ptr<Communicator> c = createMpiCommunicator(options);
  int r = c->rank();
  c->setTimeout(std::chrono::milliseconds(timeoutMs));
  std::vector<int> world = iota(c->size());
  // Everyone is up before the clock starts.
  std::shared_ptr<CommGroup> worldGroup = c->createGroup(world);
  c->barrier(world);
  Clock::time_point start = Clock::now();
  const auto killAfter = std::chrono::milliseconds(300);
  if (kill && r == 2)
    std::thread([&] {
      std::this_thread::sleep_for(killAfter);
      std::raise(SIGKILL);
    }).detach();
  std::vector<float> data(4096);
  try {
    for (long round = 0;; ++round) {
      if (lag && r == 2 && round == 3) {
        c->setTimeout(std::chrono::milliseconds(4 * timeoutMs));
        c->barrier({2, 3});
      }
      if (!kill && !lag && r == 2 && round == 3)
        std::this_thread::sleep_for(std::chrono::seconds(120));
      std::fill(data.begin(), data.end(), static_cast<float>(r));
      if (started)
        c->run({CollectiveKind::AllReduce, nullptr, data.data(), data.size(),
                DType::F32, ReduceOp::Sum, {}},
               *worldGroup);
      else
        c->allReduce(data.data(), data.size(), DType::F32, ReduceOp::Sum,
                     world);
      if (data[0] != 6.0f)
        die(r, "all_reduce gave " + std::to_string(data[0]));
    }
  } catch (const Error &e) {
    long long ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                       Clock::now() - start)
                       .count();
    std::fprintf(stderr, "error: %s\n", e.what());
    if (kill)
      std::fprintf(stderr,
                   "rank %d: the error came %lld ms after rank 2 died "
                   "(timeout %d ms)\n",
                   r, ms - static_cast<long long>(killAfter.count()),
                   timeoutMs);
    std::fflush(stderr);
    // No MPI_Finalize: the all_reduce is still in flight.
    std::_Exit(1);
  }
}

} // namespace

int main(int argc, char **argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  bool abortOnError = false;
  int timeoutMs = 2000;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--abort-on-error")
      abortOnError = true;
    else if (arg == "--timeout-ms" && i + 1 < argc)
      timeoutMs = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "unknown argument: %s\n", arg.c_str());
      return 2;
    }
  }
  try {
    if (mode == "collectives")
      return runCollectives();
    if (mode == "p2p")
      return runPointToPoint();
    if (mode == "p2p-stall" || mode == "p2p-lag" || mode == "p2p-stop")
      return runPointToPointStall(mode.substr(4), timeoutMs);
    if (mode == "kill" || mode == "stall")
      return runFailure(mode == "kill", abortOnError, timeoutMs);
    if (mode == "stall-started")
      return runFailure(/*kill=*/false, abortOnError, timeoutMs,
                        /*started=*/true);
    if (mode == "lag")
      return runFailure(/*kill=*/false, abortOnError, timeoutMs,
                        /*started=*/false, /*lag=*/true);
  } catch (const Error &e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::fflush(stderr);
    std::_Exit(1);
  }
  std::fprintf(
      stderr, "usage: partita-mpi-comm-test collectives | p2p | "
              "p2p-stall|p2p-lag|p2p-stop [--timeout-ms T] | kill "
              "[--abort-on-error] [--timeout-ms T] | stall [--timeout-ms T] | "
              "stall-started [--timeout-ms T] | lag [--timeout-ms T]\n");
  return 2;
}
