//===- Train.h - runs programs and trains on N ranks ------------*- C++ -*-===//
//
// What a tool or a framework needs around the Executor to run a plan:
// running one body per rank (threads of the local communicator, or this
// process as one MPI rank), generated inputs, token batches, the training
// loop (a loss and a time per step), the comparison with the plan's
// unpartitioned "reference" program (--check), and the profile table.
// `partita run` and `partita-run` are thin command lines over it
// (RunTool.h). Plain C++17; errors are runtime::Error.
//
//   auto plan = PlanFile::load("train.pb");
//   BatchSource data(plan->inputs("train_step"), {});
//   data.load();
//   RunOptions ranks;
//   ranks.ranks = int(plan->numDevices());
//   TrainOptions options;
//   options.steps = 10;
//   options.onStep = [](int64_t step, double loss, double s) { ... };
//   TrainRun run = train(plan, "train_step", data, options, ranks);
//
// Checkpoints (Checkpoint.h) plug in as TrainOptions hooks that run on
// every rank: loadCheckpoint before the first step, saveCheckpoint after
// the last (or after any step: afterStep). TrainLoop.h builds a whole run
// on train(): a learning-rate schedule, evaluation, metrics, periodic
// checkpoints, resume and signals (`partita train`).
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_TRAIN_H
#define PARTITA_RUNTIME_TRAIN_H

