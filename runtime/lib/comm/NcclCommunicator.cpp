//===- NcclCommunicator.cpp - collectives on GPUs through NCCL ------------===//
//
// Rank 0 makes NCCL's unique id and broadcasts it over the bootstrap
// communicator (MPI across processes; the local communicator when
// emulated); every rank then makes the world NCCL communicator, and each
// group of createGroup is split from it (ncclCommSplit: color = the group's
// smallest rank, key = the position), so every rank of the world must make
// its groups together, in the same order, as the executor does (one group
// per mesh axis set, each rank passing its own group of that axis). All NCCL
// calls go through the thin NCCL layer (runtime/lib/cuda/NcclApi.h), real or
// emulated.
//
// Failure: communicators are non-blocking; start() posts the collective
// and a request's wait polls its completion and ncclCommGetAsyncError until
// the deadline. On an error or at the deadline every NCCL communicator of
// this rank is aborted (ncclCommAbort) and the wait throws Error naming the
// rank, the collective, the group and its mesh axes:
//   rank 1: all_reduce over group [0,1] (axes dp) on nccl timed out after
//   5000 ms; aborted every nccl communicator of this rank
// After that the communicator refuses every call.
//
// Stream-ordered calls (enqueue, what the executor uses inside a step): the
// collective is posted on the layer ordered on the caller's device stream
// (events, see NcclApi.h) and returns at once; the request is kept in
// `enqueued`. A watchdog thread (started by the first enqueue) polls them
// every kWatchPeriod: a completed one is dropped, a failed one or one that
// makes no progress fails the communicator as above (every NCCL
// communicator aborted, which also ends the NCCL kernels a device stream
// waits for, so the host is never stuck behind them). The next call or
// waitEnqueued() throws that error. No progress: the oldest unfinished
// call of an NCCL communicator (whose calls run in order) not complete
// within the timeout of its stream reaching it (its inputs ready) and of
// the communicator's previous completion; so the timeout bounds each wait
// for a peer, not a whole step the host enqueued at once (a pipelined
// one). A call its stream never reaches fails after kQueuedTimeouts.
// Send and Recv are enqueued the same way after their header (below): the
// host of a receive waits for its sender's host to have sent the header,
// not for either device; the sends' headers are waited for by
// waitEnqueued, once their receives are known to be complete.
//
// The blocking methods that take a rank list (the training loop's stop flag,
// a checkpoint's barrier, send and recv) act on host memory, which NCCL
// cannot read, and go through the bootstrap communicator.
//
// start() with Send or Recv on a group: ncclSend / ncclRecv on the group's
// NCCL communicator. NCCL has no tags and matches a communicator's messages
// between two ranks in the order they are posted, and a receive of another
// size than its send is undefined there, so each message is preceded by a
// header over the bootstrap under the message's tag: its count, dtype,
// number (the how-many-th message from the sender to the receiver on this
// group) and group. The receiver takes the header when it starts the
// receive, before it posts ncclRecv, and refuses a message of another size
// or dtype, of another group, or that NCCL would match with another receive
// (posted out of order), naming both sides. So a started receive returns
// once its sender has started the send; and since a communicator's NCCL
// calls run in order on its stream, a rank whose send is ahead of its
// receive on one group waits for the send's receiver first (the pipeline
// validator's rendezvous model covers that).
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Communicator.h"
#include "partita/runtime/CudaBackend.h"

#include "CommUtils.h"
#include "runtime/lib/cuda/NcclApi.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

