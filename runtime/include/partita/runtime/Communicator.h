//===- Communicator.h - collectives between ranks ---------------*- C++ -*-===//
//
// The abstract communicator the executor issues collectives through. Ranks
// are numbered 0..size-1; a group is an ordered list of ranks (the plan's
// mesh axes resolved at load time). Every call takes effect only when every
// rank of its group makes the matching call; every call gives up after the
// communicator's timeout with an Error naming the rank and the collective,
// never a hang. Buffers are contiguous; the executor lays data out so that
// collectives act on the leading dimension.
//
// Failure model. A call that cannot complete (a peer died, never arrived, or
// made a different call) throws Error after at most the timeout, with a
// message naming this rank, the collective and its group, e.g.
//   rank 3: all_reduce over group [0,1,2,3] timed out after 5000 ms waiting
//   for ranks [2]
// After an Error the communicator is unusable: `local` poisons the state it
// shares with the other ranks, so they fail at their next wait with
// "... aborted: rank 3 failed: ..."; `mpi` cannot cancel a collective in
// flight, so the process must exit non-zero without MPI_Finalize (or let the
// communicator call MPI_Abort, MpiOptions::abortOnError).
//
// Calls on one communicator are not thread-safe (one caller per rank). Every
// rank of a group passes the same ordered list; two groups are the same only
// when their lists are equal, so [0,1] and [1,0] are different groups.
// Buffers of one call must not overlap, except that reduceScatter's `recv` may
// be the caller's own block of `send`.
//
// Groups made ahead, asynchronous calls. A user that knows its groups in
// advance (the executor: one per mesh axis set of its plan's collectives)
// makes each once with createGroup, every member in the same order (NCCL
// makes a communicator per group, collectively), and then issues calls on
// the handle: start() posts a collective and returns a CommRequest, whose
// wait() returns once this rank's part is complete or throws Error at the
// deadline. Deadline failures read as above: "<head> timed out after N ms
// ...", where N is the time from start to the deadline. `local` completes a
// collective inside start() (ranks as threads meet there, under the
// timeout), so its wait returns at once; `mpi` posts the non-blocking MPI
// call in start() and tests it against the deadline in wait(). A request
// must be waited for before its buffers are reused or the next call starts.
//
// Point to point (pipeline stages). send(data, count, dtype, peer, tag,
// group) and recv(...) address `peer` as a position in `group`; a message is
// matched by its sending rank, its receiving rank and its tag (whichever
// group named them), and messages with one (sender, receiver, tag) are
// received in the order they were sent. The blocking calls return when the
// buffer may be reused (send) or holds the message (recv); start() with
// CollectiveKind::Send or Recv posts one and returns at once (`local`,
// `mpi`), so a rank may post its receives and sends and then wait for all,
// and requests of point-to-point calls may be waited for in any order. A
// receive whose count or dtype differs from the send it matches is an Error
// naming both ranks, the tag and both sizes, e.g.
//   rank 1: recv of 4 x f32 from rank 0 with tag 7 does not match the
//   8 x f32 that rank 0 sent
// (never a truncation); a call whose peer never posts the matching one times
// out as a collective does, naming the rank, the peer and the tag:
//   rank 1: recv of 4 x f32 from rank 0 with tag 7 timed out after 300 ms
//   waiting for rank 0 (it had posted 0 sends with tag 7 to rank 1, and
//   this receive is number 1)
// A schedule must not depend on when a send returns: `local` returns only
// once the matching receive has been posted (a rendezvous, the strict case
// that the pipeline validator checks schedules against), `mpi` often
// sooner (MPI buffers small messages), and a started `nccl` receive returns
// only once its send has started (docs/runtime.md).
//
//
// Stream-ordered calls (nccl). A communicator whose calls run on a device
// (ordersOnStreams) also takes enqueue(args, group, stream): the call is
// queued on the device behind the work queued on `stream` so far, and the
// work queued there afterwards reads its result, with no host wait in
// between (NCCL's own stream ordering, joined to `stream` by CUDA events).
// The host learns of a failure later: the communicator watches every
// enqueued call from a thread of its own and, when one fails or makes no
// progress (the oldest unfinished call of its NCCL communicator, not
// complete within the timeout of its stream reaching it and of that
// communicator's previous completion), aborts (unblocking the device) and
// fails; the next call, or waitEnqueued(), which a step's end calls,
// throws the Error naming the rank, the collective and its group. Send and
// Recv may be enqueued too (pipeline messages): a receive's host thread
// still waits for its sender's host to have enqueued the send (the header
// that nccl checks the message against). The host waits for the device
// only to keep a bounded number of calls in flight (nccl: 64 a
// communicator).
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_COMMUNICATOR_H
#define PARTITA_RUNTIME_COMMUNICATOR_H