#include "partita/runtime/CudaBackend.h"
#include "partita/runtime/Executor.h"
#include "partita/runtime/TokenData.h"

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace partita::runtime {

/// "name : f32[4x8]".
std::string describe(const ProgramValue &v);

/// A tensor of `v`'s dtype and global shape: floats uniform in [-1, 1),
/// integers uniform in [0, v.valueBound), element i from
/// initialValue(seed, key, i), so every rank and every run sees the same
/// numbers. Throws Error "cannot generate <what>: the plan gives no bound
/// for its values<noBound>" for an integer without a bound, and "cannot
/// generate <what> of this dtype<otherDType>" for a dtype it does not fill
/// (f16, bf16).
Tensor generateUniform(const ProgramValue &v, uint64_t seed,
                       const std::string &key, const std::string &what,
                       const std::string &noBound,
                       const std::string &otherDType);

/// Program input `v` generated under the key "input:<name>" (what a run
/// without input files feeds).
Tensor generateInput(const ProgramValue &v, uint64_t seed);

/// Element `i` of `t` as a double (NaN for a dtype it does not read).
double elementAsDouble(const Tensor &t, int64_t i);

/// max |a - b| / max |b| over two tensors of one shape (infinite on NaN or
/// when b is zero and a is not); the largest |a - b| in `maxAbs`.
double relativeDifference(const Tensor &a, const Tensor &b, double &maxAbs);

/// How the ranks of a partitioned program run.
struct RunOptions {
  /// Ranks of the local communicator (threads) when `mpi` is null.
  int ranks = 1;
  /// This process is one rank of an MPI job (its communicator), or null.
  Communicator *mpi = nullptr;
  /// Collective deadline of the local communicator.
  std::chrono::milliseconds timeout{60000};
  /// ExecutorOptions of the program's executors.
  bool overlapBuckets = true;
  bool profile = false;
  /// ExecutorOptions::profileEinsums (with `profile`).
  bool profileEinsums = false;
  /// Record spans (ExecutorOptions::trace): TrainRun::traces.
  bool trace = false;
  /// Testing: rank `failRank` fails before step `failStep` (1-based) of a
  /// partitioned program (local: throws; mpi: the process exits after
  /// printing "<toolName>: rank N: injected failure, exiting"), so the
  /// others must fail in their next collective instead of hanging.
  int failRank = -1;
  int failStep = 1;
  std::string toolName = "partita-run";
  /// The executors' backend: cpu, or cuda (CudaBackend.h; with cudaEmulate
  /// on the emulated device layer, no GPU needed).
  std::string backend = "cpu";
  bool cudaEmulate = false;
  /// The CUDA device of this process's rank (real cuda backend); local
  /// ranks (threads) share it.
  int cudaDevice = 0;
  /// f32 GEMMs in TF32 (CudaBackendOptions::tf32).
  bool cudaTf32 = false;
  /// CudaBackendOptions::attention.
  CudaAttention cudaAttention = CudaAttention::Gemm;
  /// CudaBackendOptions::gemmAutotune; its lines go to stderr, each
  /// prefixed "<toolName>: ".
  bool cudaGemmAutotune = false;
  /// ExecutorOptions::captureGraph (`--cuda-graph`).
  bool cudaGraph = false;
  /// CudaBackendOptions::emulateAsync (testing).
  bool cudaEmulateAsync = false;
  /// CudaBackendOptions::blockSize of emulated ranks (`--emulate-block`; a
  /// GPU's ranks launch blocks of 256).
  int cudaEmulatedBlock = 32;
  /// CudaBackendOptions::emulatedComputeDelay (testing), of the ranks in
  /// cudaEmulatedDelayRanks (empty: every rank).
  std::chrono::microseconds cudaEmulatedComputeDelay{0};
  std::vector<int> cudaEmulatedDelayRanks;
  /// NcclOptions::emulatedDelay of the emulated nccl ranks (testing).
  std::chrono::microseconds ncclEmulatedDelay{0};
  /// CudaBackendOptions::bankReport of every emulated rank (`--emulate-banks`).
  std::shared_ptr<SharedBankReport> cudaBankReport;
  /// The nccl communicator: over `mpi` (its bootstrap) on GPUs, which the
  /// caller makes (createNcclCommunicator) and passes as `mpi`; with
  /// cudaEmulate, one per local rank over the local communicator.
  bool nccl = false;
  /// runProgram: called on every rank before each step's timer starts and
  /// after it stops, with the step (0-based) (e.g. `partita run
  /// --step-gate`, which takes turns with another program; collective work
  /// allowed).
  std::function<void(Communicator *, int64_t step)> beforeStep, afterStep;
};

/// The number of processes of the MPI job this process was started in by
/// a launcher (Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE; PMI and PMIx
/// launchers PMI_SIZE / PMIX_SIZE), or 0 when it was not. A tool that sees
/// more than 1 must run as one rank of that job (createMpiCommunicator),
/// never as N independent copies of the whole job.
int mpiLauncherWorldSize();

/// The backend `options` names, for one rank of them.
std::unique_ptr<Backend> createRankBackend(const RunOptions &options,
                                           int rank = 0);

/// Runs `body` for each rank of `program`: once with no communicator when
/// the program is not partitioned, once with options.mpi when set, else on
/// options.ranks threads of the local communicator. A failing rank's Error
/// is rethrown, naming the rank.
void onEveryRank(const PlanFile &plan, const std::string &program,
                 const RunOptions &options,
                 const std::function<void(Communicator *)> &body);

/// What runProgram leaves on rank 0 (empty on the others).
struct ProgramRun {
  std::vector<Tensor> results;
  std::vector<double> seconds; // per step
  std::vector<ProfileEntry> profile;
  /// With RunOptions::trace: each rank's spans, by rank (under MPI only
  /// this process's entry).
  std::vector<std::vector<TraceEvent>> traces;
  ExecutorMemory memory; // rank 0's executor
  /// Every rank's executor's, by rank (under MPI only this process's).
  std::vector<ExecutorMemory> memoryByRank;
};

/// Runs `program` of `plan` `steps` times on the inputs (global arrays, in
/// PlanFile::inputs order) and gathers its results.
/// `beforeFirstStep` (may be empty) runs on every rank first.
ProgramRun runProgram(std::shared_ptr<const PlanFile> plan,
                      const std::string &program,
                      const std::vector<Tensor> &inputs, int64_t steps,
                      const RunOptions &options,
                      const std::function<void(Executor &, Communicator *)>
                          &beforeFirstStep = {});

/// Where a train step's batches come from: `ids` and `labels` from a token
/// file (TokenData.h) when the program has them, every other input
/// generated anew per step (generateInput with seed + step).
class BatchSource {
public:
  struct Options {
    /// The token file; unset: kDefaultTrainData.
    std::optional<std::string> dataPath;
    unsigned tokenBytes = 1;
    uint64_t seed = 1;
    /// The part of the token file to use, as fractions of its tokens
    /// [splitBegin, splitEnd) (a train/validation split); the whole file
    /// by default.
    double splitBegin = 0, splitEnd = 1;
  };
  BatchSource(std::vector<ProgramValue> inputs, Options options);

  /// Loads and checks the token file when the program reads tokens (ids
  /// and labels, i32 [batch, seq]); throws when a data path was given for
  /// a program that takes none.
  void load();
  /// Step `step`'s inputs (0-based), in the program's input order.
  std::vector<Tensor> make(int64_t step) const;
  /// Sets step `step`'s inputs on `executor` from this rank's blocks alone
  /// (Executor::setInputBlock) when the program's inputs are exactly token
  /// ids and labels: each data-parallel rank reads only its rows of the
  /// batch. Returns the tokens this rank read from the data, or -1 when
  /// the program takes other inputs (then make() and setInputs()).
  int64_t setRankInputs(Executor &executor, int64_t step) const;
  /// "batch K row R: ids ..., labels ..." lines of `tensors`, a row per
  /// window (empty without token data).
  std::string formatTokens(int64_t step,
                           const std::vector<Tensor> &tensors) const;
  /// "data GPL-3 (35149 tokens), batch 8 x seq 16", or what is generated.
  std::string describeSource() const;
  /// Tokens per batch (batch x seq; 0 without token data).
  int64_t tokensPerBatch() const { return data ? batch * seq : 0; }
  /// Tokens a whole batch reads from the data (batch x (seq + 1)).
  int64_t tokensReadPerBatch() const { return data ? batch * (seq + 1) : 0; }

private:
  std::string inputList() const;

  std::vector<ProgramValue> inputs;
  Options options;
  int idsIndex = -1, labelsIndex = -1;
  int64_t batch = 0, seq = 0, vocab = 0;
  std::optional<TokenData> data;
};

/// Runs on every rank with its executor (and communicator, null when the
/// program is not partitioned): loads parameters before the first step,
/// saves a checkpoint after the last (Checkpoint.h).
using RankHook = std::function<void(Executor &, Communicator *)>;

/// What train() reports on rank 0 after each step (TrainOptions::
/// onStepResult).
struct StepResult {
  /// The step's global index (0-based; printed 1-based as "step k/n").
  int64_t step = 0;
  double loss = 0;
  double seconds = 0;
  /// The optimizer kernels' learning rate in this step (NaN: none).
  double lr = 0;
  /// The gradients' global norm before clipping, when the program returns
  /// one (a result named "grad_norm": nn-autodiff with clip-norm); NaN
  /// otherwise.
  double gradNorm = 0;
};

/// Where train() is after a step, for TrainOptions::afterStep.
struct StepPoint {
  /// The step just done (global, 0-based): step + 1 steps are done.
  int64_t step = 0;
  /// The last step of the run: options.steps reached, or a stop agreed.
  bool last = false;
  /// The run stops early because stopRequested said so (on some rank).
  bool stopping = false;
};

struct TrainOptions {
  int64_t steps = 1;
  /// The global index of the first step (a resumed run's steps so far):
  /// batches are drawn from it on.
  int64_t firstStep = 0;
  /// Before the first step, on every rank (e.g. loadCheckpoint).
  RankHook beforeFirstStep;
  /// After the last step when every loss was finite, on every rank (e.g.
  /// saveCheckpoint, collective).
  RankHook afterLastStep;
  /// Called on rank 0 after each step with its global index (0-based), its
  /// loss and its time.
  std::function<void(int64_t step, double loss, double seconds)> onStep;
  /// Called on rank 0 before each step with its inputs.
  std::function<void(int64_t step, const std::vector<Tensor> &inputs)>
      onBatch;
  /// Gather every result after the last step (TrainRun::finalResults, for
  /// --check, --save-params, --outputs); false: only the loss, so no rank
  /// holds the whole model's parameters and state as global arrays.
  bool gatherFinalResults = true;
  /// The learning rate of global step `step` (0-based), set on every rank's
  /// executor before the step (Executor::setLearningRate); empty: the
  /// plan's.
  std::function<double(int64_t step)> learningRate;
  /// Called on rank 0 after each step, after onStep, with its metrics.
  std::function<void(const StepResult &)> onStepResult;
  /// Polled on every rank after each step (e.g. a SIGTERM flag); when it is
  /// true on any rank, every rank stops after the same step (the ranks
  /// agree through an all-reduce, so a signal seen a step later on one
  /// rank does not split them).
  std::function<bool()> stopRequested;
  /// After each step on every rank (collective work allowed: periodic
  /// checkpoints, evaluation), before afterLastStep.
  std::function<void(Executor &, Communicator *, const StepPoint &)>
      afterStep;
};

/// What a training run leaves on rank 0: the loss and time of every step,
/// the final results (updated parameters, state, loss), the profile.
struct TrainRun {
  std::vector<double> losses;
  std::vector<double> seconds;
  /// Per step: the learning rate and the gradient norm (see StepResult).
  std::vector<double> lrs, gradNorms;
  /// Whether TrainOptions::stopRequested ended the run before
  /// options.steps (losses.size() steps were done).
  bool stopped = false;
  std::vector<Tensor> finalResults;
  std::vector<ProfileEntry> profile;
  /// With RunOptions::trace: each rank's spans, by rank (under MPI only
  /// this process's entry).
  std::vector<std::vector<TraceEvent>> traces;
  ExecutorMemory memory; // rank 0's executor
  /// Every rank's executor's, by rank (under MPI only this process's).
  std::vector<ExecutorMemory> memoryByRank;
  /// Tokens each rank read from the training data over the run, by rank
  /// (under MPI only this process's entry is filled; 0 without token
  /// data): a data-parallel rank reads its rows only.
  std::vector<int64_t> tokensRead;
};

/// Trains `program` (a train step) for options.steps steps, or until
/// options.stopRequested.
TrainRun train(std::shared_ptr<const PlanFile> plan, const std::string &program,
               const BatchSource &source, const TrainOptions &options,
               const RunOptions &ranks);

/// `traces` (TrainRun::traces) in Chrome's trace event format (one thread
/// per rank; viewable in Perfetto or chrome://tracing).
std::string formatChromeTrace(const std::vector<std::vector<TraceEvent>> &traces);
/// For a pipelined plan: the bubble measured in `traces` (idle time over
/// ranks x step time, the median over the steps after the first) beside
/// the schedule's simulation with each stage's measured mean forward,
/// backward and update times; "" for another plan or too few steps.
std::string formatBubble(const PlanFile &plan,
                         const std::vector<std::vector<TraceEvent>> &traces);

/// Index of a train step's "loss" result (the last one when none is named
/// so).
size_t lossIndex(const PlanFile &plan, const std::string &program);

/// Index of the result named `name`, or -1.
int resultIndex(const PlanFile &plan, const std::string &program,
                const std::string &name);

/// For each result of a train step, the parameter it updates (empty for
/// the loss and for optimizer state).
std::vector<std::string> updatedParameters(const PlanFile &plan,
                                           const std::string &program);

/// The lines of a --check comparison, and whether every one passed.
struct CheckReport {
  std::vector<std::string> lines;
  bool ok = true;
};

/// --check's default absolute floor: a tensor whose largest difference
/// from the reference is at most this passes whatever its relative one.
constexpr double kDefaultCheckAtol = 1e-8;

/// Compares a program's results with the reference program's, matched by
/// name ("result #i" for an unnamed one): one line "check <name>: max abs
/// diff A, max rel diff R (ok|FAILED, rtol T)" per result; a result that
/// only one program has fails. A tensor passes when R <= rtol or A <= atol
/// (then "ok by atol"). Throws when the result counts differ.
CheckReport compareResults(const PlanFile &plan, const std::string &program,
                           const std::vector<Tensor> &results,
                           const std::vector<Tensor> &reference, double rtol,
                           double atol = kDefaultCheckAtol);

/// Compares a training run with the reference's: a line per step's loss,
/// the worst loss difference, a line per final parameter (`paramRtol`,
/// `atol`), matched by name. Every parameter either program holds must be
/// updated by both (else a FAILED line). Throws when the result counts
/// differ.
CheckReport compareTraining(const PlanFile &plan, const std::string &program,
                            const TrainRun &run, const TrainRun &reference,
                            double rtol, double paramRtol,
                            double atol = kDefaultCheckAtol);

/// `partita run --report-memory`: what rank 0's executor allocated, by what
/// for, its high-water mark, and the process's peak resident set.
std::string formatMemory(const ExecutorMemory &memory);
/// The same for a pipelined plan: rank 0's line, then one for the first
/// rank of each other pipeline rank ("memory (rank 1, stage 1)"; its
/// stages with chunks), from `byRank` where it was measured, then the
/// process's line.
std::string formatMemory(const PlanFile &plan, const ExecutorMemory &memory,
                         const std::vector<ExecutorMemory> &byRank);

/// The profile table: a line per entry with its calls and time per step
/// beside the measured step time. Empty without entries.
/// A SharedBankReport as lines (`--emulate-banks`): per kernel, the
/// shared-memory requests of its loads and stores, their wavefronts and
/// the ideal, summed over `over` (e.g. "all ranks and steps"); "" when no
/// kernel touched shared memory.
std::string formatBankReport(SharedBankReport &report, const std::string &over);

std::string formatProfile(const std::vector<ProfileEntry> &profile,
                          int64_t steps, const std::vector<double> &seconds);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_TRAIN_H