namespace partita::runtime {
namespace {

using comm::describeCall;
using nccl::Clock;

/// How often the watchdog polls the enqueued calls.
constexpr std::chrono::milliseconds kWatchPeriod(5);
/// The most enqueued calls of one NCCL communicator not yet seen complete:
/// an enqueue beyond it first waits for the oldest, so the communicator's
/// stream always has room (the real layer posts on it holding its lock,
/// which the watchdog's abort needs) and the host runs at most this far
/// ahead of NCCL.
constexpr size_t kMaxEnqueuedPerComm = 64;
/// A call whose stream has not reached it fails after this many timeouts
/// from its enqueue (the host may run a whole step ahead of the device).
constexpr int kQueuedTimeouts = 10;

class NcclGroup final : public CommGroup {
public:
  NcclGroup(std::vector<int> ranks, int position,
            std::shared_ptr<nccl::Comm> comm)
      : CommGroup(std::move(ranks), position), comm(std::move(comm)) {}
  std::shared_ptr<nccl::Comm> comm;
};

class NcclCommunicator;

/// A send's header on its way over the bootstrap.
struct SentHeader {
  int64_t words[4] = {}; // count, dtype, number, groupHash
  std::unique_ptr<CommRequest> request;
};

class NcclRequest final : public CommRequest {
public:
  NcclRequest(NcclCommunicator &owner, const NcclGroup &group,
              std::unique_ptr<nccl::Op> op, std::string head, Clock::time_point started)
      : owner(owner), group(group), op(std::move(op)), head(std::move(head)),
        started(started) {}
  void wait(Clock::time_point deadline) override;

  /// Send and Recv: the peer a timeout names, and a send's header.
  int peerRank = -1;
  std::unique_ptr<SentHeader> header;

private:
  NcclCommunicator &owner;
  const NcclGroup &group;
  std::unique_ptr<nccl::Op> op;
  std::string head;
  Clock::time_point started;
  bool done = false;
};

class NcclCommunicator final : public Communicator {
public:
  NcclCommunicator(Communicator &bootstrap, std::unique_ptr<nccl::NcclApi> api,
                   bool emulated)
      : boot(bootstrap), api(std::move(api)), emulated(emulated) {
    setTimeout(bootstrap.getTimeout());
  }
  ~NcclCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    watched.notify_all();
    if (watchdog.joinable())
      watchdog.join();
    {
      // Calls still in flight (a failed step's): abort rather than let
      // ncclCommDestroy wait for them.
      std::lock_guard<std::mutex> lock(mutex);
      sweepLocked();
      if (!enqueued.empty())
        failLocked("rank " + std::to_string(rank()) +
                   ": nccl communicator destroyed with " +
                   std::to_string(enqueued.size()) + " calls in flight");
    }
    enqueued.clear();
    groups.clear();
    world.reset();
  }

  /// The id broadcast and the world communicator.
  void init(const NcclOptions &options) {
    nccl::UniqueId id;
    if (rank() == 0)
      id = api->uniqueId();
    // A broadcast from rank 0 as a gather: the bootstrap has no broadcast.
    std::vector<nccl::UniqueId> all(size());
    boot.allGather(id.bytes, all.data(), sizeof(id.bytes) / 4, DType::I32,
                   allRanks(size()));
    id = all[0];
    idText = nccl::fingerprint(id);
    if (options.afterId)
      options.afterId(idText);
    if (!emulated) {
      std::string error = cudaDeviceError();
      if (!error.empty())
        throw Error("rank " + std::to_string(rank()) +
                    ": --comm nccl: no usable CUDA device: " + error +
                    " (nccl unique id " + idText + " from rank 0 received)");
    }
    world = api->initRank(size(), id, rank(), Clock::now() + getTimeout());
  }

  int rank() const override { return boot.rank(); }
  int size() const override { return boot.size(); }
  const char *kind() const override { return "nccl"; }
  // A real GPU's executor would otherwise issue from a CUDA host callback,
  // where CUDA calls are not allowed.
  bool callableFromAnyThread() const override { return emulated; }
  bool takesDeviceMemory() const override { return true; }
  bool ordersOnStreams() const override { return true; }

