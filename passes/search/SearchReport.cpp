//===- SearchReport.cpp - the strategy search's table and report -----------===//
//
// printSearchTable (stderr of `partita plan --strategy auto`, the Python
// SearchResult.table) and writeSearchReport (--search-report's TSV).
//
//===----------------------------------------------------------------------===//

#include "passes/search/StrategySearch.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"

#include <algorithm>

using namespace llvm;

namespace partita::search {
namespace {

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

void printSearchTable(const SearchResult &result, const CostModel &cost,
                      raw_ostream &os) {
  os << format("  %-4s %-15s %-15s %3s %-11s %-6s %10s %10s %10s %10s %10s "
               "%6s %11s %11s\n",
               "rank", "strategy", "mesh", "mb", "sched", "cut", "step (est.)",
               "compute", "comm", "hidden", "bubble", "calls", "wire/device",
               "memory");
  for (const Candidate &c : result.candidates) {
    std::string place = c.rank ? std::to_string(c.rank) : "-";
    os << format("  %-4s %-15s %-15s %3lld %-11s %-6s ", place.c_str(),
                 c.strategy.c_str(), c.mesh.c_str(), (long long)c.microbatches,
                 c.pipelined() ? c.schedule.c_str() : "-",
                 c.pipelined() ? c.stagesBy.c_str() : "-");
    if (!c.compiled()) {
      os << "rejected: " << c.rejection << "\n";
      continue;
    }
    os << format("%11s %10s %10s %10s %10s %6lld %11s %11s",
                 secondsText(c.seconds).c_str(),
                 secondsText(c.computeSeconds).c_str(),
                 secondsText(c.commSeconds).c_str(),
                 secondsText(c.hiddenSeconds).c_str(),
                 secondsText(c.bubbleSeconds).c_str(),
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
  os << "rank\tstrategy\tmesh\tmicrobatches\tschedule\tstages_by\tseconds\t"
        "compute_seconds\tcomm_seconds\thidden_seconds\tbubble_seconds\t"
        "flops\tkernel_flops\tkernel_bytes\twire_bytes\tcalls\tcollectives\t"
        "memory_bytes\tcrosses_nodes\ttraffic\tstages\trejection\n";
  for (const Candidate &c : result.candidates) {
    std::string rejection = c.rejection;
    std::replace(rejection.begin(), rejection.end(), '\t', ' ');
    std::replace(rejection.begin(), rejection.end(), '\n', ' ');
    os << c.rank << "\t" << c.strategy << "\t" << c.mesh << "\t"
       << c.microbatches << "\t" << (c.pipelined() ? c.schedule : "-") << "\t"
       << (c.pipelined() ? c.stagesBy : "-") << "\t"
       << format("%.17g\t%.17g\t%.17g\t%.17g\t%.17g\t%.17g\t%.17g\t%.17g\t"
                 "%.17g",
                 c.seconds, c.computeSeconds, c.commSeconds, c.hiddenSeconds,
                 c.bubbleSeconds, c.work.flops, c.work.kernelFlops,
                 c.work.kernelBytes, c.work.wireBytes)
       << "\t" << c.work.calls << "\t" << c.work.collectives << "\t"
       << c.memory << "\t" << int(c.crossesNodes) << "\t";
    for (size_t i = 0; i < c.work.traffic.size(); ++i) {
      const plan_lowering::PlanTraffic &t = c.work.traffic[i];
      os << (i ? ";" : "") << llvm::join(t.axes, "+") << "/"
         << (t.bucketed ? "bucketed" : "plain") << "/" << t.calls << "/"
         << format("%.17g", t.wireBytes);
    }
    os << "\t";
    for (size_t i = 0; i < c.stages.size(); ++i) {
      const StageCost &t = c.stages[i];
      os << (i ? ";" : "")
         << format("%.17g/%.17g/%.17g/%.17g/%.17g", t.forward, t.backwardInput,
                   t.backwardWeight, t.send, t.update)
         << "/" << t.memory;
    }
    os << "\t" << rejection << "\n";
  }
}

} // namespace partita::search
