//===- LocalCommunicator.cpp - ranks as threads of one process ------------===//
//
// N ranks are N threads sharing one World. A collective call of a group is a
// Slot keyed by (group, the group's call number), which every member reaches
// in the same order, so concurrent groups (the four tp groups of a 2x4 mesh)
// never meet. A call runs in phases separated by barriers on the slot:
//   1. publish: each rank stores its buffer pointers and waits for all;
//   2. work: each rank copies or reduces straight from its peers' buffers
//      (one address space), touching only memory that no one else writes;
//      nothing in it allocates or throws, so every rank reaches its next wait;
//   3. a closing barrier, so no rank returns (and frees its buffers) while
//      a peer still reads or writes them.
// all_reduce is in place without scratch: the rank at position p owns chunk p
// of the buffer, reduces it tile by tile over all ranks in group order and
// writes the tile back into every rank's buffer; each rank reads and writes
// about `count` elements, as in a ring, and the result does not depend on
// timing. collective_permute publishes the same way; each target then copies
// its source's block once, and nothing else moves. Waits use one mutex and condition variable per world (the data
// moves outside the lock, which only guards the small slot records), and
// poll briefly, yielding, before they block: waking a sleeping thread costs
// tens of microseconds, more than a peer usually takes to arrive.
//
// Point to point: a send copies its buffer into a message when it is posted
// and files it in its channel, (sender, receiver, tag), under the channel's
// next send number; a receive posted takes the channel's next receive
// number. The n-th send and the n-th receive match as soon as both are
// posted, whichever comes second doing it, so nothing depends on timing or
// on the order requests are waited in. A send completes when it is matched
// (a rendezvous: a blocking send returns only once its receive is posted), a
// receive when it has copied its message; a count or dtype that differs is
// found at the match and poisons the world with the receiver's error. The
// channels are the world's, under its mutex, so point-to-point calls may
// come from several threads of one rank (the emulated nccl layer's streams
// do that).
//
// Failure: every wait has the call's deadline. The first rank to fail (a
// timeout, a mismatched call, an exception in its body) poisons the world;
// every wait also wakes on poison, so the others fail at once. A rank that
// gives up after its peers may have started reading or writing its buffers
// first waits until none is still doing so (they are inside a memcpy and
// reach their next wait in bounded time), then throws.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Communicator.h"

#include "CommUtils.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>
#include <tuple>

namespace partita::runtime {
namespace {

using Clock = std::chrono::steady_clock;
using comm::describeCall;
using comm::describeCount;
using comm::formatRanks;

/// Bytes reduced at a time by all_reduce and reduce_scatter: small enough to
/// stay in L1 while every rank's block is folded into it.
constexpr size_t kTileBytes = 16 * 1024;

/// One collective call of one group, shared by its members.
struct Slot {
  // What the first rank to arrive asked for; the others must ask the same.
  const char *collective = nullptr;
  size_t count = 0;
  DType dtype = DType::F32;
  ReduceOp op = ReduceOp::Sum;
  int firstRank = -1;
  std::vector<std::pair<int, int>> pairs; // collective_permute
  // Per position in the group.
  std::vector<const void *> send;
  std::vector<void *> recv;
  std::vector<int> reached;  // barriers passed: 0 = not arrived yet
  std::vector<char> working; // between two barriers, touching peers' buffers
};

/// One point-to-point message: a copy of the sender's buffer.
struct Message {
  std::vector<unsigned char> bytes;
  size_t count = 0;
  DType dtype = DType::F32;
  bool taken = false; // matched with its receive
};

/// One posted receive, until it has its message.
struct PostedRecv {
  std::string head; // "rank 1: recv of 4 x f32 from rank 0 with tag 7"
  int rank = -1, from = -1;
  size_t count = 0;
  DType dtype = DType::F32;
  std::shared_ptr<Message> message; // set when matched
  std::string error;                // set instead when they do not match
};

/// The messages from one rank to another with one tag: sends and receives
/// match by number, in the order each side posts them.
struct Channel {
  std::map<uint64_t, std::shared_ptr<Message>> unmatchedSends;
  std::map<uint64_t, std::shared_ptr<PostedRecv>> unmatchedRecvs;
  uint64_t sends = 0, recvs = 0; // posted so far
};

using ChannelKey = std::tuple<int, int, int>; // sender, receiver, tag

using SlotKey = std::pair<std::vector<int>, uint64_t>;

struct World {
  explicit World(int size) : size(size) {}

