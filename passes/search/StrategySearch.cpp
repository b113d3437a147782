//===- StrategySearch.cpp - choose a strategy and mesh by cost -------------===//
//
// Enumerates (strategy, mesh) pairs, pipelined or not, compiles each from a
// copy of the model with the compiler library (Pipelines.h), measures the
// programs of its plan (PlanExplain.h), simulates a pipelined one's schedule
// (PipelineSchedule.h) and ranks them by the cost model.
//
//===----------------------------------------------------------------------===//

#include "passes/search/StrategySearch.h"

#include "passes/pipeline/Passes.h"
#include "passes/plan/PlanExplain.h"
#include "passes/sharding/Strategies.h"
#include "partita/runtime/PipelineSchedule.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

using namespace llvm;

namespace partita::search {
namespace {

/// Every ordered way to write `n` as a product of `k` factors, each at
/// least 2.
void factorizations(int64_t n, size_t k, SmallVectorImpl<int64_t> &prefix,
                    std::vector<SmallVector<int64_t>> &out) {
  if (k == 1) {
    if (n >= 2) {
      prefix.push_back(n);
      out.emplace_back(prefix.begin(), prefix.end());
      prefix.pop_back();
    }
    return;
  }
  for (int64_t f = 2; f <= n / 2; ++f) {
    if (n % f)
      continue;
    prefix.push_back(f);
    factorizations(n / f, k - 1, prefix, out);
    prefix.pop_back();
  }
}

/// The first error of a failed compile, with its location when it has one.
std::string describeDiagnostic(mlir::Diagnostic &diag) {
  std::string text;
  raw_string_ostream os(text);
  if (auto loc = dyn_cast<mlir::FileLineColLoc>(diag.getLocation()))
    os << loc.getFilename().getValue() << ":" << loc.getLine() << ":"
       << loc.getColumn() << ": ";
  os << diag.str();
  return text;
}

/// "1.50 MiB" (binary units from KiB on).
std::string bytesText(double bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  std::string text;
  raw_string_ostream os(text);
  if (unit == 0)
    os << int64_t(bytes) << " B";
  else
    os << format("%.2f ", bytes) << units[unit];
  return text;
}

/// "1.23 ms" / "45.6 us" / "2.10 s".
std::string secondsText(double seconds) {
  std::string text;
  raw_string_ostream os(text);
  if (seconds >= 1)
    os << format("%.2f s", seconds);
  else if (seconds >= 1e-3)
    os << format("%.2f ms", seconds * 1e3);
  else
    os << format("%.1f us", seconds * 1e6);
  return text;
}
} // namespace

bool groupSpansNodes(ArrayRef<std::pair<std::string, int64_t>> axes,
                     ArrayRef<std::string> groupAxes, int64_t devicesPerNode) {
  int64_t devices = 1;
  for (const auto &axis : axes)
    devices *= axis.second;
  if (devicesPerNode <= 0 || devicesPerNode >= devices)
    return false;
  // A device's group is named by its coordinates along the other axes; the
  // group spans nodes when two of its devices are on different nodes.
  std::map<std::vector<int64_t>, int64_t> nodeOfGroup;
  for (int64_t device = 0; device < devices; ++device) {
    std::vector<int64_t> key;
    int64_t rest = device;
    for (size_t i = axes.size(); i-- > 0;) {
      int64_t coordinate = rest % axes[i].second;
      rest /= axes[i].second;
      if (!llvm::is_contained(groupAxes, axes[i].first))
        key.push_back(coordinate);
    }
    int64_t node = device / devicesPerNode;
    auto [it, inserted] = nodeOfGroup.try_emplace(key, node);
    if (!inserted && it->second != node)
      return true;
  }
  return false;
}

/// The pure pipeline's strategy name: stages not sharded further.
constexpr char kPurePipeline[] = "pp";

/// The presets that take --sequence-parallel.
bool takesSequenceParallel(StringRef preset) {
  return preset == "megatron" || preset == "dp+megatron";
}

std::vector<std::string> searchableStrategies() {
  std::vector<std::string> names;
  for (const sharding::Strategy &strategy : sharding::getStrategies()) {
    names.push_back(strategy.name.str());
    if (takesSequenceParallel(strategy.name))
      names.push_back(strategy.name.str() + "+sp");
  }
  names.push_back(kPurePipeline);
  return names;
}

std::vector<std::string> searchableSchedules() { return {"1f1b", "zb-h1"}; }

std::string checkDevices(int64_t devices) {
  if (devices >= kMinDevices && devices <= kMaxDevices)
    return "";
  return "devices must be from " + std::to_string(kMinDevices) + " to " +
         std::to_string(kMaxDevices) + ", got " + std::to_string(devices);
}

std::string checkSearchable(StringRef name) {
  std::vector<std::string> searchable = searchableStrategies();
  if (llvm::is_contained(searchable, name))
    return "";
  return ("unknown strategy '" + name + "': expected " +
          llvm::join(searchable, ", "))
      .str();
}

std::string checkSearchableSchedule(StringRef name) {
  std::vector<std::string> searchable = searchableSchedules();
  if (llvm::is_contained(searchable, name))
    return "";
  return ("unknown schedule '" + name + "': the search prices " +
          llvm::join(searchable, ", "))
      .str();
}

std::string Candidate::stageMesh() const {
  std::string text;
  for (const auto &[name, size] : axes)
    if (name != pipeline::kPipelineAxis)
      text += (text.empty() ? "" : ",") + name + "=" + std::to_string(size);
  return text;
}

void applyCandidate(const Candidate &candidate, CompilerOptions &options) {
  options.annotate.strategy = candidate.preset;
  options.annotate.sequenceParallel = candidate.sequenceParallel;
  options.annotate.mesh = candidate.stageMesh();
  options.microbatches = candidate.microbatches;
  options.pipelineSplit = candidate.pipelined();
  if (candidate.pipelined()) {
    options.pipelineStages = candidate.pipelineStages;
    options.stagesBy = candidate.stagesBy;
    options.schedule = candidate.schedule;
  }
}

/// The unpipelined candidates of `space` on `devices` devices.
static std::vector<Candidate>
enumerateMeshes(int64_t devices, const SearchSpace &space,
                const sharding::DistAnnotateOptions &annotate) {
  std::vector<Candidate> out;
  for (const std::string &name : searchableStrategies()) {
    if (name == kPurePipeline ||
        (!space.strategies.empty() &&
         !llvm::is_contained(space.strategies, name)))
      continue;
    bool sequenceParallel = StringRef(name).ends_with("+sp");
    StringRef preset =
        sequenceParallel ? StringRef(name).drop_back(3) : StringRef(name);
    const sharding::Strategy &strategy = *sharding::lookupStrategy(preset);
    SmallVector<std::string> axes;
    if (strategy.needsDataAxis())
      axes.push_back(annotate.dataAxis);
    if (strategy.needsTensorAxis())
      axes.push_back(annotate.tensorAxis);
    if (strategy.needsContextAxis())
      axes.push_back(annotate.contextAxis);
    if (axes.empty())
      continue;
    std::vector<SmallVector<int64_t>> shapes;
    SmallVector<int64_t> prefix;
    factorizations(devices, axes.size(), prefix, shapes);
    // Each shape in the canonical axis order, then (axisOrders) in the
    // others, so that every assignment of sizes to axes comes once per
    // order.
    SmallVector<size_t> order;
    for (size_t i = 0; i < axes.size(); ++i)
      order.push_back(i);
    do {
      for (const SmallVector<int64_t> &sizes : shapes) {
        Candidate candidate;
        candidate.strategy = name;
        candidate.preset = preset.str();
        candidate.sequenceParallel = sequenceParallel;
        for (size_t i : order) {
          candidate.mesh += (candidate.mesh.empty() ? "" : ",") + axes[i] +
                            "=" + std::to_string(sizes[i]);
          candidate.axes.emplace_back(axes[i], sizes[i]);
        }
        out.push_back(std::move(candidate));
      }
    } while (space.axisOrders &&
             std::next_permutation(order.begin(), order.end()));
  }
  return out;
}

std::vector<Candidate>
enumerateCandidates(int64_t devices, const SearchSpace &space,
                    const sharding::DistAnnotateOptions &annotate) {
  std::vector<Candidate> out = enumerateMeshes(devices, space, annotate);
  for (const std::string &schedule : space.schedules) {
    for (int64_t stages = 2; stages <= devices; ++stages) {
      if (devices % stages)
        continue;
      int64_t inner = devices / stages;
      std::vector<Candidate> meshes;
      if (inner == 1) {
        if (space.strategies.empty() ||
            llvm::is_contained(space.strategies, kPurePipeline)) {
          Candidate pure;
          pure.strategy = kPurePipeline;
          pure.preset = "none";
          meshes.push_back(std::move(pure));
        }
      } else {
        meshes = enumerateMeshes(inner, space, annotate);
      }
      std::string axis = pipeline::kPipelineAxis.str();
      for (Candidate &candidate : meshes) {
        candidate.axes.insert(candidate.axes.begin(), {axis, stages});
        candidate.mesh = axis + "=" + std::to_string(stages) +
                         (candidate.mesh.empty() ? "" : ",") + candidate.mesh;
        candidate.pipelineStages = stages;
        candidate.schedule = schedule;
        candidate.microbatches = stages;
        out.push_back(std::move(candidate));
      }
    }
  }
  return out;
}

/// Seconds the cost model gives `work`'s communication on the mesh `axes`
/// (calls x callSeconds + wire / the rate of each group's slowest link);
/// adds its bucketed share to `bucketed` and sets `crossesNodes` when a
/// group spans nodes.
static double commSeconds(const plan_lowering::PlanWork &work,
                          ArrayRef<std::pair<std::string, int64_t>> axes,
                          const CostModel &cost, double &bucketed,
                          bool &crossesNodes) {
  double total = 0;
  for (const plan_lowering::PlanTraffic &traffic : work.traffic) {
    bool spans = groupSpansNodes(axes, traffic.axes, cost.devicesPerNode);
    crossesNodes |= spans;
    double seconds = double(traffic.calls) * cost.callSeconds +
                     traffic.wireBytes / (spans ? cost.nodeLinkBytesPerSecond
                                                : cost.linkBytesPerSecond);
    total += seconds;
    if (traffic.bucketed)
      bucketed += seconds;
  }
  return total;
}

/// `work` plus `more` times `times` (traffic merged by axes and bucketing).
static void addWork(plan_lowering::PlanWork &work,
                    const plan_lowering::PlanWork &more, int64_t times) {
  work.flops += double(times) * more.flops;
  work.wireBytes += double(times) * more.wireBytes;
  work.collectives += times * more.collectives;
  work.calls += times * more.calls;
  for (const plan_lowering::PlanTraffic &t : more.traffic) {
    auto it = llvm::find_if(work.traffic, [&](const auto &w) {
      return w.axes == t.axes && w.bucketed == t.bucketed;
    });
    if (it == work.traffic.end()) {
      work.traffic.push_back(t);
      it = std::prev(work.traffic.end());
      it->wireBytes = 0;
      it->calls = 0;
    }
    it->wireBytes += double(times) * t.wireBytes;
    it->calls += times * t.calls;
  }
}

/// Prices a compiled pipelined plan: each stage's forward, backward, send
/// and update times from its own programs, its schedule simulated with
/// them (sends buffered, as the executor posts them), its busiest stage's
/// work as the candidate's. Returns an error, or empty.
static std::string pricePipeline(Candidate &candidate, const plan::Plan &plan,
                                 const CostModel &cost) {
  namespace pl = runtime::pipeline;
  const plan::PipelineSchedule &schedule = plan.pipeline();
  int64_t m = schedule.microbatches();
  bool ppSpans = groupSpansNodes(candidate.axes, {pipeline::kPipelineAxis.str()},
                                 cost.devicesPerNode);
  double ppRate =
      ppSpans ? cost.nodeLinkBytesPerSecond : cost.linkBytesPerSecond;
  std::vector<pl::ActionCosts> costs(schedule.stages_size());
  std::vector<plan_lowering::PlanWork> works(schedule.stages_size());
  candidate.stages.assign(schedule.stages_size(), StageCost());
  auto programAt = [&](int index) -> const plan::Program * {
    return index >= 0 && index < plan.programs_size() ? &plan.programs(index)
                                                      : nullptr;
  };
  for (int t = 0; t < schedule.stages_size(); ++t) {
    const plan::PipelineStage &stage = schedule.stages(t);
    StageCost &stageCost = candidate.stages[t];
    plan_lowering::PlanWork &work = works[t];
    // Seconds of one run of program `index`, its work added `times` times.
    auto run = [&](int index, int64_t times) -> double {
      const plan::Program *program = programAt(index);
      if (!program)
        return 0;
      plan_lowering::PlanWork one =
          plan_lowering::measurePlanWork(plan, *program);
      addWork(work, one, times);
      double bucketed = 0;
      return one.flops / cost.deviceFlops +
             commSeconds(one, candidate.axes, cost, bucketed,
                         candidate.crossesNodes);
    };
    stageCost.forward = run(stage.forward(), m);
    if (stage.backward() >= 0) {
      stageCost.backwardInput = run(stage.backward(), m);
    } else {
      stageCost.backwardInput = run(stage.backward_input(), m);
      stageCost.backwardWeight = run(stage.backward_weight(), m);
    }
    stageCost.update = run(stage.optimizer(), 1);
    const plan::Program *update = programAt(stage.optimizer());
    if (!update)
      return "stage " + std::to_string(t) + " has no update program";
    stageCost.memory =
        plan_lowering::explainPlan(plan, *update, "", nulls()).total;
    // What the stage sends per microbatch: activations to the next stage,
    // gradients to the previous one (the first stage sends no gradient, the
    // last no activation), each one point-to-point call over "pp".
    std::vector<const plan::Program *> programs;
    for (int index : pl::microbatchPrograms(stage))
      if (const plan::Program *program = programAt(index))
        programs.push_back(program);
    pl::SlotBytes slots = pl::slotBytes(programs);
    plan_lowering::PlanTraffic sends;
    sends.axes = {pipeline::kPipelineAxis.str()};
    int64_t largest = 0;
    for (pl::SlotKind kind :
         {pl::SlotKind::ActivationOut, pl::SlotKind::GradientOut}) {
      int64_t bytes = slots[size_t(kind)];
      if (bytes <= 0)
        continue;
      largest = std::max(largest, bytes);
      sends.calls += m;
      sends.wireBytes += double(m) * double(bytes);
    }
    if (sends.calls) {
      candidate.crossesNodes |= ppSpans;
      stageCost.send = cost.callSeconds + double(largest) / ppRate;
      work.traffic.push_back(sends);
      work.wireBytes += sends.wireBytes;
      work.calls += sends.calls;
    }
    costs[t].forward = stageCost.forward;
    costs[t].backwardInput = stageCost.backwardInput;
    costs[t].backwardWeight = stageCost.backwardWeight;
    costs[t].send = stageCost.send;
    costs[t].optimizer = stageCost.update;
  }
  // The library throws for a schedule that does not validate, and this
  // library is built without exceptions: validate first (plan lowering
  // wrote it from a named schedule, so it does).
  pl::Schedule actions = pl::fromProto(schedule);
  if (std::optional<pl::ScheduleError> error = pl::validate(actions))
    return "its schedule does not validate: " + pl::toString(*error);
  pl::Simulation simulation =
      pl::simulate(actions, costs, pl::SendMode::Buffered);
  // The busiest stage (most compute and communication a step) stands for
  // the candidate; the rest of the makespan is the bubble.
  double busiest = -1;
  for (size_t t = 0; t < works.size(); ++t) {
    double bucketed = 0;
    bool crosses = false;
    double compute = works[t].flops / cost.deviceFlops;
    double comm = commSeconds(works[t], candidate.axes, cost, bucketed, crosses);
    if (compute + comm > busiest) {
      busiest = compute + comm;
      candidate.work = works[t];
      candidate.computeSeconds = compute;
      candidate.commSeconds = comm;
    }
    candidate.memory = std::max(candidate.memory, candidate.stages[t].memory);
  }
  candidate.hiddenSeconds = 0;
  // A stage that sends gradients smaller than its activations (or the
  // reverse) is priced at its larger message in the simulation: the
  // makespan can then exceed the busy time by that, never fall below it
  // except by rounding.
  candidate.bubbleSeconds = std::max(0.0, simulation.makespan - busiest);
  candidate.seconds = candidate.computeSeconds + candidate.commSeconds +
                      candidate.bubbleSeconds;
  return "";
}

/// Compiles `candidate` (its strategy, mesh, microbatches and pipeline)
/// from a copy of `model` with `base`, and measures and prices its plan, or
/// sets its rejection. `splitFailed` is set when a pipelined candidate
/// fails in the stage that splits the pipeline (the differentiated step).
static void evaluate(Candidate &candidate, mlir::ModuleOp model,
                     const CompilerOptions &base, const CostModel &cost,
                     bool *splitFailed = nullptr) {
  CompilerOptions options = base;
  applyCandidate(candidate, options);
  // The candidate's errors are its rejection, not the user's errors: this
  // handler, registered last, sees each diagnostic first.
  std::string firstError;
  mlir::ScopedDiagnosticHandler capture(
      model.getContext(), [&](mlir::Diagnostic &d) {
        if (d.getSeverity() == mlir::DiagnosticSeverity::Error &&
            firstError.empty())
          firstError = describeDiagnostic(d);
        return mlir::success();
      });
  mlir::OwningOpRef<mlir::ModuleOp> copy = model.clone();
  CompileStage current = CompileStage::Differentiated;
  CompileCallbacks callbacks;
  callbacks.beforeStage = [&](CompileStage stage, const mlir::OpPassManager &) {
    current = stage;
  };
  mlir::FailureOr<plan::Plan> plan = compileToPlan(*copy, options, callbacks);
  if (failed(plan)) {
    candidate.rejection =
        firstError.empty() ? "did not compile (no diagnostic)" : firstError;
    if (splitFailed)
      *splitFailed =
          candidate.pipelined() && current == CompileStage::Differentiated;
    return;
  }
  if (candidate.pipelined()) {
    if (std::string error = pricePipeline(candidate, *plan, cost);
        !error.empty())
      candidate.rejection = error;
    return;
  }
  StringRef step = getStepFunctionName(options);
  const plan::Program *program = nullptr;
  for (const plan::Program &p : plan->programs())
    if (p.name() == step)
      program = &p;
  if (!program) {
    candidate.rejection = ("its plan has no program '" + step + "'").str();
    return;
  }
  candidate.work = plan_lowering::measurePlanWork(*plan, *program);
  candidate.memory =
      plan_lowering::explainPlan(*plan, *program, "", nulls()).total;
  candidate.computeSeconds = candidate.work.flops / cost.deviceFlops;
  double bucketed = 0;
  candidate.commSeconds = commSeconds(candidate.work, candidate.axes, cost,
                                      bucketed, candidate.crossesNodes);
  if (options.train)
    candidate.hiddenSeconds =
        std::min(bucketed, cost.backwardShare * candidate.computeSeconds);
  candidate.seconds =
      candidate.computeSeconds + candidate.commSeconds - candidate.hiddenSeconds;
}

/// Whether `a` is the better choice of two microbatch counts of one
/// pipelined candidate: fitting beats not; of two that fit the faster, of
/// two that do not the smaller.
static bool betterPipeline(const Candidate &a, const Candidate &b,
                           const CostModel &cost) {
  if (a.fits(cost) != b.fits(cost))
    return a.fits(cost);
  if (a.fits(cost))
    return a.seconds < b.seconds;
  return a.memory < b.memory;
}

SearchResult
searchStrategies(mlir::ModuleOp model, const CompilerOptions &base,
                 std::vector<Candidate> candidates, const CostModel &cost,
                 const std::function<void(const Candidate &, size_t, size_t)>
                     &progress) {
  // A train step over the memory limit is tried again with 2, 4, ...
  // microbatches (gradient accumulation: less activation memory, the same
  // compute) until it fits or no longer compiles; the first that fits
  // joins the candidates.
  std::vector<Candidate> accumulated;
  // Pipeline stage counts whose split failed under every cut.
  std::set<int64_t> failedSplits;
  std::vector<bool> dropped(candidates.size(), false);
  size_t count = candidates.size();
  for (size_t i = 0; i < count; ++i) {
    Candidate &candidate = candidates[i];
    if (candidate.pipelined()) {
      if (failedSplits.count(candidate.pipelineStages)) {
        dropped[i] = true;
        continue;
      }
      // Each cut, with more microbatches while that prices better (they
      // shrink the bubble and each one's activations); the best of all.
      std::optional<Candidate> best;
      std::string rejection;
      const char *rejectionCut = kStageCuts[0];
      bool everySplitFailed = true, rejectedAtSplit = false;
      for (const char *cut : kStageCuts) {
        Candidate trial = candidate;
        trial.stagesBy = cut;
        bool splitFailed = false;
        evaluate(trial, model, base, cost, &splitFailed);
        if (progress)
          progress(trial, i, count);
        everySplitFailed &= splitFailed;
        if (!trial.compiled()) {
          // The reason of a cut that got past the split says more (the
          // layers cut fails on a model with fewer layers than stages,
          // where the cost cut may go on to fail for another reason).
          if (rejection.empty() || (!splitFailed && rejectedAtSplit)) {
            rejection = trial.rejection;
            rejectionCut = cut;
            rejectedAtSplit = splitFailed;
          }
          continue;
        }
        for (int64_t m = 2 * trial.microbatches; m <= kMaxMicrobatches;
             m *= 2) {
          Candidate more = candidate;
          more.stagesBy = cut;
          more.microbatches = m;
          evaluate(more, model, base, cost);
          if (!more.compiled())
            break;
          if (progress)
            progress(more, i, count);
          if (!betterPipeline(more, trial, cost))
            break;
          trial = std::move(more);
        }
        if (!best || betterPipeline(trial, *best, cost))
          best = std::move(trial);
      }
      if (best) {
        candidate = std::move(*best);
        continue;
      }
      candidate.stagesBy = rejectionCut;
      candidate.rejection = rejection;
      if (everySplitFailed) {
        failedSplits.insert(candidate.pipelineStages);
        candidate.rejection += " (every candidate with " +
                               std::string(pipeline::kPipelineAxis) + "=" +
                               std::to_string(candidate.pipelineStages) +
                               " left out)";
      }
      continue;
    }
    evaluate(candidate, model, base, cost);
    if (progress)
      progress(candidate, i, count);
    if (!base.train || cost.memoryPerDevice <= 0 || !candidate.compiled() ||
        candidate.fits(cost))
      continue;
    for (int64_t m = 2; m <= kMaxMicrobatches; m *= 2) {
      Candidate retry;
      retry.strategy = candidate.strategy;
      retry.preset = candidate.preset;
      retry.sequenceParallel = candidate.sequenceParallel;
      retry.mesh = candidate.mesh;
      retry.axes = candidate.axes;
      retry.microbatches = m;
      evaluate(retry, model, base, cost);
      if (!retry.compiled())
        break;
      if (progress)
        progress(retry, i, count);
      if (retry.fits(cost)) {
        accumulated.push_back(std::move(retry));
        break;
      }
    }
  }
  std::vector<Candidate> kept;
  for (size_t i = 0; i < count; ++i)
    if (!dropped[i])
      kept.push_back(std::move(candidates[i]));
  candidates = std::move(kept);
  for (Candidate &c : accumulated)
    candidates.push_back(std::move(c));

  // Fitting first by time, then over the limit by memory, then rejected;
  // stable, so ties keep the enumeration order.
  auto group = [&](const Candidate &c) {
    return c.fits(cost) ? 0 : c.compiled() ? 1 : 2;
  };
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&](const Candidate &a, const Candidate &b) {
                     int ga = group(a), gb = group(b);
                     if (ga != gb)
                       return ga < gb;
                     if (ga == 0 && a.seconds != b.seconds)
                       return a.seconds < b.seconds;
                     if (ga < 2 && a.memory != b.memory)
                       return a.memory < b.memory;
                     return false;
                   });
  int64_t rank = 0;
  for (Candidate &c : candidates)
    c.rank = c.fits(cost) ? ++rank : 0;
  SearchResult result;
  result.found = !candidates.empty() && candidates.front().fits(cost);
  result.candidates = std::move(candidates);
  return result;
}

