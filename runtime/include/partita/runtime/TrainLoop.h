//===- TrainLoop.h - a whole training run: schedule, eval, checkpoints -*- C++ -*-===//
//
// What `partita train` runs once the plan is compiled, as a library call
// that an embedder (or the Python package) can make too:
//
//   - the train step for `steps` steps on a token file (or a split of it),
//     each step's learning rate from an LrSchedule (Schedule.h);
//   - evaluation every `evalEvery` steps (and after the last) on a
//     validation file or split: the mean loss over `evalBatches` fixed
//     batches, and its perplexity;
//   - metrics every step (Metrics.h): console and JSONL;
//   - a checkpoint every `checkpointEvery` steps (and after the last) into
//     CHECKPOINT_DIR/step-<k> through Checkpoint.h's atomic sharded format,
//     keeping the newest `keep`;
//   - resume: a run whose checkpoint directory holds checkpoints starts
//     from the newest complete one (its parameters, optimizer state and
//     step; batches and learning rate are functions of the step, so the
//     run continues as if never stopped, bit for bit);
//   - SIGTERM and SIGINT (with `handleSignals`): the step in flight
//     finishes, every rank stops after the same step, a checkpoint is
//     saved, and the run returns with `stopped` set (a second signal kills
//     at once).
//
// Evaluation runs the train step's own program on a second executor per
// rank (so under the train step's sharding, with parameter blocks copied
// locally) with the learning rate 0, which leaves its parameters exactly
// unchanged: exact losses under any strategy, for the price of a backward
// pass per evaluation batch and a second copy of the model state. Plain
// C++17; errors are runtime::Error.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_TRAINLOOP_H
#define PARTITA_RUNTIME_TRAINLOOP_H

#include "partita/runtime/Schedule.h"
#include "partita/runtime/Train.h"

#include <optional>
#include <ostream>
#include <string>

namespace partita::runtime {

struct TrainLoopOptions {
  /// Steps of the whole run (a resumed run does the remaining ones).
  int64_t steps = 1;
  /// Training data (BatchSource::Options: file, token bytes, split).
  BatchSource::Options data;
  /// Validation data; unset: no evaluation.
  std::optional<BatchSource::Options> validation;
  int64_t evalEvery = 0; // 0: only after the last step
  int64_t evalBatches = 4;
  /// Unset: the plan's learning rate at every step.
  std::optional<LrSchedule> schedule;
  /// Empty: no checkpoints (and no resume).
  std::string checkpointDir;
  int64_t checkpointEvery = 0; // 0: only after the last step
  int64_t keep = 0;            // newest checkpoints kept; 0: all
  /// Start from the newest checkpoint in checkpointDir when there is one.
  bool resume = true;
  /// Metrics: JSONL file (empty: none), every step; the console shows every
  /// logEvery-th step (and the first and last).
  std::string metricsPath;
  /// TensorBoard event files go to this directory (empty: none).
  std::string tensorboardDir;
  int64_t logEvery = 1;
  /// Rewrite one console line in place (a terminal) instead of printing a
  /// line per step.
  bool progressLine = false;
  /// Model FLOPs of one step (for MFU and FLOP/s; 0: unknown).
  double flopsPerStep = 0;
  /// The peak FLOP/s MFU is measured against (the whole job's); 0:
  /// measureCpuPeakFlops() on local ranks, no MFU under MPI.
  double peakFlops = 0;
  bool handleSignals = true;
  /// Prefixes messages ("partita train").
  std::string toolName = "partita train";
};

struct TrainLoopResult {
  /// Global steps done at the end (including those before a resume).
  int64_t stepsDone = 0;
  /// Where the run started (the resumed checkpoint's steps; 0: fresh).
  int64_t firstStep = 0;
  bool stopped = false;
  double lastLoss = 0;
  /// The last evaluation's loss (NaN: none).
  double lastValLoss = 0;
  /// The last checkpoint written (empty: none).
  std::string lastCheckpoint;
};

/// Runs the train step `program` ("train_step") of `plan` as described
/// above, writing progress to `console` (rank 0 only). `ranks` as for
/// train(). Throws Error.
TrainLoopResult trainLoop(std::shared_ptr<const PlanFile> plan,
                          const std::string &program,
                          const TrainLoopOptions &options,
                          const RunOptions &ranks, std::ostream &console);

/// The newest complete checkpoint under `dir` (DIR/step-<k> with a
/// manifest, or its .old copy from a save that died between its renames),
/// as the path to pass to openCheckpoint; empty when there is none.
std::string findNewestCheckpoint(const std::string &dir);

/// "DIR/step-00000012".
std::string checkpointPath(const std::string &dir, int64_t steps);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_TRAINLOOP_H
