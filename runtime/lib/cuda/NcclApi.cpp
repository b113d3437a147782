//===- NcclApi.cpp - the NCCL layer over NCCL and the CUDA runtime ---------===//
//
// Built with PARTITA_CUDA. Communicators are non-blocking (config.blocking
// = 0): ncclCommInitRankConfig, ncclCommSplit and every collective return at
// once, possibly with ncclInProgress, and ncclCommGetAsyncError says when
// the work NCCL started on the host is done or failed; a call that never
// finishes is bounded by the caller's deadline and then ncclCommAbort. Each
// communicator has its own non-blocking stream; completion of a posted call
// is a CUDA event recorded after it.
//
// Ordering with the device's work. A call ordered on a stream of the
// device layer (the executor's compute or communication stream) is joined
// to it by events: the communicator's stream waits for an event recorded
// on the caller's stream, NCCL runs the call there, and the caller's
// stream waits for the call's event. The host waits only for NCCL to take
// the call (a non-blocking call may stay ncclInProgress while NCCL sets up
// connections), never for the device. A call with no stream first waits
// for the whole device (cudaDeviceSynchronize): the executor's calls from
// the host outside a step.
//
// Threads: the nccl communicator's watchdog polls and aborts from a thread
// of its own while the owner posts, so every NCCL call here runs under
// `mutex`, in short sections: the caller's stream is touched outside it (a
// cudaEventRecord there may block while the device's queue is full, and the
// watchdog's abort is what frees it), a non-blocking call's ncclInProgress
// is polled one locked query at a time, and the nccl communicator keeps at
// most kMaxEnqueuedPerComm calls of one communicator unfinished, so posting
// on its stream finds room (CUDA queues about a thousand items a stream).
// Polls and aborts after an abort do not touch the freed ncclComm_t. A
// thread that polls makes the layer's device current first (the watchdog's
// first CUDA call would otherwise make device 0's context).
//
// Settling. NCCL refuses any call on a non-blocking communicator whose
// previous call is still ncclInProgress (and the refusal poisons the
// communicator), so every call here is settled before the next: post()
// polls its call until NCCL has enqueued it and only then records its
// event, and a split polls its *parent*, since NCCL fills in the child
// only once the parent's state leaves ncclInProgress (until then the
// child is null, and NCCL's thread writes it later: the storage must
// outlive the split).
//
// Aborts. ncclCommAbort blocks until the communicator's device work has
// stopped, and a communicator's stream may wait (through the executor's
// streams) for another communicator's call: aborting them one after the
// other could wait for a call whose communicator is aborted only next.
// abortAll marks every communicator aborted, then aborts them all at once,
// one thread each.
//
//===----------------------------------------------------------------------===//

#include "runtime/lib/cuda/NcclApi.h"
#include "runtime/lib/cuda/CudaNative.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace partita::runtime::nccl {

namespace {

static_assert(sizeof(UniqueId::bytes) == sizeof(ncclUniqueId),
              "UniqueId must hold an ncclUniqueId");

void checkCuda(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    throw Error(std::string("nccl: ") + what + ": " + cudaGetErrorString(e) +
                " (" + cudaGetErrorName(e) + ")");
}

std::string ncclText(ncclResult_t r, ncclComm_t comm) {
  std::string s = ncclGetErrorString(r);
  if (comm)
    if (const char *last = ncclGetLastError(comm))
      if (*last)
        s += std::string(": ") + last;
  return s;
}

ncclDataType_t ncclType(DType t) {
  switch (t) {
  case DType::F32: return ncclFloat32;
  case DType::F64: return ncclFloat64;
  case DType::F16: return ncclFloat16;
  case DType::BF16: return ncclBfloat16;
  case DType::I32: return ncclInt32;
  case DType::I64: return ncclInt64;
  }
  throw Error("nccl: a dtype out of the enum");
}

ncclRedOp_t ncclOp(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum: return ncclSum;
  case ReduceOp::Max: return ncclMax;
  case ReduceOp::Min: return ncclMin;
  }
  return ncclSum;
}

