//===- EmulatedNccl.cpp - NCCL's buffer layouts over another communicator --===//
//
// The emulated NCCL layer, for CI without a GPU: a communicator is the world
// ranks of its members (in NCCL rank order); a posted call is an item on
// the rank's NCCL thread (one host stream for all of the rank's
// communicators) that carries out NCCL's documented layout with the
// bootstrap communicator (the local communicator's threads), whose own
// deadline and poisoning stand in for NCCL's asynchronous errors. One
// thread per rank, not per communicator: the bootstrap takes one
// collective of a rank at a time, and calls posted in program order on
// every rank (the executor's) then meet in that order. Sends and receives
// (ncclSend, ncclRecv) run on a second thread of the rank, in posting
// order under a tag of their own (kRuntimePeerTag): the bootstrap takes
// point-to-point calls from several threads of a rank, and as on a GPU,
// where the pipeline's messages and a stage's collectives are on different
// NCCL communicators and streams, a message then never waits for an
// unrelated collective of its rank (or the other way round). Limit: NCCL
// matches messages per communicator; here the messages of two
// communicators between the same two ranks match in their common posting
// order (the executor sends on one group only). A call ordered on a stream of the
// emulated device (a host stream too) waits for an event of that stream,
// and that stream for the call's event: real dependencies between threads,
// as CUDA events are between streams. ncclCommSplit gathers every parent
// member's (color, key) and orders the members of a color by key, then
// parent rank, as NCCL does. The unique id is checked: every rank of an init must hold
// the same one.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Communicator.h"
#include "runtime/lib/core/HostStream.h"
#include "runtime/lib/cuda/GpuApi.h"
#include "runtime/lib/cuda/NcclApi.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <tuple>

namespace partita::runtime::nccl {

std::string fingerprint(const UniqueId &id) {
  static const char *digits = "0123456789abcdef";
  // The first bytes of a real id are its family and port; its address and
  // random magic come later, so a fingerprint covers more of it.
  uint32_t h = 2166136261u;
  for (unsigned char b : id.bytes)
    h = (h ^ b) * 16777619u;
  std::string s;
  for (int i = 7; i >= 0; --i)
    s += digits[(h >> (4 * i)) & 15];
  return s;
}

namespace {

struct EmuComm final : Comm {
  std::vector<int> members; // world ranks, in this communicator's rank order
  int position = 0;
  std::atomic<bool> aborted{false};
};

struct EmuOp final : Op {
  explicit EmuOp(std::unique_ptr<Event> e) : event(std::move(e)) {}
  /// The caller's stream's event before the call (null: no stream), and
  /// the call's own.
  std::unique_ptr<Event> ready, event;
};

class EmulatedNccl final : public NcclApi {
public:
  EmulatedNccl(Communicator &bootstrap, std::chrono::microseconds delay)
      : boot(bootstrap), delay(delay) {}

  std::string name() const override { return "nccl (emulated)"; }

  UniqueId uniqueId() override {
    UniqueId id;
    std::random_device random;
    for (unsigned char &b : id.bytes)
      b = static_cast<unsigned char>(random());
    return id;
  }

  std::unique_ptr<Comm> initRank(int nranks, const UniqueId &id, int rank,
                                 Clock::time_point) override {
    if (nranks != boot.size() || rank != boot.rank())
      throw Error("nccl (emulated): ncclCommInitRankConfig of rank " +
                  std::to_string(rank) + " of " + std::to_string(nranks) +
                  " over a bootstrap of rank " + std::to_string(boot.rank()) +
                  " of " + std::to_string(boot.size()));
    auto comm = std::make_unique<EmuComm>();
    comm->members = allRanks(nranks);
    comm->position = rank;
    // Every rank must have been handed the same id.
    std::vector<UniqueId> all(nranks);
    boot.allGather(id.bytes, all.data(), sizeof(id.bytes) / 4, DType::I32,
                   comm->members);
    for (int r = 0; r < nranks; ++r)
      if (std::memcmp(all[r].bytes, id.bytes, sizeof(id.bytes)) != 0)
        throw Error("nccl (emulated): rank " + std::to_string(rank) +
                    " holds unique id " + fingerprint(id) + " but rank " +
                    std::to_string(r) + " holds " + fingerprint(all[r]));
    return comm;
  }

