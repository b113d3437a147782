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
// A train step is also tried pipelined: P pipeline ranks along a
// major-most "pp" axis (P from 2, dividing N), each rank's N / P devices
// sharded by every preset (or by none: the pure pipeline "pp"), under each
// searched schedule (1f1b, zb-h1, interleaved with 2 stages a rank), cut at
// layer boundaries or balanced by cost, with the cut and the microbatch
// count (P, 2P, 4P, ...) that price best. A pipelined step is priced by
// simulating its schedule (runtime/PipelineSchedule.h) with each stage's
// forward, backward, send and update times from its own programs; its
// memory is its largest rank's.
//
// What it does not search yet: per-op shardings (Alpa's intra-op ILP), and
// more than kInterleavedChunks chunks. The cost model (docs/strategies.md)
// adds compute and the communication the backward does not hide, with
// links inside and across nodes.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_SEARCH_STRATEGYSEARCH_H
#define PARTITA_PASSES_SEARCH_STRATEGYSEARCH_H

#include "passes/Pipelines.h"
#include "passes/plan/PlanExplain.h"
#include "passes/sharding/DeviceRates.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace partita::search {

/// The devices and links the cost model prices a step on (DeviceRates:
/// FLOP/s, links inside and across nodes, a call's cost), and what only the
/// search prices.
struct CostModel : sharding::DeviceRates {
  /// The share of a train step's compute that is its backward, which the
  /// bucketed gradient reductions may hide behind (forward 1, backward 2).
  double backwardShare = 2.0 / 3.0;
  /// Bytes a device may allocate for the plan; 0: no limit.
  int64_t memoryPerDevice = 0;
};

/// One pipeline stage of a pipelined candidate as the cost model prices
/// it: seconds per microbatch of its forward, its backward (the input
/// gradient B and the weight gradient W of a split backward; a full
/// backward is all B), one send (its larger message: activations to the
/// next stage or gradients to the previous one), and its once-per-step
/// update (gradient reductions and optimizer); its memory per device
/// (explain's total).
struct StageCost {
  double forward = 0, backwardInput = 0, backwardWeight = 0, send = 0,
         update = 0;
  int64_t memory = 0;
};

/// One strategy on one mesh, and what its plan costs.
struct Candidate {
  /// The preset's name, with "+sp" when sequenceParallel.
  std::string strategy;
  /// The preset, and whether Megatron sequence parallelism is on.
  std::string preset;
  bool sequenceParallel = false;
  /// "dp=2,tp=2", major axis first; a pipelined candidate's starts with
  /// "pp=P".
  std::string mesh;
  /// Microbatches a step: a pipelined step's (the count that priced best);
  /// otherwise gradient accumulation, > 1 only for a train step tried again
  /// because it did not fit.
  int64_t microbatches = 1;
  /// The same as (name, size) pairs.
  std::vector<std::pair<std::string, int64_t>> axes;
  /// Pipeline ranks (the "pp" axis; 1: not pipelined), their schedule
  /// ("1f1b", "zb-h1", "interleaved") and how the model is cut into stages
  /// ("layers": at layer boundaries, "cost": balanced by cost,
  /// `--stages-by`); empty when not pipelined. Each rank runs `chunks`
  /// stages (kInterleavedChunks for interleaved, else 1).
  int64_t pipelineStages = 1, chunks = 1;
  std::string schedule, stagesBy;
  /// Empty when the candidate compiled; otherwise why it did not (the
  /// compiler's first error).
  std::string rejection;
  /// Per device and step, from the plan: its FLOPs, wire bytes, calls and
  /// traffic by axes (measurePlanWork), and its memory (PlanMemory::total).
  /// A pipelined candidate's are its busiest pipeline rank's (the most
  /// compute and communication a step; a rank runs one stage per chunk):
  /// its stages' programs' work, the microbatch programs' times the
  /// microbatches, with its sends as traffic over "pp"; its memory is the
  /// largest rank's, its stages' together.
  plan_lowering::PlanWork work;
  int64_t memory = 0;
  /// The cost model's estimate: compute = FLOPs / deviceFlops; comm = the
  /// sum over the step's traffic of calls x callSeconds + wire bytes / the
  /// rate of its group's slowest link; hidden = the part of the bucketed
  /// gradient reductions' comm that fits in backwardShare x compute (train
  /// steps only; 0 pipelined: a stage's reductions run in its update);
  /// bubble = a pipelined step's simulated makespan minus its busiest
  /// stage's compute + comm (0 otherwise); seconds = compute + comm -
  /// hidden + bubble.
  double computeSeconds = 0, commSeconds = 0, hiddenSeconds = 0,
         bubbleSeconds = 0, seconds = 0;
  /// A pipelined candidate's stages, in stage order (empty otherwise): stage
  /// t runs on pipeline rank t mod pipelineStages.
  std::vector<StageCost> stages;
  /// Whether some collective's group spans nodes.
  bool crossesNodes = false;
  /// Its place among the candidates that fit, from 1, once searched; 0
  /// when it does not fit.
  int64_t rank = 0;

  bool compiled() const { return rejection.empty(); }
  bool pipelined() const { return pipelineStages > 1; }
  /// The mesh each pipeline stage is sharded on: `mesh` without "pp=P"
  /// (empty for the pure pipeline).
  std::string stageMesh() const;
  /// Compiled and within the memory limit.
  bool fits(const CostModel &model) const {
    return compiled() &&
           (model.memoryPerDevice <= 0 || memory <= model.memoryPerDevice);
  }
};

