//===- Executor.cpp - runs one program of a plan on one rank -------------===//
//
// At construction the executor turns the validated plan into closures: each
// buffer gets its address (arena offset, or persistent storage for
// parameters and inputs, all allocated from the backend's Device; a donated
// update, Buffer.in_place, the address of what it replaces), each kernel its
// prebuilt KernelCall, each collective its rank group. Communicators act on
// the leading dimension, so a collective along another dimension is a
// transpose to the front, the collective, and a transpose back, through one
// scratch buffer all such collectives share (they run one at a time, in
// line). Kernels and copies run on the device's compute stream; gradient
// buckets' calls on a communication stream, ordered by events. A bucket is
// packed into one of a few recycled buffers of the largest bucket's size
// (kBucketSlots while calls overlap, one when they run in line): taking a
// buffer when none is free first waits for and unpacks the oldest bucket in
// flight, so memory outside the arena stays bounded whatever the model's
// size. Every allocation is counted (Executor::memory).
//
//===----------------------------------------------------------------------===//

#include "PlanInternal.h"
#include "partita/runtime/KernelRegistry.h"
#include "partita/runtime/PipelineSchedule.h"
#include "runtime/lib/cuda/PlanChecks.h"
#include "runtime/plan/PlanMemory.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <tuple>

namespace partita::runtime {

namespace {

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t fnv1a64(const std::string &s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

/// Uniform in (0, 1) from 53 random bits.
double toUnit(uint64_t r) { return (double(r >> 11) + 0.5) * 0x1.0p-53; }

/// Calls `row(globalElem, localElem, length)` for every contiguous row of the
/// local block that starts at `starts` inside the global shape. A padded
/// block (dist-partition pads dimensions their axes do not divide) reaches
/// past the global shape: only its real elements are visited.
void forEachRow(const std::vector<int64_t> &global,
                const std::vector<int64_t> &local,
                const std::vector<int64_t> &starts,
                const std::function<void(int64_t, int64_t, int64_t)> &row) {
  int64_t rank = local.size();
  for (int64_t d : local)
    if (d == 0)
      return;
  if (rank == 0) {
    row(0, 0, 1);
    return;
  }
  int64_t rowLen = local[rank - 1];
  int64_t realLen = std::min(rowLen, global[rank - 1] - starts[rank - 1]);
  std::vector<int64_t> index(rank, 0);
  int64_t localElem = 0;
  while (true) {
    int64_t g = 0;
    bool real = realLen > 0;
    for (int64_t d = 0; d < rank; ++d) {
      g = g * global[d] + starts[d] + index[d];
      real &= starts[d] + index[d] < global[d];
    }
    if (real)
      row(g, localElem, realLen);
    localElem += rowLen;
    int64_t d = rank - 2;
    while (d >= 0 && ++index[d] == local[d]) {
      index[d] = 0;
      --d;
    }
    if (d < 0)
      return;
  }
}

std::vector<int64_t>
toVector(const google::protobuf::RepeatedField<int64_t> &f) {
  return std::vector<int64_t>(f.begin(), f.end());
}

template <typename T>
void accumulate(T *dst, const T *src, int64_t n, bool max) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] =
        max ? (src[i] > dst[i] || std::isnan(double(src[i])) ? src[i] : dst[i])
            : dst[i] + src[i];
}

KernelAttrs toAttrs(const plan::KernelAttrs &a) {
  KernelAttrs attrs;
  attrs.spec = a.spec();
  attrs.dims = toVector(a.dims());
  attrs.dim = a.dim();
  attrs.epsilon = a.epsilon();
  attrs.theta = a.theta();
  attrs.positionOffset = a.position_offset();
  attrs.causal = a.causal();
  if (a.has_scale())
    attrs.scale = a.scale();
  attrs.queryOffset = a.query_offset();
  attrs.tanh = a.tanh();
  attrs.vocabOffset = a.vocab_offset();
  attrs.meanCount = a.mean_count();
  attrs.fillValue = a.fill_value();
  attrs.wrt = a.wrt();
  attrs.lr = a.lr();
  attrs.momentum = a.momentum();
  attrs.beta1 = a.beta1();
  attrs.beta2 = a.beta2();
  attrs.eps = a.eps();
  attrs.weightDecay = a.weight_decay();
  return attrs;
}

AttrValue toAttrValue(const plan::AttrValue &v) {
  switch (v.value_case()) {
  case plan::AttrValue::kIntValue:
    return v.int_value();
  case plan::AttrValue::kFloatValue:
    return v.float_value();
  case plan::AttrValue::kBoolValue:
    return v.bool_value();
  case plan::AttrValue::kStringValue:
    return v.string_value();
  case plan::AttrValue::kIntsValue:
    return toVector(v.ints_value().values());
  case plan::AttrValue::VALUE_NOT_SET:
    break;
  }
  return int64_t(0); // PlanFile rejects an attribute with no value
}

/// The initializer's value at `index` for a parameter whose key is
/// splitmix64(seed ^ fnv1a64(name)).
double valueForKey(uint64_t key, uint64_t index, int kind, double a, double b) {
  switch (kind) {
  case plan::Init::UNIFORM:
    return a + (b - a) * toUnit(splitmix64(key + 2 * index));
  case plan::Init::CONSTANT:
    return a;
  case plan::Init::NORMAL:
  default: {
    double u1 = toUnit(splitmix64(key + 2 * index));
    double u2 = toUnit(splitmix64(key + 2 * index + 1));
    return a + b * std::sqrt(-2.0 * std::log(u1)) *
                   std::cos(6.283185307179586476925 * u2);
  }
  }
}

} // namespace

const char *collectiveKindName(int kind) {
  switch (kind) {
  case plan::Collective::ALL_REDUCE:
    return "all_reduce";
  case plan::Collective::ALL_GATHER:
    return "all_gather";
  case plan::Collective::REDUCE_SCATTER:
    return "reduce_scatter";
  case plan::Collective::ALL_TO_ALL:
    return "all_to_all";
  case plan::Collective::SLICE:
    return "slice";
  case plan::Collective::COLLECTIVE_PERMUTE:
    return "collective_permute";
  case plan::Collective::AXIS_INDEX:
    return "axis_index";
  case plan::Collective::MASK:
    return "mask";
  default:
    return "?";
  }
}

bool collectiveCommunicates(int kind) {
  return kind != plan::Collective::SLICE && kind != plan::Collective::MASK &&
         kind != plan::Collective::AXIS_INDEX;
}

double initialValue(uint64_t seed, const std::string &name, uint64_t index,
                    int kind, double a, double b) {
  return valueForKey(splitmix64(seed ^ fnv1a64(name)), index, kind, a, b);
}

struct Executor::Impl {
  /// The communication stream's thread may be inside a bucket call, which
  /// reads the communicator groups, the bucket and its slot (a rank whose
  /// step failed is torn down while its bucket waits for the others): the
  /// stream goes first. Its destructor lets the call in flight finish
  /// (bounded by the collective's deadline) and skips the rest; members
  /// declared after commStream would otherwise be destroyed before it.
  ///
  /// Collectives enqueued on the device (streamOrdered) may still read and
  /// write this program's buffers after a failed step: they are waited for
  /// first (bounded by the communicator's deadlines; a failure was already
  /// reported by the step).
  ~Impl() {
    if (streamOrdered) {
      try {
        comm->waitEnqueued();
      } catch (const Error &) {
      }
    }
    commStream.reset();
  }

  std::shared_ptr<const PlanFile> plan;
  /// Executor::setLearningRate's value for the optimizer kernels (sgd,
  /// adamw); NaN: each kernel's lr from the plan.
  double learningRate = NAN;
  /// The rate an optimizer kernel whose plan says `planRate` runs with.
  double rateFor(double planRate) const {
    return std::isnan(learningRate) ? planRate : learningRate;
  }
  /// The plan's lr of the first optimizer kernel (NaN: none).
  double planLearningRate = NAN;
  const plan::Program *program = nullptr;
  Communicator *comm = nullptr;
  Backend *backend = nullptr;
  Device *device = nullptr;
  Stream *compute = nullptr; // the device's compute stream
  int rank = 0;
  std::map<std::string, int64_t> axisSizes;
  std::map<std::string, int64_t> coords; // this rank's mesh coordinates
  std::vector<std::string> axisOrder;
  std::vector<int> rankOfPosition;

  DeviceBuffer arena, hostArena; // the memory plan's, per memory space
  /// Set before buildImpl: a device arena this program uses instead of its
  /// own (a pipelined stage's per-microbatch programs, which run one at a
  /// time, share the largest's; its owner counts it).
  unsigned char *sharedArena = nullptr;
  std::vector<DeviceBuffer> persistent;
  /// What the executor holds, by what for (Executor::memory).
  ExecutorMemory memory;
  int64_t held = 0; // bytes held now, temporaries included
  void hold(int64_t bytes) {
    held += bytes;
    memory.highWaterMark = std::max(memory.highWaterMark, held);
  }
  /// Zeroed memory for a buffer, scratch or staging area that lives as long
  /// as the executor, counted in `category`.
  unsigned char *allocate(size_t bytes, int64_t &category,
                          MemorySpace space = MemorySpace::Device) {
    persistent.push_back(device->allocateBuffer(bytes, space));
    category += int64_t(bytes);
    hold(int64_t(bytes));
    return persistent.back().get();
  }
  /// One scratch buffer for every collective that transposes (they run in
  /// line, one at a time): its size, the largest need, is known once every
  /// collective is compiled.
  unsigned char *collectiveScratch = nullptr;
  size_t collectiveScratchBytes = 0;
  /// The gradient buckets' recycled buffers (see Bucket), each
  /// `bucketSlotBytes`; `slotHolder[k]`: the bucket packed in slot k, null
  /// when free; `slotQueue`: holders, oldest first.
  std::vector<unsigned char *> bucketSlots;
  size_t bucketSlotBytes = 0;
  /// Buckets that pack into a slot (not Bucket::direct).
  size_t slotBuckets = 0;
  struct Bucket;
  std::vector<Bucket *> slotHolder;
  std::vector<Bucket *> slotQueue;
  /// A reduce_scatter member along a dimension other than 0 is transposed
  /// here before it is packed (on the compute stream, one at a time).
  unsigned char *packScratch = nullptr;
  size_t packScratchBytes = 0;
  /// Lets `write` fill `bytes` at device address `dst` from the host: in
  /// place on a host-accessible device, else through a staging copy.
  template <typename Write>
  void writeFromHost(void *dst, size_t bytes, Write &&write) {
    if (device->isHostAccessible()) {
      compute->synchronize();
      write(static_cast<unsigned char *>(dst));
      return;
    }
    std::vector<unsigned char> host(bytes);
    write(host.data());
    device->copyFromHost(dst, host.data(), bytes, *compute);
  }
  /// `bytes` at device address `src` as host memory: the address itself on a
  /// host-accessible device, else a copy in `staging`.
  const unsigned char *readToHost(const void *src, size_t bytes,
                                  std::vector<unsigned char> &staging) {
    if (device->isHostAccessible()) {
      compute->synchronize();
      return static_cast<const unsigned char *>(src);
    }
    staging.resize(bytes);
    device->copyToHost(staging.data(), src, bytes, *compute);
    return staging.data();
  }
  /// Collectives staged through host memory (see runComm): a communicator
  /// of host memory (local, mpi) on a device whose memory the host cannot
  /// read (a GPU, or the emulated one, whose device memory faults on a host
  /// access).
  bool staged = false;
  /// Collectives enqueued on device streams (Communicator::ordersOnStreams,
  /// nccl): a step's collectives and gradient buckets are queued behind
  /// their producers with no host wait, buckets on the communication
  /// stream; run() waits for them (waitEnqueued) before its end.
  bool streamOrdered = false;
  /// Pinned host memory of the staged collectives, grown to the largest
  /// call (counted in memory.staging).
  DeviceBuffer hostStaging;
  size_t hostStagingBytes = 0;
  /// comm->run(args, group) on device buffers. Staged: the send bytes are
  /// copied to host memory once the compute stream has reached the call
  /// (copyToHost returns when everything queued before it has run), the
  /// communicator runs on host buffers, and the result is copied back on
  /// the compute stream, ahead of every later kernel there.
  /// Unstaged on such a device (nccl): a step's call (`stream` given, the
  /// stream it is ordered on) is enqueued on that stream with no host wait
  /// (streamOrdered; its failures surface by the step's end, waitEnqueued);
  /// any other call from the host thread first waits for the compute
  /// stream (the real NCCL layer also waits for the device, the emulated
  /// one relies on this).
  void runComm(const CollectiveArgs &args, const CommGroup &grp,
               Stream *stream = nullptr) {
    if (!staged) {
      if (streamOrdered && stream) {
        comm->enqueue(args, grp, *stream);
        return;
      }
      if (!device->isHostAccessible() && !onCommThread())
        compute->synchronize();
      comm->run(args, grp);
      return;
    }
    size_t n = size_t(grp.size()), sendElems = 0, recvElems = 0;
    switch (args.kind) {
    case CollectiveKind::AllReduce: // in place in recv
      recvElems = args.count;
      break;
    case CollectiveKind::AllGather:
      sendElems = args.count;
      recvElems = n * args.count;
      break;
    case CollectiveKind::ReduceScatter:
      sendElems = n * args.count;
      recvElems = args.count;
      break;
    case CollectiveKind::AllToAll:
      sendElems = recvElems = n * args.count;
      break;
    case CollectiveKind::CollectivePermute:
      sendElems = recvElems = args.count;
      break;
    case CollectiveKind::Barrier:
      break;
    case CollectiveKind::Send:
      sendElems = args.count;
      break;
    case CollectiveKind::Recv:
      recvElems = args.count;
      break;
    }
    size_t elem = sizeOf(args.dtype), sendBytes = sendElems * elem,
           recvBytes = recvElems * elem, recvAt = alignedBytes(sendBytes);
    if (recvAt + recvBytes > hostStagingBytes) {
      size_t bytes = recvAt + recvBytes;
      hostStaging.reset();
      hostStaging = device->allocateBuffer(bytes, MemorySpace::Host);
      memory.staging += int64_t(bytes - hostStagingBytes);
      hold(int64_t(bytes - hostStagingBytes));
      hostStagingBytes = bytes;
    }
    unsigned char *host = hostStaging.get();
    CollectiveArgs onHost = args;
    if (sendBytes) {
      device->copyToHost(host, args.send, sendBytes, *compute);
      onHost.send = host;
    }
    if (recvBytes) {
      if (args.kind == CollectiveKind::AllReduce)
        device->copyToHost(host + recvAt, args.recv, recvBytes, *compute);
      onHost.recv = host + recvAt;
    }
    comm->run(onHost, grp);
    if (recvBytes)
      device->copyFromHost(args.recv, host + recvAt, recvBytes, *compute);
  }
  std::vector<TensorView> views; // per buffer
  std::vector<std::function<void()>> steps;
  /// A microbatched step (Plan.pipeline, one rank): the per-microbatch
  /// program, sharing this one's parameters and state (accumulators
  /// included) by name; the action list; (step input, microbatch input)
  /// buffer pairs, the step's holding the whole local batch; and this
  /// program's accumulators, zeroed before every step.
  std::unique_ptr<Impl> micro;
  /// A pipelined step (isPipelined): this rank's stage (see Pipe); this
  /// Impl is then the stage's once-per-step program, which holds the
  /// stage's parameters, state and accumulators and the whole batch.
  struct Pipe;
  std::unique_ptr<Pipe> pipe;
  /// The mesh axis a pipelined step's stages lie along ("" otherwise).
  std::string pipelineAxis;
  std::vector<plan::PipelineAction> actions;
  std::vector<std::pair<int64_t, int64_t>> microInputs;
  std::vector<int64_t> accumulators;
  // After a step: results copied into the parameters and state they
  // replace. A result that is itself a persistent buffer is staged first,
  // so results that exchange parameters still read the old values.
  struct CopyBack {
    void *from, *staged, *to; // staged: null when `from` is an activation
    size_t bytes;
  };
  std::vector<CopyBack> copyBacks;

