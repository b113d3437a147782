//===- Executor.h - loads and runs a plan on one rank -----------*- C++ -*-===//
//
// A plan (runtime/plan/plan.proto) is parsed and validated once into a
// PlanFile, which ranks share read-only. Each rank builds an Executor from
// it: the executor resolves the mesh axes of every collective to rank groups
// and makes a communicator group for each (Communicator::createGroup, in
// instruction order, so every rank makes the same groups in the same order),
// allocates the arenas the plan's memory plan sized and every other buffer
// from the backend's Device, initializes its shard of every parameter from
// the counter-based initializer, and then runs steps: kernels and copies on
// the device's compute stream, gradient buckets on a communication stream,
// ordered by events (see Stream.h and docs/runtime.md).
// Inputs come in as global arrays (each rank keeps its block, as the
// sharding says); outputs go out as global arrays (gathered over every rank,
// partial values reduced). Plain C++17; errors are runtime::Error.
//
// Training: parameters and optimizer state (STATE buffers, zero at first)
// persist across steps. A result that replaces one (nn-autodiff's updated
// parameters and state) is written straight into it when the plan donates
// it (Buffer.in_place), else copied into it when a step ends, so N steps are
//
//   Executor ex(plan, plan->programNames()[0], comm, backend);
//   for (int step = 0; step < N; ++step) {
//     ex.setInputs(batch(step)); // global ids/labels/x of this step
//     ex.run();                  // forward, backward, update, copy-back
//     loss = ex.gatherResult(lossIndex); // every rank calls it when
//                                        // partitioned
//   }
//
// and gatherPersistent / setPersistent read and write the parameters and
// state as global arrays (--check against a reference run), while
// persistentBlock / readPersistentBlock / writePersistentBlock give this
// rank's own block with its place in the global array (sharded
// checkpoints, Checkpoint.h: no rank touches a block it does not hold).
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_EXECUTOR_H
#define PARTITA_RUNTIME_EXECUTOR_H

#include "partita/runtime/Backend.h"
#include "partita/runtime/Communicator.h"
#include "partita/runtime/PipelineSchedule.h"
#include "partita/runtime/Tensor.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace partita::runtime {

/// The plan format this runtime reads and the compiler writes.
/// 2: kernel kinds are plan.proto's Kernel.Kind enum; buffers have memory
/// spaces.
constexpr uint32_t kPlanFormatVersion = 2;

/// An argument or result of a program, as a caller sees it (global shape).
struct ProgramValue {
  std::string name; // nn.param / nn.input / nn.output name, may be empty
  DType dtype = DType::F32;
  std::vector<int64_t> globalShape;
  bool isParameter = false;
  /// Training state (optimizer moments, momentum, the step counter).
  bool isState = false;
  /// A result that replaces parameter or state `replaces` after each step.
  std::string replaces;
  /// Integer inputs: values lie in [0, valueBound); 0 when unknown.
  int64_t valueBound = 0;
};

/// A parsed and validated plan, immutable and shareable between ranks.
class PlanFile {
public:
  /// Parses serialized plan bytes; throws Error saying what is wrong with a
  /// malformed, truncated or inconsistent plan (`what` names the source).
  static std::shared_ptr<const PlanFile>
  parse(const std::string &bytes, const std::string &what = "plan");
  /// Reads and parses a plan file.
  static std::shared_ptr<const PlanFile> load(const std::string &path);
  ~PlanFile();