void printSearchTable(const SearchResult &result, const CostModel &cost,
                      raw_ostream &os) {
  os << format("  %-4s %-15s %-15s %3s %-5s %-6s %10s %10s %10s %10s %10s "
               "%6s %11s %11s\n",
               "rank", "strategy", "mesh", "mb", "sched", "cut", "step (est.)",
               "compute", "comm", "hidden", "bubble", "calls", "wire/device",
               "memory");
  for (const Candidate &c : result.candidates) {
    std::string place = c.rank ? std::to_string(c.rank) : "-";
    os << format("  %-4s %-15s %-15s %3lld %-5s %-6s ", place.c_str(),
                 c.strategy.c_str(), c.mesh.c_str(), (long long)c.microbatches,
                 c.pipelined() ? c.schedule.c_str() : "-",
                 c.pipelined() ? c.stagesBy.c_str() : "-");
    if (!c.compiled()) {
      os << "rejected: " << c.rejection << "\n";
      continue;
    }
    os << format("%11s %10s %10s %10s %10s %6lld %11s %11s",
                 secondsText(c.seconds).c_str(),
                 secondsText(c.computeSeconds).c_str(),
                 secondsText(c.commSeconds).c_str(),
                 secondsText(c.hiddenSeconds).c_str(),
                 secondsText(c.bubbleSeconds).c_str(),
                 (long long)c.work.calls, bytesText(c.work.wireBytes).c_str(),
                 bytesText(c.memory).c_str());
    if (c.crossesNodes)
      os << "  across nodes";
    if (!c.fits(cost))
      os << "  over the memory limit (" << bytesText(cost.memoryPerDevice)
         << ")";
    os << "\n";
  }
}

