//===- Pricing.cpp - the cost model applied to a compiled plan -------------===//
//
// Measures a candidate's plan (PlanExplain.h) and prices it: compute (every
// kernel's FLOPs and memory bytes, as lowering wrote them from the dialect's
// CostOpInterface, by DeviceRates::kernelSeconds: the same formula
// dist-auto-shard prices an op by) and communication by the cost model, the
// overlap of bucketed gradient reductions, and for a pipeline its schedule
// simulated with each stage's times (PipelineSchedule.h).
//
//===----------------------------------------------------------------------===//

#include "passes/search/Pricing.h"

#include "passes/pipeline/Passes.h"
#include "passes/plan/PlanExplain.h"
#include "passes/sharding/MeshSpec.h"
#include "partita/runtime/PipelineSchedule.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <optional>

using namespace llvm;

namespace partita::search {

using sharding::groupSpansNodes;

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

/// Seconds of `work`'s kernels (DeviceRates::kernelSeconds).
static double computeSeconds(const plan_lowering::PlanWork &work,
                             const CostModel &cost) {
  return cost.kernelSeconds(work.kernelFlops, work.kernelBytes);
}

/// `work` plus `more` times `times` (traffic merged by axes and bucketing).
static void addWork(plan_lowering::PlanWork &work,
                    const plan_lowering::PlanWork &more, int64_t times) {
  work.flops += double(times) * more.flops;
  work.kernelFlops += double(times) * more.kernelFlops;
  work.kernelBytes += double(times) * more.kernelBytes;
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
/// them (sends buffered, as the executor posts them), its busiest pipeline
/// rank's work as the candidate's. Returns an error, or empty.
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
      return computeSeconds(one, cost) + commSeconds(one, candidate.axes, cost,
                                                     bucketed,
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
  // The busiest pipeline rank (most compute and communication a step: its
  // stages, one per chunk, together) stands for the candidate; the rest of
  // the makespan is the bubble. A rank holds every chunk's stage, so its
  // memory is their sum.
  int ranks = std::max(1, schedule.ranks());
  std::vector<plan_lowering::PlanWork> rankWorks(ranks);
  std::vector<int64_t> rankMemory(ranks, 0);
  for (size_t t = 0; t < works.size(); ++t) {
    addWork(rankWorks[t % ranks], works[t], 1);
    rankMemory[t % ranks] += candidate.stages[t].memory;
  }
  double busiest = -1;
  for (int r = 0; r < ranks; ++r) {
    double bucketed = 0;
    bool crosses = false;
    double compute = computeSeconds(rankWorks[r], cost);
    double comm =
        commSeconds(rankWorks[r], candidate.axes, cost, bucketed, crosses);
    if (compute + comm > busiest) {
      busiest = compute + comm;
      candidate.work = rankWorks[r];
      candidate.computeSeconds = compute;
      candidate.commSeconds = comm;
    }
    candidate.memory = std::max(candidate.memory, rankMemory[r]);
  }
  candidate.hiddenSeconds = 0;
  // A stage that sends gradients smaller than its activations (or the
  // reverse) is priced at its larger message in the simulation, and a
  // receive takes the time of its message on the receiver too: the
  // makespan exceeds the busiest rank's compute and comm by those and the
  // idle time, never falls below it but by rounding.
  candidate.bubbleSeconds = std::max(0.0, simulation.makespan - busiest);
  candidate.seconds = candidate.computeSeconds + candidate.commSeconds +
                      candidate.bubbleSeconds;
  return "";
}

std::string pricePlan(Candidate &candidate, const plan::Plan &plan,
                      StringRef stepProgram, bool train,
                      const CostModel &cost) {
  if (candidate.pipelined())
    return pricePipeline(candidate, plan, cost);
  const plan::Program *program = nullptr;
  for (const plan::Program &p : plan.programs())
    if (p.name() == stepProgram)
      program = &p;
  if (!program)
    return ("its plan has no program '" + stepProgram + "'").str();
  candidate.work = plan_lowering::measurePlanWork(plan, *program);
  candidate.memory =
      plan_lowering::explainPlan(plan, *program, "", nulls()).total;
  candidate.computeSeconds = computeSeconds(candidate.work, cost);
  double bucketed = 0;
  candidate.commSeconds = commSeconds(candidate.work, candidate.axes, cost,
                                      bucketed, candidate.crossesNodes);
  if (train)
    candidate.hiddenSeconds =
        std::min(bucketed, cost.backwardShare * candidate.computeSeconds);
  candidate.seconds =
      candidate.computeSeconds + candidate.commSeconds - candidate.hiddenSeconds;
  return "";
}

} // namespace partita::search