struct RealComm final : Comm {
  /// Written by NCCL's own thread while a split is in progress.
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  bool aborted = false;
  ~RealComm() override {
    if (comm && !aborted)
      ncclCommDestroy(comm);
    if (stream)
      cudaStreamDestroy(stream);
  }
};

struct RealOp final : Op {
  /// Recorded on the caller's stream before the call (its inputs ready:
  /// the communicator's stream waits for it), and after the call.
  cudaEvent_t ready = nullptr, event = nullptr;
  ~RealOp() override {
    if (ready)
      cudaEventDestroy(ready);
    if (event)
      cudaEventDestroy(event);
  }
};

class RealNccl final : public NcclApi {
public:
  // The device is set at init, after the id has gone round (no CUDA call
  // before: a rank without a device still takes part in the broadcast).
  explicit RealNccl(int device) : device(device) {}

  std::string name() const override {
    int v = 0;
    ncclGetVersion(&v);
    return "nccl " + std::to_string(v / 10000) + "." +
           std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
  }

  UniqueId uniqueId() override {
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess)
      throw Error("nccl: ncclGetUniqueId: " + ncclText(r, nullptr));
    UniqueId out;
    std::memcpy(out.bytes, &id, sizeof(id));
    return out;
  }

  std::unique_ptr<Comm> initRank(int nranks, const UniqueId &id, int rank,
                                 Clock::time_point deadline) override {
    checkCuda(cudaSetDevice(device), "cudaSetDevice");
    auto comm = std::make_unique<RealComm>();
    ncclUniqueId nid;
    std::memcpy(&nid, id.bytes, sizeof(nid));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r =
        ncclCommInitRankConfig(&comm->comm, nranks, nid, rank, &config);
    settle(*comm, r, "ncclCommInitRankConfig", deadline);
    makeStream(*comm);
    return comm;
  }

  std::unique_ptr<Comm> split(Comm &parentComm, int color, int key,
                              Clock::time_point deadline) override {
    useDevice();
    auto &parent = static_cast<RealComm &>(parentComm);
    auto comm = std::make_unique<RealComm>();
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (parent.aborted)
        throw Error("nccl: ncclCommSplit of an aborted communicator");
      r = ncclCommSplit(parent.comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color,
                        key, &comm->comm, &config);
    }
    if (r != ncclSuccess && r != ncclInProgress)
      throw Error("nccl: ncclCommSplit: " + ncclText(r, parent.comm));
    // The child exists once the parent has settled; NCCL's thread writes
    // it into comm->comm meanwhile. When the settling fails (the parent
    // aborted here, or by the watchdog, whose abort may still be joining
    // that thread), the storage is left allocated, never freed under it: a
    // failed split ends the run.
    try {
      settle(parent, r, "ncclCommSplit", deadline);
    } catch (...) {
      comm.release();
      throw;
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!comm->comm) {
        if (color < 0)
          return nullptr; // NCCL_SPLIT_NOCOLOR: no communicator
        throw Error("nccl: ncclCommSplit completed without a communicator");
      }
    }
    // The child's own initialization may still be going on.
    settle(*comm, ncclInProgress, "ncclCommSplit (the new communicator)",
           deadline);
    makeStream(*comm);
    return comm;
  }

  std::unique_ptr<Op> post(Comm &c, const Call &call, Stream *order,
                           Clock::time_point deadline) override {
    useDevice();
    auto &comm = static_cast<RealComm &>(c);
    cudaStream_t caller = order ? gpu::nativeCudaStream(*order) : nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (comm.aborted)
        throw Error("nccl: a collective on an aborted communicator");
    }
    // The inputs come from kernels queued on `order`, or on the device.
    auto op = std::make_unique<RealOp>();
    checkCuda(cudaEventCreateWithFlags(&op->event, cudaEventDisableTiming),
              "cudaEventCreateWithFlags");
    if (caller) {
      checkCuda(cudaEventCreateWithFlags(&op->ready, cudaEventDisableTiming),
                "cudaEventCreateWithFlags");
      checkCuda(cudaEventRecord(op->ready, caller), "cudaEventRecord");
    } else {
      checkCuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    }
    ncclResult_t r;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (comm.aborted)
        throw Error("nccl: a collective on an aborted communicator");
      if (caller)
        checkCuda(cudaStreamWaitEvent(comm.stream, op->ready, 0),
                  "cudaStreamWaitEvent");
      r = issue(comm, call);
      if (r != ncclSuccess && r != ncclInProgress)
        throw Error("nccl: " + ncclText(r, comm.comm));
    }
    // Settled before anything else touches the communicator (see the file
    // comment), one locked query at a time so the watchdog can abort
    // meanwhile; the event is recorded only once NCCL has enqueued the
    // call's kernel (recorded earlier, it would be reached too soon).
    while (r == ncclInProgress) {
      if (Clock::now() > deadline)
        throw Error("nccl: the call was still not enqueued at the "
                    "deadline (ncclInProgress)");
      std::this_thread::yield();
      std::lock_guard<std::mutex> lock(mutex);
      if (comm.aborted)
        throw Error("nccl: the communicator was aborted while the call "
                    "was being enqueued");
      ncclResult_t q = ncclCommGetAsyncError(comm.comm, &r);
      if (q != ncclSuccess)
        r = q;
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (r != ncclSuccess)
        throw Error("nccl: " + ncclText(r, comm.comm));
      if (comm.aborted)
        throw Error("nccl: a collective on an aborted communicator");
      checkCuda(cudaEventRecord(op->event, comm.stream), "cudaEventRecord");
    }
    // What `order` queues from now on reads the call's result.
    if (caller)
      checkCuda(cudaStreamWaitEvent(caller, op->event, 0),
                "cudaStreamWaitEvent");
    return op;
  }

  OpState poll(Comm &c, Op &o, std::string &error) override {
    useDevice();
    std::lock_guard<std::mutex> lock(mutex);
    return pollLocked(c, o, error);
  }

  void abortAll(const std::vector<Comm *> &comms) override {
    useDevice();
    std::vector<ncclComm_t> live;
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (Comm *c : comms) {
        auto &comm = static_cast<RealComm &>(*c);
        if (comm.aborted || !comm.comm)
          continue;
        comm.aborted = true; // nothing here touches it again
        live.push_back(comm.comm);
      }
    }
    if (live.size() == 1) {
      ncclCommAbort(live[0]);
      return;
    }
    std::vector<std::thread> threads;
    for (ncclComm_t comm : live) {
      try {
        threads.emplace_back([this, comm] {
          cudaSetDevice(device);
          ncclCommAbort(comm);
        });
      } catch (const std::system_error &) {
        ncclCommAbort(comm); // no thread to spare: in line
      }
    }
    for (std::thread &t : threads)
      t.join();
  }

  int size(Comm &c) override {
    auto &comm = static_cast<RealComm &>(c);
    std::lock_guard<std::mutex> lock(mutex);
    if (comm.aborted)
      throw Error("nccl: ncclCommCount of an aborted communicator");
    int count = 0;
    ncclResult_t r = ncclCommCount(comm.comm, &count);
    if (r != ncclSuccess)
      throw Error("nccl: ncclCommCount: " + ncclText(r, comm.comm));
    return count;
  }