  /// Number of devices (ranks) of the mesh.
  int64_t numDevices() const;
  uint64_t seed() const;
  std::vector<std::string> programNames() const;
  bool hasProgram(const std::string &name) const;
  /// Whether the program runs split over the mesh (else on any one rank).
  bool isPartitioned(const std::string &program) const;
  /// Arguments that are inputs (not parameters), in argument order.
  std::vector<ProgramValue> inputs(const std::string &program) const;
  std::vector<ProgramValue> results(const std::string &program) const;
  /// Parameters and state buffers (persistent across steps), in buffer
  /// order.
  std::vector<ProgramValue> persistent(const std::string &program) const;
  int64_t arenaBytes(const std::string &program) const;
  /// Whether program 0 is a pipelined step (stages with programs of their
  /// own; see docs/pipeline.md), its schedule, and the stage `rank` runs.
  bool isPipelined() const;
  pipeline::Schedule pipelineSchedule() const;
  int pipelineStageOf(int rank) const;

  struct Impl;
  const Impl &impl() const { return *pimpl; }

private:
  PlanFile();
  std::unique_ptr<Impl> pimpl;
};

/// Gradient buckets in flight at once while their calls overlap backward
/// (ExecutorOptions::overlapBuckets): the executor packs buckets into this
/// many recycled buffers of the largest bucket's packed size (fewer when
/// the program has fewer buckets; one when the calls run in line), so
/// `partita explain` bounds the memory outside the arena by it.
constexpr size_t kBucketSlots = 2;

/// What an executor allocated from its Device, in bytes, counted at every
/// allocation (Executor::memory). Kernels' own workspaces (the cpu
/// backend's temporaries) and a communicator's internal buffers are not
/// included.
struct ExecutorMemory {
  int64_t arena = 0;      // the memory plan's arenas (device and host)
  int64_t parameters = 0; // PARAMETER buffers
  int64_t state = 0;      // STATE buffers (optimizer moments, step counter),
                          // and a recorded step's learning rates (one f64
                          // per optimizer kernel, captureGraph)
  int64_t inputs = 0;     // INPUT and CONSTANT buffers
  /// Gradient buckets' recycled packing buffers (kBucketSlots, or one, of
  /// the largest bucket's send + receive bytes) and the transposition
  /// buffer of reduce_scatter members along a dimension other than 0.
  int64_t bucketBuffers = 0;
  /// The one transposition buffer of collectives along a dimension other
  /// than 0 (the largest such collective's input + output bytes).
  int64_t collectiveScratch = 0;
  /// Staging of results that are themselves persistent buffers and replace
  /// another one (copied back when a step ends).
  int64_t staging = 0;
  /// A pipelined step's slots: the messages and stashes of the microbatches
  /// in flight (one buffer per value; kept for reuse, so the peak).
  int64_t pipelineSlots = 0;
  /// The most bytes held at once from construction through every run():
  /// the sum of the above, as every one of them lives as long as the
  /// executor.
  int64_t highWaterMark = 0;
  /// The largest temporary of a gather (gatherResults, gatherResult,
  /// gatherPersistent: group size x the local bytes), outside any step.
  int64_t largestGather = 0;
};

struct ExecutorOptions {
  /// Run each gradient bucket's communicator call (Collective.bucket, from
  /// dist-optimize-comm) on a communication thread while the instructions
  /// after it go on, waiting only before the first instruction that reads
  /// the bucket's results. False: each bucket's call runs in line. Either
  /// way a bucket is one packed call, and the results are the same bit for
  /// bit. Ignored for a communicator that must be called from its own
  /// thread (Communicator::callableFromAnyThread).
  bool overlapBuckets = true;
  /// Time every instruction (see Executor::profile); the device's compute
  /// stream is drained around each, so a GPU's kernels are timed, not
  /// their launches.
  bool profile = false;
  /// With `profile`: one line per einsum spec and operand shapes
  /// ("einsum bsh,hd->bsd [8,128,256] [256,1024]") instead of one
  /// "einsum" line, each with its FLOPs (ProfileEntry::flops), so a slow
  /// GEMM shape can be found.
  bool profileEinsums = false;
  /// Record when each step (and each action of a pipelined step) begins
  /// and ends (Executor::trace).
  bool trace = false;
  /// Run steps as a graph (a GPU's CUDA graph; `partita run --cuda-graph`):
  /// the first run() runs eagerly (backend workspaces and GEMM plans are
  /// made there), the second records its work on the compute stream
  /// (Stream::beginCapture) and launches the recording, and later runs
  /// launch it again, sparing the host every kernel launch of the step.
  /// The optimizer kernels then read their learning rates from device
  /// memory, written before each run, so setLearningRate between runs
  /// reaches the recorded kernels (KernelAttrs::lrOnDevice). For a
  /// one-device, unpipelined program on a device whose compute stream
  /// can capture (cuda), without `profile`: the constructor throws Error
  /// otherwise, saying why.
  bool captureGraph = false;
};

