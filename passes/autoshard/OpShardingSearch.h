//===- OpShardingSearch.h - every op's sharding, chosen by an ILP -*- C++ -*-===//
//
// The per-op sharding search of `dist-auto-shard` (`partita plan --strategy
// ilp`), after Alpa's intra-operator pass (Zheng et al. 2022, section 4):
// on one mesh, every op of a function picks how its factors (its sharding
// rule, ShardingRule.h) are split over the mesh axes, every argument how it
// is laid out, and the choices together minimise the estimated step time:
// - an op's choice costs its compute at the local shapes it implies
//   (CostOpInterface: FLOPs at the device rate, bytes read and written at
//   the memory rate);
// - a value whose producer writes one sharding and whose consumer reads
//   another costs the cheapest reshard between them (the partitioner's
//   planner, Reshard.h: bytes over the link of the axes involved, plus a
//   fixed cost a collective call); a sharded reduction factor leaves its
//   result partial, so the reduction is priced where a consumer needs it
//   whole; the reductions (all-reduces, reduce-scatters) of the reshards
//   into an optimizer update, which dist-optimize-comm buckets, pay their
//   bytes and one call for all (any other step, a gather, its own call);
// - a train step's updated parameter or state must come back in its
//   argument's layout, so ZeRO-like layouts (update sharded, gradients
//   reduce-scattered, parameters gathered) are priced like any other;
// - a model input (`nn.input`) is written anew every step: its bytes per
//   device at the memory rate;
// - the arguments' bytes per device (parameters, optimizer state, inputs)
//   may be capped; activations are not counted;
// - the bucketed gradient reductions may run behind overlapShare of the
//   step's compute, as the strategy search prices a plan (Pricing.h):
//   min(their time, that share) comes off the estimate.
// ChoiceILP.h solves it with CBC. The choices are written as closed
// annotations on every argument, op result and function result, with a
// `dist.constraint` before each op that reads a value in another layout
// than it was written in; dist-propagate then has nothing to choose, and
// dist-partition turns each constraint into the reshard that was priced.
//
// A factor that needs a collective-aware local form (FactorKind::Collective:
// softmax's and the norms' reduced dimension, the embedding's vocabulary) is
// a choice when the op's partition hook builds that form under the
// partitioner's options; the choice is priced by the form the hook builds.
//
// What it leaves out: the vocabulary-parallel cross-entropy and split-key
// attention unless the partitioner's options turn them on; a dimension made
// of several factors splits only its major one; a value read in one other
// layout by several ops is priced once per op but resharded once;
// the overlap of the bucketed gradient reductions is the strategy search's
// (up to overlapShare of all the compute), not a schedule's.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_AUTOSHARD_OPSHARDINGSEARCH_H
#define PARTITA_PASSES_AUTOSHARD_OPSHARDINGSEARCH_H

#include "dialects/dist/IR/PartitionHooks.h"
#include "dialects/dist/IR/ShardingModel.h"
#include "passes/autoshard/ChoiceILP.h"
#include "passes/sharding/DeviceRates.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/LLVM.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace partita::autoshard {

/// The rates the search prices a choice at: the strategy search's devices,
/// memory and links (DeviceRates), and what only this search takes.
struct CostRates : sharding::DeviceRates {
  /// Bytes of arguments a device may hold; 0: no limit.
  double memoryPerDevice = 0;
  /// CBC's time limit; it keeps its best solution when it stops.
  double timeLimitSeconds = 60;
  /// How the program is solved: cbc (with the greedy heuristic, and on a
  /// mesh of several axes the one-axis answer, as fallbacks when its time
  /// runs out), greedy (the heuristic alone), or one-axis (CBC on the
  /// mesh's devices as one axis, a smaller program, mapped back and improved
  /// by single moves).
  enum class Solver { CBC, Greedy, OneAxis } solver = Solver::CBC;
  /// The partitioner's opt-in local forms (its options), so that the
  /// collective factors offered split are those dist-partition will split.
  dist::PartitionHookOptions partitionHooks;
  /// Whether dist-partition returns a partial value partial (its option of
  /// that name): a function result may then be read partial, for free.
  bool keepPartialResults = true;
  /// The share of the compute behind which the gradient reductions into
  /// optimizer updates (bucketed) may run: the search's backwardShare; 0
  /// when dist-optimize-comm does not overlap them.
  double overlapShare = 2.0 / 3.0;
};

/// The solver named `name` ("cbc", "greedy" or "one-axis": the pass's
/// `solver` option, `partita plan --ilp-solver`), or none.
std::optional<CostRates::Solver> parseSolver(std::string_view name);

/// What the search solved and what it estimates for its choice.
struct AutoShardReport {
  /// Nodes (ops, arguments and unpaired function results) and their
  /// choices in all.
  int64_t nodes = 0, choices = 0;
  /// The nodes left once those their neighbours decide are taken out
  /// (reduceChoices), and the integer programs CBC solved for them (two
  /// when the gradient buckets' call was priced both paid and avoided),
  /// their sizes summed.
  ProgramSize program;
  /// "optimal" (CBC proved it), "time-limit" (CBC's best when its time
  /// limit stopped it), "bounded" (the best of the programs that weight the
  /// overlap, within gapSeconds of their bound), "rounded" (the
  /// relaxation's largest choices
  /// improved by single moves, CBC having found nothing better in time),
  /// "heuristic" (the greedy heuristic's, CBC having
  /// found nothing better in time), "one-axis" (solver one-axis) or
  /// "one-axis-fallback" (on a mesh of several axes that CBC did not
  /// finish, the one-axis answer was better).
  std::string method;
  /// The estimate of the chosen shardings: the ops' compute, the reshards'
  /// communication, the part of it hidden behind compute, and the
  /// arguments' bytes per device. The step is compute + comm - hidden.
  double computeSeconds = 0, commSeconds = 0, hiddenSeconds = 0,
         argumentBytes = 0;
  /// "bounded": how far above a lower bound the step's estimate may be.
  double gapSeconds = 0;
  /// `dist.constraint` ops written (reshards).
  int64_t reshards = 0;
};

/// Chooses and writes the sharding of every tensor of `func` on `mesh` (see
/// the file comment). Arguments that already carry `dist.sharding` keep it.
/// Fails, with a diagnostic, on a function it cannot take (more than one
/// block, ops with regions, calls, `dist.constraint` or annotated op
/// results, dynamic shapes) or when no choice fits the memory limit.
mlir::FailureOr<AutoShardReport> autoShardFunction(mlir::func::FuncOp func,
                                                   const dist::Mesh &mesh,
                                                   const CostRates &rates);

} // namespace partita::autoshard

#endif // PARTITA_PASSES_AUTOSHARD_OPSHARDINGSEARCH_H