  /// A gradient bucket: adjacent all_reduces or reduce_scatters packed into
  /// one communicator call. The first member takes a slot (a recycled
  /// buffer); each member packs its input at its own instruction (where the
  /// memory plan has it live); the last one issues the call; the outputs are
  /// unpacked before the first instruction that reads one of them, when the
  /// slot is wanted for a later bucket, or when the step ends (the outputs
  /// are live from their own instructions on, so any of these is in time).
  struct Bucket {
    int64_t id = 0;
    size_t sendBytes = 0, recvBytes = 0; // recvBytes: 0 when in place
    int slot = -1;                       // while it holds one
    unsigned char *send = nullptr, *recv = nullptr; // in the slot
    std::string where;            // "bucket N (instructions i-j)"
    /// The communicator call on the packed data, ordered on the given
    /// stream when stream-ordered (else it blocks until done).
    std::function<void(Stream &)> call;
    std::function<void()> unpack; // packed result -> every member's output
    std::vector<int64_t> outputs; // buffer ids
    std::unique_ptr<Event> done;   // recorded on `commStream` after `call`
    std::unique_ptr<Event> packed; // recorded on the compute stream
    bool pending = false;         // issued, not yet unpacked
    /// One all_reduce reduced in place in its own output (no slot): see
    /// compileBucket.
    bool direct = false;
  };
  std::vector<std::shared_ptr<Bucket>> buckets;
  // ExecutorOptions::trace: the spans so far, and run() calls so far.
  bool tracing = false;
  /// ExecutorOptions::captureGraph: the recorded step and how many
  /// recordings; each optimizer kernel's learning rate in device memory
  /// (KernelAttrs::lrOnDevice; planRates its plan's), written before each
  /// run so that a recorded kernel follows setLearningRate.
  bool captureGraph = false;
  std::unique_ptr<Graph> graph;
  int64_t graphCaptures = 0;
  std::vector<double> planRates;
  DeviceBuffer rates;
  std::vector<TraceEvent> traceEvents;
  int64_t runs = 0;
  /// Runs `work`, recording it as a span named `name` when tracing.
  template <typename Work>
  void traced(const std::string &name, bool compute, Work &&work) {
    if (!tracing)
      return (void)work();
    double begin = traceClock();
    work();
    traceEvents.push_back({name, begin, traceClock(), runs, compute});
  }
  static double traceClock() {
    static const auto epoch = std::chrono::steady_clock::now();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         epoch)
        .count();
  }
  // ExecutorOptions::profile: seconds and calls per label.
  bool profiling = false;
  std::vector<ProfileEntry> profileSlots;
  std::map<std::string, size_t> profileSlotOf;
  size_t profileSlot(const std::string &what) {
    auto [it, added] = profileSlotOf.emplace(what, profileSlots.size());
    if (added)
      profileSlots.push_back({what, 0, 0, 0});
    return it->second;
  }
  /// Runs `body`, adding its time to slot `slot` when profiling. The
  /// compute stream is drained before and after, so on a device whose
  /// stream runs ahead of the host (a GPU) the time is the work's own
  /// (plus one launch and synchronization, some microseconds), not the
  /// time to queue it.
  template <typename Body>
  void timed(size_t slot, Body &&body, double flops = 0) {
    if (!profiling) {
      body();
      return;
    }
    compute->synchronize();
    auto start = std::chrono::steady_clock::now();
    body();
    compute->synchronize();
    double seconds = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    Backend::KernelPartSeconds parts = backend->takeKernelPartSeconds();
    for (auto [part, partSlot] :
         {std::pair(parts.innerGemms, innerGemmSlot),
          std::pair(parts.einsumAddends, einsumAddendSlot)})
      if (part > 0) {
        part = std::min(part, seconds);
        seconds -= part;
        profileSlots[partSlot].seconds += part;
        ++profileSlots[partSlot].calls;
      }
    ProfileEntry &e = profileSlots[slot];
    e.seconds += seconds;
    e.flops += flops;
    ++e.calls;
  }
  size_t waitSlot = 0, copyBackSlot = 0, innerGemmSlot = 0,
         einsumAddendSlot = 0;
  /// The communication stream bucket calls run on
  /// (ExecutorOptions::overlapBuckets); null when they run in line.
  std::unique_ptr<Stream> commStream;
  /// The event of the bucket issued last, while one is pending: the
  /// communication stream is in order, so reaching it means every earlier
  /// bucket call has run too.
  Event *lastIssued = nullptr;

  /// Gives `b` a free slot, first finishing the oldest bucket in flight
  /// when none is free.
  void acquireSlot(Bucket &b) {
    while (true) {
      for (size_t k = 0; k < bucketSlots.size(); ++k)
        if (!slotHolder[k]) {
          slotHolder[k] = &b;
          slotQueue.push_back(&b);
          b.slot = int(k);
          b.send = bucketSlots[k];
          b.recv = b.recvBytes ? b.send + alignedBytes(b.sendBytes) : b.send;
          return;
        }
      // Every holder is in flight (a bucket takes its slot at its first
      // member and issues at its last, adjacent ones); one left over by a
      // step that failed is just freed.
      Bucket *oldest = slotQueue.front();
      if (oldest->pending)
        finish(*oldest);
      else
        releaseSlot(*oldest);
    }
  }
  void releaseSlot(Bucket &b) {
    if (b.slot < 0)
      return;
    slotHolder[b.slot] = nullptr;
    slotQueue.erase(std::find(slotQueue.begin(), slotQueue.end(), &b));
    b.slot = -1;
  }
  static size_t alignedBytes(size_t bytes) { return (bytes + 63) / 64 * 64; }

  /// Issues `b`'s call (on the communication stream, or in line) once its
  /// members are packed.
  void issue(Bucket &b) {
    if (!commStream) {
      runBucketCall(b, *compute);
      b.unpack();
      releaseSlot(b);
      return;
    }
    // The call reads what the members packed on the compute stream.
    compute->record(*b.packed);
    commStream->wait(*b.packed);
    if (streamOrdered) {
      // Enqueued behind that wait from here; the communicator keeps its
      // calls in the order they are enqueued, so nothing else waits.
      runBucketCall(b, *commStream);
    } else {
      Stream *cs = compute;
      commStream->enqueue([&b, cs] {
        onCommThread() = true;
        try {
          runBucketCall(b, *cs);
        } catch (...) {
          onCommThread() = false;
          throw;
        }
        onCommThread() = false;
      });
      lastIssued = b.done.get();
    }
    commStream->record(*b.done);
    b.pending = true;
  }
  /// Waits for `b`'s call if it is in flight and unpacks its outputs.
  void finish(Bucket &b) {
    if (!b.pending)
      return;
    b.pending = false;
    timed(waitSlot, [&] {
      compute->wait(*b.done);
      b.unpack();
    });
    releaseSlot(b);
  }
  static void runBucketCall(Bucket &b, Stream &stream) {
    try {
      b.call(stream);
    } catch (const Error &e) {
      throw Error(b.where + ": " + e.what());
    }
  }
  /// Before the main thread calls the communicator itself: every bucket
  /// call issued so far must have run, so calls stay in program order, one
  /// at a time. The outputs are unpacked later, where they are first read.
  /// Whether the caller is a bucket call on the communication stream.
  static bool &onCommThread() {
    thread_local bool inBucketCall = false;
    return inBucketCall;
  }
  void waitForCommStream() {
    if (!lastIssued)
      return;
    Event *last = lastIssued;
    lastIssued = nullptr;
    timed(waitSlot, [&] { compute->wait(*last); });
  }
  /// When a step ends: waits for and unpacks every pending bucket.
  void finishBuckets() {
    for (const std::shared_ptr<Bucket> &b : buckets)
      finish(*b);
    lastIssued = nullptr;
  }
  /// Compiles the bucket of instructions [first, end); returns one step per
  /// member.
  std::vector<std::function<void()>> compileBucket(int64_t first,
                                                   int64_t end);

  const plan::Buffer &buffer(int64_t id) const { return program->buffers(id); }

  /// The communicator groups, made at construction (see makeGroups): one
  /// per set of mesh axes the plan's collectives use, and every device.
  std::map<std::string, std::shared_ptr<CommGroup>> groupOfAxes;
  std::shared_ptr<CommGroup> worldGroup;
  /// Every group of the executor by axes key ("" for every device), shared
  /// by its programs (a microbatched step's two, a pipelined rank's stage
  /// programs), so each group is made once.
  using GroupCache = std::map<std::string, std::shared_ptr<CommGroup>>;
  std::shared_ptr<GroupCache> groupCache;
  static std::string axesKey(
      const google::protobuf::RepeatedPtrField<std::string> &axes) {
    std::string key;
    for (const std::string &axis : axes)
      key += axis + ",";
    return key;
  }
  /// The group of `axes` (null without a communicator).
  const CommGroup *
  commGroup(const google::protobuf::RepeatedPtrField<std::string> &axes) const {
    auto it = groupOfAxes.find(axesKey(axes));
    return it == groupOfAxes.end() ? nullptr : it->second.get();
  }
  /// Makes every group the program's collectives use, in instruction order
  /// (the same on every rank, as communicators that set groups up together
  /// need: nccl splits the world for each), before any step runs. The ranks
  /// of a pipelined plan run different stage programs, so there each rank
  /// makes the groups of every program of the plan, in the plan's order.
  void makeGroups() {
    if (!comm)
      return;
    if (!groupCache)
      groupCache = std::make_shared<GroupCache>();
    auto made = [&](const std::string &key, const std::vector<int> &ranks,
                    const std::string &label) {
      std::shared_ptr<CommGroup> &g = (*groupCache)[key];
      if (!g) {
        g = comm->createGroup(ranks);
        g->setLabel(label); // named in a communicator's errors
      }
      return g;
    };
    worldGroup = made("", allRanks(plan->numDevices()), "every device");
    std::vector<const plan::Program *> programs = {program};
    if (plan->isPipelined()) {
      programs.clear();
      for (const plan::Program &p : plan->impl().proto.programs())
        programs.push_back(&p);
    }
    for (const plan::Program *p : programs)
      for (const plan::Instruction &inst : p->instructions()) {
        if (!inst.has_collective() ||
            !collectiveCommunicates(inst.collective().kind()))
          continue;
        std::string key = axesKey(inst.collective().axes());
        std::shared_ptr<CommGroup> g =
            made(key, group(inst.collective().axes()),
                 "axes " + key.substr(0, key.size() - 1));
        if (p == program)
          groupOfAxes[key] = g;
      }
  }

  std::map<std::string, int64_t> coordsOf(int position) const {
    return meshCoordinates(plan->impl().proto.mesh(), position);
  }

  int positionOf(const std::map<std::string, int64_t> &c) const {
    int64_t p = 0;
    for (const std::string &axis : axisOrder)
      p = p * axisSizes.at(axis) + c.at(axis);
    return int(p);
  }

  /// Devices differing from this one only in `axes`, ordered by their
  /// coordinates along `axes` (listed order, major to minor).
  std::vector<int>
  group(const google::protobuf::RepeatedPtrField<std::string> &axes) const {
    int64_t size = 1;
    for (const std::string &axis : axes)
      size *= axisSizes.at(axis);
    std::vector<int> ranks;
    for (int64_t i = 0; i < size; ++i) {
      std::map<std::string, int64_t> c = coords;
      int64_t rest = i;
      for (int a = axes.size() - 1; a >= 0; --a) {
        int64_t s = axisSizes.at(axes[a]);
        c[axes[a]] = rest % s;
        rest /= s;
      }
      ranks.push_back(rankOfPosition[positionOf(c)]);
    }
    return ranks;
  }

  /// The start of a buffer's local block in its global shape, for the device
  /// at mesh coordinates `c`.
  std::vector<int64_t>
  blockStarts(const plan::Buffer &b,
              const std::map<std::string, int64_t> &c) const {
    std::vector<int64_t> starts(b.local_shape_size(), 0);
    for (int d = 0; d < b.sharding_size(); ++d) {
      int64_t index = 0;
      for (const std::string &axis : b.sharding(d).axes())
        index = index * axisSizes.at(axis) + c.at(axis);
      starts[d] = index * b.local_shape(d);
    }
    return starts;
  }

  void initParameter(int64_t id) {
    const plan::Buffer &b = buffer(id);
    const TensorView &view = views[id];
    std::vector<int64_t> global = toVector(b.global_shape());
    const plan::Init &init = b.init();
    // A master copy draws its parameter's values, so both start equal.
    const std::string &name = b.master_of().empty() ? b.name() : b.master_of();
    uint64_t key = splitmix64(plan->seed() ^ fnv1a64(name));
    DType dtype = view.dtype;
    writeFromHost(view.data, view.numBytes(), [&](unsigned char *host) {
      std::memset(host, 0, view.numBytes()); // padding, if any, is zeros
      forEachRow(global, view.shape, blockStarts(b, coords),
                 [&](int64_t g, int64_t l, int64_t n) {
                   for (int64_t i = 0; i < n; ++i) {
                     double v = valueForKey(key, g + i, init.kind(), init.a(),
                                            init.b());
                     if (dtype == DType::F64)
                       reinterpret_cast<double *>(host)[l + i] = v;
                     else if (dtype == DType::F32)
                       reinterpret_cast<float *>(host)[l + i] = float(v);
                     else // bf16, f16: the f32 value rounded to nearest even
                       reinterpret_cast<uint16_t *>(host)[l + i] =
                           narrowFloat(float(v), dtype);
                   }
                 });
    });
  }

  void transpose(const TensorView &in, const TensorView &out,
                 std::vector<int64_t> perm) {
    KernelCall call{KernelKind::Transpose, {}, {in}, {out}};
    call.attrs.dims = std::move(perm);
    backend->run(call);
  }

  std::function<void()> compileCollective(const plan::Collective &c);
  /// Buffer `id` as a global array (see gatherResults).
  Tensor gatherBuffer(int64_t id);
  /// Buffer `b` of a program on every rank, this rank's block at `data`
  /// (null: zeros); `ownerStage` >= 0: a pipelined step's value, held by
  /// that stage's devices only. Collective over every device.
  Tensor gatherBuffer(const plan::Buffer &b, const void *data, int ownerStage);
  /// Writes this rank's block of global value `t` into buffer `id`.
  void scatterInto(int64_t id, const TensorView &t, const std::string &what);
  /// The PARAMETER or STATE buffer named `name`; throws naming it.
  int64_t persistentId(const std::string &name) const;
  /// The PARAMETER or STATE buffer named `name`, or -1.
  int64_t findPersistent(const std::string &name) const;
  /// The Impl of this rank holding parameter or state `name`: this one, or
  /// for a pipelined rank the chunk whose stage holds it (null: another
  /// stage's); `ownerStage` is then whether that stage is the first that
  /// holds it (a tied parameter and the step counter are on several).
  Impl *holderOf(const std::string &name, bool &ownerStage);
};