  /// Polls (each a yield) before a wait blocks.
  static constexpr int kPolls = 200;

  const int size;
  std::mutex mutex;
  std::condition_variable changed;
  std::atomic<uint64_t> version{0}; // bumped by every notify()
  bool poisoned = false;
  int failedRank = -1;
  std::string failure;
  std::map<SlotKey, std::shared_ptr<Slot>> slots;
  std::map<ChannelKey, Channel> channels;

  /// Wakes every waiter after a change of the shared state. Requires
  /// `mutex`.
  void notify() {
    version.fetch_add(1, std::memory_order_release);
    changed.notify_all();
  }

  /// Waits until `ready()` (checked with `lock` held) or the deadline;
  /// returns ready(). Polls briefly before blocking: a peer usually arrives
  /// within microseconds, sooner than a sleeping thread can be woken.
  template <typename Ready>
  bool waitUntil(std::unique_lock<std::mutex> &lock, Clock::time_point deadline,
                 Ready ready) {
    for (int polls = 0; polls < kPolls && !ready();) {
      uint64_t seen = version.load(std::memory_order_acquire);
      lock.unlock();
      while (polls < kPolls &&
             version.load(std::memory_order_acquire) == seen) {
        ++polls;
        std::this_thread::yield();
      }
      lock.lock();
    }
    return changed.wait_until(lock, deadline, ready);
  }

  /// Matches `message` with `recv`: hands it over, or records the
  /// receiver's error and poisons the world with it when the counts or
  /// dtypes differ. Requires `mutex`.
  void match(const std::shared_ptr<Message> &message, PostedRecv &recv) {
    if (message->count != recv.count || message->dtype != recv.dtype) {
      recv.error = comm::peerMismatch(recv.head, message->count,
                                      message->dtype, recv.from);
      poison(recv.rank, recv.error);
      return;
    }
    message->taken = true;
    recv.message = message;
    notify();
  }

  /// Records the first failure and wakes every waiter. Requires `mutex`.
  void poison(int rank, const std::string &message) {
    if (poisoned)
      return;
    poisoned = true;
    failedRank = rank;
    failure = message;
    notify();
  }

  void poisonLocked(int rank, const std::string &message) {
    std::lock_guard<std::mutex> lock(mutex);
    poison(rank, message);
  }

  /// "rank 2 failed: <its error>", without repeating a "rank 2: " that the
  /// error already starts with.
  std::string failureNote() const {
    std::string prefix = "rank " + std::to_string(failedRank) + ": ";
    std::string what = failure.compare(0, prefix.size(), prefix) == 0
                           ? failure.substr(prefix.size())
                           : failure;
    return "rank " + std::to_string(failedRank) + " failed: " + what;
  }

  /// The root cause as runLocalRanks reports it: "rank 2: <its error>".
  std::string rootCause() const {
    std::string prefix = "rank " + std::to_string(failedRank) + ": ";
    return failure.compare(0, prefix.size(), prefix) == 0 ? failure
                                                          : prefix + failure;
  }
};

class LocalCommunicator final : public Communicator {
public:
  LocalCommunicator(std::shared_ptr<World> world, int rank,
                    std::chrono::milliseconds t)
      : world(std::move(world)), myRank(rank), tile(kTileBytes) {
    setTimeout(t);
  }

  int rank() const override { return myRank; }
  int size() const override { return world->size; }
  const char *kind() const override { return "local"; }