/// One span of Executor::trace: "F3" / "B3" (a pipelined step's forward or
/// backward of microbatch 3), "send activation 3", "recv gradient 3",
/// "update", or "step" (a whole run() of an unpipelined plan); seconds on
/// a steady clock shared by the process (so local ranks line up), and the
/// run() it belongs to, from 0.
struct TraceEvent {
  std::string name;
  double begin = 0, end = 0;
  int64_t step = 0;
  /// "compute" (F, B, update, step) or "comm" (a send or receive).
  bool compute = true;
};

/// One line of Executor::profile: a kernel kind ("einsum"), a collective
/// ("all_reduce", "reduce_scatter (bucket)" for a bucket member's packing
/// and the bucket's call when it runs in line), or the time the step spent
/// waiting for and unpacking gradient buckets ("gradient buckets: wait and
/// unpack"), and copying updated parameters and state back. The matrix
/// products inside attention kernels are their own line, "attention
/// GEMMs", and so is an einsum's copy of its addend into its output (a
/// fused bias or gradient add), "einsum addends"
/// (Backend::takeKernelPartSeconds), taken out of their kernels' lines.
struct ProfileEntry {
  std::string what;
  int64_t calls = 0;
  double seconds = 0;
  /// Floating-point operations of those calls as the plan's kernels carry
  /// them (2 per multiply-add, and a fused addend's adds), where counted
  /// (ExecutorOptions::profileEinsums); 0 otherwise.
  double flops = 0;
};

/// Runs one program of a plan on one rank.
class Executor {
public:
  /// `comm` may be null for a program that is not partitioned; else its size
  /// must be the mesh's device count. Throws Error on a mismatch.
  Executor(std::shared_ptr<const PlanFile> plan, const std::string &program,
           Communicator *comm, Backend &backend,
           const ExecutorOptions &options = {});
  ~Executor();

  /// Sets every input from its global value (in `PlanFile::inputs` order);
  /// each rank keeps its block. Shapes and dtypes must match exactly.
  void setInputs(const std::vector<Tensor> &globalInputs);
  /// The same from views of memory the caller owns (a framework's arrays,
  /// read in place: no staging copy); only read.
  void setInputViews(const std::vector<TensorView> &globalInputs);
  /// Runs the instruction stream once (donated updates write the
  /// parameters and state they replace), then copies every other result
  /// that replaces a parameter or state buffer into it (the next run sees
  /// it). Returns when the step's work is done on the device (its compute
  /// stream is drained), so a step timed around run() is timed whole.
  void run();
  /// How many times run() recorded its step (ExecutorOptions::captureGraph;
  /// 0 without it).
  int64_t graphCaptures() const;
  /// Every result as a global array. Collective over all ranks of a
  /// partitioned program (every rank must call it); partial results are
  /// reduced (summed, or max) over their partial axes.
  std::vector<Tensor> gatherResults();
  /// Result `index` alone as a global array (a train step's loss, without
  /// gathering every updated parameter). Collective like gatherResults.
  Tensor gatherResult(size_t index);
  /// This rank's block of parameter or state buffer `name` (for tests and
  /// debugging).
  Tensor localParameter(const std::string &name) const;
  /// Parameter or state buffer `name` as a global array. Collective over
  /// all ranks of a partitioned program, like gatherResults.
  Tensor gatherPersistent(const std::string &name);
  /// Overwrites parameter or state buffer `name` from its global value; each
  /// rank keeps its block. Shape and dtype must match exactly.
  void setPersistent(const std::string &name, const Tensor &global);
  void setPersistentView(const std::string &name, const TensorView &global);