/// What Executor::profile calls an instruction (a custom kernel by its
/// name).
static std::string instructionLabel(const plan::Instruction &inst) {
  if (inst.has_kernel() && inst.kernel().kind() == plan::Kernel::CUSTOM)
    return inst.kernel().custom_name();
  if (inst.has_kernel())
    return kernelKindName(inst.kernel().kind());
  const plan::Collective &c = inst.collective();
  std::string name = collectiveKindName(c.kind());
  return c.bucket() > 0 ? name + " (bucket)" : name;
}

/// ExecutorOptions::profileEinsums: an einsum's profile line, "einsum",
/// its spec and its operands' shapes. A spec the kernel would reject keeps
/// the plain label; the kernel reports it.
static std::string einsumProfileLabel(const std::string &spec,
                                      const std::vector<TensorView> &inputs) {
  std::string label = "einsum " + spec;
  size_t arrow = spec.find("->");
  size_t operand = 0, position = 0;
  for (size_t i = 0; i < std::min(arrow, spec.size()); ++i) {
    if (spec[i] == ',') {
      ++operand;
      position = 0;
      continue;
    }
    // The addend (a third input) names no indices of its own.
    if (operand >= 2 || operand >= inputs.size() ||
        position++ >= inputs[operand].shape.size())
      return "einsum";
  }
  for (size_t k = 0; k < std::min<size_t>(inputs.size(), 2); ++k) {
    label += " [";
    for (size_t d = 0; d < inputs[k].shape.size(); ++d)
      label += (d ? "," : "") + std::to_string(inputs[k].shape[d]);
    label += "]";
  }
  if (inputs.size() > 2)
    label += " + addend";
  return label;
}

static ReduceOp toReduceOp(int op) {
  return op == plan::MAX   ? ReduceOp::Max
         : op == plan::MIN ? ReduceOp::Min
                           : ReduceOp::Sum;
}

/// Moves dimension `d` of `shape` to the front: the permutation and the
/// resulting shape.
static std::pair<std::vector<int64_t>, std::vector<int64_t>>
toFront(const std::vector<int64_t> &shape, int64_t d) {
  std::vector<int64_t> perm{d}, out{shape[d]};
  for (int64_t i = 0; i < int64_t(shape.size()); ++i)
    if (i != d) {
      perm.push_back(i);
      out.push_back(shape[i]);
    }
  return {perm, out};
}

static std::vector<int64_t> inverse(const std::vector<int64_t> &perm) {
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inv[perm[i]] = i;
  return inv;
}

std::function<void()>
Executor::Impl::compileCollective(const plan::Collective &c) {
  TensorView in = views[c.input()], out = views[c.output()];
  std::vector<int> ranks = group(c.axes());
  const CommGroup *grp = commGroup(c.axes());
  int64_t g = ranks.size();
  ReduceOp op = toReduceOp(c.op());
  Device *dev = device;
  Stream *cs = compute;
  DType dtype = in.dtype;
  // The shared scratch (collectiveScratch): the first view at its start,
  // the second after it; their addresses are taken when the step runs,
  // once the scratch is allocated at its largest size.
  auto scratchPair = [&](const std::vector<int64_t> &first,
                         const std::vector<int64_t> &second) {
    TensorView a{nullptr, dtype, first}, b{nullptr, dtype, second};
    size_t offset = alignedBytes(a.numBytes());
    collectiveScratchBytes =
        std::max(collectiveScratchBytes, offset + b.numBytes());
    return std::make_tuple(a, b, offset);
  };
  Impl *self = this;
  // A gather or scatter along dimension d > 0: d moved to the front into
  // the scratch (contiguous blocks), the collective, and the result moved
  // back; `blocks` the result's front dimension (d's size times or over g).
  auto alongFront = [&](CollectiveKind kind, int64_t d, int64_t blocks) {
    std::vector<int64_t> perm, front; // not bindings: lambdas capture them
    std::tie(perm, front) = toFront(in.shape, d);
    std::vector<int64_t> result = front;
    result[0] = blocks;
    auto [sendView, recvView, recvOffset] = scratchPair(front, result);
    std::vector<int64_t> back = inverse(perm);
    return std::function<void()>([=, sendView = sendView, recvView = recvView,
                                  recvOffset = recvOffset] {
      TensorView sendT = sendView, recvT = recvView;
      sendT.data = self->collectiveScratch;
      recvT.data = self->collectiveScratch + recvOffset;
      transpose(in, sendT, perm);
      size_t count = kind == CollectiveKind::AllGather
                         ? size_t(sendT.numElements())
                         : size_t(recvT.numElements());
      self->runComm({kind, sendT.data, recvT.data, count, dtype, op, {}}, *grp,
                    cs);
      transpose(recvT, out, back);
    });
  };
  switch (c.kind()) {
  case plan::Collective::ALL_REDUCE:
    return [=] {
      if (in.data != out.data)
        dev->copy(out.data, in.data, in.numBytes(), *cs);
      if (g > 1)
        self->runComm({CollectiveKind::AllReduce, nullptr, out.data,
                       size_t(out.numElements()), dtype, op, {}}, *grp, cs);
    };
  case plan::Collective::ALL_GATHER: {
    int64_t d = c.dim();
    if (d == 0 || g == 1)
      return [=] {
        if (g == 1)
          dev->copy(out.data, in.data, in.numBytes(), *cs);
        else
          self->runComm({CollectiveKind::AllGather, in.data, out.data,
                         size_t(in.numElements()), dtype, op, {}}, *grp, cs);
      };
    return alongFront(CollectiveKind::AllGather, d, in.shape[d] * g);
  }
  case plan::Collective::REDUCE_SCATTER: {
    int64_t d = c.dim();
    if (g == 1)
      return [=] { dev->copy(out.data, in.data, in.numBytes(), *cs); };
    if (d == 0)
      return [=] {
        self->runComm({CollectiveKind::ReduceScatter, in.data, out.data,
                       size_t(out.numElements()), dtype, op, {}}, *grp, cs);
      };
    return alongFront(CollectiveKind::ReduceScatter, d, in.shape[d] / g);
  }
  case plan::Collective::ALL_TO_ALL: {
    int64_t s = c.dim(), cd = c.concat_dim(), rank = in.shape.size();
    if (g == 1)
      return [=] { dev->copy(out.data, in.data, in.numBytes(), *cs); };
    // Send: split dim to the front, so block j (for position j) is contiguous.
    std::vector<int64_t> perm, front; // not bindings: lambdas capture them
    std::tie(perm, front) = toFront(in.shape, s);
    // Received: [g, S/g, the other dims of the input in order]; axis 0 is the
    // source position, which becomes the major part of the concat dim.
    std::vector<int64_t> recvShape{g, in.shape[s] / g};
    std::vector<int64_t> axisOfDim(rank); // recv axis holding input dim d
    axisOfDim[s] = 1;
    for (int64_t d = 0, next = 2; d < rank; ++d)
      if (d != s) {
        recvShape.push_back(in.shape[d]);
        axisOfDim[d] = next++;
      }
    auto [sendView, recvView, recvOffset] = scratchPair(front, recvShape);
    std::vector<int64_t> backPerm, permuted;
    for (int64_t d = 0; d < rank; ++d) {
      if (d == cd)
        backPerm.push_back(0);
      backPerm.push_back(axisOfDim[d]);
    }
    for (int64_t a : backPerm)
      permuted.push_back(recvShape[a]);
    TensorView outT{out.data, dtype, permuted};
    return [=, sendView = sendView, recvView = recvView,
            recvOffset = recvOffset] {
      TensorView sendT = sendView, recvT = recvView;
      sendT.data = self->collectiveScratch;
      recvT.data = self->collectiveScratch + recvOffset;
      transpose(in, sendT, perm);
      self->runComm({CollectiveKind::AllToAll, sendT.data, recvT.data,
                     size_t(sendT.numElements() / g), dtype, op, {}}, *grp, cs);
      transpose(recvT, outT, backPerm);
    };
  }
  case plan::Collective::SLICE: {
    // [outer, D, inner] -> this position's [outer, D/g, inner] block.
    int64_t d = c.dim(), outer = 1, inner = sizeOf(dtype);
    for (int64_t i = 0; i < d; ++i)
      outer *= in.shape[i];
    for (size_t i = d + 1; i < in.shape.size(); ++i)
      inner *= in.shape[i];
    int64_t position =
        std::find(ranks.begin(), ranks.end(), rank) - ranks.begin();
    int64_t block = out.shape[d] * inner, row = in.shape[d] * inner;
    return [=] {
      const unsigned char *src = static_cast<const unsigned char *>(in.data);
      unsigned char *dst = static_cast<unsigned char *>(out.data);
      for (int64_t o = 0; o < outer; ++o)
        dev->copy(dst + o * block, src + o * row + position * block, block,
                  *cs);
    };
  }
  case plan::Collective::MASK: {
    // Padding (dist.mask): elements whose global index along `dim`,
    // position * local size + local index, is >= `size` get `value`.
    int64_t position =
        std::find(ranks.begin(), ranks.end(), rank) - ranks.begin();
    int64_t d = c.dim(), local = in.shape[d], size = c.size();
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < d; ++i)
      outer *= in.shape[i];
    for (int64_t i = d + 1; i < int64_t(in.shape.size()); ++i)
      inner *= in.shape[i];
    int64_t first = std::clamp<int64_t>(size - position * local, 0, local);
    double value = c.value();
    if (dtype != DType::F32 && dtype != DType::F64 && dtype != DType::I32 &&
        dtype != DType::I64)
      throw Error(std::string("mask: unsupported dtype ") + toString(dtype));
    return [=] {
      if (in.data != out.data)
        dev->copy(out.data, in.data, in.numBytes(), *cs);
      auto fill = [&](auto v) {
        size_t elem = sizeof(v);
        auto *data = static_cast<unsigned char *>(out.data);
        if (first < local)
          for (int64_t o = 0; o < outer; ++o)
            dev->fill(data + (o * local + first) * inner * elem, &v, elem,
                      (local - first) * inner, *cs);
      };
      switch (dtype) {
      case DType::F32:
        fill(float(value));
        break;
      case DType::F64:
        fill(value);
        break;
      case DType::I32:
        fill(int32_t(value));
        break;
      default:
        fill(int64_t(value));
        break;
      }
    };
  }
  case plan::Collective::AXIS_INDEX: {
    int64_t position =
        std::find(ranks.begin(), ranks.end(), rank) - ranks.begin();
    return [=] {
      if (out.dtype == DType::I32) {
        int32_t value = int32_t(position);
        dev->fill(out.data, &value, sizeof(value), 1, *cs);
      } else {
        dev->fill(out.data, &position, sizeof(position), 1, *cs);
      }
    };
  }
  case plan::Collective::COLLECTIVE_PERMUTE: {
    // Point to point: each source sends its block to its target only; a
    // device that is no target gets zeros (the communicator clears it).
    std::vector<std::pair<int, int>> pairs;
    for (int k = 0; k + 1 < c.pairs_size(); k += 2)
      pairs.emplace_back(int(c.pairs(k)), int(c.pairs(k + 1)));
    return [=] {
      self->runComm({CollectiveKind::CollectivePermute, in.data, out.data,
                     size_t(in.numElements()), dtype, op, pairs}, *grp, cs);
    };
  }
  default:
    throw Error("unknown collective kind");
  }
}

