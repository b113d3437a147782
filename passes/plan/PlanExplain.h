//===- PlanExplain.h - what a plan costs, as text and numbers ---*- C++ -*-===//
//
// The report behind `partita explain` (and the Python package's
// Plan.explain()): a plan's mesh, memory per device with the formula behind
// each total, parameter shardings, collectives and gradient buckets, and for
// a train step the model state beside the ZeRO paper's accounting.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_PLAN_PLANEXPLAIN_H
#define PARTITA_PASSES_PLAN_PLANEXPLAIN_H

#include "runtime/plan/plan.pb.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>
#include <vector>

namespace partita::plan_lowering {

/// The memory totals of the report, in bytes per device.
struct PlanMemory {
  int64_t parameters = 0, inputs = 0, activations = 0, outputs = 0,
          constants = 0;
  /// Optimizer state buffers (moments, step counter).
  int64_t state = 0;
  /// A microbatched step: its gradient accumulators (STATE buffers marked
  /// `accumulator`), and the per-microbatch program's arena, inputs and
  /// collective buffers.
  int64_t accumulators = 0, microbatch = 0;
  /// A pipelined step's stage 0 (program 0 is its update): its forward and
  /// backward programs' arenas, inputs and collective buffers, and the
  /// slots of the microbatches in flight (pipeline::slotPeaks times each
  /// kind's bytes per microbatch).
  int64_t stagePrograms = 0, pipelineSlots = 0;
  /// Bytes stage 0 sends point to point per step (not memory).
  int64_t pipelineSends = 0;
  /// The static arena's peak (memory plan), and the same over activations
  /// kept in host memory.
  int64_t arenaPeak = 0, hostArena = 0;
  /// Outside the arena: the gradient buckets' bound (recycled buffers in
  /// flight) and the collectives' one transposition buffer.
  int64_t buckets = 0, scratch = 0;
  /// parameters + inputs + constants + state + arena peak + host arena +
  /// buckets + scratch (+ accumulators + microbatch + stagePrograms +
  /// pipelineSlots): what the runtime
  /// allocates.
  int64_t total = 0;
  /// A train step's model state (only when `hasModelState`).
  bool hasModelState = false;
  int64_t stateParameters = 0, stateGradients = 0, stateOptimizer = 0,
          stateCounter = 0, modelState = 0;
  /// A train step's activations kept for the backward, per model layer
  /// (index = `nn.layer`), and outside any layer.
  std::vector<int64_t> layerActivations;
  int64_t otherActivations = 0;
};

/// The communication of a step over one group of mesh axes.
struct PlanTraffic {
  /// The collectives' axes, as the plan lists them.
  std::vector<std::string> axes;
  /// Gradient reductions in buckets (dist-optimize-comm), issued as soon
  /// as their gradients exist: they may overlap the rest of the backward.
  bool bucketed = false;
  double wireBytes = 0;
  int64_t calls = 0;
};

/// The work of one step of a program on one device, for cost models
/// (`partita plan --strategy auto`): what `partita explain` counts, as
/// numbers.
struct PlanWork {
  /// Floating-point operations of the contractions on this device (einsums,
  /// attention and its gradients), as the plan's kernels carry them (the
  /// dialect's CostOpInterface at the local shapes, written by lowering).
  double flops = 0;
  /// FLOPs and bytes of memory read and written by every kernel, the
  /// contractions included: what the cost model prices compute by
  /// (DeviceRates::kernelSeconds).
  double kernelFlops = 0, kernelBytes = 0;
  /// Bytes this device sends under the ring algorithms (the explain
  /// report's "wire"), summed over the communicating collectives.
  double wireBytes = 0;
  /// Communicating collectives, and the communicator calls they make (a
  /// gradient bucket's members are one call).
  int64_t collectives = 0, calls = 0;
  /// The same bytes and calls by axes and bucketing, in first-use order.
  std::vector<PlanTraffic> traffic;
};

/// The work of one step of `program`: for the step program of a
/// microbatched plan (program 0 of a one-stage pipeline) with its
/// per-microbatch program's work times the microbatches. A pipelined
/// plan's stage programs are not counted.
PlanWork measurePlanWork(const plan::Plan &proto,
                         const plan::Program &program);

/// Prints the report on `program` of `proto` (a plan the runtime validated:
/// PlanFile::parse) to `os`, naming the plan `source`; returns its totals.
PlanMemory explainPlan(const plan::Plan &proto, const plan::Program &program,
                       llvm::StringRef source, llvm::raw_ostream &os);

} // namespace partita::plan_lowering

#endif // PARTITA_PASSES_PLAN_PLANEXPLAIN_H
