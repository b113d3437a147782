//===- StrategySearch.cpp - choose a strategy and mesh by cost -------------===//
//
// Enumerates (strategy, mesh) pairs, compiles each from a copy of the model
// with the compiler library (Pipelines.h), measures the step program of its
// plan (PlanExplain.h) and ranks them by the cost model.
//
//===----------------------------------------------------------------------===//

#include "passes/search/StrategySearch.h"

#include "passes/plan/PlanExplain.h"
#include "passes/sharding/Strategies.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"

#include <algorithm>
#include <map>

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
  return names;
}

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

std::vector<Candidate>
enumerateCandidates(int64_t devices, ArrayRef<std::string> strategies,
                    const sharding::DistAnnotateOptions &annotate,
                    bool axisOrders) {
  std::vector<Candidate> out;
  for (const std::string &name : searchableStrategies()) {
    if (!strategies.empty() && !llvm::is_contained(strategies, name))
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
    } while (axisOrders && std::next_permutation(order.begin(), order.end()));
  }
  return out;
}

/// Compiles `candidate` (its strategy, mesh and microbatches) from a copy
/// of `model` with `base`, and measures and prices its plan, or sets its
/// rejection.
static void evaluate(Candidate &candidate, mlir::ModuleOp model,
                     const CompilerOptions &base, const CostModel &cost) {
  CompilerOptions options = base;
  options.annotate.strategy = candidate.preset;
  options.annotate.sequenceParallel = candidate.sequenceParallel;
  options.annotate.mesh = candidate.mesh;
  options.microbatches = candidate.microbatches;
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
  mlir::FailureOr<plan::Plan> plan = compileToPlan(*copy, options);
  if (failed(plan)) {
    candidate.rejection =
        firstError.empty() ? "did not compile (no diagnostic)" : firstError;
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
  for (const plan_lowering::PlanTraffic &traffic : candidate.work.traffic) {
    bool spans =
        groupSpansNodes(candidate.axes, traffic.axes, cost.devicesPerNode);
    candidate.crossesNodes |= spans;
    double seconds = double(traffic.calls) * cost.callSeconds +
                     traffic.wireBytes / (spans ? cost.nodeLinkBytesPerSecond
                                                : cost.linkBytesPerSecond);
    candidate.commSeconds += seconds;
    if (traffic.bucketed)
      bucketed += seconds;
  }
  if (options.train)
    candidate.hiddenSeconds =
        std::min(bucketed, cost.backwardShare * candidate.computeSeconds);
  candidate.seconds =
      candidate.computeSeconds + candidate.commSeconds - candidate.hiddenSeconds;
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
  size_t count = candidates.size();
  for (size_t i = 0; i < count; ++i) {
    Candidate &candidate = candidates[i];
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
  os << format("  %-4s %-15s %-11s %3s %11s %11s %11s %11s %6s %12s %12s\n",
               "rank", "strategy", "mesh", "mb", "step (est.)", "compute",
               "comm", "hidden", "calls", "wire/device", "memory");
  for (const Candidate &c : result.candidates) {
    std::string place = c.rank ? std::to_string(c.rank) : "-";
    os << format("  %-4s %-15s %-11s %3lld ", place.c_str(),
                 c.strategy.c_str(), c.mesh.c_str(),
                 (long long)c.microbatches);
    if (!c.compiled()) {
      os << "rejected: " << c.rejection << "\n";
      continue;
    }
    os << format("%11s %11s %11s %11s %6lld %12s %12s",
                 secondsText(c.seconds).c_str(),
                 secondsText(c.computeSeconds).c_str(),
                 secondsText(c.commSeconds).c_str(),
                 secondsText(c.hiddenSeconds).c_str(),
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
  os << "rank\tstrategy\tmesh\tmicrobatches\tseconds\tcompute_seconds\t"
        "comm_seconds\t"
        "hidden_seconds\tflops\twire_bytes\tcalls\tcollectives\t"
        "memory_bytes\tcrosses_nodes\ttraffic\trejection\n";
  for (const Candidate &c : result.candidates) {
    std::string rejection = c.rejection;
    std::replace(rejection.begin(), rejection.end(), '\t', ' ');
    std::replace(rejection.begin(), rejection.end(), '\n', ' ');
    os << c.rank << "\t" << c.strategy << "\t" << c.mesh << "\t"
       << c.microbatches << "\t"
       << format("%.17g\t%.17g\t%.17g\t%.17g\t%.17g\t%.17g", c.seconds,
                 c.computeSeconds, c.commSeconds, c.hiddenSeconds,
                 c.work.flops, c.work.wireBytes)
       << "\t" << c.work.calls << "\t" << c.work.collectives << "\t"
       << c.memory << "\t" << int(c.crossesNodes) << "\t";
    for (size_t i = 0; i < c.work.traffic.size(); ++i) {
      const plan_lowering::PlanTraffic &t = c.work.traffic[i];
      os << (i ? ";" : "") << llvm::join(t.axes, "+") << "/"
         << (t.bucketed ? "bucketed" : "plain") << "/" << t.calls << "/"
         << format("%.17g", t.wireBytes);
    }
    os << "\t" << rejection << "\n";
  }
}

} // namespace partita::search