/// Model chunks a pipeline rank runs under the interleaved schedule
/// (`--chunks`, Megatron-LM's virtual stages).
inline constexpr int64_t kInterleavedChunks = 2;

/// How the search cuts a pipelined candidate into stages (`--stages-by`).
inline constexpr const char *kStageCuts[] = {"layers", "cost"};

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

/// What the search enumerates.
struct SearchSpace {
  /// Strategy names (searchableStrategies()); empty: all.
  std::vector<std::string> strategies;
  /// Every order of a mesh's axes too (which axis is inside a node matters
  /// when the cost model has nodes).
  bool axisOrders = false;
  /// The pipeline schedules to try (searchableSchedules()); empty: no
  /// pipelined candidates (a forward step never has them).
  std::vector<std::string> schedules;
};

/// The (strategy, mesh) pairs the search compiles for `devices` devices:
/// every preset of getStrategies(), and megatron and dp+megatron also with
/// sequence parallelism ("megatron+sp", "dp+megatron+sp"; the pairs
/// `partita plan --sequence-parallel` takes), whose name is in
/// `space.strategies` (empty: all), on every mesh whose axes are the ones it
/// needs (data, tensor, context, under the names in `annotate`, in that
/// order), each at least 2, with product `devices` (in every order with
/// `space.axisOrders`). Then, for each schedule of `space.schedules` and
/// each P from 2 dividing `devices`, the pipelined candidates: "pp=P" before
/// every such mesh of devices / P devices (and "pp" alone, the pure
/// pipeline, when P = devices), with P microbatches to start from.
std::vector<Candidate>
enumerateCandidates(int64_t devices, const SearchSpace &space,
                    const sharding::DistAnnotateOptions &annotate);

/// The names enumerateCandidates knows, in its order: every preset, and
/// "megatron+sp", "dp+megatron+sp" after their presets; then "pp", the
/// pure pipeline (searched only with schedules); then "ilp", every op's
/// sharding by dist-auto-shard on each mesh of one or two axes (searched
/// only when named, and not pipelined).
std::vector<std::string> searchableStrategies();

/// The pipeline schedules the search prices: "1f1b", "zb-h1",
/// "interleaved" (kInterleavedChunks chunks a rank).
std::vector<std::string> searchableSchedules();

/// Why `name` is no schedule the search prices, or empty.
std::string checkSearchableSchedule(llvm::StringRef name);

/// dist-auto-shard's options (`--strategy ilp`) for the rates and memory
/// limit of `cost`: the one cost model in the pass's units.
autoshard::DistAutoShardOptions toAutoShardOptions(const CostModel &cost);

/// Sets `options` to compile `candidate`: its preset, sequence
/// parallelism, stage mesh, microbatches and pipeline (stages, cut and
/// schedule); for ilp, dist-auto-shard's rates from `cost` (without its
/// argument cap: the search's limit is the plan's memory).
void applyCandidate(const Candidate &candidate, const CostModel &cost,
                    CompilerOptions &options);

/// Compiles each candidate of `candidates` from a copy of `model` with
/// `base` (its strategy and mesh replaced), measures its plan and prices it
/// with `model`; `progress` (may be empty) is told after each one, with its
/// index. A train step over a memory limit is tried again with 2, 4, ...
/// kMaxMicrobatches microbatches until it fits (the first that fits is
/// added as a candidate of its own) or stops compiling. A pipelined
/// candidate is compiled cut by layers and by cost (kStageCuts), each with
/// P, 2P, 4P, ... kMaxMicrobatches microbatches while the estimate improves
/// and the batch divides; it keeps the fastest cut and count that fit
/// (else the smallest). Once the pipeline split itself fails for some stage
/// count (ranks x chunks) under every cut (more stages than the model can
/// be cut into), the other candidates with that count are left out without
/// compiling. Diagnostics of a candidate that does not compile are kept as
/// its rejection, not reported. Returns the ranked result.
SearchResult
searchStrategies(mlir::ModuleOp model, const CompilerOptions &base,
                 std::vector<Candidate> candidates, const CostModel &cost,
                 const std::function<void(const Candidate &, size_t index,
                                          size_t count)> &progress = {});

/// The ranked table: one line per candidate (estimated step, compute,
/// communication, hidden and bubble time, calls, wire bytes, memory), or
/// why it was rejected.
void printSearchTable(const SearchResult &result, const CostModel &cost,
                      llvm::raw_ostream &os);

/// The same as tab-separated values with exact numbers, a header line
/// first: rank (0 when it does not fit), strategy, mesh, microbatches,
/// schedule and stages_by ("-" when not pipelined), seconds, compute_seconds,
/// comm_seconds, hidden_seconds, bubble_seconds, flops (the contractions'),
/// kernel_flops and kernel_bytes (every kernel's), wire_bytes, calls,
/// collectives, memory_bytes, crosses_nodes (0 or 1), traffic (per group of
/// axes "AXES/bucketed|plain/CALLS/WIRE_BYTES", AXES joined by "+", entries
/// by ";"), stages (per pipeline stage
/// "FORWARD/BACKWARD_INPUT/BACKWARD_WEIGHT/SEND/UPDATE/MEMORY", seconds and
/// bytes, entries by ";"; empty when not pipelined), rejection.
void writeSearchReport(const SearchResult &result, llvm::raw_ostream &os);

} // namespace partita::search

#endif // PARTITA_PASSES_SEARCH_STRATEGYSEARCH_H
