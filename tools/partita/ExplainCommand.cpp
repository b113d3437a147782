//===- ExplainCommand.cpp - `partita explain`: what a plan costs ----------===//
//
// Loads a plan (validated by the runtime exactly as `partita run` loads it)
// and prints the report of passes/plan/PlanExplain.h on its step program.
// With --schedule it draws the plan's pipeline schedule instead
// (passes/plan/PipelineChart.h), or, with --pp and --microbatches and no
// plan, a named schedule or a --schedule-file.
//
// Compiled with exceptions: the runtime reports errors as runtime::Error.
//
//===----------------------------------------------------------------------===//

#include "tools/partita/Driver.h"

#include "partita/runtime/Executor.h"
#include "partita/runtime/PipelineSchedule.h"
#include "passes/plan/PipelineChart.h"
#include "passes/plan/PlanExplain.h"
#include "runtime/plan/plan.pb.h"

#include "llvm/Support/raw_ostream.h"

#include <fstream>
#include <sstream>

using namespace llvm;
namespace rt = partita::runtime;

namespace partita::driver {
namespace {
cl::SubCommand explainCommand("explain",
                              "Print a plan's mesh, memory per device, "
                              "parameter shardings and collectives");

cl::opt<std::string> planFile(cl::Positional, cl::sub(explainCommand),
                              cl::desc("<plan.pb>"));

// `--schedule` alone draws the plan's schedule; with --pp (no plan) the
// word after it names the schedule: `--schedule 1f1b` leaves "1f1b" to the
// positional argument, since an optional value binds only with '='.
cl::opt<std::string> scheduleArg(
    "schedule", cl::sub(explainCommand), cl::ValueOptional,
    cl::desc("Draw the pipeline schedule: the plan's, or with --pp the named "
             "one (gpipe, 1f1b, interleaved, zb-h1)"),
    cl::value_desc("kind"));
cl::opt<std::string> scheduleFileArg(
    "schedule-file", cl::sub(explainCommand),
    cl::desc("Draw a hand-written schedule (docs/pipeline.md), with --pp and "
             "--microbatches"),
    cl::value_desc("file"));
cl::opt<std::string> ppArg("pp", cl::sub(explainCommand),
                           cl::desc("Pipeline ranks, for a schedule without "
                                    "a plan"),
                           cl::value_desc("P"));
cl::opt<std::string> microbatchesArg(
    "microbatches", cl::sub(explainCommand),
    cl::desc("Microbatches, for a schedule without a plan"),
    cl::value_desc("M"));
cl::opt<std::string> chunksArg(
    "chunks", cl::sub(explainCommand),
    cl::desc("Model chunks per rank (interleaved; default 2 for it, else 1)"),
    cl::value_desc("V"));
cl::opt<int> stageArg(
    "stage", cl::sub(explainCommand), cl::init(-1), cl::value_desc("S"),
    cl::desc("A pipelined plan: explain stage S (its update, forward and "
             "backward programs, slots and traffic; default stage 0)"));
cl::opt<std::string> svgArg("svg", cl::sub(explainCommand),
                            cl::desc("Also draw the schedule as SVG"),
                            cl::value_desc("file.svg"));
cl::opt<std::string> htmlArg("html", cl::sub(explainCommand),
                             cl::desc("Also write an HTML page with the "
                                      "schedule"),
                             cl::value_desc("file.html"));

constexpr StringLiteral kCommand = "explain";

int writeText(StringRef path, const std::string &text) {
  std::ofstream out(path.str(), std::ios::binary);
  out << text;
  out.close();
  if (!out)
    return reportError(kCommand, "cannot write '" + path + "'");
  return 0;
}

// Validates, simulates and draws `schedule`; `source` names it in errors.
int drawSchedule(const rt::pipeline::Schedule &schedule,
                 const std::string &source) {
  namespace pp = rt::pipeline;
  if (std::optional<pp::ScheduleError> error = pp::validate(schedule))
    return reportError(kCommand, "invalid pipeline schedule (" + source +
                                     "): " + pp::toString(*error));
  plan_lowering::ScheduleChart chart;
  chart.schedule = &schedule;
  chart.source = source;
  try {
    chart.simulation = pp::simulate(schedule, chart.costs);
    chart.bufferedBubble =
        pp::simulate(schedule, chart.costs, pp::SendMode::Buffered)
            .bubbleFraction;
  } catch (const rt::Error &e) {
    return reportError(kCommand, e.what());
  }
  plan_lowering::printScheduleChart(chart, outs());
  if (!svgArg.empty() &&
      writeText(svgArg, plan_lowering::renderScheduleSvg(chart)))
    return 1;
  if (!htmlArg.empty() &&
      writeText(htmlArg, plan_lowering::renderScheduleHtml(chart)))
    return 1;
  return 0;
}

// A schedule without a plan: named by --schedule or read from
// --schedule-file, sized by --pp, --microbatches and --chunks.
int explainScheduleOnly() {
  // The kind comes with '=' or as the positional word (see scheduleArg).
  std::string kind = scheduleArg.empty() ? planFile : scheduleArg;
  if (!scheduleArg.empty() && !planFile.empty())
    return reportError(kCommand, "a plan ('" + planFile +
                                     "') and --pp both given: --pp sizes a "
                                     "schedule without a plan");
  if (!scheduleFileArg.empty() && !kind.empty())
    return reportError(kCommand, "--schedule-file " + scheduleFileArg +
                                     " and '" + kind +
                                     "' both given: give one schedule");
  if (kind.empty() && scheduleFileArg.empty())
    return reportError(kCommand, "--pp needs --schedule KIND or "
                                 "--schedule-file FILE");
  if (microbatchesArg.empty())
    return reportError(kCommand, "--pp needs --microbatches M");
  int64_t ranks = 0, microbatches = 0,
          chunks = kind == "interleaved" ? 2 : 1;
  if (parseInteger(kCommand, ppArg, ranks) ||
      parseInteger(kCommand, microbatchesArg, microbatches) ||
      (!chunksArg.empty() && parseInteger(kCommand, chunksArg, chunks)))
    return 1;
  auto small = [](int64_t x) { return x >= -(1 << 20) && x <= (1 << 20); };
  if (!small(ranks) || !small(microbatches) || !small(chunks))
    return reportError(kCommand, "--pp, --microbatches and --chunks must be "
                                 "at most 1048576");
  rt::pipeline::Schedule schedule;
  std::string source;
  try {
    if (!scheduleFileArg.empty()) {
      source = scheduleFileArg;
      schedule = rt::pipeline::parseScheduleFile(scheduleFileArg, ranks,
                                                 microbatches, chunks);
    } else {
      source = "generated";
      schedule =
          rt::pipeline::makeSchedule(kind, ranks, microbatches, chunks);
    }
  } catch (const rt::Error &e) {
    return reportError(kCommand, e.what());
  }
  return drawSchedule(schedule, source);
}

// The plan's own schedule (Plan.pipeline).
int explainPlanSchedule() {
  if (!microbatchesArg.empty() || !chunksArg.empty())
    return reportError(kCommand, "--microbatches and --chunks size a "
                                 "schedule without a plan (with --pp); a "
                                 "plan carries its own");
  plan::Plan proto;
  try {
    rt::PlanFile::load(planFile);
    std::ifstream in(planFile, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    if (!in || !proto.ParseFromString(bytes.str()))
      return reportError(kCommand, "cannot read plan file '" + planFile + "'");
  } catch (const rt::Error &e) {
    return reportError(kCommand, e.what());
  }
  if (!proto.has_pipeline())
    return reportError(kCommand, planFile +
                                     ": the plan has no pipeline schedule "
                                     "(Plan.pipeline is not set)");
  rt::pipeline::Schedule schedule;
  try {
    schedule = rt::pipeline::fromProto(proto.pipeline());
  } catch (const rt::Error &e) {
    return reportError(kCommand, planFile + ": " + e.what());
  }
  return drawSchedule(schedule, planFile);
}

int runExplain() {
  if (!ppArg.empty())
    return explainScheduleOnly();
  if (!scheduleFileArg.empty())
    return reportError(kCommand, "--schedule-file needs --pp P and "
                                 "--microbatches M");
  if (scheduleArg.getNumOccurrences()) {
    if (!scheduleArg.empty())
      return reportError(kCommand, "--schedule=" + scheduleArg +
                                       " names a schedule: give --pp P and "
                                       "--microbatches M too");
    if (planFile.empty())
      return reportError(kCommand, "--schedule needs a plan (partita explain "
                                   "PLAN.pb --schedule) or --pp P "
                                   "--microbatches M");
    return explainPlanSchedule();
  }
  if (!svgArg.empty() || !htmlArg.empty() || !microbatchesArg.empty() ||
      !chunksArg.empty())
    return reportError(kCommand, "--svg, --html, --microbatches and --chunks "
                                 "go with --schedule");
  if (planFile.empty())
    return reportError(kCommand, "missing the plan file (partita explain "
                                 "PLAN.pb)");
  return explainPlanFile(planFile, stageArg.getNumOccurrences() ? stageArg
                                                                 : -1);
}
} // namespace

int explainPlanFile(StringRef path, int stage) {
  std::string planFile = path.str();
  plan::Plan proto;
  std::string programName;
  try {
    // The runtime's own validation: a plan explained is a plan that loads.
    std::shared_ptr<const rt::PlanFile> loaded = rt::PlanFile::load(planFile);
    programName = loaded->programNames().front();
    std::ifstream in(planFile, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    if (!in || !proto.ParseFromString(bytes.str()))
      return reportError(kCommand, "cannot read plan file '" + planFile + "'");
  } catch (const rt::Error &e) {
    return reportError(kCommand, e.what());
  } catch (const std::exception &e) {
    return reportError(kCommand,
                       std::string("unexpected failure: ") + e.what());
  }
  const plan::Program *program = nullptr;
  for (const plan::Program &p : proto.programs())
    if (p.name() == programName)
      program = &p;
  if (stage >= 0 || stageArg.getNumOccurrences()) {
    // A pipelined plan's stage: its once-per-step program (the plan is
    // valid, so the index is a program).
    bool pipelined =
        proto.has_pipeline() && proto.pipeline().stages_size() > 0 &&
        rt::pipeline::isPipelinedStage(proto.pipeline().stages(0));
    if (!pipelined)
      return reportError(kCommand, "--stage " + std::to_string(stage) +
                                       ": " + planFile +
                                       " is not a pipelined plan");
    if (stage < 0 || stage >= proto.pipeline().stages_size())
      return reportError(kCommand,
                         "--stage " + std::to_string(stage) +
                             ": the plan has stages 0.." +
                             std::to_string(proto.pipeline().stages_size() - 1));
    program = &proto.programs(proto.pipeline().stages(stage).optimizer());
  }
  if (!program)
    return reportError(kCommand, "the plan has no program '" + programName + "'");
  plan_lowering::explainPlan(proto, *program, planFile, outs());
  return 0;
}

Command getExplainCommand() { return {explainCommand, runExplain}; }

} // namespace partita::driver
