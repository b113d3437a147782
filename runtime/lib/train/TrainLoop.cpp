//===- TrainLoop.cpp - a whole training run: schedule, eval, checkpoints --===//

#include "partita/runtime/TrainLoop.h"
#include "partita/runtime/Checkpoint.h"
#include "partita/runtime/Metrics.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>

namespace partita::runtime {

namespace fs = std::filesystem;

namespace {

/// Set by the SIGTERM / SIGINT handler; read after each step.
volatile std::sig_atomic_t stopSignal = 0;

extern "C" void onStopSignal(int signal) { stopSignal = signal; }

/// Installs the handlers for the loop's lifetime. SA_RESETHAND: a second
/// signal takes the default action (ends the process at once).
class SignalGuard {
public:
  explicit SignalGuard(bool enable) : enabled(enable) {
    if (!enabled)
      return;
    stopSignal = 0;
    struct sigaction action = {};
    action.sa_handler = onStopSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND;
    sigaction(SIGTERM, &action, &oldTerm);
    sigaction(SIGINT, &action, &oldInt);
  }
  ~SignalGuard() {
    if (!enabled)
      return;
    sigaction(SIGTERM, &oldTerm, nullptr);
    sigaction(SIGINT, &oldInt, nullptr);
  }

private:
  bool enabled;
  struct sigaction oldTerm = {}, oldInt = {};
};

/// The step count of a checkpoint directory name "step-<k>" (or
/// "step-<k>.old"), or -1.
int64_t stepsOfName(const std::string &name, bool &old) {
  const std::string prefix = "step-";
  if (name.compare(0, prefix.size(), prefix) != 0)
    return -1;
  std::string digits = name.substr(prefix.size());
  old = digits.size() > 4 && digits.compare(digits.size() - 4, 4, ".old") == 0;
  if (old)
    digits.resize(digits.size() - 4);
  if (digits.empty() || digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(),
                   [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}

/// Complete checkpoints under `dir` by step count (path to open).
std::map<int64_t, std::string> completeCheckpoints(const std::string &dir) {
  std::map<int64_t, std::string> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return found;
  for (const fs::directory_entry &entry : fs::directory_iterator(dir, ec)) {
    bool old = false;
    int64_t steps = stepsOfName(entry.path().filename().string(), old);
    if (steps < 0 || !fs::exists(entry.path() / "manifest.txt", ec))
      continue;
    // DIR.old counts only while DIR itself is missing (a save that died
    // between its two renames); openCheckpoint finds it from DIR's name.
    std::string path = checkpointPath(dir, steps);
    if (old && fs::exists(path, ec))
      continue;
    found[steps] = path;
  }
  return found;
}

std::string format(const char *fmt, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, value);
  return buf;
}

} // namespace

std::string checkpointPath(const std::string &dir, int64_t steps) {
  char name[40];
  std::snprintf(name, sizeof(name), "step-%08lld", (long long)steps);
  return (fs::path(dir) / name).string();
}

std::string findNewestCheckpoint(const std::string &dir) {
  std::map<int64_t, std::string> found = completeCheckpoints(dir);
  return found.empty() ? std::string() : found.rbegin()->second;
}

TrainLoopResult trainLoop(std::shared_ptr<const PlanFile> plan,
                          const std::string &program,
                          const TrainLoopOptions &options,
                          const RunOptions &ranks, std::ostream &console) {
  if (options.steps < 1)
    throw Error("the run needs at least 1 step, got " +
                std::to_string(options.steps));
  if (options.schedule)
    checkSchedule(*options.schedule);
  bool printer = !ranks.mpi || ranks.mpi->rank() == 0;
  BatchSource source(plan->inputs(program), options.data);
  source.load();
  std::optional<BatchSource> validation;
  if (options.validation) {
    validation.emplace(plan->inputs(program), *options.validation);
    validation->load();
  }

  // Resume from the newest complete checkpoint.
  std::optional<Checkpoint> start;
  TrainLoopResult result;
  result.lastValLoss = NAN;
  if (!options.checkpointDir.empty() && options.resume) {
    std::string newest = findNewestCheckpoint(options.checkpointDir);
    if (!newest.empty()) {
      start = openCheckpoint(*plan, program, newest, /*paramsOnly=*/false);
      result.firstStep = start->steps;
    }
  }
  std::unique_ptr<MetricsLog> log;
  if (printer)
    log = std::make_unique<MetricsLog>(console, options.progressLine,
                                       options.metricsPath,
                                       options.tensorboardDir);
  auto say = [&](const std::string &line) {
    if (log)
      log->message(options.toolName + ": " + line);
  };
  say(source.describeSource() +
      (validation ? "; validation " + validation->describeSource() : ""));
  if (start)
    say("resuming from checkpoint '" + start->dir + "' after " +
        std::to_string(start->steps) + " step" +
        (start->steps == 1 ? "" : "s"));
  result.stepsDone = result.firstStep;
  if (result.firstStep >= options.steps) {
    say("the run is already complete (" + std::to_string(result.firstStep) +
        " of " + std::to_string(options.steps) + " steps done)");
    return result;
  }

  double peak = options.peakFlops > 0 ? options.peakFlops : 0;
  if (printer && peak == 0 && options.flopsPerStep > 0 && ranks.mpi) {
    // One process's BLAS peak says nothing of the job's (how many
    // processes share a machine is not known here).
    say("no MFU: name the peak (log.peak_flops, one device's) under mpirun");
  } else if (printer && peak == 0 && options.flopsPerStep > 0) {
    peak = measureCpuPeakFlops();
    say("MFU against the measured BLAS peak of this machine, " +
        format("%.3g", peak / 1e9) + " GFLOP/s (sgemm 1024^3)");
  }

  SignalGuard signals(options.handleSignals);
  TrainOptions step;
  step.firstStep = result.firstStep;
  step.steps = options.steps - result.firstStep;
  if (start)
    step.beforeFirstStep = [&](Executor &executor, Communicator *) {
      loadCheckpoint(*start, executor, *plan, program, /*paramsOnly=*/false);
    };
  if (options.schedule) {
    LrSchedule schedule = *options.schedule;
    step.learningRate = [schedule](int64_t step) {
      return learningRateAt(schedule, step);
    };
  }
  if (options.handleSignals)
    step.stopRequested = [] { return stopSignal != 0; };

  // Evaluation: a second executor of the same program per rank.
  struct EvalSlot {
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Executor> executor;
  };
  std::mutex evalMutex;
  std::map<int, EvalSlot> evalSlots;
  std::vector<std::string> parameters;
  for (const ProgramValue &v : plan->persistent(program))
    if (v.isParameter)
      parameters.push_back(v.name);
  size_t lossResult = lossIndex(*plan, program);
  auto evaluate = [&](Executor &trained, Communicator *comm) {
    int rank = comm ? comm->rank() : 0;
    Executor *executor;
    {
      std::lock_guard<std::mutex> lock(evalMutex);
      EvalSlot &slot = evalSlots[rank];
      if (!slot.executor) {
        slot.backend = createCpuBackend(ranks.ranks > 1 ? 1 : 0);
        ExecutorOptions exOptions;
        exOptions.overlapBuckets = ranks.overlapBuckets;
        slot.executor = std::make_unique<Executor>(plan, program, comm,
                                                   *slot.backend, exOptions);
        // lr 0: sgd and adamw leave every parameter exactly as it is.
        slot.executor->setLearningRate(0);
      }
      executor = slot.executor.get();
    }
    for (const std::string &name : parameters)
      executor->writePersistentBlock(name, trained.readPersistentBlock(name));
    double sum = 0;
    for (int64_t b = 0; b < options.evalBatches; ++b) {
      // This rank's rows only, as in training.
      if (validation->setRankInputs(*executor, b) < 0)
        executor->setInputs(validation->make(b));
      executor->run();
      sum += elementAsDouble(executor->gatherResult(lossResult), 0);
    }
    return sum / double(options.evalBatches);
  };

  auto save = [&](Executor &executor, Communicator *comm, int64_t steps) {
    std::string dir = checkpointPath(options.checkpointDir, steps);
    CheckpointSaveOptions saveOptions;
    saveOptions.toolName = options.toolName;
    saveCheckpoint(executor, comm, *plan, program, dir, steps, saveOptions);
    if (comm && comm->rank() != 0)
      return;
    result.lastCheckpoint = dir;
    // Keep the newest `keep`: the one just written is complete first.
    if (options.keep > 0) {
      std::map<int64_t, std::string> found =
          completeCheckpoints(options.checkpointDir);
      int64_t extra = int64_t(found.size()) - options.keep;
      for (auto it = found.begin(); extra > 0 && it != found.end();
           ++it, --extra) {
        std::error_code ec;
        fs::remove_all(it->second, ec);
        fs::remove_all(it->second + ".old", ec);
      }
    }
  };

  step.afterStep = [&](Executor &executor, Communicator *comm,
                        const StepPoint &point) {
    int64_t done = point.step + 1;
    bool periodicEval = options.evalEvery > 0 && done % options.evalEvery == 0;
    if (validation && (periodicEval || point.last)) {
      double loss = evaluate(executor, comm);
      if (!comm || comm->rank() == 0) {
        result.lastValLoss = loss;
        if (log)
          log->eval(done, loss);
      }
    }
    bool periodicSave =
        options.checkpointEvery > 0 && done % options.checkpointEvery == 0;
    if (!options.checkpointDir.empty() && (periodicSave || point.last)) {
      save(executor, comm, done);
      if (log && !point.last && (!comm || comm->rank() == 0))
        log->message(options.toolName + ": saved checkpoint '" +
                     checkpointPath(options.checkpointDir, done) + "'");
    }
  };

  int64_t tokens = source.tokensPerBatch();
  auto wallStart = std::chrono::steady_clock::now();
  int64_t logged = 0;
  step.onStepResult = [&](const StepResult &r) {
    StepMetrics m;
    m.step = r.step + 1;
    m.steps = options.steps;
    m.loss = r.loss;
    m.lr = r.lr;
    m.gradNorm = r.gradNorm;
    m.seconds = r.seconds;
    m.tokensPerSecond = r.seconds > 0 ? double(tokens) / r.seconds : 0;
    m.flopsPerSecond = options.flopsPerStep > 0 && r.seconds > 0
                           ? options.flopsPerStep / r.seconds
                           : NAN;
    m.mfu = peak > 0 ? m.flopsPerSecond / peak : NAN;
    m.peakMemoryBytes = peakResidentBytes();
    // The mean wall time per step so far (evaluation and saves included).
    ++logged;
    double wall = std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - wallStart)
                      .count();
    m.etaSeconds = wall / double(logged) * double(options.steps - m.step);
    result.lastLoss = r.loss;
    // The files get every step; the console every logEvery-th.
    if (log)
      log->step(m, m.step % std::max<int64_t>(options.logEvery, 1) == 0 ||
                       m.step == options.steps || m.step == 1);
  };

  TrainRun run = train(plan, program, source, step, ranks);
  result.stepsDone = result.firstStep + int64_t(run.losses.size());
  result.stopped = run.stopped;
  if (printer) {
    for (double loss : run.losses)
      if (!std::isfinite(loss))
        throw Error("the loss is not finite (step " +
                    std::to_string(result.stepsDone) + ")");
  }
  return result;
}

} // namespace partita::runtime