  void allReduce(void *data, size_t count, DType dtype, ReduceOp op,
                 const std::vector<int> &group) override;
  void allGather(const void *send, void *recv, size_t count, DType dtype,
                 const std::vector<int> &group) override;
  void reduceScatter(const void *send, void *recv, size_t count, DType dtype,
                     ReduceOp op, const std::vector<int> &group) override;
  void allToAll(const void *send, void *recv, size_t count, DType dtype,
                const std::vector<int> &group) override;
  void collectivePermute(const void *send, void *recv, size_t count,
                         DType dtype,
                         const std::vector<std::pair<int, int>> &pairs,
                         const std::vector<int> &group) override;
  void barrier(const std::vector<int> &group) override;
  /// Send and Recv post here; the collectives run in the default.
  std::unique_ptr<CommRequest> start(const CollectiveArgs &args,
                                     const CommGroup &group) override;

private:
  /// One rank's part in one collective call.
  struct Call {
    const char *collective;
    const std::vector<int> &group;
    int position;
    Clock::time_point deadline;
    SlotKey key;
    std::shared_ptr<Slot> slot;
    std::unique_lock<std::mutex> lock;
  };

  /// Validates the call, joins its slot, publishes the buffers and waits for
  /// the whole group. Returns with the lock held and this rank working.
  Call begin(const char *collective, const std::vector<int> &group,
             size_t count, DType dtype, ReduceOp op, const void *send,
             void *recv,
             const std::vector<std::pair<int, int>> *pairs = nullptr);
  /// Ends a work phase: waits (lock held) until every member has passed
  /// barrier `phase`, then returns working again when `thenWork`.
  void step(Call &call, int phase, bool thenWork);
  /// After the closing barrier: drops the slot from the world.
  void finish(Call &call);
  /// Ends this rank's work phase (entered unlocked): relocks, waits at the
  /// closing barrier until every member is done with the buffers, then
  /// finishes.
  void endWork(Call &call);
  /// Gives up on `call`: waits until no member still touches buffers, then
  /// throws `message`.
  [[noreturn]] void abandon(Call &call, const std::string &message);
  /// Poisons the world with `message` and throws it.
  [[noreturn]] void invalid(const std::string &message);

  std::string head(const Call &call) const {
    return describeCall(myRank, call.collective, call.group);
  }
  std::string timeoutText() const {
    return std::to_string(getTimeout().count()) + " ms";
  }