  std::unique_ptr<Comm> split(Comm &parentComm, int color, int key,
                              Clock::time_point) override {
    auto &parent = static_cast<EmuComm &>(parentComm);
    checkUsable(parent, "ncclCommSplit");
    int mine[2] = {color, key};
    std::vector<int> all(2 * parent.members.size());
    boot.allGather(mine, all.data(), 2, DType::I32, parent.members);
    if (color < 0)
      return nullptr; // NCCL_SPLIT_NOCOLOR
    std::vector<std::tuple<int, int, int>> chosen; // key, parent rank, world
    for (size_t p = 0; p < parent.members.size(); ++p)
      if (all[2 * p] == color)
        chosen.emplace_back(all[2 * p + 1], int(p), parent.members[p]);
    std::sort(chosen.begin(), chosen.end());
    auto comm = std::make_unique<EmuComm>();
    for (size_t i = 0; i < chosen.size(); ++i) {
      comm->members.push_back(std::get<2>(chosen[i]));
      if (std::get<1>(chosen[i]) == parent.position)
        comm->position = int(i);
    }
    return comm;
  }

  std::unique_ptr<Op> post(Comm &c, const Call &original, Stream *order,
                           Clock::time_point) override {
    host::HostStream *caller = nullptr;
    if (order) {
      caller = dynamic_cast<host::HostStream *>(order);
      if (!caller)
        throw Error("nccl (emulated): a call ordered on a stream that is not "
                    "the emulated device's");
    }
    // NCCL reads and writes device memory: the emulated device's guarded
    // addresses are translated here, as the device layer does for kernels.
    Call call = original;
    call.send = gpu::emulatedHostAddress(call.send, 0, "an nccl send buffer");
    call.recv =
        gpu::emulatedHostAddress(call.recv, 0, "an nccl receive buffer");
    auto &comm = static_cast<EmuComm &>(c);
    checkUsable(comm, "a collective");
    int n = int(comm.members.size());
    bool p2p = call.kind == Call::SendRecv || call.kind == Call::Send ||
               call.kind == Call::Recv;
    for (int peer : {call.sendTo, call.recvFrom})
      if (p2p && (peer < -1 || peer >= n))
        throw Error("nccl (emulated): peer " + std::to_string(peer) +
                    " is not a rank of a communicator of " +
                    std::to_string(n));
    Communicator &b = boot;
    const std::vector<int> &members = comm.members;
    host::HostStream &runs =
        call.kind == Call::Send || call.kind == Call::Recv ? peerStream
                                                           : stream;
    auto op = std::make_unique<EmuOp>(runs.createEvent());
    if (caller) {
      // The call reads what the work queued on `order` so far writes.
      op->ready = caller->createEvent();
      caller->record(*op->ready);
      runs.wait(*op->ready);
    }
    runs.enqueue([&b, members, position = comm.position, call,
                  delay = delay] {
      if (delay.count() > 0)
        std::this_thread::sleep_for(delay);
      runCollective(b, members, position, call);
    });
    runs.record(*op->event);
    // What `order` queues from now on reads the call's result (a
    // synchronous stream, the emulated compute stream, waits here, and
    // throws the call's error).
    if (caller)
      caller->wait(*op->event);
    return op;
  }

  /// As NCCL's: an op of an aborted communicator reports Failed, but only
  /// once its item has stopped (an abort here does not end a bootstrap
  /// call in flight, which may still touch its buffers).
  OpState poll(Comm &c, Op &o, std::string &error) override {
    auto &op = static_cast<EmuOp &>(o);
    bool done;
    {
      auto &event = static_cast<host::HostEvent &>(*op.event);
      std::lock_guard<std::mutex> lock(event.state->mutex);
      if (event.state->error) {
        try {
          std::rethrow_exception(event.state->error);
        } catch (const std::exception &e) {
          error = e.what();
        } catch (...) {
          error = "an exception that is not a std::exception";
        }
        return OpState::Failed;
      }
      done = event.state->finished >= event.ticket;
    }
    if (!done) {
      if (!op.ready)
        return OpState::Pending;
      auto &ready = static_cast<host::HostEvent &>(*op.ready);
      std::lock_guard<std::mutex> lock(ready.state->mutex);
      return ready.state->finished >= ready.ticket || ready.state->error
                 ? OpState::Pending
                 : OpState::Queued;
    }
    if (static_cast<EmuComm &>(c).aborted) {
      error = "the communicator was aborted";
      return OpState::Failed;
    }
    return OpState::Done;
  }