std::vector<std::function<void()>>
Executor::Impl::compileBucket(int64_t first, int64_t end) {
  auto b = std::make_shared<Bucket>();
  buckets.push_back(b);
  const plan::Collective &head = program->instructions(first).collective();
  b->id = head.bucket();
  b->where = "bucket " + std::to_string(b->id) + " (instructions " +
             std::to_string(first) + "-" + std::to_string(end - 1) + ")";
  const CommGroup *grp = commGroup(head.axes());
  int64_t g = group(head.axes()).size();
  ReduceOp op = toReduceOp(head.op());
  DType dtype = views[head.input()].dtype;
  size_t elem = sizeOf(dtype);
  bool scatter = head.kind() == plan::Collective::REDUCE_SCATTER;

  // Member m's share of one rank's block: `count` elements at `offset`. An
  // all_reduce packs whole inputs one after another (one block); a
  // reduce_scatter packs, for every rank r, each member's r-th block of its
  // input (its scatter dimension moved to the front).
  struct Member {
    TensorView in, out;
    int64_t offset = 0, count = 0;
    std::vector<int64_t> perm, back; // to the front and back; empty: dim 0
    // The input transposed, when perm is set (in packScratch when packed).
    TensorView front;
    // False for an output nothing reads after the bucket is issued: the
    // memory plan may already have given its bytes to another buffer by the
    // time the bucket is unpacked.
    bool live = true;
  };
  std::vector<Member> members;
  int64_t block = 0; // elements per rank block of the packed buffer
  for (int64_t i = first; i < end; ++i) {
    const plan::Collective &c = program->instructions(i).collective();
    Member m;
    m.in = views[c.input()];
    m.out = views[c.output()];
    m.offset = block;
    m.count = scatter ? m.in.numElements() / g : m.in.numElements();
    if (scatter && c.dim() != 0 && g > 1) {
      auto [perm, front] = toFront(m.in.shape, c.dim());
      m.front = TensorView{nullptr, dtype, front};
      packScratchBytes = std::max(packScratchBytes, m.front.numBytes());
      m.perm = perm;
      m.back = inverse(perm);
    }
    block += m.count;
    m.live = plan::readAfterBucket(buffer(c.output()), end);
    b->outputs.push_back(c.output());
    members.push_back(std::move(m));
  }
  int64_t sendElems = scatter ? block * g : block;
  // In its slot: an all_reduce reduces in place; a reduce_scatter receives
  // after what it sends.
  b->sendBytes = sendElems * elem;
  b->recvBytes = scatter ? block * elem : 0;
  // A lone all_reduce whose output is read after the bucket reduces in
  // place in that output: its input is copied there at its instruction,
  // where the memory plan has the output live until its last reader, after
  // the bucket's wait. It takes no slot, so a gradient larger than the
  // bucket cap (GPT-2's 154 MB embedding table) does not size the slots
  // every bucket recycles. The input and output may not partly overlap.
  if (plan::reducesInItsOutput(*program, first, end)) {
    const Member &m = members[0];
    auto *in = static_cast<unsigned char *>(m.in.data);
    auto *out = static_cast<unsigned char *>(m.out.data);
    size_t bytes = m.count * elem;
    b->direct = in == out || in + bytes <= out || out + bytes <= in;
  }
  if (b->direct) {
    b->send = b->recv = static_cast<unsigned char *>(members[0].out.data);
  } else {
    ++slotBuckets;
    bucketSlotBytes =
        std::max(bucketSlotBytes,
                 b->recvBytes ? alignedBytes(b->sendBytes) + b->recvBytes
                              : b->sendBytes);
  }

  Impl *self = this;
  Device *dev = device;
  Bucket *bucket = b.get();
  b->call = [=](Stream &stream) {
    unsigned char *send = bucket->send, *recv = bucket->recv;
    if (g == 1) {
      if (recv != send)
        dev->copy(recv, send, block * elem, stream);
    } else if (scatter) {
      self->runComm({CollectiveKind::ReduceScatter, send, recv, size_t(block),
                     dtype, op, {}}, *grp, &stream);
    } else {
      self->runComm({CollectiveKind::AllReduce, nullptr, send, size_t(block),
                     dtype, op, {}}, *grp, &stream);
    }
  };
  b->unpack = [this, members, bucket, elem, dtype] {
    if (bucket->direct)
      return;
    for (const Member &m : members) {
      if (!m.live)
        continue;
      unsigned char *src = bucket->recv + m.offset * elem;
      if (m.perm.empty()) {
        device->copy(m.out.data, src, m.count * elem, *compute);
        continue;
      }
      std::vector<int64_t> shape = m.front.shape;
      shape[0] = shape[0] * m.count / m.front.numElements();
      transpose(TensorView{src, dtype, shape}, m.out, m.back);
    }
  };

  std::vector<std::function<void()>> steps;
  for (size_t k = 0; k < members.size(); ++k) {
    const Member &m = members[k];
    bool first = k == 0, last = k + 1 == members.size();
    steps.push_back([this, m, elem, g, scatter, block, bucket, first, last] {
      if (bucket->direct) {
        if (m.in.data != m.out.data)
          device->copy(m.out.data, m.in.data, m.count * elem, *compute);
        issue(*bucket);
        return;
      }
      if (first)
        acquireSlot(*bucket);
      unsigned char *send = bucket->send;
      if (!scatter) {
        device->copy(send + m.offset * elem, m.in.data, m.count * elem,
                     *compute);
      } else {
        TensorView front = m.front;
        front.data = packScratch;
        const unsigned char *src = static_cast<const unsigned char *>(
            m.perm.empty() ? m.in.data : front.data);
        if (!m.perm.empty())
          transpose(m.in, front, m.perm);
        for (int64_t r = 0; r < g; ++r)
          device->copy(send + (r * block + m.offset) * elem,
                       src + r * m.count * elem, m.count * elem, *compute);
      }
      if (last)
        issue(*bucket);
    });
  }
  return steps;
}

/// Every custom kernel of `program` must be registered for `backend` before
/// anything runs: a missing one is found when the plan is loaded, not part
/// way through a step.
static void checkCustomKernels(const plan::Program &program,
                               const std::string &programName,
                               Backend &backend) {
  for (int64_t i = 0; i < program.instructions_size(); ++i) {
    const plan::Instruction &inst = program.instructions(i);
    if (!inst.has_kernel() || inst.kernel().kind() != plan::Kernel::CUSTOM ||
        findKernel(backend.name(), inst.kernel().custom_name()))
      continue;
    std::string registered;
    for (const std::string &name : registeredKernels(backend.name()))
      registered += (registered.empty() ? "" : ", ") + name;
    throw Error("program '" + programName + "': instruction " +
                std::to_string(i) +
                (inst.location().empty() ? "" : " (" + inst.location() + ")") +
                " runs custom kernel '" + inst.kernel().custom_name() +
                "', which no kernel library has registered for the " +
                backend.name() + " backend (registered: " +
                (registered.empty() ? "none" : registered) +
                "); load the library that provides it (--kernel-library "
                "PATH)");
  }
}

/// Builds `s` for program `programName`; with `share`, its parameter and
/// state buffers are `share`'s of the same name (a microbatched step's
/// programs read and write one set).
static void buildImpl(Executor::Impl &s, std::shared_ptr<const PlanFile> plan,
                      const std::string &programName, Communicator *comm,
                      Backend &backend, const ExecutorOptions &options,
                      const Executor::Impl *share) {
  using Impl = Executor::Impl;
  s.plan = plan;
  const PlanFile::Impl &p = plan->impl();
  s.program = &p.program(programName);
  s.backend = &backend;
  s.device = &backend.device();
  s.compute = &s.device->computeStream();
  checkCustomKernels(*s.program, programName, backend);
  // What a GPU would run wrongly or hang on (runtime/lib/cuda/PlanChecks.h).
  if (std::string(backend.name()) == "cuda")
    gpu::checkPlanForCuda(p.proto, programName);
  if (s.program->partitioned()) {
    if (!comm)
      throw Error("program '" + programName +
                  "' is partitioned and needs a communicator");
    if (comm->size() != p.numDevices)
      throw Error("program '" + programName + "' runs on " +
                  std::to_string(p.numDevices) +
                  " devices (its mesh), but the "
                  "communicator has " +
                  std::to_string(comm->size()) + " ranks");
    s.comm = comm;
    s.rank = comm->rank();
    s.staged = !s.device->isHostAccessible() && !comm->takesDeviceMemory();
    s.streamOrdered = !s.device->isHostAccessible() && !s.staged &&
                      comm->ordersOnStreams();
  }
  s.axisSizes = p.axisSizes;
  for (const plan::MeshAxis &axis : p.proto.mesh().axes())
    s.axisOrder.push_back(axis.name());
  s.rankOfPosition.resize(p.numDevices);
  int position = s.rank;
  for (int64_t k = 0; k < p.numDevices; ++k) {
    s.rankOfPosition[k] = p.proto.mesh().devices().empty()
                              ? int(k)
                              : int(p.proto.mesh().devices(k));
    if (s.rankOfPosition[k] == s.rank)
      position = int(k);
  }
  s.coords = s.coordsOf(s.program->partitioned() ? position : 0);
  s.makeGroups();

  if (!s.sharedArena) {
    s.arena = s.device->allocateBuffer(s.program->arena_bytes());
    s.memory.arena += s.program->arena_bytes();
    s.hold(s.program->arena_bytes());
  }
  unsigned char *deviceArena = s.sharedArena ? s.sharedArena : s.arena.get();
  if (s.program->host_arena_bytes() > 0) {
    s.hostArena = s.device->allocateBuffer(s.program->host_arena_bytes(),
                                           MemorySpace::Host);
    s.memory.arena += s.program->host_arena_bytes();
    s.hold(s.program->host_arena_bytes());
  }
  s.views.resize(s.program->buffers_size());
  for (int64_t id = 0; id < s.program->buffers_size(); ++id) {
    const plan::Buffer &b = s.buffer(id);
    TensorView &view = s.views[id];
    view.dtype = toDType(b.dtype());
    view.shape = toVector(b.local_shape());
    bool host = b.memory_space() == plan::HOST;
    if (b.in_place()) {
      continue; // below, once what it replaces has its address
    } else if (b.role() == plan::ACTIVATION) {
      view.data = (host ? s.hostArena.get() : deviceArena) + b.offset();
    } else {
      if (share &&
          (b.role() == plan::PARAMETER || b.role() == plan::STATE)) {
        int64_t other = share->persistentId(b.name());
        if (share->views[other].numBytes() != view.numBytes())
          throw Error("program '" + programName + "': buffer '" + b.name() +
                      "' differs in size from the step program's");
        view.data = share->views[other].data;
        continue;
      }
      view.data = s.allocate(view.numBytes(),
                             b.role() == plan::PARAMETER ? s.memory.parameters
                             : b.role() == plan::STATE   ? s.memory.state
                                                         : s.memory.inputs,
                             host ? MemorySpace::Host : MemorySpace::Device);
      // State starts at zero unless it has an initializer (a master copy,
      // a loss scale).
      if (b.role() == plan::PARAMETER ||
          (b.role() == plan::STATE && b.has_init()))
        s.initParameter(id);
      else if (b.role() == plan::CONSTANT)
        s.device->copyFromHost(view.data, b.data().data(), b.data().size(),
                               *s.compute);
    }
  }
  // A donated update is written straight into what it replaces.
  for (int64_t id = 0; id < s.program->buffers_size(); ++id)
    if (s.buffer(id).in_place())
      s.views[id].data = s.views[s.persistentId(s.buffer(id).replaces())].data;
  int64_t numInstructions = s.program->instructions_size();
  // The pending buckets' outputs not read yet: the first instruction that
  // reads one unpacks the bucket first.
  std::map<int64_t, Impl::Bucket *> bucketOfOutput;
  Impl *impl = &s;
  // Appends instruction i's step: it first finishes every bucket whose
  // output it is the first to read.
  s.profiling = options.profile;
  bool profileEinsums = options.profile && options.profileEinsums;
  s.tracing = options.trace;
  s.waitSlot = s.profileSlot("gradient buckets: wait and unpack");
  s.copyBackSlot = s.profileSlot("copy back updated parameters and state");
  s.innerGemmSlot = s.profileSlot("attention GEMMs");
  s.einsumAddendSlot = s.profileSlot("einsum addends");
  if (s.profiling)
    backend.setTimeKernelParts(true);
  // `drains`: a collective the main thread issues itself, after every
  // bucket call issued before it has run.
  auto addStep = [&](int64_t i, const std::vector<int64_t> &reads,
                     std::function<void()> step, bool drains) {
    const plan::Instruction &inst = s.program->instructions(i);
    std::string where =
        "instruction " + std::to_string(i) +
        (inst.location().empty() ? "" : " (" + inst.location() + ")");
    std::vector<Impl::Bucket *> waits;
    for (int64_t id : reads) {
      auto it = bucketOfOutput.find(id);
      if (it == bucketOfOutput.end())
        continue;
      Impl::Bucket *b = it->second;
      waits.push_back(b);
      for (int64_t out : b->outputs)
        bucketOfOutput.erase(out);
    }
    std::string label = instructionLabel(inst);
    double flops = 0;
    if (profileEinsums && inst.has_kernel() &&
        inst.kernel().kind() == plan::Kernel::EINSUM) {
      std::vector<TensorView> inputs;
      for (int64_t id : inst.kernel().inputs())
        inputs.push_back(s.views[id]);
      label = einsumProfileLabel(inst.kernel().attrs().spec(), inputs);
      // The FLOPs lowering wrote (the dialect's cost model; 0 in a plan
      // without them, which then prints no rate).
      flops = inst.kernel().flops();
    }
    size_t slot = s.profileSlot(label);
    s.steps.push_back([impl, waits, step, where, slot, drains, flops] {
      try {
        for (Impl::Bucket *b : waits)
          impl->finish(*b);
        if (drains)
          impl->waitForCommStream();
        impl->timed(slot, step, flops);
      } catch (const Error &e) {
        throw Error(where + ": " + e.what());
      }
    });
  };
  for (int64_t i = 0; i < numInstructions;) {
    const plan::Instruction &inst = s.program->instructions(i);
    if (inst.has_collective() && inst.collective().bucket() > 0) {
      int64_t end = i + 1;
      while (end < numInstructions &&
             s.program->instructions(end).has_collective() &&
             s.program->instructions(end).collective().bucket() ==
                 inst.collective().bucket())
        ++end;
      std::vector<std::function<void()>> members = s.compileBucket(i, end);
      for (int64_t k = i; k < end; ++k)
        addStep(k, {s.program->instructions(k).collective().input()},
                members[k - i], /*drains=*/false);
      for (int64_t id : s.buckets.back()->outputs)
        bucketOfOutput[id] = s.buckets.back().get();
      i = end;
      continue;
    }
    std::function<void()> step;
    std::vector<int64_t> reads;
    bool drains = false;
    if (inst.has_kernel()) {
      const plan::Kernel &k = inst.kernel();
      KernelCall call{
          *kernelKindFromPlan(k.kind()), toAttrs(k.attrs()), {}, {}, {}};
      if (k.kind() == plan::Kernel::CUSTOM) {
        call.customName = k.custom_name();
        for (const plan::NamedAttr &a : k.custom_attrs())
          call.attrs.custom.set(a.name(), toAttrValue(a.value()));
      }
      for (int64_t id : k.inputs())
        call.inputs.push_back(s.views[id]);
      for (int64_t id : k.outputs())
        call.outputs.push_back(s.views[id]);
      Backend *be = s.backend;
      if (call.kind == KernelKind::SGD || call.kind == KernelKind::AdamW) {
        // The lr is read when the kernel runs, so one plan runs a whole
        // learning-rate schedule (setLearningRate between steps).
        if (std::isnan(s.planLearningRate))
          s.planLearningRate = call.attrs.lr;
        double planLr = call.attrs.lr;
        // A step recorded as a graph reads its rate from device memory.
        size_t slot = s.planRates.size();
        if (options.captureGraph)
          s.planRates.push_back(planLr);
        step = [be, call, planLr, impl, slot]() mutable {
          call.attrs.lr = impl->rateFor(planLr);
          if (impl->rates)
            call.attrs.lrOnDevice =
                reinterpret_cast<const double *>(impl->rates.get()) + slot;
          be->run(call);
        };
      } else {
        step = [be, call] { be->run(call); };
      }
      reads.assign(k.inputs().begin(), k.inputs().end());
    } else {
      const plan::Collective &c = inst.collective();
      step = s.compileCollective(c);
      if (c.kind() != plan::Collective::AXIS_INDEX)
        reads.push_back(c.input());
      drains = collectiveCommunicates(c.kind());
    }
    addStep(i, reads, step, drains);
    ++i;
  }
  // Bucket calls on the communication stream: a stream-ordered
  // communicator's (nccl) enqueued there from the host thread; any other's
  // as host work there, which needs one callable from any thread. Staged
  // calls copy on the compute stream from the calling thread, so they run
  // in line: on a GPU the communication stream's host work is a CUDA host
  // function, which may not call CUDA.
  if (!s.buckets.empty() && s.comm && options.overlapBuckets &&
      (s.comm->callableFromAnyThread() || s.streamOrdered) && !s.staged) {
    s.commStream = s.device->createStream();
    for (const std::shared_ptr<Impl::Bucket> &b : s.buckets) {
      b->done = s.commStream->createEvent();
      b->packed = s.compute->createEvent();
    }
  }
  // The buffers outside the arena, now that their largest needs are known:
  // bucket slots (kBucketSlots in flight while calls overlap, else one),
  // the packing transposition and the collectives' shared scratch.
  if (s.slotBuckets > 0) {
    size_t slots = s.commStream ? std::min(kBucketSlots, s.slotBuckets) : 1;
    for (size_t k = 0; k < slots; ++k)
      s.bucketSlots.push_back(
          s.allocate(s.bucketSlotBytes, s.memory.bucketBuffers));
    s.slotHolder.assign(slots, nullptr);
  }
  if (s.packScratchBytes)
    s.packScratch = s.allocate(s.packScratchBytes, s.memory.bucketBuffers);
  if (s.collectiveScratchBytes)
    s.collectiveScratch =
        s.allocate(s.collectiveScratchBytes, s.memory.collectiveScratch);
  // Copy-backs remain only where an update cannot be donated (see
  // Buffer.in_place): the old value is read after the update is written
  // (or by a kernel that cannot update in place), or the result is itself a
  // persistent buffer (results that exchange parameters: staged, so each
  // reads the old values).
  for (int64_t id : s.program->results()) {
    const plan::Buffer &b = s.buffer(id);
    if (b.replaces().empty() || b.in_place())
      continue;
    int64_t target = s.persistentId(b.replaces());
    if (target == id)
      continue; // returned unchanged
    Impl::CopyBack copy{s.views[id].data, nullptr, s.views[target].data,
                        s.views[id].numBytes()};
    if (b.role() != plan::ACTIVATION) {
      copy.staged = s.allocate(copy.bytes, s.memory.staging);
    }
    s.copyBacks.push_back(copy);
  }
}