  void allReduce(void *data, size_t count, DType dtype, ReduceOp op,
                 const std::vector<int> &group) override {
    checkUsable();
    boot.allReduce(data, count, dtype, op, group);
  }
  void allGather(const void *send, void *recv, size_t count, DType dtype,
                 const std::vector<int> &group) override {
    checkUsable();
    boot.allGather(send, recv, count, dtype, group);
  }
  void reduceScatter(const void *send, void *recv, size_t count, DType dtype,
                     ReduceOp op, const std::vector<int> &group) override {
    checkUsable();
    boot.reduceScatter(send, recv, count, dtype, op, group);
  }
  void allToAll(const void *send, void *recv, size_t count, DType dtype,
                const std::vector<int> &group) override {
    checkUsable();
    boot.allToAll(send, recv, count, dtype, group);
  }
  void collectivePermute(const void *send, void *recv, size_t count,
                         DType dtype,
                         const std::vector<std::pair<int, int>> &pairs,
                         const std::vector<int> &group) override {
    checkUsable();
    boot.collectivePermute(send, recv, count, dtype, pairs, group);
  }
  void send(const void *data, size_t count, DType dtype, int peer, int tag,
            const std::vector<int> &group) override {
    checkUsable();
    checkCallerTag("send", tag);
    boot.send(data, count, dtype, peer, tag, group);
  }
  void recv(void *data, size_t count, DType dtype, int peer, int tag,
            const std::vector<int> &group) override {
    checkUsable();
    checkCallerTag("recv", tag);
    boot.recv(data, count, dtype, peer, tag, group);
  }

  /// The bootstrap takes the runtime's own tags (the emulated layer's
  /// messages); a caller of this communicator may not use them.
  void checkCallerTag(const char *what, int tag) const {
    if (tag > kMaxTag)
      throw Error("rank " + std::to_string(rank()) + ": " + what +
                  " with tag " + std::to_string(tag) + ": tags are 0.." +
                  std::to_string(kMaxTag));
  }
  void barrier(const std::vector<int> &group) override {
    checkUsable();
    boot.barrier(group);
  }

  std::shared_ptr<CommGroup> createGroup(const std::vector<int> &ranks) override {
    checkUsable();
    int position = comm::checkGroup(rank(), size(), ranks, "create_group");
    std::shared_ptr<nccl::Comm> comm;
    if (ranks == allRanks(size())) {
      comm = world; // every rank asks for it alike: no split
    } else {
      int color = *std::min_element(ranks.begin(), ranks.end());
      int made = 0;
      try {
        comm = api->split(*world, color, position,
                          Clock::now() + getTimeout());
        made = comm ? api->size(*comm) : 0;
      } catch (const Error &e) {
        fail(describeCall(rank(), "create_group", ranks) + ": " + e.what());
      }
      // Every rank splits the world together: ranks that made their groups
      // in different orders join one communicator of the wrong ranks.
      if (made != int(ranks.size()))
        fail(describeCall(rank(), "create_group", ranks) +
             ": ncclCommSplit made a communicator of " + std::to_string(made) +
             " ranks, not " + std::to_string(ranks.size()) +
             " (every rank must make the same groups in the same order)");
    }
    auto group = std::make_shared<NcclGroup>(ranks, position, comm);
    std::lock_guard<std::mutex> lock(mutex);
    groups.push_back(group);
    return group;
  }

  std::unique_ptr<CommRequest> start(const CollectiveArgs &args,
                                     const CommGroup &g) override {
    checkUsable();
    const NcclGroup &group = ncclGroup(g);
    if (args.kind == CollectiveKind::Send || args.kind == CollectiveKind::Recv)
      return startPeer(args, group);
    std::string head = headOf(args, g);
    if (args.kind == CollectiveKind::Barrier) {
      boot.barrier(g.ranks());
      return Communicator::start({CollectiveKind::Barrier}, g);
    }
    return post(group, collectiveCall(args, g, head), std::move(head));
  }

  void enqueue(const CollectiveArgs &args, const CommGroup &g,
               Stream &stream) override {
    checkUsable();
    const NcclGroup &group = ncclGroup(g);
    if (args.kind == CollectiveKind::Barrier)
      throw Error(headOf(args, g) +
                  ": nccl enqueues no barrier (start() it)");
    PeerMessage peer;
    std::string head;
    nccl::Call call{nccl::Call::AllReduce};
    if (args.kind == CollectiveKind::Send ||
        args.kind == CollectiveKind::Recv) {
      peer = preparePeer(args, group);
      head = peer.head;
      call = peer.call;
    } else {
      head = headOf(args, g);
      call = collectiveCall(args, g, head);
    }
    // Kept from now on: on a failure below, its bootstrap send may still
    // read it (MPI).
    if (peer.header)
      sentHeaders.push_back({std::move(peer.header), head});
    waitForRoom(*group.comm);
    Clock::time_point now = Clock::now(), deadline = now + getTimeout();
    std::unique_ptr<nccl::Op> op;
    try {
      op = api->post(*group.comm, call, &stream, deadline);
    } catch (const Error &e) {
      fail(head + " on nccl failed: " + e.what());
    }
    std::lock_guard<std::mutex> lock(mutex);
    enqueued.push_back({group.comm, std::move(op), std::move(head), now,
                        deadline});
    if (!watchdog.joinable())
      watchdog = std::thread([this] { watch(); });
  }