  /// Where this rank's block of parameter or state buffer `name` lies in
  /// its global array, for checkpoints that each rank writes and reads in
  /// shards. Local: no collective.
  struct Block {
    std::vector<int64_t> globalShape;
    /// Global index of the block's first element, per dimension.
    std::vector<int64_t> offsets;
    /// Extent of the block's real elements per dimension (a padded block,
    /// see dist-partition, is cut at the global shape; may be 0).
    std::vector<int64_t> shape;
    /// Whether this rank writes the block: it is at coordinate 0 of every
    /// mesh axis the buffer is replicated over (one owner per block).
    bool owner = true;
  };
  Block persistentBlock(const std::string &name) const;
  /// The real elements of this rank's block (shape persistentBlock().shape).
  Tensor readPersistentBlock(const std::string &name) const;
  /// Overwrites this rank's block from `block` (shape
  /// persistentBlock().shape, the buffer's dtype); padding stays zero.
  void writePersistentBlock(const std::string &name, const Tensor &block);

  /// Where this rank's block of input `index` (PlanFile::inputs order)
  /// lies in its global array (as persistentBlock; `owner` is unused), so
  /// that a data loader reads only this rank's rows. Throws Error for an
  /// index past the inputs.
  Block inputBlock(size_t index) const;
  /// Sets input `index` from this rank's block alone: `block` has shape
  /// inputBlock(index).shape and the input's dtype (else an Error naming
  /// the input and both shapes); padding is zeros. Only read.
  void setInputBlock(size_t index, const TensorView &block);

  /// Overrides the learning rate of every optimizer kernel (sgd, adamw)
  /// from the next run() on, so that one plan runs a whole schedule
  /// (Schedule.h); NaN returns to the plan's lr. Local: every rank must set
  /// the same value (Train.h's TrainOptions::learningRate does). Throws
  /// Error for a negative or infinite value.
  void setLearningRate(double lr);
  /// The lr the optimizer kernels use now: the override, else the plan's
  /// (its first optimizer kernel's; NaN for a program without one).
  double learningRate() const;

  /// Bytes of this rank's arena (the plan's memory plan).
  int64_t arenaBytes() const;
  /// What this rank allocated from its Device, by what for, and its
  /// high-water mark.
  ExecutorMemory memory() const;

  /// With ExecutorOptions::profile: this rank's time per kind of
  /// instruction, summed over every run() so far, largest first. Empty
  /// without it.
  std::vector<ProfileEntry> profile() const;
  /// With ExecutorOptions::trace: every span recorded so far, in order.
  std::vector<TraceEvent> trace() const;

  struct Impl;

private:
  std::unique_ptr<Impl> pimpl;
};

/// The plan format's name for collective kind `kind` (plan.proto's
/// Collective.Kind): "all_reduce", "all_gather", ...; "?" for an unknown one.
const char *collectiveKindName(int kind);

/// The runtime's name of plan kernel kind `kind` (plan.proto's Kernel.Kind):
/// "einsum", "layer_norm", ... (toString of its KernelKind); "?" for an
/// unknown one.
const char *kernelKindName(int kind);

/// Whether collective kind `kind` moves data between devices (slice, mask
/// and axis_index are local).
bool collectiveCommunicates(int kind);

/// The counter-based initial value of global element `index` of parameter
/// `name` (the plan's initializer; exposed for tests and reference code).
double initialValue(uint64_t seed, const std::string &name, uint64_t index,
                    int kind, double a, double b);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_EXECUTOR_H