/// A pipelined step on this rank: per model chunk (one, or v under
/// interleaved: chunk c is stage c x ranks + this rank), the stage's
/// once-per-step program and its per-microbatch ones (forward, and a full
/// backward or the input- and weight-gradient B and W, all sharing the
/// first's persistent buffers), the rank's action list, and where each
/// program's pipeline values are. A microbatch's messages, stashes and
/// deferred values are copied out of the program that made them into
/// slots of their own (one buffer per value, per kind, chunk and
/// microbatch, recycled), so any number of microbatches may be in flight.
struct Executor::Impl::Pipe {
  using SlotKind = pipeline::SlotKind;
  static constexpr int kKinds = pipeline::kSlotKinds;
  int ranks = 1, stages = 1, microbatches = 1;
  /// A program's pipeline values of one slot kind: (k, buffer id).
  using Port = std::vector<std::pair<int, int64_t>>;
  /// One per-microbatch program and where its values are.
  struct Part {
    std::unique_ptr<Impl> program;
    /// (step input, microbatch input) pairs, as Impl::microInputs.
    std::vector<std::pair<int64_t, int64_t>> inputs;
    /// Per slot kind, the values it reads (arguments) and makes (results).
    std::array<Port, kKinds> in, out;
    explicit operator bool() const { return bool(program); }
  };
  /// The shape of one value of a slot.
  struct Value {
    DType dtype = DType::F32;
    size_t elements = 0, bytes = 0;
  };
  struct Chunk {
    int stage = 0;
    Impl *step = nullptr;          // chunk 0: the executor's own Impl
    std::unique_ptr<Impl> ownStep; // chunks >= 1
    /// `backward` when the stage has one backward program; `input` (B) and
    /// `weight` (W) when it is split.
    Part forward, backward, input, weight;
    /// Their one device arena, the largest of theirs: they run one at a
    /// time (counted in the executor's own memory).
    DeviceBuffer arena;
    int64_t arenaBytes = 0;
    /// Per slot kind, its values in k order.
    std::array<std::vector<Value>, kKinds> values;
    std::vector<const Part *> parts() const {
      std::vector<const Part *> out;
      for (const Part *p : {&forward, &backward, &input, &weight})
        if (*p)
          out.push_back(p);
      return out;
    }
  };
  std::vector<Chunk> chunks;
  std::vector<plan::PipelineAction> actions;
  std::shared_ptr<CommGroup> group; // the pipeline axis: position = rank
  /// The step's results (PlanFile::results order): (stage, its position
  /// in that stage's once-per-step program's results).
  std::vector<std::pair<int, int>> results;
  /// One microbatch's values of one kind and chunk: a buffer each. Where
  /// the messages are enqueued on the device (streamOrdered, nccl), the
  /// events that order a slot's uses without the host: `released` (compute
  /// stream, after the slot's last copy into a program: a receive into it
  /// waits for it), `arrived` (message stream, after a receive into it: the
  /// compute stream waits for it before it reads the slot, while
  /// `arriving`) and `sent` (message stream, after a send from it: the
  /// compute stream waits for it before the slot is given back).
  struct Slot {
    std::vector<DeviceBuffer> buffers;
    std::unique_ptr<Event> released, arrived, sent;
    bool arriving = false;
  };
  /// (kind, chunk, microbatch) -> its slot; spare ones by (kind, chunk).
  std::map<std::tuple<int, int, int>, Slot> slots;
  std::map<std::pair<int, int>, std::vector<Slot>> spare;
  /// streamOrdered: the stream the messages are enqueued on, beside the
  /// compute stream (so a send does not hold up the compute queued after
  /// it, and a receive may run ahead of the compute before its reader),
  /// and an event of the compute stream that a send waits for (made on
  /// first use).
  std::unique_ptr<Stream> messages;
  std::unique_ptr<Event> computed;
  /// This rank's Impl of `stage`'s once-per-step program, or null.
  Impl *stepOf(int stage) const {
    for (const Chunk &c : chunks)
      if (c.stage == stage)
        return c.step;
    return nullptr;
  }
};

/// The buffer of `step` (a microbatched step's once-per-step program, which
/// holds this rank's whole batch) that input `id` of `program` is a
/// microbatch of: the input of the same name and dtype whose dimension 0 is
/// `m` times as large (microbatch k is its block k). Throws otherwise.
static int64_t wholeInputOf(const Executor::Impl &step,
                            const Executor::Impl &program, int64_t id,
                            int64_t m) {
  const plan::Buffer &b = program.buffer(id);
  int64_t whole = -1;
  for (int64_t sid : step.program->arguments())
    if (step.buffer(sid).role() == plan::INPUT &&
        step.buffer(sid).name() == b.name())
      whole = sid;
  std::vector<int64_t> want = program.views[id].shape;
  if (whole < 0 || want.empty() ||
      step.views[whole].dtype != program.views[id].dtype ||
      (want[0] *= m, want != step.views[whole].shape))
    throw Error("program '" + program.program->name() + "': input '" +
                b.name() +
                "' is not a microbatch of the step's input of that name");
  return whole;
}

/// A new pipeline slot: one buffer per value, counted in `s`'s memory.
static Executor::Impl::Pipe::Slot
newSlot(Executor::Impl &s, const std::vector<Executor::Impl::Pipe::Value> &values) {
  Executor::Impl::Pipe::Slot slot;
  for (const Executor::Impl::Pipe::Value &v : values) {
    slot.buffers.push_back(s.device->allocateBuffer(v.bytes));
    s.memory.pipelineSlots += int64_t(v.bytes);
    s.hold(int64_t(v.bytes));
  }
  return slot;
}

/// Builds `s` as this rank's stages of a pipelined plan (see Impl::Pipe).
static void buildPipelined(Executor::Impl &s,
                           std::shared_ptr<const PlanFile> plan,
                           Communicator *comm, Backend &backend,
                           const ExecutorOptions &options) {
  using Pipe = Executor::Impl::Pipe;
  using Impl = Executor::Impl;
  const plan::Plan &proto = plan->impl().proto;
  if (!plan->impl().pipelineUnrunnable.empty())
    throw Error(plan->impl().pipelineUnrunnable);
  const plan::PipelineSchedule &schedule = proto.pipeline();
  if (!comm)
    throw Error("a pipelined plan needs a communicator");
  auto pipe = std::make_unique<Pipe>();
  Pipe &p = *pipe;
  // The groups of every stage program, made once (see makeGroups).
  s.groupCache = std::make_shared<Impl::GroupCache>();
  p.ranks = schedule.ranks();
  p.stages = schedule.stages_size();
  p.microbatches = schedule.microbatches();
  int rank = plan->pipelineStageOf(comm->rank());
  p.chunks.resize(size_t(schedule.chunks()));
  for (int c = 0; c < schedule.chunks(); ++c) {
    Pipe::Chunk &chunk = p.chunks[size_t(c)];
    chunk.stage = c * p.ranks + rank;
    const plan::PipelineStage &stage = schedule.stages(chunk.stage);
    if (c == 0) {
      chunk.step = &s;
    } else {
      chunk.ownStep = std::make_unique<Impl>();
      chunk.step = chunk.ownStep.get();
    }
    chunk.step->groupCache = s.groupCache;
    buildImpl(*chunk.step, plan, proto.programs(stage.optimizer()).name(),
              comm, backend, options, nullptr);
    chunk.step->pipelineAxis = schedule.axis();
    for (int index : pipeline::microbatchPrograms(stage))
      chunk.arenaBytes =
          std::max(chunk.arenaBytes, int64_t(proto.programs(index).arena_bytes()));
    chunk.arena = s.device->allocateBuffer(size_t(chunk.arenaBytes));
    s.memory.arena += chunk.arenaBytes;
    s.hold(chunk.arenaBytes);
    auto build = [&](Pipe::Part &part, int index) {
      if (index < 0)
        return;
      part.program = std::make_unique<Impl>();
      part.program->sharedArena = chunk.arena.get();
      part.program->groupCache = s.groupCache;
      buildImpl(*part.program, plan, proto.programs(index).name(), comm,
                backend, options, chunk.step);
    };
    build(chunk.forward, stage.forward());
    build(chunk.backward, stage.backward());
    build(chunk.input, stage.backward_input());
    build(chunk.weight, stage.backward_weight());
    Impl &step = *chunk.step;
    for (int64_t id = 0; id < step.program->buffers_size(); ++id)
      if (step.buffer(id).accumulator())
        step.accumulators.push_back(id);
  }
  p.actions.assign(schedule.rank_actions(rank).actions().begin(),
                   schedule.rank_actions(rank).actions().end());
  // Each program's pipeline values by slot kind (pipeline::slotOfValue),
  // and its microbatch inputs; each slot value's shape, the same in every
  // program that reads or makes it.
  pipeline::Schedule generated = pipeline::fromProto(schedule);
  for (size_t c = 0; c < p.chunks.size(); ++c) {
    Pipe::Chunk &chunk = p.chunks[c];
    std::string where = "stage " + std::to_string(chunk.stage) + "'s ";
    std::array<std::map<int, Pipe::Value>, Pipe::kKinds> shapes;
    auto note = [&](Pipe::SlotKind kind, int k, const TensorView &v) {
      Pipe::Value value{v.dtype, size_t(v.numElements()), v.numBytes()};
      auto [it, added] = shapes[int(kind)].emplace(k, value);
      if (!added && (it->second.bytes != value.bytes ||
                     it->second.dtype != value.dtype))
        throw Error(where + pipeline::describe(kind) + " value " +
                    std::to_string(k) + " differs in shape between its "
                    "programs");
    };
    for (Pipe::Part *part :
         {&chunk.forward, &chunk.backward, &chunk.input, &chunk.weight}) {
      if (!*part)
        continue;
      Impl &program = *part->program;
      // PlanFile has checked the names (validatePipeline).
      auto slotOf = [&](int64_t id, bool result) {
        return pipeline::slotOfValue(program.buffer(id).name(), result);
      };
      // The whole batch the callers set is chunk 0's (`s`): every stage's
      // once-per-step program takes all of the step's inputs.
      for (int64_t id : program.program->arguments()) {
        if (program.buffer(id).role() != plan::INPUT)
          continue;
        if (auto slot = slotOf(id, false)) {
          part->in[int(slot->first)].push_back({slot->second, id});
          note(slot->first, slot->second, program.views[id]);
        } else {
          part->inputs.push_back(
              {wholeInputOf(s, program, id, p.microbatches), id});
        }
      }
      for (int64_t id : program.program->results())
        if (auto slot = slotOf(id, true)) {
          part->out[int(slot->first)].push_back({slot->second, id});
          note(slot->first, slot->second, program.views[id]);
        }
    }
    for (int kind = 0; kind < Pipe::kKinds; ++kind) {
      for (auto &[k, value] : shapes[kind]) {
        if (k != int(chunk.values[kind].size()))
          throw Error(where + pipeline::describe(Pipe::SlotKind(kind)) +
                      " value " + std::to_string(chunk.values[kind].size()) +
                      " is missing");
        chunk.values[kind].push_back(value);
      }
    }
    // The slots of the microbatches in flight, allocated now: as many of
    // each kind as the action list holds at once (pipeline::slotPeaks,
    // which explain counts too).
    pipeline::SlotPeaks peaks = pipeline::slotPeaks(generated, rank, int(c));
    for (int kind = 0; kind < Pipe::kKinds; ++kind)
      for (int n = 0; n < peaks.of(Pipe::SlotKind(kind)); ++n)
        p.spare[{kind, int(c)}].push_back(newSlot(s, chunk.values[kind]));
  }
  // The pipeline axis's group: the devices differing only in their stage.
  google::protobuf::RepeatedPtrField<std::string> axis;
  axis.Add()->assign(schedule.axis());
  p.group = comm->createGroup(s.group(axis));
  p.group->setLabel("pipeline axis " + schedule.axis());
  if (s.streamOrdered)
    p.messages = s.device->createStream();
  // The step's results: each stage's once-per-step program's, in order,
  // a name once (PlanFile::results).
  std::set<std::string> seen;
  for (int t = 0; t < schedule.stages_size(); ++t) {
    const plan::Program &program = proto.programs(schedule.stages(t).optimizer());
    for (int j = 0; j < program.results_size(); ++j) {
      const std::string &name = program.buffers(program.results(j)).name();
      if (name.empty() || seen.insert(name).second)
        p.results.push_back({t, j});
    }
  }
  s.pipe = std::move(pipe);
}