  void waitEnqueued() override {
    {
      std::unique_lock<std::mutex> lock(mutex);
      if (!sweepUntil(lock, [&] { return enqueued.empty(); })) {
        settleAfterFailure(lock);
        throw Error(failure);
      }
    }
    // Every enqueued receive took its header before it was posted, so the
    // headers of the sends complete now (or name the receiver that never
    // posted its receive). One that fails stays kept with the rest, as
    // after any failure.
    while (!sentHeaders.empty()) {
      auto &[header, head] = sentHeaders.front();
      try {
        header->request->wait(Clock::now() + getTimeout());
      } catch (const Error &e) {
        fail(head + " on nccl: sending its header: " + e.what());
      }
      sentHeaders.pop_front();
    }
  }

  /// Before an enqueue on `comm`: while kMaxEnqueuedPerComm of its calls
  /// are unfinished, waits (each call is bounded by its deadline).
  void waitForRoom(const nccl::Comm &comm) {
    std::unique_lock<std::mutex> lock(mutex);
    if (!sweepUntil(lock, [&] {
          size_t mine = 0;
          for (const Enqueued &e : enqueued)
            mine += e.comm.get() == &comm;
          return mine < kMaxEnqueuedPerComm;
        }))
      throw Error(unusable());
  }

  /// `args` (a collective, not Send, Recv or Barrier) as NCCL's call.
  nccl::Call collectiveCall(const CollectiveArgs &args, const CommGroup &g,
                            const std::string &head) {
    nccl::Call call{nccl::Call::AllReduce};
    call.send = args.send;
    call.recv = args.recv;
    call.count = args.count;
    call.dtype = args.dtype;
    call.op = args.op;
    switch (args.kind) {
    case CollectiveKind::AllReduce:
      call.send = args.recv; // in place
      break;
    case CollectiveKind::AllGather:
      call.kind = nccl::Call::AllGather;
      break;
    case CollectiveKind::ReduceScatter:
      call.kind = nccl::Call::ReduceScatter;
      break;
    case CollectiveKind::AllToAll:
      call.kind = nccl::Call::AllToAll;
      break;
    case CollectiveKind::CollectivePermute: {
      call.kind = nccl::Call::SendRecv;
      try {
        std::tie(call.recvFrom, call.sendTo) = comm::checkPermutePairs(
            head, args.pairs, g.size(), g.position());
      } catch (const Error &e) {
        fail(e.what());
      }
      break;
    }
    case CollectiveKind::Barrier:
    case CollectiveKind::Send:
    case CollectiveKind::Recv:
      break;
    }
    return call;
  }

  /// Posts `call` on `group`'s NCCL communicator.
  std::unique_ptr<NcclRequest> post(const NcclGroup &group,
                                    const nccl::Call &call, std::string head) {
    Clock::time_point now = Clock::now();
    std::unique_ptr<nccl::Op> op;
    try {
      op = api->post(*group.comm, call, nullptr, now + getTimeout());
    } catch (const Error &e) {
      fail(head + " on nccl failed: " + e.what());
    }
    return std::make_unique<NcclRequest>(*this, group, std::move(op),
                                         std::move(head), now);
  }

  /// A Send or Recv made ready to post: its NCCL call, its head for
  /// messages, the peer's rank, and a send's header on its way.
  struct PeerMessage {
    nccl::Call call{nccl::Call::Send};
    std::string head;
    int peerRank = -1;
    std::unique_ptr<SentHeader> header;
  };

