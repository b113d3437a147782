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
// the last.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_TRAIN_H
#define PARTITA_RUNTIME_TRAIN_H

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
  /// Testing: rank `failRank` fails before step `failStep` (1-based) of a
  /// partitioned program (local: throws; mpi: the process exits after
  /// printing "<toolName>: rank N: injected failure, exiting"), so the
  /// others must fail in their next collective instead of hanging.
  int failRank = -1;
  int failStep = 1;
  std::string toolName = "partita-run";
};

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
  };
  BatchSource(std::vector<ProgramValue> inputs, Options options);

  /// Loads and checks the token file when the program reads tokens (ids
  /// and labels, i32 [batch, seq]); throws when a data path was given for
  /// a program that takes none.
  void load();
  /// Step `step`'s inputs (0-based), in the program's input order.
  std::vector<Tensor> make(int64_t step) const;
  /// "batch K row R: ids ..., labels ..." lines of `tensors`, a row per
  /// window (empty without token data).
  std::string formatTokens(int64_t step,
                           const std::vector<Tensor> &tensors) const;
  /// "data GPL-3 (35149 tokens), batch 8 x seq 16", or what is generated.
  std::string describeSource() const;

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
};

/// What a training run leaves on rank 0: the loss and time of every step,
/// the final results (updated parameters, state, loss), the profile.
struct TrainRun {
  std::vector<double> losses;
  std::vector<double> seconds;
  std::vector<Tensor> finalResults;
  std::vector<ProfileEntry> profile;
};

/// Trains `program` (a train step) for options.steps steps.
TrainRun train(std::shared_ptr<const PlanFile> plan, const std::string &program,
               const BatchSource &source, const TrainOptions &options,
               const RunOptions &ranks);

/// Index of a train step's "loss" result (the last one when none is named
/// so).
size_t lossIndex(const PlanFile &plan, const std::string &program);

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

/// The profile table: a line per entry with its calls and time per step
/// beside the measured step time. Empty without entries.
std::string formatProfile(const std::vector<ProfileEntry> &profile,
                          int64_t steps, const std::vector<double> &seconds);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_TRAIN_H