/// ExecutorOptions::captureGraph's conditions, checked once the executor is
/// built (`pipelined`: a stage of a pipelined plan).
static void checkGraphCapture(Executor::Impl &s, const ExecutorOptions &options,
                              bool pipelined) {
  if (!options.captureGraph)
    return;
  const char *what = "recording steps as a graph (--cuda-graph)";
  if (pipelined || s.micro)
    throw Error(std::string(what) + " needs an unpipelined program: a " +
                (pipelined ? "pipelined stage sends and receives between "
                             "ranks from the host"
                           : "microbatched step zeroes its accumulators "
                             "from the host") +
                " between its kernels");
  if (s.program->partitioned() && s.plan->numDevices() > 1)
    throw Error(std::string(what) + " needs a one-device program: '" +
                s.program->name() + "' runs on " +
                std::to_string(s.plan->numDevices()) +
                " devices, and the executor issues its collectives from the "
                "host");
  if (options.profile)
    throw Error(std::string(what) +
                " and a profile exclude each other: the profile times each "
                "instruction between two drains of the stream");
  if (!s.compute->canCapture())
    throw Error(std::string(what) + ": the " + s.device->name() +
                " device's stream cannot record (a CUDA stream can: "
                "--backend cuda)");
  s.captureGraph = true;
  if (!s.planRates.empty()) {
    size_t bytes = s.planRates.size() * sizeof(double);
    s.rates = s.device->allocateBuffer(bytes);
    s.memory.state += int64_t(bytes);
    s.hold(int64_t(bytes));
  }
}

Executor::Executor(std::shared_ptr<const PlanFile> plan,
                   const std::string &programName, Communicator *comm,
                   Backend &backend, const ExecutorOptions &options)
    : pimpl(std::make_unique<Impl>()) {
  Impl &s = *pimpl;
  const plan::Plan &proto = plan->impl().proto;
  if (isPipelined(proto) && programName == proto.programs(0).name()) {
    buildPipelined(s, plan, comm, backend, options);
    checkGraphCapture(s, options, /*pipelined=*/true);
    return;
  }
  buildImpl(s, plan, programName, comm, backend, options, nullptr);
  // A microbatched step: program 0 with a pipeline (PlanFile validated it
  // as a schedule; whether this runtime runs it is asked here).
  if (!proto.has_pipeline() || proto.programs(0).name() != programName) {
    checkGraphCapture(s, options, /*pipelined=*/false);
    return;
  }
  if (!plan->impl().pipelineUnrunnable.empty())
    throw Error(plan->impl().pipelineUnrunnable);
  const plan::PipelineSchedule &schedule = proto.pipeline();
  const plan::Program &microProgram =
      proto.programs(schedule.stages(0).forward());
  s.micro = std::make_unique<Impl>();
  s.micro->groupCache = s.groupCache;
  buildImpl(*s.micro, plan, microProgram.name(), comm, backend, options, &s);
  s.actions.assign(schedule.rank_actions(0).actions().begin(),
                   schedule.rank_actions(0).actions().end());
  for (int64_t id = 0; id < s.program->buffers_size(); ++id)
    if (s.buffer(id).accumulator())
      s.accumulators.push_back(id);
  int64_t m = schedule.microbatches();
  for (int64_t id : s.micro->program->arguments())
    if (s.micro->buffer(id).role() == plan::INPUT)
      s.microInputs.push_back({wholeInputOf(s, *s.micro, id, m), id});
  checkGraphCapture(s, options, /*pipelined=*/false);
}

Executor::~Executor() = default;

int64_t Executor::graphCaptures() const { return pimpl->graphCaptures; }

void Executor::setLearningRate(double lr) {
  if (!std::isnan(lr) && !(lr >= 0 && std::isfinite(lr)))
    throw Error("the learning rate must be finite and >= 0, got " +
                std::to_string(lr));
  pimpl->learningRate = lr;
}

double Executor::learningRate() const {
  return pimpl->rateFor(pimpl->planLearningRate);
}

int64_t Executor::arenaBytes() const {
  // A microbatched step holds both programs' arenas.
  // A pipelined stage holds its update's arena and the one its
  // per-microbatch programs share.
  int64_t bytes = pimpl->program->arena_bytes() +
                  (pimpl->micro ? pimpl->micro->program->arena_bytes() : 0);
  if (const Impl::Pipe *pipe = pimpl->pipe.get())
    for (const Impl::Pipe::Chunk &c : pipe->chunks)
      bytes += c.arenaBytes +
               (c.ownStep ? c.ownStep->program->arena_bytes() : 0);
  return bytes;
}

ExecutorMemory Executor::memory() const {
  ExecutorMemory m = pimpl->memory;
  std::vector<const Impl *> parts;
  if (pimpl->micro)
    parts.push_back(pimpl->micro.get());
  if (pimpl->pipe)
    for (const Impl::Pipe::Chunk &c : pimpl->pipe->chunks)
      for (const Impl::Pipe::Part *part : c.parts())
        parts.push_back(part->program.get());
  for (const Impl *micro : parts) {
    // Its own arena, inputs and collective buffers; parameters and state
    // are the step's. Both live as long as the executor.
    const ExecutorMemory &u = micro->memory;
    m.arena += u.arena;
    m.inputs += u.inputs;
    m.bucketBuffers += u.bucketBuffers;
    m.collectiveScratch += u.collectiveScratch;
    m.staging += u.staging;
    m.highWaterMark += u.highWaterMark;
    m.largestGather = std::max(m.largestGather, u.largestGather);
  }
  // An interleaved rank's other chunks hold their stages' parameters and
  // state too.
  if (pimpl->pipe)
    for (const Impl::Pipe::Chunk &c : pimpl->pipe->chunks)
      if (c.ownStep) {
        const ExecutorMemory &u = c.ownStep->memory;
        m.parameters += u.parameters;
        m.state += u.state;
        m.arena += u.arena;
        m.inputs += u.inputs;
        m.bucketBuffers += u.bucketBuffers;
        m.collectiveScratch += u.collectiveScratch;
        m.staging += u.staging;
        m.highWaterMark += u.highWaterMark;
      }
  return m;
}

/// A view of `t` for reading (the view type has no const form).
static TensorView readView(const Tensor &t) {
  return {const_cast<unsigned char *>(t.data<unsigned char>()), t.getDType(),
          t.getShape()};
}

void Executor::Impl::scatterInto(int64_t id, const TensorView &t,
                                 const std::string &what) {
  const plan::Buffer &b = buffer(id);
  std::vector<int64_t> global = toVector(b.global_shape());
  if (t.dtype != toDType(b.dtype()) || t.shape != global) {
    std::string want = toString(toDType(b.dtype())),
                got = toString(t.dtype);
    for (int64_t d : global)
      want += "x" + std::to_string(d);
    for (int64_t d : t.shape)
      got += "x" + std::to_string(d);
    throw Error(what + " must be " + want + ", got " + got);
  }
  const TensorView &view = views[id];
  size_t elem = sizeOf(view.dtype);
  const unsigned char *src = static_cast<const unsigned char *>(t.data);
  writeFromHost(view.data, view.numBytes(), [&](unsigned char *dst) {
    std::memset(dst, 0, view.numBytes()); // padding, if any, is zeros
    forEachRow(global, view.shape, blockStarts(b, coords),
               [&](int64_t g, int64_t l, int64_t n) {
                 std::memcpy(dst + l * elem, src + g * elem, n * elem);
               });
  });
}

/// A pipelined plan's parameter or state `name` in the first stage that
/// holds it (a tied parameter and the step counter are on several), and
/// that stage; throws when no stage has it.
static const plan::Buffer &firstStageBuffer(const plan::Plan &proto,
                                            const std::string &name,
                                            int &stage) {
  for (stage = 0; stage < proto.pipeline().stages_size(); ++stage)
    for (const plan::Buffer &b :
         proto.programs(proto.pipeline().stages(stage).optimizer()).buffers())
      if ((b.role() == plan::PARAMETER || b.role() == plan::STATE) &&
          b.name() == name)
        return b;
  throw Error("the program has no parameter or state buffer '" + name + "'");
}

Executor::Impl *Executor::Impl::holderOf(const std::string &name,
                                         bool &ownerStage) {
  ownerStage = true;
  if (!pipe) {
    persistentId(name); // throws for a name it does not have
    return this;
  }
  int first;
  firstStageBuffer(plan->impl().proto, name, first);
  for (Pipe::Chunk &c : pipe->chunks)
    if (c.step->findPersistent(name) >= 0) {
      ownerStage = c.stage == first;
      return c.step;
    }
  ownerStage = false;
  return nullptr;
}

int64_t Executor::Impl::findPersistent(const std::string &name) const {
  for (int64_t id = 0; id < program->buffers_size(); ++id) {
    const plan::Buffer &b = buffer(id);
    if ((b.role() == plan::PARAMETER || b.role() == plan::STATE) &&
        b.name() == name)
      return id;
  }
  return -1;
}

int64_t Executor::Impl::persistentId(const std::string &name) const {
  int64_t id = findPersistent(name);
  if (id < 0)
    throw Error("the program has no parameter or state buffer '" + name +
                "'");
  return id;
}

void Executor::setInputs(const std::vector<Tensor> &globalInputs) {
  std::vector<TensorView> views;
  for (const Tensor &t : globalInputs)
    views.push_back(readView(t));
  setInputViews(views);
}

/// Throws when an integer input holds a value at or beyond the plan's bound
/// for it (Buffer.value_bound: the rows of the table or the classes that it
/// indexes), as a train step's token file is checked: an embedding would
/// read zeros for such an id and a cross entropy give a NaN loss (the cpu
/// backend stops at the op; a device sees it after the step). Negative
/// values pass: a cross entropy skips a negative label.
static void checkValueBound(const plan::Buffer &b, const TensorView &data,
                            const std::string &what) {
  int64_t bound = b.value_bound();
  if (bound <= 0 || (data.dtype != DType::I32 && data.dtype != DType::I64))
    return;
  for (int64_t i = 0, n = data.numElements(); i < n; ++i) {
    int64_t v = data.dtype == DType::I32
                    ? static_cast<const int32_t *>(data.data)[i]
                    : static_cast<const int64_t *>(data.data)[i];
    if (v >= bound)
      throw Error(what + ": element " + std::to_string(i) + " is " +
                  std::to_string(v) + ", outside [0, " + std::to_string(bound) +
                  "), the plan's bound for it (the size of the dimension it "
                  "indexes: a vocabulary, a class count)");
  }
}

void Executor::setInputViews(const std::vector<TensorView> &globalInputs) {
  Impl &s = *pimpl;
  size_t next = 0;
  for (int64_t id : s.program->arguments()) {
    const plan::Buffer &b = s.buffer(id);
    if (b.role() != plan::INPUT)
      continue;
    std::string what = "input '" + b.name() + "'";
    if (next >= globalInputs.size())
      throw Error("too few inputs: " + what + " is missing (got " +
                  std::to_string(globalInputs.size()) + ")");
    if (globalInputs[next].dtype == toDType(b.dtype()))
      checkValueBound(b, globalInputs[next], what);
    s.scatterInto(id, globalInputs[next++], what);
  }
  if (next != globalInputs.size())
    throw Error("too many inputs: the program takes " + std::to_string(next) +
                ", got " + std::to_string(globalInputs.size()));
}

/// Runs one program's instruction stream and copy-backs.
static void runProgram(Executor::Impl &s);
/// Runs the step: the program, or its microbatches' actions.
static void runSteps(Executor::Impl &s);

/// run()'s step under ExecutorOptions::captureGraph: eager the first
/// time, recorded and launched the second, launched again after that; the
/// optimizer kernels' learning rates are written to device memory first.
static void runGraphed(Executor::Impl &s) {
  if (!s.planRates.empty()) {
    std::vector<double> rates;
    for (double planRate : s.planRates)
      rates.push_back(s.rateFor(planRate));
    s.device->copyFromHost(s.rates.get(), rates.data(),
                           rates.size() * sizeof(double), *s.compute);
  }
  if (s.graph) {
    s.graph->launch(*s.compute);
    return;
  }
  if (s.runs == 0)
    return runSteps(s);
  s.compute->beginCapture();
  // Whatever the step throws, the capture ends before it leaves (a stream
  // left capturing would record the next run's work instead of running it).
  auto endCapture = [&] {
    try {
      s.compute->endCapture();
    } catch (const Error &) {
    }
  };
  const std::string what = "recording the step as a graph (--cuda-graph): ";
  try {
    runSteps(s);
  } catch (const Error &e) {
    endCapture();
    throw Error(what + e.what());
  } catch (...) {
    endCapture();
    throw;
  }
  try {
    s.graph = s.compute->endCapture();
  } catch (const Error &e) {
    throw Error(what + e.what());
  }
  ++s.graphCaptures;
  s.graph->launch(*s.compute);
}

void Executor::run() {
  Impl &s = *pimpl;
  if (s.pipe)
    runSteps(s); // its actions are the spans
  else if (s.captureGraph)
    s.traced("step", true, [&] { runGraphed(s); });
  else
    s.traced("step", true, [&] { runSteps(s); });
  ++s.runs;
  // A collective enqueued on a device stream that failed or timed out is
  // reported here, by the communicator, naming it (its watchdog has aborted
  // it, so the streams behind it go on).
  if (s.comm)
    s.comm->waitEnqueued();
  // The step is done when its work is: a GPU's compute stream runs ahead of
  // the host, and a step timed around run() would otherwise time only the
  // queuing (the cpu device's stream runs in line: nothing to wait for).
  s.compute->synchronize();
  s.backend->checkDeviceErrors();
}

/// Copies block `microbatch` of each step input into the program's
/// microbatch input.
static void copyMicrobatchInputs(
    Executor::Impl &s, Executor::Impl &program,
    const std::vector<std::pair<int64_t, int64_t>> &inputs, int microbatch) {
  for (auto [whole, part] : inputs) {
    size_t bytes = program.views[part].numBytes();
    s.device->copy(program.views[part].data,
                   static_cast<unsigned char *>(s.views[whole].data) +
                       bytes * microbatch,
                   bytes, *s.compute);
  }
}