  /// Send or Recv on `group`: the header over the bootstrap (see the file
  /// comment; a receive waits for its header here), and the ncclSend or
  /// ncclRecv to post.
  PeerMessage preparePeer(const CollectiveArgs &args, const NcclGroup &group) {
    comm::PeerCall peer;
    try {
      checkCallerTag(args.kind == CollectiveKind::Send ? "send" : "recv",
                     args.tag);
      peer = comm::checkPeerCall(args, group);
    } catch (const Error &e) {
      fail(e.what());
    }
    PeerMessage message;
    message.head = peer.head;
    if (!group.label().empty())
      message.head += " (" + group.label() + ")";
    const std::string &head = message.head;
    message.peerRank = peer.peerRank;
    bool isSend = args.kind == CollectiveKind::Send;
    uint64_t &number =
        (isSend ? sentTo : receivedFrom)[{group.comm.get(), args.peer}];
    int64_t words[4] = {int64_t(args.count), int64_t(args.dtype),
                        int64_t(number), int64_t(comm::groupHash(group.ranks()))};
    nccl::Call &call = message.call;
    call.kind = isSend ? nccl::Call::Send : nccl::Call::Recv;
    call.send = args.send;
    call.recv = args.recv;
    call.count = args.count;
    call.dtype = args.dtype;
    call.sendTo = isSend ? args.peer : -1;
    call.recvFrom = isSend ? -1 : args.peer;
    if (isSend) {
      message.header = std::make_unique<SentHeader>();
      std::copy(words, words + 4, message.header->words);
      CollectiveArgs h{CollectiveKind::Send, message.header->words, nullptr,
                       4, DType::I64};
      h.peer = args.peer;
      h.tag = args.tag;
      try {
        message.header->request =
            boot.start(h, CommGroup(group.ranks(), group.position()));
      } catch (const Error &e) {
        fail(head + " on nccl: sending its header: " + e.what());
      }
    } else {
      int64_t sent[4] = {};
      try {
        boot.recv(sent, 4, DType::I64, args.peer, args.tag, group.ranks());
      } catch (const Error &e) {
        fail(head + " on nccl: receiving its header: " + e.what());
      }
      checkHeader(head, peer.peerRank, sent, words);
    }
    ++number;
    return message;
  }

  /// start() of a Send or Recv: preparePeer, then posted after everything
  /// queued on the device so far.
  std::unique_ptr<CommRequest> startPeer(const CollectiveArgs &args,
                                         const NcclGroup &group) {
    PeerMessage message = preparePeer(args, group);
    auto request = post(group, message.call, message.head);
    request->peerRank = message.peerRank;
    request->header = std::move(message.header);
    return request;
  }

  /// Fails unless the header `sent` describes the message a receive
  /// described by `mine` (same layout) may take.
  void checkHeader(const std::string &head, int sender, const int64_t sent[4],
                   const int64_t mine[4]) {
    if (sent[0] != mine[0] || sent[1] != mine[1])
      fail(comm::peerMismatch(head, size_t(sent[0]), DType(sent[1]), sender));
    if (sent[3] != mine[3])
      fail(head + " on nccl: rank " + std::to_string(sender) +
           " sent that message over another nccl group");
    if (sent[2] != mine[2])
      fail(head + " on nccl: rank " + std::to_string(sender) +
           " sent that message as its message " + std::to_string(sent[2]) +
           " to rank " + std::to_string(rank()) +
           " on this group, but this is the receive of message " +
           std::to_string(mine[2]) +
           " (nccl matches the messages between two ranks in the order "
           "they are sent: receive them in that order)");
  }

  /// Aborts every NCCL communicator of this rank and throws `message`
  /// (with that said); later calls refuse.
  [[noreturn]] void fail(const std::string &message) {
    std::lock_guard<std::mutex> lock(mutex);
    failLocked(message);
    throw Error(failure);
  }

