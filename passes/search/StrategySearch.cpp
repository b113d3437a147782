//===- StrategySearch.cpp - choose a strategy and mesh by cost -------------===//
//
// Enumerates (strategy, mesh) pairs, pipelined or not, compiles each from a
// copy of the model with the compiler library (Pipelines.h), prices its plan
// (Pricing.h) and ranks them. The table and report are SearchReport.cpp.
//
//===----------------------------------------------------------------------===//

#include "passes/search/StrategySearch.h"

#include "passes/pipeline/Passes.h"
#include "passes/search/Pricing.h"
#include "passes/sharding/Strategies.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringExtras.h"

#include <algorithm>
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

} // namespace

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
  names.push_back(kILPStrategy.str());
  return names;
}

std::vector<std::string> searchableSchedules() {
  return {"1f1b", "zb-h1", "interleaved"};
}

std::string checkDevices(int64_t devices) {
  if (devices >= kMinDevices && devices <= kMaxDevices)
    return "";
  return "devices must be from " + std::to_string(kMinDevices) + " to " +
         std::to_string(kMaxDevices) + ", got " + std::to_string(devices);
}

/// Empty when `name` is one of `known`; else "unknown KIND 'NAME':
/// INTRO a, b, c".
static std::string checkKnown(StringRef name, ArrayRef<std::string> known,
                              StringRef kind, StringRef intro) {
  if (llvm::is_contained(known, name))
    return "";
  return ("unknown " + kind + " '" + name + "': " + intro + " " +
          llvm::join(known, ", "))
      .str();
}

std::string checkSearchable(StringRef name) {
  return checkKnown(name, searchableStrategies(), "strategy", "expected");
}

std::string checkSearchableSchedule(StringRef name) {
  return checkKnown(name, searchableSchedules(), "schedule",
                    "the search prices");
}

std::string Candidate::stageMesh() const {
  std::string text;
  for (const auto &[name, size] : axes)
    if (name != pipeline::kPipelineAxis)
      text += (text.empty() ? "" : ",") + name + "=" + std::to_string(size);
  return text;
}

autoshard::DistAutoShardOptions toAutoShardOptions(const CostModel &cost) {
  autoshard::DistAutoShardOptions options;
  options.deviceTflops = cost.deviceFlops / 1e12;
  options.linkGbytes = cost.linkBytesPerSecond / 1e9;
  options.nodeLinkGbytes = cost.nodeLinkBytesPerSecond / 1e9;
  options.devicesPerNode = cost.devicesPerNode;
  options.callUs = cost.callSeconds / 1e-6;
  options.memoryGbytes = cost.memoryBytesPerSecond / 1e9;
  options.memoryPerDeviceGib =
      double(cost.memoryPerDevice) / double(int64_t(1) << 30);
  options.overlapShare = cost.backwardShare;
  return options;
}

void applyCandidate(const Candidate &candidate, const CostModel &cost,
                    CompilerOptions &options) {
  options.annotate.strategy = candidate.preset;
  if (candidate.preset == kILPStrategy) {
    // The search's own memory limit is the plan's total; the program's cap
    // on argument bytes stays off.
    options.autoShard = toAutoShardOptions(cost);
    options.autoShard.memoryPerDeviceGib = 0;
  }
  options.annotate.sequenceParallel = candidate.sequenceParallel;
  options.annotate.mesh = candidate.stageMesh();
  options.microbatches = candidate.microbatches;
  options.pipelineSplit = candidate.pipelined();
  if (candidate.pipelined()) {
    options.pipelineStages = candidate.pipelineStages;
    options.stagesBy = candidate.stagesBy;
    options.schedule = candidate.schedule;
    options.pipelineChunks = candidate.chunks;
  }
}

/// The candidates of `space` on `devices` devices, unpipelined (or a
/// pipeline's stage meshes: `pipelined`, which ilp does not take).
static std::vector<Candidate>
enumerateMeshes(int64_t devices, const SearchSpace &space,
                const sharding::DistAnnotateOptions &annotate,
                bool pipelined) {
  std::vector<Candidate> out;
  for (const std::string &name : searchableStrategies()) {
    if (name == kPurePipeline ||
        (!space.strategies.empty() &&
         !llvm::is_contained(space.strategies, name)))
      continue;
    if (name == kILPStrategy) {
      // Only when named: one integer program per mesh, on one axis or two
      // (the axes' names are only names to it).
      if (!llvm::is_contained(space.strategies, name) || pipelined)
        continue;
      std::vector<SmallVector<int64_t>> shapes;
      SmallVector<int64_t> prefix;
      factorizations(devices, 1, prefix, shapes);
      factorizations(devices, 2, prefix, shapes);
      for (const SmallVector<int64_t> &sizes : shapes) {
        Candidate candidate;
        candidate.strategy = candidate.preset = name;
        const std::string *axisNames[] = {&annotate.dataAxis,
                                          &annotate.tensorAxis};
        for (size_t i = 0; i < sizes.size(); ++i) {
          candidate.mesh += (i ? "," : "") + *axisNames[i] + "=" +
                            std::to_string(sizes[i]);
          candidate.axes.emplace_back(*axisNames[i], sizes[i]);
        }
        out.push_back(std::move(candidate));
      }
      continue;
    }
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
  std::vector<Candidate> out =
      enumerateMeshes(devices, space, annotate, /*pipelined=*/false);
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
        meshes = enumerateMeshes(inner, space, annotate, /*pipelined=*/true);
      }
      std::string axis = pipeline::kPipelineAxis.str();
      for (Candidate &candidate : meshes) {
        candidate.axes.insert(candidate.axes.begin(), {axis, stages});
        candidate.mesh = axis + "=" + std::to_string(stages) +
                         (candidate.mesh.empty() ? "" : ",") + candidate.mesh;
        candidate.pipelineStages = stages;
        candidate.schedule = schedule;
        candidate.chunks = schedule == "interleaved" ? kInterleavedChunks : 1;
        candidate.microbatches = stages;
        out.push_back(std::move(candidate));
      }
    }
  }
  return out;
}

