//===- StrategySearch.h - choose a strategy and mesh by cost -----*- C++ -*-===//
//
// The first automatic search (`partita plan --strategy auto --devices N`):
// every strategy preset of dist-annotate (megatron and dp+megatron also
// with sequence parallelism) on every mesh of N devices it can use (each of
// its axes at least 2, their product N) is compiled to a plan,
// its step measured from the plan (PlanExplain.h: memory per device, FLOPs,
// bytes on the wire, communicator calls) and priced by a simple cost model;
// the cheapest that fits the memory limit wins. Every candidate is kept with
// its numbers or the reason it was rejected, so the choice can be printed
// and checked.
//
// What it does not search yet: per-op shardings (Alpa's intra-op ILP) and
// pipeline stages; microbatches only to fit a memory limit. The cost model
// (docs/strategies.md) adds compute and the communication the backward does
// not hide, with links inside and across nodes.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_SEARCH_STRATEGYSEARCH_H
#define PARTITA_PASSES_SEARCH_STRATEGYSEARCH_H

#include "passes/Pipelines.h"
#include "passes/plan/PlanExplain.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace partita::search {

/// The devices and links the cost model prices a step on.
struct CostModel {
  /// Contraction FLOP/s a device sustains.
  double deviceFlops = 100e12;
  /// Bytes a second a device sends to a device of its node (each ring
  /// step's link).
  double linkBytesPerSecond = 100e9;
  /// Devices a node holds, numbered consecutively (the mesh is laid out
  /// row-major over device numbers, its last axis fastest); 0: one node.
  int64_t devicesPerNode = 0;
  /// Bytes a second a device sends to another node: a collective whose
  /// group spans nodes runs at this rate.
  double nodeLinkBytesPerSecond = 25e9;
  /// Fixed cost of a communicator call (latency, launch), seconds.
  double callSeconds = 20e-6;
  /// The share of a train step's compute that is its backward, which the
  /// bucketed gradient reductions may hide behind (forward 1, backward 2).
  double backwardShare = 2.0 / 3.0;
  /// Bytes a device may allocate for the plan; 0: no limit.
  int64_t memoryPerDevice = 0;
};

/// One strategy on one mesh, and what its plan costs.
struct Candidate {
  /// The preset's name, with "+sp" when sequenceParallel.
  std::string strategy;
  /// The preset, and whether Megatron sequence parallelism is on.
  std::string preset;
  bool sequenceParallel = false;
  /// "dp=2,tp=2", major axis first.
  std::string mesh;
  /// Microbatches a step (gradient accumulation); > 1 only for a train
  /// step tried again because it did not fit.
  int64_t microbatches = 1;
  /// The same as (name, size) pairs.
  std::vector<std::pair<std::string, int64_t>> axes;
  /// Empty when the candidate compiled; otherwise why it did not (the
  /// compiler's first error).
  std::string rejection;
  /// Per device and step, from the plan: its FLOPs, wire bytes, calls and
  /// traffic by axes (measurePlanWork), and its memory (PlanMemory::total).
  plan_lowering::PlanWork work;
  int64_t memory = 0;
  /// The cost model's estimate: compute = FLOPs / deviceFlops; comm = the
  /// sum over the step's traffic of calls x callSeconds + wire bytes / the
  /// rate of its group's slowest link; hidden = the part of the bucketed
  /// gradient reductions' comm that fits in backwardShare x compute (train
  /// steps only); seconds = compute + comm - hidden.
  double computeSeconds = 0, commSeconds = 0, hiddenSeconds = 0,
         seconds = 0;
  /// Whether some collective's group spans nodes.
  bool crossesNodes = false;
  /// Its place among the candidates that fit, from 1, once searched; 0
  /// when it does not fit.
  int64_t rank = 0;

  bool compiled() const { return rejection.empty(); }
  /// Compiled and within the memory limit.
  bool fits(const CostModel &model) const {
    return compiled() &&
           (model.memoryPerDevice <= 0 || memory <= model.memoryPerDevice);
  }
};

/// The most microbatches the search tries a candidate with (2, 4, ...).
constexpr int64_t kMaxMicrobatches = 64;

/// The device counts the search takes.
constexpr int64_t kMinDevices = 2, kMaxDevices = 4096;

/// Why the search cannot plan for `devices` devices ("devices must be from
/// 2 to 4096, got 1"), or empty.
std::string checkDevices(int64_t devices);

/// Why `name` is no strategy the search knows ("unknown strategy 'x':
/// expected dp, ..."), or empty.
std::string checkSearchable(llvm::StringRef name);

struct SearchResult {
  /// Every candidate: those that fit by estimated step time (then memory,
  /// then enumeration order), then those over the memory limit by memory,
  /// then those that did not compile, in enumeration order.
  std::vector<Candidate> candidates;
  /// candidates[0] when it fits, else none fits.
  bool found = false;
};

/// The (strategy, mesh) pairs the search compiles for `devices` devices:
/// every preset of getStrategies(), and megatron and dp+megatron also with
/// sequence parallelism ("megatron+sp", "dp+megatron+sp"; the pairs
/// `partita plan --sequence-parallel` takes), whose name is in `strategies`
/// (empty: all), on every mesh whose axes are the ones it needs (data,
/// tensor, context, under the names in `annotate`, in that order), each at
/// least 2, with product `devices`. With `axisOrders`, every order of the
/// axes too (which axis is inside a node matters when the cost model has
/// nodes).
std::vector<Candidate>
enumerateCandidates(int64_t devices, llvm::ArrayRef<std::string> strategies,
                    const sharding::DistAnnotateOptions &annotate,
                    bool axisOrders = false);

/// The names enumerateCandidates knows, in its order: every preset, and
/// "megatron+sp", "dp+megatron+sp" after their presets.
std::vector<std::string> searchableStrategies();

/// Whether some group of devices that differ only in `groupAxes` of the
/// mesh `axes` (row-major over device numbers) holds devices of two nodes
/// of `devicesPerNode` (0: one node).
bool groupSpansNodes(llvm::ArrayRef<std::pair<std::string, int64_t>> axes,
                     llvm::ArrayRef<std::string> groupAxes,
                     int64_t devicesPerNode);

/// Compiles each candidate of `candidates` from a copy of `model` with
/// `base` (its strategy and mesh replaced), measures its plan and prices it
/// with `model`; `progress` (may be empty) is told after each one, with its
/// index. A train step over a memory limit is tried again with 2, 4, ...
/// kMaxMicrobatches microbatches until it fits (the first that fits is
/// added as a candidate of its own) or stops compiling. Diagnostics of a
/// candidate that does not compile are kept as its rejection, not
/// reported. Returns the ranked result.
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
/// first: rank (0 when it does not fit), strategy, mesh, microbatches, seconds,
/// compute_seconds, comm_seconds, hidden_seconds, flops, wire_bytes, calls,
/// collectives, memory_bytes, crosses_nodes (0 or 1), traffic (per group of
/// axes "AXES/bucketed|plain/CALLS/WIRE_BYTES", AXES joined by "+", entries
/// by ";"), rejection.
void writeSearchReport(const SearchResult &result, llvm::raw_ostream &os);

} // namespace partita::search

#endif // PARTITA_PASSES_SEARCH_STRATEGYSEARCH_H