  /// The layer's poll of a call; a poll that throws (a CUDA
  /// error on the polling thread) is the call's failure, never an
  /// exception on the watchdog's thread.
  nccl::OpState pollOp(nccl::Comm &comm, nccl::Op &op, std::string &error) {
    try {
      return api->poll(comm, op, error);
    } catch (const std::exception &x) {
      error = x.what();
      return nccl::OpState::Failed;
    }
  }

private:
  /// The first failure: aborts every NCCL communicator and keeps `message`.
  /// Requires `mutex`.
  void failLocked(const std::string &message) {
    if (!failure.empty())
      return;
    std::vector<nccl::Comm *> comms;
    for (const auto &g : groups)
      if (g->comm && g->comm != world)
        comms.push_back(g->comm.get());
    if (world)
      comms.push_back(world.get());
    api->abortAll(comms);
    failure = message + "; aborted every nccl communicator of this rank";
  }

  void checkUsable() {
    std::lock_guard<std::mutex> lock(mutex);
    if (!failure.empty())
      throw Error(unusable());
  }

  /// What a call after a failure throws. Requires `mutex`.
  std::string unusable() const {
    return "rank " + std::to_string(rank()) +
           ": nccl communicator unusable after an earlier failure: " + failure;
  }

  const NcclGroup &ncclGroup(const CommGroup &g) const {
    const auto *group = dynamic_cast<const NcclGroup *>(&g);
    if (!group)
      throw Error("rank " + std::to_string(rank()) +
                  ": nccl: a group not made by this communicator");
    return *group;
  }

  std::string headOf(const CollectiveArgs &args, const CommGroup &g) const {
    std::string head = describeCall(rank(), toString(args.kind), g.ranks());
    if (!g.label().empty())
      head += " (" + g.label() + ")";
    return head;
  }

  /// Drops the enqueued calls that are complete; fails on one that failed
  /// or that makes no progress: the oldest unfinished call of an NCCL
  /// communicator (the calls of one run in order) fails once the timeout
  /// has passed since its stream reached it (its inputs ready) and since
  /// the communicator's previous call was seen complete. So a whole step
  /// enqueued at once (a pipelined one) is not bounded by the timeout,
  /// each wait for a peer is. A call its stream never reaches (a device
  /// stuck, or an order that cannot be met) fails after kQueuedTimeouts
  /// timeouts from its enqueue. Requires `mutex`.
  void sweepLocked() {
    if (!failure.empty())
      return;
    Clock::time_point now = Clock::now();
    std::vector<const nccl::Comm *> seen;
    for (auto it = enqueued.begin(); it != enqueued.end();) {
      std::string error;
      nccl::OpState state = pollOp(*it->comm, *it->op, error);
      if (state == nccl::OpState::Done) {
        lastDone[it->comm.get()] = now;
        it = enqueued.erase(it);
        continue;
      }
      if (state == nccl::OpState::Failed)
        return failLocked(it->head + " on nccl failed: " + error);
      if (state == nccl::OpState::Pending && !it->readyAt)
        it->readyAt = now;
      const nccl::Comm *comm = it->comm.get();
      if (std::find(seen.begin(), seen.end(), comm) == seen.end()) {
        seen.push_back(comm);
        if (!it->readyAt) {
          if (now - it->started >= kQueuedTimeouts * getTimeout())
            return failLocked(
                it->head + " on nccl was not started " +
                std::to_string((kQueuedTimeouts * getTimeout()).count()) +
                " ms after its enqueue (enqueued on a device stream that "
                "did not reach it: the device is stuck, or far behind)");
        } else {
          Clock::time_point since = *it->readyAt;
          auto done = lastDone.find(comm);
          if (done != lastDone.end())
            since = std::max(since, done->second);
          if (now - since >= getTimeout())
            return failLocked(it->head + " on nccl timed out after " +
                              std::to_string(getTimeout().count()) +
                              " ms (enqueued on a device stream)");
        }
      }
      ++it;
    }
  }

  /// Sweeps (sweepLocked) every 20 us until `done()` holds: true, or until
  /// the communicator has failed: false. `lock` holds `mutex`, released
  /// while sleeping.
  template <typename Done>
  bool sweepUntil(std::unique_lock<std::mutex> &lock, Done &&done) {
    while (true) {
      sweepLocked();
      if (!failure.empty())
        return false;
      if (done())
        return true;
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      lock.lock();
    }
  }