private:
  /// Makes this layer's device current on the calling thread, once.
  void useDevice() {
    thread_local int current = -1;
    if (current != device) {
      checkCuda(cudaSetDevice(device), "cudaSetDevice");
      current = device;
    }
  }

  /// The NCCL calls of `call` on `comm`'s stream.
  ncclResult_t issue(RealComm &comm, const Call &call) {
    ncclDataType_t type = ncclType(call.dtype);
    ncclResult_t r = ncclSuccess;
    switch (call.kind) {
    case Call::AllReduce:
      r = ncclAllReduce(call.send, call.recv, call.count, type,
                        ncclOp(call.op), comm.comm, comm.stream);
      break;
    case Call::AllGather:
      r = ncclAllGather(call.send, call.recv, call.count, type, comm.comm,
                        comm.stream);
      break;
    case Call::ReduceScatter:
      r = ncclReduceScatter(call.send, call.recv, call.count, type,
                            ncclOp(call.op), comm.comm, comm.stream);
      break;
    case Call::AllToAll:
      r = ncclAlltoAll(call.send, call.recv, call.count, type, comm.comm,
                       comm.stream);
      break;
    case Call::SendRecv:
      if (call.recvFrom < 0)
        checkCuda(cudaMemsetAsync(call.recv, 0,
                                  call.count * sizeOf(call.dtype),
                                  comm.stream),
                  "cudaMemsetAsync");
      r = ncclGroupStart();
      if (r == ncclSuccess && call.sendTo >= 0)
        r = ncclSend(call.send, call.count, type, call.sendTo, comm.comm,
                     comm.stream);
      if (r == ncclSuccess && call.recvFrom >= 0)
        r = ncclRecv(call.recv, call.count, type, call.recvFrom, comm.comm,
                     comm.stream);
      {
        ncclResult_t end = ncclGroupEnd();
        if (r == ncclSuccess)
          r = end;
      }
      break;
    case Call::Send:
      r = ncclSend(call.send, call.count, type, call.sendTo, comm.comm,
                   comm.stream);
      break;
    case Call::Recv:
      r = ncclRecv(call.recv, call.count, type, call.recvFrom, comm.comm,
                   comm.stream);
      break;
    }
    return r;
  }

  OpState pollLocked(Comm &c, Op &o, std::string &error) {
    auto &comm = static_cast<RealComm &>(c);
    auto &op = static_cast<RealOp &>(o);
    if (comm.aborted) {
      // ncclCommAbort has ended its calls and freed the communicator.
      error = "the communicator was aborted";
      return OpState::Failed;
    }
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm.comm, &async);
    if (r != ncclSuccess)
      async = r;
    if (async != ncclSuccess && async != ncclInProgress) {
      error = ncclText(async, comm.comm);
      return OpState::Failed;
    }
    cudaError_t e = cudaEventQuery(op.event);
    if (e == cudaSuccess)
      return OpState::Done;
    if (e == cudaErrorNotReady) {
      // Not an error, but the runtime may keep it as this thread's last
      // one, which the next kernel launch's check would report.
      (void)cudaGetLastError();
      if (op.ready && cudaEventQuery(op.ready) == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return OpState::Queued;
      }
      return OpState::Pending;
    }
    error = std::string("cudaEventQuery: ") + cudaGetErrorString(e);
    return OpState::Failed;
  }

  /// Polls `comm` (after a non-blocking init, or a split of it) until it
  /// leaves ncclInProgress, one locked query at a time; aborts it and
  /// throws on an error or at the deadline.
  void settle(RealComm &comm, ncclResult_t r, const char *what,
              Clock::time_point deadline) {
    while (r == ncclInProgress) {
      if (Clock::now() > deadline) {
        abortAll({&comm});
        throw Error(std::string("nccl: ") + what +
                    " did not complete before the deadline");
      }
      std::this_thread::yield();
      std::lock_guard<std::mutex> lock(mutex);
      if (comm.aborted)
        throw Error(std::string("nccl: ") + what +
                    ": the communicator was aborted meanwhile");
      ncclResult_t q = ncclCommGetAsyncError(comm.comm, &r);
      if (q != ncclSuccess)
        r = q;
    }
    if (r != ncclSuccess) {
      std::string text;
      {
        std::lock_guard<std::mutex> lock(mutex);
        text = ncclText(r, comm.comm);
      }
      abortAll({&comm});
      throw Error(std::string("nccl: ") + what + ": " + text);
    }
  }

  void makeStream(RealComm &comm) {
    checkCuda(cudaStreamCreateWithFlags(&comm.stream, cudaStreamNonBlocking),
              "cudaStreamCreateWithFlags");
  }

  int device;
  std::mutex mutex; // every NCCL call (see the file comment)
};

} // namespace

std::unique_ptr<NcclApi> createRealNccl(int device) {
  return std::make_unique<RealNccl>(device);
}

} // namespace partita::runtime::nccl
