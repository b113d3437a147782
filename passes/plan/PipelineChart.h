//===- PipelineChart.h - pictures of a pipeline schedule --------*- C++ -*-===//
//
// `partita explain --schedule`'s views of a validated schedule and its
// simulation: a text Gantt chart per rank (cost-model durations), the
// bubble fraction beside the published formula, and the peak in-flight
// microbatches per stage; the same as SVG, and as an HTML page embedding the
// SVG. The callers validate and simulate first (the runtime library throws,
// this library does not).
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_PLAN_PIPELINECHART_H
#define PARTITA_PASSES_PLAN_PIPELINECHART_H

#include "partita/runtime/PipelineSchedule.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace partita::plan_lowering {

/// What the pictures show: a validated schedule, its simulation under
/// `costs` with rendezvous sends, and the same lists' bubble with buffered
/// sends.
struct ScheduleChart {
  const runtime::pipeline::Schedule *schedule = nullptr;
  runtime::pipeline::ActionCosts costs;
  /// When set, each stage's own costs (the simulation's), shown instead.
  std::vector<runtime::pipeline::ActionCosts> stageCosts;
  runtime::pipeline::Simulation simulation;
  double bufferedBubble = 0;
  /// Where the schedule came from, for the title ("1f1b", a file, a plan).
  std::string source;
};

/// The short label of a timed action: F, B (full backward or input
/// gradient), W, R (reduce), O (optimizer), then the microbatch, then the
/// chunk as a letter when the schedule has several ("F3b").
std::string actionLabel(const runtime::pipeline::Action &action, int chunks);

/// The text chart and numbers.
void printScheduleChart(const ScheduleChart &chart, llvm::raw_ostream &os);

/// A standalone SVG document of the chart.
std::string renderScheduleSvg(const ScheduleChart &chart);

/// An HTML page with the numbers and the SVG inline.
std::string renderScheduleHtml(const ScheduleChart &chart);

} // namespace partita::plan_lowering

#endif // PARTITA_PASSES_PLAN_PIPELINECHART_H