  std::shared_ptr<World> world;
  int myRank;
  std::map<std::vector<int>, uint64_t> nextCall;
  std::vector<unsigned char> tile;
};

void LocalCommunicator::invalid(const std::string &message) {
  world->poisonLocked(myRank, message);
  throw Error(message);
}

LocalCommunicator::Call LocalCommunicator::begin(const char *collective,
                                                 const std::vector<int> &group,
                                                 size_t count, DType dtype,
                                                 ReduceOp op, const void *send,
                                                 void *recv,
                                                 const std::vector<std::pair<int, int>> *pairs) {
  int position;
  try {
    position = comm::checkGroup(myRank, world->size, group, collective);
    (void)sizeOf(dtype); // throws on a dtype out of the enum
  } catch (const Error &e) {
    invalid(e.what());
  }
  uint64_t number = nextCall[group]++;
  Call call{collective,
            group,
            position,
            Clock::now() + getTimeout(),
            SlotKey(group, number),
            nullptr,
            std::unique_lock<std::mutex>(world->mutex)};
  if (world->poisoned)
    throw Error(head(call) + " aborted: " + world->failureNote());

  std::shared_ptr<Slot> &slot = world->slots[call.key];
  if (!slot) {
    slot = std::make_shared<Slot>();
    slot->collective = collective;
    slot->count = count;
    slot->dtype = dtype;
    slot->op = op;
    slot->firstRank = myRank;
    if (pairs)
      slot->pairs = *pairs;
    size_t n = group.size();
    slot->send.assign(n, nullptr);
    slot->recv.assign(n, nullptr);
    slot->reached.assign(n, 0);
    slot->working.assign(n, 0);
  } else if (std::strcmp(slot->collective, collective) != 0 ||
             slot->count != count || slot->dtype != dtype || slot->op != op) {
    auto what = [](const char *c, size_t n, DType t, ReduceOp o) {
      std::string s = std::string(c) + " of " + describeCount(n, t);
      if (!std::strcmp(c, "all_reduce") || !std::strcmp(c, "reduce_scatter"))
        s += std::string(" (") + toString(o) + ")";
      return s;
    };
    std::string message =
        head(call) + ": call " + std::to_string(number) + " of this group is " +
        what(collective, count, dtype, op) + " here but " +
        what(slot->collective, slot->count, slot->dtype, slot->op) +
        " on rank " + std::to_string(slot->firstRank);
    world->poison(myRank, message);
    throw Error(message);
  } else if (pairs && slot->pairs != *pairs) {
    std::string message = head(call) + ": call " + std::to_string(number) +
                          " of this group has pairs " +
                          comm::formatPairs(*pairs) + " here but " +
                          comm::formatPairs(slot->pairs) + " on rank " +
                          std::to_string(slot->firstRank);
    world->poison(myRank, message);
    throw Error(message);
  }
  call.slot = slot;
  slot->send[position] = send;
  slot->recv[position] = recv;
  step(call, 1, /*thenWork=*/true);
  return call;
}

void LocalCommunicator::step(Call &call, int phase, bool thenWork) {
  Slot &slot = *call.slot;
  slot.working[call.position] = 0;
  slot.reached[call.position] = phase;
  world->notify();
  auto allReached = [&] {
    return std::all_of(slot.reached.begin(), slot.reached.end(),
                       [&](int r) { return r >= phase; });
  };
  bool woke = world->waitUntil(call.lock, call.deadline,
                               [&] { return world->poisoned || allReached(); });
  // Poison wins over completion: a peer that gave up may already be
  // unwinding, so its buffers must not be touched again.
  if (world->poisoned)
    abandon(call, head(call) + " aborted: " + world->failureNote());
  if (!woke) {
    std::vector<int> missing;
    for (size_t i = 0; i < slot.reached.size(); ++i)
      if (slot.reached[i] < phase)
        missing.push_back(call.group[i]);
    std::string message = head(call) + " timed out after " + timeoutText() +
                          " waiting for ranks " + formatRanks(missing);
    world->poison(myRank, message);
    abandon(call, message);
  }
  if (thenWork)
    slot.working[call.position] = 1;
}

void LocalCommunicator::abandon(Call &call, const std::string &message) {
  Slot &slot = *call.slot;
  slot.working[call.position] = 0;
  world->notify();
  world->changed.wait(call.lock, [&] {
    return std::none_of(slot.working.begin(), slot.working.end(),
                        [](char w) { return w != 0; });
  });
  throw Error(message);
}

void LocalCommunicator::finish(Call &call) {
  call.slot->working[call.position] = 0;
  auto it = world->slots.find(call.key);
  if (it != world->slots.end() && it->second == call.slot)
    world->slots.erase(it);
}

void LocalCommunicator::endWork(Call &call) {
  call.lock.lock();
  step(call, 2, /*thenWork=*/false);
  finish(call);
}

/// Block q of `recv` = the block at byte `offset` of member q's send buffer,
/// for every member q (`block` bytes each).
static void gatherBlocks(const std::vector<const void *> &sends, size_t offset,
                         size_t block, void *recv) {
  if (!block)
    return;
  for (size_t q = 0; q < sends.size(); ++q)
    std::memcpy(static_cast<unsigned char *>(recv) + q * block,
                static_cast<const unsigned char *>(sends[q]) + offset, block);
}

/// [begin, end) of chunk `i` when `count` elements are split in `n` chunks.
static std::pair<size_t, size_t> chunkOf(size_t count, size_t n, size_t i) {
  size_t base = count / n, extra = count % n;
  size_t begin = i * base + std::min(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

void LocalCommunicator::allReduce(void *data, size_t count, DType dtype,
                                  ReduceOp op, const std::vector<int> &group) {
  Call call = begin("all_reduce", group, count, dtype, op, data, data);
  // The pointers stay fixed once published; reading them needs no lock.
  const std::vector<void *> &bufs = call.slot->recv;
  auto at = [&](size_t q, size_t off) {
    return static_cast<unsigned char *>(bufs[q]) + off;
  };
  call.lock.unlock();

  size_t n = group.size();
  if (n > 1) {
    size_t esize = sizeOf(dtype), tileElems = kTileBytes / esize;
    auto [lo, hi] = chunkOf(count, n, call.position);
    for (size_t t = lo; t < hi; t += tileElems) {
      size_t m = std::min(tileElems, hi - t), off = t * esize;
      std::memcpy(tile.data(), at(0, off), m * esize);
      for (size_t q = 1; q < n; ++q)
        comm::reduceInto(tile.data(), at(q, off), m, dtype, op);
      for (size_t q = 0; q < n; ++q)
        std::memcpy(at(q, off), tile.data(), m * esize);
    }
  }

  endWork(call);
}

void LocalCommunicator::allGather(const void *send, void *recv, size_t count,
                                  DType dtype, const std::vector<int> &group) {
  Call call =
      begin("all_gather", group, count, dtype, ReduceOp::Sum, send, recv);
  const std::vector<const void *> &sends = call.slot->send;
  call.lock.unlock();

  gatherBlocks(sends, /*offset=*/0, count * sizeOf(dtype), recv);

  endWork(call);
}

void LocalCommunicator::reduceScatter(const void *send, void *recv,
                                      size_t count, DType dtype, ReduceOp op,
                                      const std::vector<int> &group) {
  Call call = begin("reduce_scatter", group, count, dtype, op, send, recv);
  const std::vector<const void *> &sends = call.slot->send;
  call.lock.unlock();

  // Through the tile, so that `recv` may be this rank's own block of `send`
  // (only this rank reads that block).
  size_t esize = sizeOf(dtype), tileElems = kTileBytes / esize;
  size_t base = call.position * count * esize;
  for (size_t t = 0; t < count; t += tileElems) {
    size_t m = std::min(tileElems, count - t), off = base + t * esize;
    std::memcpy(tile.data(), static_cast<const unsigned char *>(sends[0]) + off,
                m * esize);
    for (size_t q = 1; q < sends.size(); ++q)
      comm::reduceInto(tile.data(),
                       static_cast<const unsigned char *>(sends[q]) + off, m,
                       dtype, op);
    std::memcpy(static_cast<unsigned char *>(recv) + t * esize, tile.data(),
                m * esize);
  }

  endWork(call);
}

void LocalCommunicator::allToAll(const void *send, void *recv, size_t count,
                                 DType dtype, const std::vector<int> &group) {
  Call call =
      begin("all_to_all", group, count, dtype, ReduceOp::Sum, send, recv);
  const std::vector<const void *> &sends = call.slot->send;
  call.lock.unlock();

  // Member q's block addressed to this rank.
  size_t block = count * sizeOf(dtype);
  gatherBlocks(sends, call.position * block, block, recv);

  endWork(call);
}

void LocalCommunicator::collectivePermute(
    const void *send, void *recv, size_t count, DType dtype,
    const std::vector<std::pair<int, int>> &pairs,
    const std::vector<int> &group) {
  const char *name = "collective_permute";
  int from = -1;
  try {
    int position = comm::checkGroup(myRank, world->size, group, name);
    from = comm::checkPermutePairs(describeCall(myRank, name, group), pairs,
                                   static_cast<int>(group.size()), position)
               .first;
  } catch (const Error &e) {
    invalid(e.what());
  }
  Call call = begin(name, group, count, dtype, ReduceOp::Sum, send, recv,
                    &pairs);
  const std::vector<const void *> &sends = call.slot->send;
  call.lock.unlock();

  // The one address space makes the message a single copy: the target reads
  // its source's block (only it does), the others clear theirs.
  size_t bytes = count * sizeOf(dtype);
  if (bytes) {
    if (from < 0)
      std::memset(recv, 0, bytes);
    else
      std::memcpy(recv, sends[from], bytes);
  }

  endWork(call);
}

void LocalCommunicator::barrier(const std::vector<int> &group) {
  Call call =
      begin("barrier", group, 0, DType::F32, ReduceOp::Sum, nullptr, nullptr);
  finish(call);
}

/// What a point-to-point request shares: its world, head and clock.
class PeerRequest : public CommRequest {
public:
  PeerRequest(std::shared_ptr<World> world, int rank, comm::PeerCall call,
              const Channel &channel, uint64_t number, bool isSend)
      : world(std::move(world)), rank(rank), call(std::move(call)),
        channel(channel), number(number), isSend(isSend) {}

protected:
  /// Waits (`lock` held) until `ready()`; throws, after poisoning the world
  /// on a timeout, when the world is poisoned or the deadline passes first.
  template <typename Ready>
  void await(std::unique_lock<std::mutex> &lock, Clock::time_point deadline,
             Ready ready) {
    world->waitUntil(lock, deadline,
                     [&] { return world->poisoned || ready(); });
    // A call that completed did so even if a rank failed meanwhile.
    if (ready())
      return;
    if (world->poisoned)
      throw Error(call.head + " aborted: " + world->failureNote());
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - started);
    // Unmatched, so the peer has posted at most `number` matching calls.
    std::string message =
        call.head + " timed out after " + std::to_string(ms.count()) +
        " ms waiting for rank " + std::to_string(call.peerRank) + " (" +
        comm::peerProgress(isSend, call.tag, rank,
                           isSend ? channel.recvs : channel.sends,
                           number + 1) +
        ")";
    world->poison(rank, message);
    throw Error(message);
  }

  std::shared_ptr<World> world;
  int rank;
  comm::PeerCall call;
  const Channel &channel; // channels live as long as the world
  uint64_t number;        // this call's on its channel, from 0
  bool isSend;
  Clock::time_point started = Clock::now();
  bool done = false;
};

/// A posted send: complete once matched with its receive.
class SendRequest final : public PeerRequest {
public:
  SendRequest(std::shared_ptr<World> world, int rank, comm::PeerCall call,
              const Channel &channel, uint64_t number,
              std::shared_ptr<Message> message)
      : PeerRequest(std::move(world), rank, std::move(call), channel, number,
                    /*isSend=*/true),
        message(std::move(message)) {}
  void wait(Clock::time_point deadline) override {
    if (done)
      return;
    std::unique_lock<std::mutex> lock(world->mutex);
    await(lock, deadline, [&] { return message->taken; });
    done = true;
  }

private:
  std::shared_ptr<Message> message;
};

/// A posted receive: copies its message once matched.
class RecvRequest final : public PeerRequest {
public:
  RecvRequest(std::shared_ptr<World> world, int rank, comm::PeerCall call,
              const Channel &channel, uint64_t number,
              std::shared_ptr<PostedRecv> posted, void *data)
      : PeerRequest(std::move(world), rank, std::move(call), channel, number,
                    /*isSend=*/false),
        posted(std::move(posted)), data(data) {}
  void wait(Clock::time_point deadline) override {
    if (done)
      return;
    std::unique_lock<std::mutex> lock(world->mutex);
    await(lock, deadline,
          [&] { return posted->message || !posted->error.empty(); });
    if (!posted->error.empty())
      throw Error(posted->error);
    lock.unlock();
    // The bytes are the message's own, no longer shared with the sender.
    const std::vector<unsigned char> &bytes = posted->message->bytes;
    if (!bytes.empty())
      std::memcpy(data, bytes.data(), bytes.size());
    posted->message.reset();
    done = true;
  }

private:
  std::shared_ptr<PostedRecv> posted;
  void *data;
};

std::unique_ptr<CommRequest>
LocalCommunicator::start(const CollectiveArgs &args, const CommGroup &group) {
  bool isSend = args.kind == CollectiveKind::Send;
  if (!isSend && args.kind != CollectiveKind::Recv)
    return Communicator::start(args, group);
  comm::PeerCall call;
  try {
    comm::checkGroup(myRank, world->size, group.ranks(), toString(args.kind));
    call = comm::checkPeerCall(args, group);
  } catch (const Error &e) {
    invalid(e.what());
  }
  std::shared_ptr<Message> message;
  if (isSend) { // copied outside the lock
    message = std::make_shared<Message>();
    message->bytes.resize(args.count * sizeOf(args.dtype));
    if (!message->bytes.empty())
      std::memcpy(message->bytes.data(), args.send, message->bytes.size());
    message->count = args.count;
    message->dtype = args.dtype;
  }
  std::lock_guard<std::mutex> lock(world->mutex);
  if (world->poisoned)
    throw Error(call.head + " aborted: " + world->failureNote());
  ChannelKey key = isSend ? ChannelKey(myRank, call.peerRank, args.tag)
                          : ChannelKey(call.peerRank, myRank, args.tag);
  Channel &channel = world->channels[key];
  if (isSend) {
    uint64_t number = channel.sends++;
    auto recv = channel.unmatchedRecvs.find(number);
    if (recv == channel.unmatchedRecvs.end()) {
      channel.unmatchedSends[number] = message;
    } else {
      world->match(message, *recv->second);
      channel.unmatchedRecvs.erase(recv);
      if (world->poisoned)
        throw Error(call.head + " aborted: " + world->failureNote());
    }
    return std::make_unique<SendRequest>(world, myRank, std::move(call),
                                         channel, number, std::move(message));
  }
  auto posted = std::make_shared<PostedRecv>();
  posted->head = call.head;
  posted->rank = myRank;
  posted->from = call.peerRank;
  posted->count = args.count;
  posted->dtype = args.dtype;
  uint64_t number = channel.recvs++;
  auto sent = channel.unmatchedSends.find(number);
  if (sent == channel.unmatchedSends.end()) {
    channel.unmatchedRecvs[number] = posted;
  } else {
    world->match(sent->second, *posted);
    channel.unmatchedSends.erase(sent);
    if (!posted->error.empty())
      throw Error(posted->error);
  }
  return std::make_unique<RecvRequest>(world, myRank, std::move(call),
                                       channel, number, std::move(posted),
                                       args.recv);
}

} // namespace

void runLocalRanks(int numRanks,
                   const std::function<void(Communicator &)> &body,
                   std::chrono::milliseconds timeout) {
  if (numRanks < 1)
    throw Error("runLocalRanks: needs at least one rank, got " +
                std::to_string(numRanks));
  auto world = std::make_shared<World>(numRanks);
  std::vector<std::unique_ptr<LocalCommunicator>> comms;
  for (int r = 0; r < numRanks; ++r)
    comms.push_back(std::make_unique<LocalCommunicator>(world, r, timeout));

  auto run = [&](int r) {
    try {
      body(*comms[r]);
    } catch (const std::exception &e) {
      world->poisonLocked(r, e.what());
    } catch (...) {
      world->poisonLocked(r, "an exception that is not a std::exception");
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(numRanks);
  for (int r = 0; r < numRanks; ++r) {
    try {
      threads.emplace_back(run, r);
    } catch (const std::system_error &e) {
      // The ranks already running would wait for this one until their
      // timeout; poisoning stops them at their next wait instead.
      world->poisonLocked(r, std::string("could not start its thread: ") +
                                 e.what());
      break;
    }
  }
  for (std::thread &t : threads)
    t.join();
  // Every thread has stopped, so the world is no longer shared.
  if (world->poisoned)
    throw Error(world->rootCause());
}

} // namespace partita::runtime