/// Compiles `candidate` (its strategy, mesh, microbatches and pipeline)
/// from a copy of `model` with `base`, and measures and prices its plan, or
/// sets its rejection. `splitFailed` is set when a pipelined candidate
/// fails in the stage that splits the pipeline (the differentiated step).
static void evaluate(Candidate &candidate, mlir::ModuleOp model,
                     const CompilerOptions &base, const CostModel &cost,
                     bool *splitFailed = nullptr) {
  CompilerOptions options = base;
  applyCandidate(candidate, cost, options);
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
  StringRef step = getStepFunctionName(options);
  if (std::string error = pricePlan(candidate, *plan, step, options.train, cost);
      !error.empty())
    candidate.rejection = error;
}

/// Whether `a` is the better choice of two cuts or microbatch counts of one
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

/// Tells the search's progress callback about one compile.
using Told = llvm::function_ref<void(const Candidate &)>;

/// Compiles the pipelined `candidate` under each cut, each with P, 2P, ...
/// microbatches while that prices better (more shrink the bubble and each
/// one's activations), and keeps the best of all in `candidate`. When no cut
/// compiles it keeps the reason of the cut that got furthest, and returns
/// whether the split itself failed under every cut (the other candidates
/// of its stage count need not be compiled).
static bool choosePipeline(Candidate &candidate, mlir::ModuleOp model,
                           const CompilerOptions &base, const CostModel &cost,
                           Told told) {
  std::optional<Candidate> best;
  std::string rejection;
  const char *rejectionCut = kStageCuts[0];
  bool everySplitFailed = true, rejectedAtSplit = false;
  for (const char *cut : kStageCuts) {
    Candidate trial = candidate;
    trial.stagesBy = cut;
    bool splitFailed = false;
    evaluate(trial, model, base, cost, &splitFailed);
    told(trial);
    everySplitFailed &= splitFailed;
    if (!trial.compiled()) {
      // The reason of a cut that got past the split says more (the layers
      // cut fails on a model with fewer layers than stages, where the cost
      // cut may go on to fail for another reason).
      if (rejection.empty() || (!splitFailed && rejectedAtSplit)) {
        rejection = trial.rejection;
        rejectionCut = cut;
        rejectedAtSplit = splitFailed;
      }
      continue;
    }
    for (int64_t m = 2 * trial.microbatches; m <= kMaxMicrobatches; m *= 2) {
      Candidate more = candidate;
      more.stagesBy = cut;
      more.microbatches = m;
      evaluate(more, model, base, cost);
      if (!more.compiled())
        break;
      told(more);
      if (!betterPipeline(more, trial, cost))
        break;
      trial = std::move(more);
    }
    if (!best || betterPipeline(trial, *best, cost))
      best = std::move(trial);
  }
  if (best) {
    candidate = std::move(*best);
    return false;
  }
  candidate.stagesBy = rejectionCut;
  candidate.rejection = rejection;
  if (everySplitFailed)
    candidate.rejection += " (the other candidates of " +
                           std::to_string(candidate.pipelineStages *
                                          candidate.chunks) +
                           " stages left out)";
  return everySplitFailed;
}

/// A train step over the memory limit tried again with 2, 4, ...
/// microbatches (gradient accumulation: less activation memory, the same
/// compute) from `choice` (unpriced): the first that fits, or none once one
/// no longer compiles.
static std::optional<Candidate> accumulate(const Candidate &choice,
                                           mlir::ModuleOp model,
                                           const CompilerOptions &base,
                                           const CostModel &cost, Told told) {
  for (int64_t m = 2; m <= kMaxMicrobatches; m *= 2) {
    Candidate retry = choice;
    retry.microbatches = m;
    evaluate(retry, model, base, cost);
    if (!retry.compiled())
      return std::nullopt;
    told(retry);
    if (retry.fits(cost))
      return retry;
  }
  return std::nullopt;
}

SearchResult
searchStrategies(mlir::ModuleOp model, const CompilerOptions &base,
                 std::vector<Candidate> candidates, const CostModel &cost,
                 const std::function<void(const Candidate &, size_t, size_t)>
                     &progress) {
  // Every candidate priced, but those left out; then the accumulated
  // retries that fit.
  std::vector<Candidate> priced, accumulated;
  // Stage counts (ranks x chunks) whose split failed under every cut.
  std::set<int64_t> failedSplits;
  size_t count = candidates.size();
  for (size_t i = 0; i < count; ++i) {
    Candidate &candidate = candidates[i];
    auto told = [&](const Candidate &c) {
      if (progress)
        progress(c, i, count);
    };
    if (candidate.pipelined()) {
      int64_t stageCount = candidate.pipelineStages * candidate.chunks;
      if (failedSplits.count(stageCount))
        continue;
      if (choosePipeline(candidate, model, base, cost, told))
        failedSplits.insert(stageCount);
    } else {
      const Candidate choice = candidate;
      evaluate(candidate, model, base, cost);
      told(candidate);
      if (base.train && cost.memoryPerDevice > 0 && candidate.compiled() &&
          !candidate.fits(cost) && candidate.preset != kILPStrategy)
        if (std::optional<Candidate> fit =
                accumulate(choice, model, base, cost, told))
          accumulated.push_back(std::move(*fit));
    }
    priced.push_back(std::move(candidate));
  }
  candidates = std::move(priced);
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

} // namespace partita::search