  void abortAll(const std::vector<Comm *> &comms) override {
    for (Comm *c : comms)
      static_cast<EmuComm &>(*c).aborted = true;
  }

  int size(Comm &c) override {
    return int(static_cast<EmuComm &>(c).members.size());
  }

private:
  /// Carries out a collective (or SendRecv) of a communicator whose world
  /// ranks are `members` on its stream's thread.
  static void runCollective(Communicator &b, const std::vector<int> &members,
                            int position, const Call &call) {
    size_t bytes = call.count * sizeOf(call.dtype);
    switch (call.kind) {
    case Call::AllReduce:
      if (call.send != call.recv && bytes)
        std::memcpy(call.recv, call.send, bytes);
      b.allReduce(call.recv, call.count, call.dtype, call.op, members);
      return;
    case Call::AllGather:
      b.allGather(call.send, call.recv, call.count, call.dtype, members);
      return;
    case Call::ReduceScatter:
      b.reduceScatter(call.send, call.recv, call.count, call.dtype, call.op,
                      members);
      return;
    case Call::AllToAll:
      b.allToAll(call.send, call.recv, call.count, call.dtype, members);
      return;
    case Call::SendRecv:
    case Call::Send:
    case Call::Recv:
      return sendRecv(b, members, position, call);
    }
  }

  /// ncclGroupStart; ncclSend; ncclRecv; ncclGroupEnd: the send is posted
  /// before the receive is waited for, so a ring cannot deadlock (a Send or
  /// a Recv alone is its one half). Under a tag of the runtime's own, which
  /// no caller of the bootstrap uses (SendRecv kRuntimeTag, Send and Recv
  /// kRuntimePeerTag): each runs on one thread of the rank in posting
  /// order, so the messages between two ranks meet in the order they were
  /// posted, as NCCL matches them, whatever the caller's tags.
  static void sendRecv(Communicator &b, const std::vector<int> &members,
                       int position, const Call &call) {
    size_t bytes = call.count * sizeOf(call.dtype);
    if (call.sendTo == position && call.recvFrom == position) {
      if (bytes && call.send != call.recv)
        std::memmove(call.recv, call.send, bytes);
      return;
    }
    int tag = call.kind == Call::SendRecv ? kRuntimeTag : kRuntimePeerTag;
    std::unique_ptr<CommRequest> sent;
    if (call.sendTo >= 0) {
      CollectiveArgs args{CollectiveKind::Send, call.send, nullptr,
                          call.count, call.dtype};
      args.peer = call.sendTo;
      args.tag = tag;
      sent = b.start(args, CommGroup(members, position));
    }
    if (call.recvFrom >= 0)
      b.recv(call.recv, call.count, call.dtype, call.recvFrom, tag, members);
    else if (call.kind == Call::SendRecv && bytes)
      std::memset(call.recv, 0, bytes);
    if (sent)
      sent->wait(Clock::now() + b.getTimeout());
  }

  static void checkUsable(const EmuComm &comm, const char *what) {
    if (comm.aborted)
      throw Error(std::string("nccl (emulated): ") + what +
                  " on an aborted communicator");
  }

  Communicator &boot;
  std::chrono::microseconds delay;
  /// The rank's NCCL threads, for collectives and for sends and receives
  /// (each skips what has not started when destroyed).
  host::HostStream stream, peerStream;
};

} // namespace

std::unique_ptr<NcclApi> createEmulatedNccl(Communicator &bootstrap,
                                            std::chrono::microseconds delay) {
  return std::make_unique<EmulatedNccl>(bootstrap, delay);
}

} // namespace partita::runtime::nccl