  /// After a failure: waits until no enqueued call is still running (an
  /// aborted one ends; the emulated layer's ends at the bootstrap's
  /// deadline), so the buffers they touch may be freed, for at most the
  /// timeout past the latest deadline. `lock` holds `mutex`, released
  /// while sleeping.
  void settleAfterFailure(std::unique_lock<std::mutex> &lock) {
    Clock::time_point limit = Clock::now();
    for (const Enqueued &e : enqueued)
      limit = std::max(limit, e.deadline);
    limit += getTimeout();
    while (!enqueued.empty() && Clock::now() < limit) {
      for (auto it = enqueued.begin(); it != enqueued.end();) {
        std::string error;
        nccl::OpState state = pollOp(*it->comm, *it->op, error);
        if (state == nccl::OpState::Done || state == nccl::OpState::Failed)
          it = enqueued.erase(it);
        else
          ++it;
      }
      if (enqueued.empty())
        return;
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      lock.lock();
    }
  }

  /// The watchdog thread (see the file comment).
  void watch() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      watched.wait_for(lock, kWatchPeriod);
      if (!stopping)
        sweepLocked();
    }
  }

  Communicator &boot;
  std::unique_ptr<nccl::NcclApi> api;
  bool emulated;
  std::string idText;
  std::shared_ptr<nccl::Comm> world;
  std::vector<std::shared_ptr<NcclGroup>> groups;
  /// Guards what the watchdog shares with the owner: failure, groups (for
  /// the abort), enqueued and stopping.
  std::mutex mutex;
  std::string failure;
  /// Messages sent to and received from each (NCCL communicator, peer
  /// position): the numbers the headers carry.
  std::map<std::pair<const nccl::Comm *, int>, uint64_t> sentTo, receivedFrom;
  /// A call enqueued on a device stream, not yet seen complete.
  struct Enqueued {
    std::shared_ptr<nccl::Comm> comm;
    std::unique_ptr<nccl::Op> op;
    std::string head;
    Clock::time_point started, deadline;
    /// When the sweep first saw its stream reach it.
    std::optional<Clock::time_point> readyAt;
  };
  std::deque<Enqueued> enqueued;
  /// When the sweep last saw a call of each NCCL communicator complete.
  std::map<const nccl::Comm *, Clock::time_point> lastDone;
  /// The headers of the enqueued sends (and their heads), waited for by
  /// waitEnqueued; after a failure kept until the communicator goes (a
  /// bootstrap send may still read one). The owner's thread only.
  std::deque<std::pair<std::unique_ptr<SentHeader>, std::string>>
      sentHeaders;
  bool stopping = false;
  std::condition_variable watched;
  std::thread watchdog; // last: joined in the destructor
};

void NcclRequest::wait(Clock::time_point deadline) {
  if (done)
    return;
  while (true) {
    std::string error;
    nccl::OpState state = owner.pollOp(*group.comm, *op, error);
    if (state == nccl::OpState::Done) {
      // The receiver took the header before it posted ncclRecv.
      if (header) {
        try {
          header->request->wait(deadline);
        } catch (const Error &e) {
          owner.fail(head + " on nccl: sending its header: " + e.what());
        }
      }
      done = true;
      return;
    }
    if (state == nccl::OpState::Failed)
      owner.fail(head + " on nccl failed: " + error);
    if (Clock::now() >= deadline) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - started);
      owner.fail(head + " on nccl timed out after " +
                 std::to_string(ms.count()) + " ms" +
                 (peerRank < 0 ? std::string()
                               : " waiting for rank " +
                                     std::to_string(peerRank)));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

} // namespace

std::unique_ptr<Communicator>
createNcclCommunicator(Communicator &bootstrap, const NcclOptions &options) {
  std::unique_ptr<nccl::NcclApi> api =
      options.emulate ? nccl::createEmulatedNccl(bootstrap,
                                                 options.emulatedDelay)
                      : nccl::createRealNccl(options.device);
  auto comm = std::make_unique<NcclCommunicator>(bootstrap, std::move(api),
                                                 options.emulate);
  comm->init(options);
  return comm;
}

} // namespace partita::runtime