/// Runs this rank's action list of a pipelined step (see Impl::Pipe).
static void runPipelined(Executor::Impl &s) {
  using Pipe = Executor::Impl::Pipe;
  using Kind = Pipe::SlotKind;
  using Impl = Executor::Impl;
  Pipe &p = *s.pipe;
  for (Pipe::Chunk &c : p.chunks)
    for (int64_t id : c.step->accumulators)
      c.step->writeFromHost(c.step->views[id].data,
                            c.step->views[id].numBytes(),
                            [&](unsigned char *dst) {
                              std::memset(dst, 0,
                                          c.step->views[id].numBytes());
                            });
  // Sends are posted and left running (on host memory; staged ones block):
  // a send's slot returns to its pool once the send completes, which the
  // rank waits for only when it needs that slot again or at the end of
  // the step. So a rank goes on computing while its peer has not yet
  // posted the receive (the lists were proven free of deadlock with
  // blocking sends, which wait earlier).
  //
  // Where the communicator orders calls on device streams (nccl), nothing
  // waits on the host: sends and receives are enqueued on the message
  // stream (p.messages), a send behind the compute that filled its slot,
  // a receive behind the compute that last read its slot; the compute
  // stream waits for a receive before it reads the slot and for a send
  // before the slot is reused (the Slot's events).
  using Slot = Pipe::Slot;
  struct PendingSend {
    std::vector<std::unique_ptr<CommRequest>> requests;
    Kind kind;
    int chunk, mb;
  };
  std::deque<PendingSend> pending;
  bool ordered = bool(p.messages);
  bool asyncSends = ordered || (!s.staged && s.device->isHostAccessible());
  std::function<void(Kind, int, int)> release;
  std::function<Slot &(Kind, int, int)> find;
  auto complete = [&](std::deque<PendingSend>::iterator it) {
    for (auto &request : it->requests)
      request->wait(CommRequest::Clock::now() + s.comm->getTimeout());
    if (ordered)
      s.compute->wait(*find(it->kind, it->chunk, it->mb).sent);
    PendingSend done = std::move(*it);
    pending.erase(it);
    release(done.kind, done.chunk, done.mb);
  };
  // A slot: one buffer per value of its kind.
  auto take = [&](Kind kind, int chunk, int mb) -> Slot & {
    Slot slot;
    auto &spare = p.spare[{int(kind), chunk}];
    if (spare.empty())
      for (auto it = pending.begin(); it != pending.end(); ++it)
        if (it->kind == kind && it->chunk == chunk) {
          complete(it);
          break;
        }
    if (!spare.empty()) {
      slot = std::move(spare.back());
      spare.pop_back();
    } else {
      slot = newSlot(s, p.chunks[size_t(chunk)].values[int(kind)]);
    }
    auto [it, added] =
        p.slots.emplace(std::make_tuple(int(kind), chunk, mb), std::move(slot));
    if (!added)
      throw Error("microbatch " + std::to_string(mb) + " has a pipeline " +
                  pipeline::describe(kind) + " slot already");
    return it->second;
  };
  find = [&](Kind kind, int chunk, int mb) -> Slot & {
    auto it = p.slots.find({int(kind), chunk, mb});
    if (it == p.slots.end())
      throw Error("microbatch " + std::to_string(mb) + ": its " +
                  pipeline::describe(kind) + " are read before they arrive");
    return it->second;
  };
  // A received slot, before the compute stream reads it.
  auto arrive = [&](Slot &slot) {
    if (slot.arriving)
      s.compute->wait(*slot.arrived);
    slot.arriving = false;
  };
  // Moves `event` (made on first use) to the end of `stream`.
  auto mark = [](Stream &stream, std::unique_ptr<Event> &event) {
    if (!event)
      event = stream.createEvent();
    stream.record(*event);
  };
  // Only received slots are written by the message stream: the compute
  // stream's last read of one is what a receive into it waits for.
  auto received = [](Kind kind) {
    return kind == Kind::ActivationIn || kind == Kind::GradientIn;
  };
  release = [&](Kind kind, int chunk, int mb) {
    auto it = p.slots.find({int(kind), chunk, mb});
    if (it == p.slots.end())
      throw Error("microbatch " + std::to_string(mb) + ": its " +
                  pipeline::describe(kind) + " are released before they "
                  "were made");
    Slot &slot = it->second;
    // A received slot that no program read (its values all unused):
    // whatever comes next waits for the receive.
    if (slot.arriving) {
      arrive(slot);
      mark(*s.compute, slot.released);
    }
    p.spare[{int(kind), chunk}].push_back(std::move(slot));
    p.slots.erase(it);
  };
  // Copies between a program's buffers and a slot, for the values of
  // `kind` it reads (in) or makes (out).
  auto copyIn = [&](const Pipe::Part &part, Kind kind, int chunk, int mb) {
    const Pipe::Port &port = part.in[int(kind)];
    if (port.empty())
      return;
    Slot &slot = find(kind, chunk, mb);
    arrive(slot);
    for (auto [k, id] : port)
      s.device->copy(part.program->views[id].data,
                     slot.buffers[size_t(k)].get(),
                     part.program->views[id].numBytes(), *s.compute);
    // Copied out: a later receive into the slot need not wait for the
    // program that reads the copy (each reader records it again).
    if (ordered && received(kind))
      mark(*s.compute, slot.released);
  };
  auto copyOut = [&](const Pipe::Part &part, Kind kind, int chunk, int mb) {
    Slot &slot = take(kind, chunk, mb);
    for (auto [k, id] : part.out[int(kind)])
      s.device->copy(slot.buffers[size_t(k)].get(),
                     part.program->views[id].data,
                     part.program->views[id].numBytes(), *s.compute);
  };
  // Messages: tag 2 x sending stage + direction (0 forward, 1 backward),
  // so that the messages of one tag arrive in microbatch order; the peer is
  // the rank of the stage before or after (its position in the group).
  auto exchange = [&](bool send, Kind kind, int ci, int mb, int peerStage,
                      int tag) {
    Slot &slot = send ? find(kind, ci, mb) : take(kind, ci, mb);
    const std::vector<Pipe::Value> &values = p.chunks[size_t(ci)].values[int(kind)];
    if (ordered) {
      if (send) {
        mark(*s.compute, p.computed);
        p.messages->wait(*p.computed);
      } else if (slot.released) {
        p.messages->wait(*slot.released);
      }
    }
    PendingSend posted{{}, kind, ci, mb};
    for (size_t k = 0; k < values.size(); ++k) {
      CollectiveArgs args;
      args.kind = send ? CollectiveKind::Send : CollectiveKind::Recv;
      args.send = slot.buffers[k].get();
      args.recv = slot.buffers[k].get();
      args.count = values[k].elements;
      args.dtype = values[k].dtype;
      args.peer = peerStage % p.ranks;
      args.tag = tag;
      if (ordered)
        s.runComm(args, *p.group, p.messages.get());
      else if (send && asyncSends)
        posted.requests.push_back(s.comm->start(args, *p.group));
      else
        s.runComm(args, *p.group);
    }
    if (ordered) {
      mark(*p.messages, send ? slot.sent : slot.arrived);
      slot.arriving = !send;
    }
    if (send && asyncSends)
      pending.push_back(std::move(posted));
    else if (send)
      release(kind, ci, mb);
  };
  for (const plan::PipelineAction &a : p.actions) {
    int mb = a.microbatch(), ci = a.chunk();
    Pipe::Chunk &c = p.chunks[size_t(ci)];
    bool first = c.stage == 0, last = c.stage + 1 == p.stages;
    std::string name;
    bool compute = true;
    if (s.tracing) {
      std::string n = std::to_string(mb) +
                      (p.chunks.size() > 1 ? " c" + std::to_string(ci) : "");
      switch (a.kind()) {
      case plan::PipelineAction::FORWARD: name = "F" + n; break;
      case plan::PipelineAction::BACKWARD: name = "B" + n; break;
      case plan::PipelineAction::BACKWARD_INPUT: name = "B" + n; break;
      case plan::PipelineAction::BACKWARD_WEIGHT: name = "W" + n; break;
      case plan::PipelineAction::SEND_ACTIVATION: name = "send activation " + n; break;
      case plan::PipelineAction::RECV_ACTIVATION: name = "recv activation " + n; break;
      case plan::PipelineAction::SEND_GRADIENT: name = "send gradient " + n; break;
      case plan::PipelineAction::RECV_GRADIENT: name = "recv gradient " + n; break;
      case plan::PipelineAction::OPTIMIZER:
        name = "update" + std::string(p.chunks.size() > 1 ? " c" + std::to_string(ci) : "");
        break;
      default: break;
      }
      compute = a.kind() == plan::PipelineAction::FORWARD ||
                a.kind() == plan::PipelineAction::BACKWARD ||
                a.kind() == plan::PipelineAction::BACKWARD_INPUT ||
                a.kind() == plan::PipelineAction::BACKWARD_WEIGHT ||
                a.kind() == plan::PipelineAction::OPTIMIZER;
    }
    double begin = s.tracing ? Impl::traceClock() : 0;
    pipeline::ActionKind kind = pipeline::ActionKind(int(a.kind()));
    switch (a.kind()) {
    case plan::PipelineAction::FORWARD:
    case plan::PipelineAction::BACKWARD:
    case plan::PipelineAction::BACKWARD_INPUT:
    case plan::PipelineAction::BACKWARD_WEIGHT: {
      // The slots it reads, frees and fills: pipeline::slotUse, which
      // slotPeaks (and so the slots allocated, and explain) follows too.
      const Pipe::Part &part =
          kind == pipeline::ActionKind::Forward    ? c.forward
          : kind == pipeline::ActionKind::Backward ? c.backward
          : kind == pipeline::ActionKind::BackwardInput ? c.input
                                                        : c.weight;
      pipeline::SlotUse use = pipeline::slotUse(kind, first, last);
      copyMicrobatchInputs(s, *part.program, part.inputs, mb);
      for (Kind k : use.reads)
        copyIn(part, k, ci, mb);
      runProgram(*part.program);
      for (Kind k : use.releases)
        release(k, ci, mb);
      for (Kind k : use.takes)
        copyOut(part, k, ci, mb);
      break;
    }
    case plan::PipelineAction::SEND_ACTIVATION:
      exchange(true, Kind::ActivationOut, ci, mb, c.stage + 1, 2 * c.stage);
      break;
    case plan::PipelineAction::RECV_ACTIVATION:
      exchange(false, Kind::ActivationIn, ci, mb, c.stage - 1,
               2 * (c.stage - 1));
      break;
    case plan::PipelineAction::SEND_GRADIENT:
      exchange(true, Kind::GradientOut, ci, mb, c.stage - 1,
               2 * c.stage + 1);
      break;
    case plan::PipelineAction::RECV_GRADIENT:
      exchange(false, Kind::GradientIn, ci, mb, c.stage + 1,
               2 * (c.stage + 1) + 1);
      break;
    case plan::PipelineAction::OPTIMIZER:
      runProgram(*c.step);
      break;
    default:
      // REDUCE_GRADIENTS: the once-per-step program's first instructions.
      break;
    }
    if (s.tracing && !name.empty())
      s.traceEvents.push_back({name, begin, Impl::traceClock(), s.runs, compute});
  }
  while (!pending.empty())
    complete(pending.begin());
}

static void runSteps(Executor::Impl &s) {
  if (s.pipe)
    return runPipelined(s);
  if (!s.micro)
    return runProgram(s);
  for (int64_t id : s.accumulators)
    s.writeFromHost(s.views[id].data, s.views[id].numBytes(),
                    [&](unsigned char *dst) {
                      std::memset(dst, 0, s.views[id].numBytes());
                    });
  for (const plan::PipelineAction &a : s.actions) {
    switch (a.kind()) {
    case plan::PipelineAction::FORWARD:
      copyMicrobatchInputs(s, *s.micro, s.microInputs, a.microbatch());
      runProgram(*s.micro);
      break;
    case plan::PipelineAction::OPTIMIZER:
      runProgram(s);
      break;
    default:
      // BACKWARD ran with its FORWARD; the data-parallel reductions are
      // the step program's first instructions.
      break;
    }
  }
}

static void runProgram(Executor::Impl &s) {
  for (const std::function<void()> &step : s.steps)
    step();
  s.finishBuckets();
  if (s.copyBacks.empty())
    return;
  s.timed(s.copyBackSlot, [&] {
    for (const Executor::Impl::CopyBack &c : s.copyBacks)
      if (c.staged)
        s.device->copy(c.staged, c.from, c.bytes, *s.compute);
    for (const Executor::Impl::CopyBack &c : s.copyBacks)
      s.device->copy(c.to, c.staged ? c.staged : c.from, c.bytes, *s.compute);
  });
}

std::vector<ProfileEntry> Executor::profile() const {
  std::vector<ProfileEntry> entries;
  if (!pimpl->profiling)
    return entries;
  std::map<std::string, size_t> at;
  for (const Impl *impl : {pimpl.get(), pimpl->micro.get()}) {
    if (!impl)
      continue;
    for (const ProfileEntry &e : impl->profileSlots) {
      if (e.calls == 0)
        continue;
      auto [it, fresh] = at.try_emplace(e.what, entries.size());
      if (fresh) {
        entries.push_back(e);
      } else {
        entries[it->second].calls += e.calls;
        entries[it->second].seconds += e.seconds;
        entries[it->second].flops += e.flops;
      }
    }
  }
  std::stable_sort(entries.begin(), entries.end(),
                   [](const ProfileEntry &a, const ProfileEntry &b) {
                     return a.seconds > b.seconds;
                   });
  return entries;
}

std::vector<TraceEvent> Executor::trace() const { return pimpl->traceEvents; }

std::vector<Tensor> Executor::gatherResults() {
  std::vector<Tensor> results;
  size_t count = pimpl->pipe ? pimpl->pipe->results.size()
                             : size_t(pimpl->program->results_size());
  for (size_t i = 0; i < count; ++i)
    results.push_back(gatherResult(i));
  return results;
}

Tensor Executor::gatherResult(size_t index) {
  Impl &s = *pimpl;
  size_t count = s.pipe ? s.pipe->results.size()
                        : size_t(s.program->results_size());
  if (index >= count)
    throw Error("result " + std::to_string(index) + " does not exist: the " +
                "program has " + std::to_string(count) + " results");
  if (!s.pipe)
    return s.gatherBuffer(s.program->results(int(index)));
  // A pipelined step's result is its stage's: gathered from there.
  auto [stage, j] = s.pipe->results[index];
  const plan::PipelineSchedule &schedule = s.plan->impl().proto.pipeline();
  const plan::Program &program =
      s.plan->impl().proto.programs(schedule.stages(stage).optimizer());
  const plan::Buffer &b = program.buffers(program.results(j));
  const Impl *owner = s.pipe->stepOf(stage);
  const void *data =
      owner ? owner->views[owner->program->results(j)].data : nullptr;
  return s.gatherBuffer(b, data, stage % s.pipe->ranks);
}

