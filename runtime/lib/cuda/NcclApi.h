//===- NcclApi.h - the thin NCCL layer under the nccl communicator -*- C++ -*-===//
//
// Every NCCL call of the runtime sits behind this interface, which has two
// implementations, as the device layer (GpuApi.h) has:
//   - the real one (NcclApi.cpp, built with PARTITA_CUDA): ncclGetUniqueId,
//     ncclCommInitRankConfig and ncclCommSplit with blocking = 0 (so no
//     call can hang: each returns at once and is polled with
//     ncclCommGetAsyncError), the collectives on a stream of the
//     communicator's own, completion as a CUDA event, ncclCommAbort;
//   - the emulated one (EmulatedNccl.cpp, always built): NCCL's documented
//     buffer layouts carried out by another communicator of the same ranks
//     (the local communicator's threads) on one host thread per rank (and
//     one more for its sends and receives, which match in posting order
//     between two ranks, as NCCL's do), so the nccl communicator's own
//     code runs in CI.
// One object per rank. Calls on one NcclComm are made by one thread at a
// time, except poll() and abortAll(), which a watchdog thread may call while
// the owner posts (each layer guards its NCCL state with a mutex of its
// own).
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_LIB_CUDA_NCCLAPI_H
#define PARTITA_RUNTIME_LIB_CUDA_NCCLAPI_H

#include "partita/runtime/Communicator.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace partita::runtime::nccl {

using Clock = std::chrono::steady_clock;

/// ncclUniqueId's bytes (NCCL_UNIQUE_ID_BYTES).
struct UniqueId {
  unsigned char bytes[128] = {};
};

/// "3f9a01c2": the first bytes of an id in hex, for messages and tests.
std::string fingerprint(const UniqueId &id);

/// An NCCL communicator: the world's, or one split from it.
class Comm {
public:
  virtual ~Comm() = default;
};

/// One collective posted on a communicator's stream.
class Op {
public:
  virtual ~Op() = default;
};

/// Queued: a call ordered on a stream whose work ahead of it has not run
/// (its inputs are not ready); Pending: ready, not complete.
enum class OpState { Queued, Pending, Done, Failed };

/// One call in NCCL's terms (counts as NCCL counts them):
///   AllReduce(send, recv, count): recv = reduction of every rank's send.
///   AllGather(send, recv, count): recv = the ranks' `count` elements in
///     rank order (rank-major concatenation).
///   ReduceScatter(send, recv, count): send holds nranks blocks of `count`;
///     rank r gets the reduction of every rank's block r.
///   AllToAll(send, recv, count): block j of send goes to rank j; block i of
///     recv comes from rank i.
///   SendRecv: within ncclGroupStart/End, ncclSend of `count` elements of
///     send to rank `sendTo` and ncclRecv into recv from rank `recvFrom`
///     (-1: none; with no source, recv is cleared).
///   Send: ncclSend of `count` elements of send to rank `sendTo`.
///   Recv: ncclRecv of `count` elements into recv from rank `recvFrom`.
///     NCCL matches a communicator's sends and receives between two ranks
///     in the order they are posted (it has no tags).
/// Ranks are ranks of the communicator.
struct Call {
  enum Kind {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    SendRecv,
    Send,
    Recv
  } kind;
  const void *send = nullptr;
  void *recv = nullptr;
  size_t count = 0;
  DType dtype = DType::F32;
  ReduceOp op = ReduceOp::Sum;
  int sendTo = -1, recvFrom = -1;
};

class NcclApi {
public:
  virtual ~NcclApi() = default;
  /// "nccl 2.28.9", "nccl (emulated)".
  virtual std::string name() const = 0;
  /// ncclGetUniqueId (rank 0 calls it, then broadcasts it).
  virtual UniqueId uniqueId() = 0;
  /// ncclCommInitRankConfig, non-blocking, polled until `deadline`; throws
  /// Error with NCCL's text (or the timeout) after aborting what it made.
  virtual std::unique_ptr<Comm> initRank(int nranks, const UniqueId &id,
                                         int rank, Clock::time_point deadline) = 0;
  /// ncclCommSplit of `parent` (every rank of parent calls it; ranks with
  /// the same color form one communicator, ordered by key), polled until
  /// `deadline`.
  virtual std::unique_ptr<Comm> split(Comm &parent, int color, int key,
                                      Clock::time_point deadline) = 0;
  /// Posts `call` on `comm`'s stream; throws Error with NCCL's text when
  /// NCCL refuses it. Ordering with the device's work:
  ///   - `order` null: the call starts after everything queued on the
  ///     device so far (the real layer waits for the device first; the
  ///     emulated one relies on its caller having waited);
  ///   - `order` a stream of the device the layer runs on (the cuda
  ///     backend's, real or emulated): the call starts once the work queued
  ///     on `order` so far has run, and work queued on `order` afterwards
  ///     waits for the call (events between `order` and `comm`'s stream);
  ///     the host does not wait for either, except for NCCL to take the
  ///     call (a non-blocking communicator may leave it ncclInProgress for
  ///     a while), until `deadline`.
  /// Thread-safe with poll() and abort() from another thread.
  virtual std::unique_ptr<Op> post(Comm &comm, const Call &call,
                                   Stream *order,
                                   Clock::time_point deadline) = 0;
  /// Whether `op` has completed: its event has been reached (Done), or
  /// ncclCommGetAsyncError reports an error (Failed, with NCCL's text in
  /// `error`); else whether its stream has reached it (Pending) or not
  /// (Queued).
  virtual OpState poll(Comm &comm, Op &op, std::string &error) = 0;
  /// ncclCommAbort of each of `comms` (all at once: one may wait for
  /// another's call through the device's streams): the communicators stop;
  /// what is in flight ends (so a device stream waiting for it goes on).
  /// Later polls of their ops report Failed. Aborting one twice is
  /// nothing.
  virtual void abortAll(const std::vector<Comm *> &comms) = 0;
  /// The number of ranks of `comm` (ncclCommCount).
  virtual int size(Comm &comm) = 0;
};

/// The real layer on CUDA device `device` (cudaSetDevice first); throws
/// Error when the runtime was built without CUDA.
std::unique_ptr<NcclApi> createRealNccl(int device);

/// The emulated layer of rank `bootstrap.rank()`: every communicator's
/// calls are carried out by `bootstrap` (which must outlive it and is
/// called from the layer's own two threads: collectives from one, one at a
/// time, sends and receives from the other), each after
/// `delay` (NcclOptions::emulatedDelay).
std::unique_ptr<NcclApi>
createEmulatedNccl(Communicator &bootstrap,
                   std::chrono::microseconds delay = {});

} // namespace partita::runtime::nccl

#endif // PARTITA_RUNTIME_LIB_CUDA_NCCLAPI_H