#include "partita/runtime/Stream.h"
#include "partita/runtime/Tensor.h"

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace partita::runtime {

/// Reductions happen in the buffer's dtype (f16 and bf16 round after every
/// step), combining ranks in group order, so on `local` a result does not
/// depend on thread timing and repeats bit for bit. Max and Min propagate NaN
/// on `local`; on `mpi` NaN handling is the MPI library's.
enum class ReduceOp : uint8_t { Sum, Max, Min };

/// "sum", "max", "min".
const char *toString(ReduceOp op);

/// A group of ranks made ahead of time by Communicator::createGroup. A
/// backend may derive from it to keep its own handle (an MPI_Comm, a
/// ncclComm_t).
class CommGroup {
public:
  CommGroup(std::vector<int> ranks, int position)
      : members(std::move(ranks)), myPosition(position) {}
  virtual ~CommGroup() = default;
  /// The ranks, in the order given to createGroup.
  const std::vector<int> &ranks() const { return members; }
  /// This rank's position in ranks().
  int position() const { return myPosition; }
  int size() const { return static_cast<int>(members.size()); }
  /// What the group is for ("axes dp,tp"), for error messages; empty when
  /// not set.
  const std::string &label() const { return what; }
  void setLabel(std::string text) { what = std::move(text); }

private:
  std::vector<int> members;
  int myPosition;
  std::string what;
};

/// The collectives start() can post.
enum class CollectiveKind : uint8_t {
  AllReduce,
  AllGather,
  ReduceScatter,
  AllToAll,
  CollectivePermute,
  Barrier,
  /// Point to point: `count` elements of `send` to position `peer` of the
  /// group, with `tag`.
  Send,
  /// Point to point: `count` elements into `recv` from position `peer`.
  Recv,
};

/// Tags of point-to-point messages are 0..kMaxTag: MPI guarantees tags up
/// to 32767, and the runtime keeps three for itself (kRuntimeTag,
/// kRuntimePeerTag, and 32767, the mpi communicator's own).
constexpr int kMaxTag = 32764;
/// The tags of the runtime's own point-to-point messages, which no other
/// caller may use: the emulated nccl layer's collective_permute
/// (kRuntimeTag) and its sends and receives (kRuntimePeerTag) over the
/// bootstrap communicator, each on a thread of its own.
constexpr int kRuntimeTag = kMaxTag + 1;
constexpr int kRuntimePeerTag = kMaxTag + 2;

/// "all_reduce", "all_gather", ..., "send", "recv" (as error messages name
/// them).
const char *toString(CollectiveKind kind);

/// One collective call: the buffers and counts of the blocking method of the
/// same kind (allReduce reduces `recv` in place; `send` is unused; Send
/// reads `send`, Recv writes `recv`).
struct CollectiveArgs {
  CollectiveKind kind = CollectiveKind::AllReduce;
  const void *send = nullptr;
  void *recv = nullptr;
  size_t count = 0;
  DType dtype = DType::F32;
  ReduceOp op = ReduceOp::Sum;
  std::vector<std::pair<int, int>> pairs; // CollectivePermute
  int peer = -1; // Send, Recv: a position in the group
  int tag = 0;   // Send, Recv: 0..kMaxTag
};

/// A collective in flight on this rank.
class CommRequest {
public:
  using Clock = std::chrono::steady_clock;
  virtual ~CommRequest() = default;
  /// Returns once this rank's part is complete (its `recv` holds the
  /// result); throws Error naming the rank, the collective and the group
  /// when `deadline` passes first or the call fails. Waiting again after a
  /// success returns at once.
  virtual void wait(Clock::time_point deadline) = 0;
};

/// Ranks 0..size-1 in order: the group of every rank of a size-rank world.
std::vector<int> allRanks(int size);

class Communicator {
public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "local", "mpi", "nccl".
  virtual const char *kind() const = 0;
  /// Whether calls may come from a thread other than the one that made the
  /// communicator (still one call at a time): the executor then issues
  /// gradient buckets from a communication thread. False for MPI below
  /// MPI_THREAD_SERIALIZED.
  virtual bool callableFromAnyThread() const { return true; }
  /// Whether its buffers may be device memory (nccl). Else they must be
  /// memory the host reads (local, mpi): on a device whose memory the host
  /// cannot read, the executor stages every call through host memory.
  virtual bool takesDeviceMemory() const { return false; }

  /// In place: every rank of `group` ends with the reduction of all ranks'
  /// `count` elements.
  virtual void allReduce(void *data, size_t count, DType dtype, ReduceOp op,
                         const std::vector<int> &group) = 0;
  /// `recv` gets group.size() * count elements: rank group[i]'s `send` at
  /// block i.
  virtual void allGather(const void *send, void *recv, size_t count,
                         DType dtype, const std::vector<int> &group) = 0;
  /// `send` holds group.size() blocks of `count` elements; the rank at
  /// position i receives the reduction of every rank's block i.
  virtual void reduceScatter(const void *send, void *recv, size_t count,
                             DType dtype, ReduceOp op,
                             const std::vector<int> &group) = 0;
  /// `send` holds group.size() blocks of `count` elements; block j goes to
  /// the rank at position j, and `recv` block i comes from position i.
  virtual void allToAll(const void *send, void *recv, size_t count, DType dtype,
                        const std::vector<int> &group) = 0;
  /// `pairs` are (source, target) positions in `group`, each source and each
  /// target at most once (every member passes the same list): the rank at
  /// a source position sends its `count` elements to the rank at the target
  /// position, and only those blocks move; a member that is no target gets
  /// zeros in `recv`. A pair (p, p) copies locally. `send` and `recv` must
  /// not overlap. Bad pairs are an Error naming them.
  virtual void collectivePermute(const void *send, void *recv, size_t count,
                                 DType dtype,
                                 const std::vector<std::pair<int, int>> &pairs,
                                 const std::vector<int> &group) = 0;
  /// Point to point (see the file comment): `count` elements to / from the
  /// rank at position `peer` of `group` (which holds this rank), with `tag`
  /// in 0..kMaxTag (kRuntimeTag and kRuntimePeerTag are the runtime's own). A bad peer (outside the group, or this rank) or tag is
  /// an Error naming it. The default runs start() with a group of `group`'s
  /// ranks under the timeout.
  virtual void send(const void *data, size_t count, DType dtype, int peer,
                    int tag, const std::vector<int> &group);
  virtual void recv(void *data, size_t count, DType dtype, int peer, int tag,
                    const std::vector<int> &group);
  /// Every rank of the group waits for all the others.
  virtual void barrier(const std::vector<int> &group) = 0;

  /// Makes the group of `ranks` (ordered; this rank among them); throws
  /// Error naming the group when it is invalid. Every member calls it, in
  /// the same order relative to its other createGroup calls. `mpi` sets up
  /// the group's MPI communicator now, under the timeout.
  virtual std::shared_ptr<CommGroup> createGroup(const std::vector<int> &ranks);
  /// Posts `args` over `group` (made by this communicator). The default
  /// runs the blocking collective of args.kind now and returns a request
  /// that is already complete; a communicator with point-to-point calls
  /// overrides it for Send and Recv (the default throws).
  virtual std::unique_ptr<CommRequest> start(const CollectiveArgs &args,
                                             const CommGroup &group);
  /// start(), then wait until the communicator's timeout from now.
  void run(const CollectiveArgs &args, const CommGroup &group) {
    start(args, group)->wait(CommRequest::Clock::now() + timeout);
  }

  /// Whether enqueue() orders calls on device streams (nccl). Else a caller
  /// on a device waits for the producers on the host and then calls start().
  virtual bool ordersOnStreams() const { return false; }
  /// Queues `args` over `group` on the device and returns at once (see the
  /// file comment): the call starts once the work queued on `stream` (a
  /// stream of the device whose memory the buffers are) so far has run, and
  /// work queued on `stream` afterwards starts once the call is complete. A
  /// failure, or a call that makes no progress within the timeout (above),
  /// is thrown by a later call or waitEnqueued(). Collectives, Send and
  /// Recv (not Barrier; tags 0..kMaxTag). Where !ordersOnStreams(), throws
  /// Error.
  virtual void enqueue(const CollectiveArgs &args, const CommGroup &group,
                       Stream &stream);
  /// Blocks until every call enqueued so far is complete; throws the first
  /// failure or timeout as above. Returns at once where nothing is enqueued.
  virtual void waitEnqueued() {}

  void setTimeout(std::chrono::milliseconds t) { timeout = t; }
  std::chrono::milliseconds getTimeout() const { return timeout; }

protected:
  std::chrono::milliseconds timeout{60000};
};

/// comm's barrier over every rank; nothing without a communicator (one
/// rank in this process).
void barrierOfAll(Communicator *comm);

/// Runs `body(comm)` on `numRanks` threads of this process, each with its own
/// local communicator; after every thread has stopped, rethrows the first
/// failure (the root cause, not the others' "aborted" errors) as
/// Error("rank N: <its message>"). A rank that throws poisons the shared state, so the
/// others fail at their next collective instead of waiting for it.
void runLocalRanks(
    int numRanks, const std::function<void(Communicator &)> &body,
    std::chrono::milliseconds timeout = std::chrono::seconds(60));

struct MpiOptions {
  /// On a failed or timed-out call, print the error to stderr and call
  /// MPI_Abort(MPI_COMM_WORLD, 1) instead of throwing: the whole job ends
  /// non-zero even under an mpirun that does not tear a job down when one
  /// process exits (--mca orte_abort_on_non_zero_status 0).
  bool abortOnError = false;
};

/// The MPI communicator over MPI_COMM_WORLD: ranks are MPI_COMM_WORLD ranks.
/// Initializes MPI (MPI_Init_thread, MPI_THREAD_SERIALIZED) unless the caller
/// already did, and then finalizes it on destruction unless a call failed
/// (a collective still in flight would make MPI_Finalize hang). Creating it is
/// collective over MPI_COMM_WORLD. Null when Partita was built without MPI.
std::unique_ptr<Communicator>
createMpiCommunicator(const MpiOptions &options = {});

struct NcclOptions {
  /// Carry NCCL's documented buffer layouts out with the bootstrap
  /// communicator (the local communicator's threads) instead of NCCL on a
  /// GPU: `--backend cuda --emulate --comm nccl`.
  bool emulate = false;
  /// Testing, emulated only: each call waits this long on the rank's NCCL
  /// thread before it runs (a slow network), so that calls stay in flight
  /// while the host and the device's streams go on; ordering that is
  /// missing then shows as wrong data.
  std::chrono::microseconds emulatedDelay{0};
  /// The CUDA device of this rank (one GPU per rank).
  int device = 0;
  /// Called with the unique id's fingerprint once it has reached this rank
  /// (testing and logs).
  std::function<void(const std::string &)> afterId;
};

/// The nccl communicator of rank bootstrap.rank() (runtime/lib/comm/
/// NcclCommunicator.cpp): rank 0 makes NCCL's unique id and broadcasts it
/// over `bootstrap` (MPI, or the local communicator when emulated), then
/// every rank makes the world NCCL communicator; collective over the
/// bootstrap's ranks. `bootstrap` must outlive it. Without a usable CUDA
/// device (and not emulated) throws, after the broadcast, Error("rank N:
/// --comm nccl: no usable CUDA device: <CUDA's text> (nccl unique id ...
/// from rank 0 received)").
std::unique_ptr<Communicator>
createNcclCommunicator(Communicator &bootstrap, const NcclOptions &options);

/// Ends the whole MPI job: MPI_Abort(MPI_COMM_WORLD, code) when MPI is
/// initialized and not finalized (every process, and mpirun, then exit
/// non-zero whatever --mca orte_abort_on_non_zero_status says; a rank that
/// just exits leaves such an mpirun waiting). Returns when there is no MPI
/// job to end (built without MPI, or MPI not running).
void abortMpiJob(int code);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_COMMUNICATOR_H