void writeSearchReport(const SearchResult &result, raw_ostream &os) {
  os << "rank\tstrategy\tmesh\tmicrobatches\tschedule\tstages_by\tseconds\t"
        "compute_seconds\tcomm_seconds\thidden_seconds\tbubble_seconds\t"
        "flops\twire_bytes\tcalls\tcollectives\tmemory_bytes\tcrosses_nodes\t"
        "traffic\tstages\trejection\n";
  for (const Candidate &c : result.candidates) {
    std::string rejection = c.rejection;
    std::replace(rejection.begin(), rejection.end(), '\t', ' ');
    std::replace(rejection.begin(), rejection.end(), '\n', ' ');
    os << c.rank << "\t" << c.strategy << "\t" << c.mesh << "\t"
       << c.microbatches << "\t" << (c.pipelined() ? c.schedule : "-") << "\t"
       << (c.pipelined() ? c.stagesBy : "-") << "\t"
       << format("%.17g\t%.17g\t%.17g\t%.17g\t%.17g\t%.17g\t%.17g", c.seconds,
                 c.computeSeconds, c.commSeconds, c.hiddenSeconds,
                 c.bubbleSeconds, c.work.flops, c.work.wireBytes)
       << "\t" << c.work.calls << "\t" << c.work.collectives << "\t"
       << c.memory << "\t" << int(c.crossesNodes) << "\t";
    for (size_t i = 0; i < c.work.traffic.size(); ++i) {
      const plan_lowering::PlanTraffic &t = c.work.traffic[i];
      os << (i ? ";" : "") << llvm::join(t.axes, "+") << "/"
         << (t.bucketed ? "bucketed" : "plain") << "/" << t.calls << "/"
         << format("%.17g", t.wireBytes);
    }
    os << "\t";
    for (size_t i = 0; i < c.stages.size(); ++i) {
      const StageCost &t = c.stages[i];
      os << (i ? ";" : "")
         << format("%.17g/%.17g/%.17g/%.17g/%.17g", t.forward, t.backwardInput,
                   t.backwardWeight, t.send, t.update)
         << "/" << t.memory;
    }
    os << "\t" << rejection << "\n";
  }
}

} // namespace partita::search
