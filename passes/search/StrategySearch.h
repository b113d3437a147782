//===- StrategySearch.h - choose a strategy and mesh by cost -----*- C++ -*-===//
//
// The first automatic search (`partita plan --strategy auto --devices N`):
// every strategy preset of dist-annotate on every mesh of N devices it can
// use (each of its axes at least 2, their product N) is compiled to a plan,
// its step measured from the plan (PlanExplain.h: memory per device, FLOPs,
// bytes on the wire, communicator calls) and priced by a simple cost model;
// the cheapest that fits the memory limit wins. Every candidate is kept with
// its numbers or the reason it was rejected, so the choice can be printed
// and checked.
//
// What it does not search yet: per-op shardings (Alpa's intra-op ILP),
// pipeline stages and microbatches, sequence parallelism. The cost model
// adds compute and communication (no overlap), which ranks plans of equal
// compute by their traffic; docs/strategies.md has the model.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_SEARCH_STRATEGYSEARCH_H
#define PARTITA_PASSES_SEARCH_STRATEGYSEARCH_H

#include "passes/Pipelines.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace partita::search {

/// The device and link the cost model prices a step on.
struct CostModel {
  /// Contraction FLOP/s a device sustains.
  double deviceFlops = 100e12;
  /// Bytes a second a device sends (each ring step's link).
  double linkBytesPerSecond = 100e9;
  /// Fixed cost of a communicator call (latency, launch), seconds.
  double callSeconds = 20e-6;
  /// Bytes a device may allocate for the plan; 0: no limit.
  int64_t memoryPerDevice = 0;
};

/// One strategy on one mesh, and what its plan costs.
struct Candidate {
  std::string strategy;
  /// "dp=2,tp=2", major axis first.
  std::string mesh;
  /// Empty when the candidate compiled; otherwise why it did not (the
  /// compiler's first error).
  std::string rejection;
  /// Per device and step, from the plan (PlanWork, PlanMemory::total).
  double flops = 0, wireBytes = 0;
  int64_t collectives = 0, calls = 0, memory = 0;
  /// The cost model's estimate: flops / deviceFlops, calls x callSeconds +
  /// wireBytes / linkBytesPerSecond, and their sum.
  double computeSeconds = 0, commSeconds = 0, seconds = 0;

  bool compiled() const { return rejection.empty(); }
  /// Compiled and within the memory limit.
  bool fits(const CostModel &model) const {
    return compiled() &&
           (model.memoryPerDevice <= 0 || memory <= model.memoryPerDevice);
  }
};

struct SearchResult {
  /// Every candidate: those that fit by estimated step time (then memory,
  /// then enumeration order), then those over the memory limit by memory,
  /// then those that did not compile, in enumeration order.
  std::vector<Candidate> candidates;
  /// candidates[0] when it fits, else none fits.
  bool found = false;
};

/// The (strategy, mesh) pairs the search compiles for `devices` devices:
/// every preset in `strategies` (empty: all of getStrategies()) on every
/// mesh whose axes are the ones it needs (data, tensor, context, under the
/// names in `annotate`), each at least 2, with product `devices`.
std::vector<Candidate>
enumerateCandidates(int64_t devices, llvm::ArrayRef<std::string> strategies,
                    const sharding::DistAnnotateOptions &annotate);

/// Compiles each candidate of `candidates` from a copy of `model` with
/// `base` (its strategy and mesh replaced), measures its plan and prices it
/// with `model`; `progress` (may be empty) is told after each one, with its
/// index. Diagnostics of a candidate that does not compile are kept as its
/// rejection, not reported. Returns the ranked result.
SearchResult
searchStrategies(mlir::ModuleOp model, const CompilerOptions &base,
                 std::vector<Candidate> candidates, const CostModel &cost,
                 const std::function<void(const Candidate &, size_t index,
                                          size_t count)> &progress = {});

/// The ranked table: one line per candidate (estimated step, compute and
/// communication time, calls, wire bytes, memory), or why it was rejected.
void printSearchTable(const SearchResult &result, const CostModel &cost,
                      llvm::raw_ostream &os);

/// The same as tab-separated values with exact numbers, a header line
/// first: rank (0 when it does not fit), strategy, mesh, seconds,
/// compute_seconds, comm_seconds, flops, wire_bytes, calls, collectives,
/// memory_bytes, rejection.
void writeSearchReport(const SearchResult &result, const CostModel &cost,
                       llvm::raw_ostream &os);

} // namespace partita::search

#endif // PARTITA_PASSES_SEARCH_STRATEGYSEARCH_H