Tensor Executor::gatherPersistent(const std::string &name) {
  Impl &s = *pimpl;
  if (!s.pipe)
    return s.gatherBuffer(s.persistentId(name));
  // From the first stage that holds it (a step counter is on every stage).
  int t;
  const plan::Buffer &b = firstStageBuffer(s.plan->impl().proto, name, t);
  const Impl *owner = s.pipe->stepOf(t);
  return s.gatherBuffer(
      b, owner ? owner->views[owner->persistentId(name)].data : nullptr,
      t % s.pipe->ranks);
}

void Executor::setPersistent(const std::string &name, const Tensor &global) {
  setPersistentView(name, readView(global));
}

void Executor::setPersistentView(const std::string &name,
                                 const TensorView &global) {
  bool ownerStage;
  Impl *holder = pimpl->holderOf(name, ownerStage);
  if (!holder)
    return; // a pipelined rank: another stage's
  int64_t id = holder->persistentId(name);
  holder->scatterInto(id, global,
                      (holder->buffer(id).role() == plan::STATE
                           ? "state '"
                           : "parameter '") +
                          name + "'");
}

Tensor Executor::Impl::gatherBuffer(int64_t id) {
  return gatherBuffer(buffer(id), views[id].data, -1);
}

Tensor Executor::Impl::gatherBuffer(const plan::Buffer &b, const void *data,
                                    int ownerStage) {
  Impl &s = *this;
  int64_t numDevices = s.plan->numDevices();
  {
    // A pipelined step's value lives on one stage: the others send zeros
    // of its local size, and the owner stage's devices speak.
    TensorView view{const_cast<void *>(data), toDType(b.dtype()),
                    toVector(b.local_shape())};
    DeviceBuffer zeros;
    if (!view.data) {
      zeros = s.device->allocateBuffer(view.numBytes());
      view.data = zeros.get();
    }
    std::vector<int64_t> global = toVector(b.global_shape());
    Tensor out(view.dtype, global);
    size_t elem = sizeOf(view.dtype);
    // A value replicated on every device (no axis splits it, none is
    // partial) is its local copy: no all_gather, and no temporary of every
    // device's copy on each (8 local ranks gathering GPT-2's replicated
    // 154 MB embedding table held 1.2 GB each). Every rank decides alike
    // from the plan, so the collectives stay matched.
    // (Local and global shapes must agree too: a padded value's local
    // shape is larger.)
    bool replicated = b.partial_axes_size() == 0 &&
                      view.shape == global &&
                      std::all_of(b.sharding().begin(), b.sharding().end(),
                                  [](const plan::DimSharding &dim) {
                                    return dim.axes_size() == 0;
                                  });
    if (!s.program->partitioned() || numDevices == 1 ||
        (replicated && ownerStage < 0)) {
      s.device->copyToHost(out.data<unsigned char>(), view.data,
                           view.numBytes(), *s.compute);
      return out;
    }
    // Gathered in device memory (where a device's communicator reads and
    // writes), then read on the host.
    size_t allBytes = view.numBytes() * numDevices;
    DeviceBuffer gathered = s.device->allocateBuffer(allBytes);
    // Outside any step: counted apart from the step's high-water mark.
    s.memory.largestGather = std::max(s.memory.largestGather, int64_t(allBytes));
    s.runComm({CollectiveKind::AllGather, view.data, gathered.get(),
               size_t(view.numElements()), view.dtype, ReduceOp::Sum, {}},
              *s.worldGroup);
    std::vector<unsigned char> staging;
    const unsigned char *all = s.readToHost(gathered.get(), allBytes, staging);
    // Axes the value is split or partial over; over every other axis it is
    // replicated, and coordinate 0 speaks for the copies.
    std::map<std::string, bool> used;
    for (const plan::DimSharding &dim : b.sharding())
      for (const std::string &axis : dim.axes())
        used[axis] = true;
    for (const std::string &axis : b.partial_axes())
      used[axis] = true;
    bool partial = b.partial_axes_size() > 0;
    bool max = b.partial_op() == plan::MAX;
    if (partial && view.dtype != DType::F32 && view.dtype != DType::F64 &&
        view.dtype != DType::I32 && view.dtype != DType::I64 &&
        view.dtype != DType::BF16 && view.dtype != DType::F16)
      throw Error("result '" + b.name() +
                  "': cannot reduce partial values of dtype " +
                  toString(view.dtype));
    for (int64_t position = 0; position < numDevices; ++position) {
      std::map<std::string, int64_t> c = s.coordsOf(int(position));
      bool speaks = true;
      for (const std::string &axis : s.axisOrder)
        if (!used.count(axis) &&
            c[axis] != (ownerStage >= 0 && axis == s.pipelineAxis ? ownerStage
                                                                   : 0))
          speaks = false;
      if (!speaks)
        continue;
      const unsigned char *src =
          all + s.rankOfPosition[position] * view.numBytes();
      unsigned char *dst = out.data<unsigned char>();
      // With partial axes the blocks of one place are combined; the one with
      // every partial coordinate 0 (the lowest position of them) is copied.
      bool firstOfPlace = true;
      for (const std::string &axis : b.partial_axes())
        if (c[axis] != 0)
          firstOfPlace = false;
      bool overwrite = !partial || firstOfPlace;
      forEachRow(global, view.shape, s.blockStarts(b, c),
                 [&](int64_t g, int64_t l, int64_t n) {
                   if (overwrite) {
                     std::memcpy(dst + g * elem, src + l * elem, n * elem);
                     return;
                   }
                   switch (view.dtype) {
                   case DType::F32:
                     accumulate(out.data<float>() + g, (const float *)src + l,
                                n, max);
                     break;
                   case DType::F64:
                     accumulate(out.data<double>() + g, (const double *)src + l,
                                n, max);
                     break;
                   case DType::I32:
                     accumulate(out.data<int32_t>() + g,
                                (const int32_t *)src + l, n, max);
                     break;
                   case DType::BF16:
                   case DType::F16: {
                     // Combined in f32, rounded once per partial added.
                     uint16_t *d = out.data<uint16_t>() + g;
                     const uint16_t *x = (const uint16_t *)src + l;
                     for (int64_t i = 0; i < n; ++i) {
                       float a = widenFloat(d[i], view.dtype);
                       float v = widenFloat(x[i], view.dtype);
                       float r = max ? (v > a || v != v ? v : a) : a + v;
                       d[i] = narrowFloat(r, view.dtype);
                     }
                     break;
                   }
                   default:
                     accumulate(out.data<int64_t>() + g,
                                (const int64_t *)src + l, n, max);
                     break;
                   }
                 });
    }
    return out;
  }
}

// This rank's block of buffer `b`: where it starts in the global array and
// its shape there, the padding past the global end left out.
static Executor::Block localBlock(const Executor::Impl &s,
                                  const plan::Buffer &b) {
  Executor::Block block;
  block.globalShape = toVector(b.global_shape());
  std::vector<int64_t> local = toVector(b.local_shape());
  block.offsets = s.program->partitioned()
                      ? s.blockStarts(b, s.coords)
                      : std::vector<int64_t>(local.size(), 0);
  for (size_t d = 0; d < local.size(); ++d)
    block.shape.push_back(std::max<int64_t>(
        0, std::min(local[d], block.globalShape[d] - block.offsets[d])));
  return block;
}

// Checkpoint shards: this rank's block with its place in the global array.
Executor::Block Executor::persistentBlock(const std::string &name) const {
  bool ownerStage;
  const Impl *holder = pimpl->holderOf(name, ownerStage);
  if (!holder) {
    // A pipelined rank: another stage's value, an empty block here.
    Block block;
    int first;
    block.globalShape = toVector(
        firstStageBuffer(pimpl->plan->impl().proto, name, first).global_shape());
    block.offsets.assign(block.globalShape.size(), 0);
    block.shape.assign(block.globalShape.size(), 0);
    block.owner = false;
    return block;
  }
  const Impl &s = *holder;
  const plan::Buffer &b = s.buffer(s.persistentId(name));
  if (b.partial_axes_size() > 0)
    throw Error("'" + name + "' holds partial values: it has no block to " +
                "checkpoint");
  Block block = localBlock(s, b);
  std::map<std::string, bool> used;
  for (const plan::DimSharding &dim : b.sharding())
    for (const std::string &axis : dim.axes())
      used[axis] = true;
  // One owner per block: coordinate 0 of every axis the value is replicated
  // over; a pipelined value's stage instead of the pipeline axis.
  if (s.program->partitioned())
    for (const std::string &axis : s.axisOrder)
      if (!used.count(axis) && axis != s.pipelineAxis &&
          s.coords.at(axis) != 0)
        block.owner = false;
  block.owner = block.owner && ownerStage;
  return block;
}

namespace {
/// Calls `row(localByte, compactByte, bytes)` for each row of the `shape`
/// region at the start of a local view of `localShape` (padding
/// included), and of a compact tensor of `shape`.
template <typename Row>
void forEachBlockRow(const std::vector<int64_t> &localShape,
                     const std::vector<int64_t> &shape, size_t elem, Row row) {
  int64_t rank = shape.size();
  for (int64_t d : shape)
    if (d == 0)
      return;
  if (rank == 0) {
    row(0, 0, elem);
    return;
  }
  std::vector<int64_t> index(rank, 0);
  size_t bytes = shape[rank - 1] * elem;
  for (size_t compact = 0;; compact += bytes) {
    int64_t l = 0;
    for (int64_t d = 0; d < rank; ++d)
      l = l * localShape[d] + index[d];
    row(l * elem, compact, bytes);
    int64_t d = rank - 2;
    while (d >= 0 && ++index[d] == shape[d]) {
      index[d] = 0;
      --d;
    }
    if (d < 0)
      return;
  }
}
} // namespace

/// The id of input `index` (arguments with role INPUT, in order).
static int64_t inputId(const plan::Program &program, size_t index) {
  size_t next = 0;
  for (int64_t id : program.arguments())
    if (program.buffers(id).role() == plan::INPUT && next++ == index)
      return id;
  throw Error("input " + std::to_string(index) + " does not exist: the " +
              "program takes " + std::to_string(next) + " inputs");
}

Executor::Block Executor::inputBlock(size_t index) const {
  const Impl &s = *pimpl;
  const plan::Buffer &b = s.buffer(inputId(*s.program, index));
  return localBlock(s, b);
}

void Executor::setInputBlock(size_t index, const TensorView &data) {
  Impl &s = *pimpl;
  int64_t id = inputId(*s.program, index);
  const plan::Buffer &b = s.buffer(id);
  Block block = inputBlock(index);
  if (data.dtype != toDType(b.dtype()) || data.shape != block.shape) {
    std::string want = toString(toDType(b.dtype())), got = toString(data.dtype);
    for (int64_t d : block.shape)
      want += "x" + std::to_string(d);
    for (int64_t d : data.shape)
      got += "x" + std::to_string(d);
    throw Error("the block of input '" + b.name() + "' on this rank must be " +
                want + ", got " + got);
  }
  checkValueBound(b, data, "the block of input '" + b.name() + "' on this rank");
  const TensorView &view = s.views[id];
  size_t elem = sizeOf(view.dtype);
  const auto *from = static_cast<const unsigned char *>(data.data);
  s.writeFromHost(view.data, view.numBytes(), [&](unsigned char *dst) {
    std::memset(dst, 0, view.numBytes()); // padding, if any, is zeros
    forEachBlockRow(view.shape, block.shape, elem,
                    [&](size_t l, size_t c, size_t n) {
                      std::memcpy(dst + l, from + c, n);
                    });
  });
}

Tensor Executor::readPersistentBlock(const std::string &name) const {
  bool ownerStage;
  Block block = persistentBlock(name);
  Impl *holder = pimpl->holderOf(name, ownerStage);
  if (!holder) // a pipelined rank: another stage's, an empty block
    return Tensor(DType::F32, block.shape);
  Impl &s = *holder;
  const TensorView &view = s.views[s.persistentId(name)];
  Tensor t(view.dtype, block.shape);
  std::vector<unsigned char> staging;
  const unsigned char *from = s.readToHost(view.data, view.numBytes(), staging);
  unsigned char *to = t.data<unsigned char>();
  forEachBlockRow(view.shape, block.shape, sizeOf(view.dtype),
                  [&](size_t l, size_t c, size_t n) {
                    std::memcpy(to + c, from + l, n);
                  });
  return t;
}

void Executor::writePersistentBlock(const std::string &name,
                                    const Tensor &data) {
  bool ownerStage;
  Block block = persistentBlock(name);
  Impl *holder = pimpl->holderOf(name, ownerStage);
  if (!holder) { // a pipelined rank: another stage's
    if (data.numElements() != 0)
      throw Error("'" + name + "' is another pipeline stage's: this rank "
                  "holds no block of it");
    return;
  }
  Impl &s = *holder;
  const TensorView &view = s.views[s.persistentId(name)];
  if (data.getDType() != view.dtype || data.getShape() != block.shape)
    throw Error("the data for the block of '" + name + "' on this rank " +
                "differs from it in dtype or shape");
  const unsigned char *from = data.data<unsigned char>();
  // The bytes outside the block (padding) keep their values.
  std::vector<unsigned char> old;
  const unsigned char *before = s.readToHost(view.data, view.numBytes(), old);
  s.writeFromHost(view.data, view.numBytes(), [&](unsigned char *to) {
    if (to != before)
      std::memcpy(to, before, view.numBytes());
    forEachBlockRow(view.shape, block.shape, sizeOf(view.dtype),
                    [&](size_t l, size_t c, size_t n) {
                      std::memcpy(to + l, from + c, n);
                    });
  });
}

Tensor Executor::localParameter(const std::string &name) const {
  const Impl &s = *pimpl;
  for (int64_t id = 0; id < s.program->buffers_size(); ++id) {
    const plan::Buffer &b = s.buffer(id);
    if ((b.role() == plan::PARAMETER || b.role() == plan::STATE) &&
        b.name() == name) {
      Tensor t(s.views[id].dtype, s.views[id].shape);
      s.device->copyToHost(t.data<unsigned char>(), s.views[id].data,
                           s.views[id].numBytes(), *s.compute);
      return t;
    }
  }
  throw Error("the program has no parameter or state buffer '" + name + "'");
}

} // namespace partita::runtime
