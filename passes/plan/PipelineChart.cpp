//===- PipelineChart.cpp - text, SVG and HTML views of a pipeline schedule ===//
//
// One time axis for all views: the simulation's intervals under the cost
// model. The text chart gives each unit of time as many columns as the
// longest label needs plus one, so every action of at least one unit shows
// its label; zero-length actions (free sends, a free reduction) are not
// drawn. Idle units show '.'.
//
//===----------------------------------------------------------------------===//

#include "passes/plan/PipelineChart.h"

#include "llvm/Support/Format.h"

#include <algorithm>
#include <cmath>
#include <sstream>

using namespace llvm;
namespace pp = partita::runtime::pipeline;

namespace partita::plan_lowering {
namespace {

bool drawn(const pp::Interval &iv) {
  return !pp::isCommunication(iv.action.kind) && iv.end > iv.start;
}

std::string formatNumber(double x);

// The published bubble of a named schedule, as "(p-1)/(m+p-1) = 3/11", or
// empty when there is none to compare with. zb-h1's, (p-1)(F+B-W) idle per
// rank (arXiv 2401.10241, section 3.1), holds for m >= p.
std::string publishedBubble(const pp::Schedule &s, const pp::ActionCosts &c,
                            double &value) {
  int p = s.ranks, m = s.microbatches, v = s.chunks;
  if (s.kind == "zb-h1" && m >= p) {
    double idle = (p - 1) * (c.forward + c.backwardInput - c.backwardWeight);
    double busy = m * (c.forward + c.backwardInput + c.backwardWeight);
    value = idle + busy > 0 ? idle / (idle + busy) : 0;
    return "(p-1)(F+B-W)/((p-1)(F+B-W)+m(F+B+W)) = " + formatNumber(idle) +
           "/" + formatNumber(idle + busy);
  }
  if (s.kind == "gpipe" || s.kind == "1f1b" ||
      (s.kind == "interleaved" && v == 1)) {
    value = double(p - 1) / (m + p - 1);
    return "(p-1)/(m+p-1) = " + std::to_string(p - 1) + "/" +
           std::to_string(m + p - 1);
  }
  if (s.kind == "interleaved") {
    value = double(p - 1) / (v * m + p - 1);
    return "(p-1)/(vm+p-1) = " + std::to_string(p - 1) + "/" +
           std::to_string(v * m + p - 1);
  }
  return "";
}

std::string formatNumber(double x) {
  std::string s;
  raw_string_ostream os(s);
  if (x == std::floor(x) && std::fabs(x) < 1e15)
    os << static_cast<long long>(x);
  else
    os << format("%.3g", x);
  return s;
}

std::string fraction(double x) {
  std::string s;
  raw_string_ostream os(s);
  os << format("%.4f", x);
  return s;
}

std::string escapeXml(StringRef text) {
  std::string out;
  for (char c : text) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

// The lines below the chart: the numbers and where they come from.
void printNumbers(const ScheduleChart &chart, raw_ostream &os) {
  const pp::Schedule &s = *chart.schedule;
  const pp::Simulation &sim = chart.simulation;
  const pp::ActionCosts &c = chart.costs;
  auto printCosts = [&](const pp::ActionCosts &k) {
    os << "F=" << formatNumber(k.forward) << " B=" << formatNumber(k.backwardInput)
       << " W=" << formatNumber(k.backwardWeight) << " (full backward B+W="
       << formatNumber(k.backwardInput + k.backwardWeight)
       << "), send=" << formatNumber(k.send)
       << ", reduce=" << formatNumber(k.reduce)
       << ", optimizer=" << formatNumber(k.optimizer);
  };
  if (chart.stageCosts.empty()) {
    os << "costs: ";
    printCosts(c);
    os << "; sends block until received (rendezvous)\n";
  } else {
    os << "costs per stage; sends block until received (rendezvous):\n";
    for (size_t stage = 0; stage < chart.stageCosts.size(); ++stage) {
      os << "  stage " << stage << ": ";
      printCosts(chart.stageCosts[stage]);
      os << "\n";
    }
  }
  os << "makespan " << formatNumber(sim.makespan) << "; bubble "
     << fraction(sim.bubbleFraction) << " = idle "
     << formatNumber(sim.idleTime) << " / (" << s.ranks << " ranks x makespan "
     << formatNumber(sim.makespan) << ")\n";
  os << "bubble with buffered sends: " << fraction(chart.bufferedBubble)
     << "\n";
  double published = 0;
  std::string formula =
      chart.stageCosts.empty() ? publishedBubble(s, c, published) : "";
  if (!formula.empty())
    os << "published: " << formula << " = " << fraction(published) << "\n";
  os << "peak in-flight microbatches (forward started, backward not ended):\n";
  for (int stage = 0; stage < s.ranks * s.chunks; ++stage)
    os << "  stage " << stage << " (rank " << stage % s.ranks << ", chunk "
       << stage / s.ranks << "): " << sim.peakInFlight[stage] << "\n";
  if (s.chunks > 1)
    for (int r = 0; r < s.ranks; ++r)
      os << "  rank " << r << " (all chunks at once): "
         << sim.peakInFlightPerRank[r] << "\n";
}

struct Color {
  const char *fill, *text;
};

Color colorOf(pp::ActionKind kind) {
  switch (kind) {
  case pp::ActionKind::Forward:
    return {"#4e79a7", "#ffffff"};
  case pp::ActionKind::Backward:
    return {"#59a14f", "#ffffff"};
  case pp::ActionKind::BackwardInput:
    return {"#8cd17d", "#000000"};
  case pp::ActionKind::BackwardWeight:
    return {"#f28e2b", "#000000"};
  case pp::ActionKind::ReduceGradients:
    return {"#9c755f", "#ffffff"};
  default:
    return {"#bab0ac", "#000000"};
  }
}

} // namespace

std::string actionLabel(const pp::Action &a, int chunks) {
  std::string label;
  switch (a.kind) {
  case pp::ActionKind::Forward:
    label = "F";
    break;
  case pp::ActionKind::Backward:
  case pp::ActionKind::BackwardInput:
    label = "B";
    break;
  case pp::ActionKind::BackwardWeight:
    label = "W";
    break;
  case pp::ActionKind::ReduceGradients:
    label = "R";
    break;
  case pp::ActionKind::Optimizer:
    label = "O";
    break;
  default:
    label = "c";
    break;
  }
  if (a.kind != pp::ActionKind::ReduceGradients &&
      a.kind != pp::ActionKind::Optimizer)
    label += std::to_string(a.microbatch);
  if (chunks > 1)
    label += static_cast<char>('a' + a.chunk % 26);
  return label;
}

void printScheduleChart(const ScheduleChart &chart, raw_ostream &os) {
  const pp::Schedule &s = *chart.schedule;
  const pp::Simulation &sim = chart.simulation;
  os << "pipeline schedule " << s.kind << " (" << chart.source << "): "
     << s.ranks << (s.ranks == 1 ? " rank, " : " ranks, ") << s.microbatches
     << (s.microbatches == 1 ? " microbatch, " : " microbatches, ")
     << s.chunks << (s.chunks == 1 ? " chunk" : " chunks") << " per rank\n";
  size_t width = 2;
  for (const auto &rank : sim.timeline)
    for (const pp::Interval &iv : rank)
      if (drawn(iv))
        width = std::max(width, actionLabel(iv.action, s.chunks).size() + 1);
  auto column = [&](double t) {
    return static_cast<size_t>(std::llround(t * width));
  };
  size_t columns = column(sim.makespan);
  std::string prefix = "rank " + std::to_string(s.ranks - 1) + " ";
  // A ruler with the time every 5 units.
  std::string ruler(columns, ' ');
  for (long t = 0; column(t) < columns; t += 5) {
    std::string n = std::to_string(t);
    for (size_t i = 0; i < n.size() && column(t) + i < columns; ++i)
      ruler[column(t) + i] = n[i];
  }
  os << std::string(prefix.size(), ' ') << "|" << ruler << "|\n";
  for (int r = 0; r < s.ranks; ++r) {
    std::string row(columns, ' ');
    for (size_t col = 0; col < columns; col += width)
      row[col] = '.';
    for (const pp::Interval &iv : sim.timeline[r]) {
      if (!drawn(iv))
        continue;
      size_t begin = column(iv.start), end = std::min(column(iv.end), columns);
      for (size_t col = begin; col < end; ++col)
        row[col] = ' ';
      std::string label = actionLabel(iv.action, s.chunks);
      for (size_t i = 0; i < label.size() && begin + i < end; ++i)
        row[begin + i] = label[i];
    }
    std::string name = "rank " + std::to_string(r);
    name.resize(prefix.size(), ' ');
    // The closing bar marks the makespan and keeps lines free of trailing
    // blanks.
    os << name << "|" << row << "|\n";
  }
  os << "F forward, B " << (s.kind == "zb-h1" ? "input gradient" : "backward")
     << ", W weight gradient, R gradient reduction, O optimizer"
     << (s.chunks > 1 ? "; a, b, ...: the chunk" : "")
     << "; one unit = " << width << " columns\n";
  printNumbers(chart, os);
}

std::string renderScheduleSvg(const ScheduleChart &chart) {
  const pp::Schedule &s = *chart.schedule;
  const pp::Simulation &sim = chart.simulation;
  const double unit = 24, rowHeight = 28, left = 70, top = 40;
  double width = left + std::max(sim.makespan, 1.0) * unit + 20;
  double height = top + s.ranks * rowHeight + 40;
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width
     << "\" height=\"" << height << "\" viewBox=\"0 0 " << width << " "
     << height << "\" font-family=\"monospace\" font-size=\"11\">\n";
  std::ostringstream title;
  title << "pipeline schedule " << s.kind << ": " << s.ranks
        << (s.ranks == 1 ? " rank, " : " ranks, ") << s.microbatches
        << (s.microbatches == 1 ? " microbatch, " : " microbatches, ")
        << s.chunks << (s.chunks == 1 ? " chunk" : " chunks")
        << " per rank; bubble " << fraction(sim.bubbleFraction);
  os << "<title>" << escapeXml(title.str()) << "</title>\n";
  os << "<text x=\"4\" y=\"16\" font-size=\"13\">" << escapeXml(title.str())
     << "</text>\n";
  for (long t = 0; t <= static_cast<long>(sim.makespan); t += 5)
    os << "<text x=\"" << left + t * unit << "\" y=\"" << top - 6
       << "\" fill=\"#555555\">" << t << "</text>\n";
  for (int r = 0; r < s.ranks; ++r) {
    double y = top + r * rowHeight;
    os << "<text x=\"4\" y=\"" << y + rowHeight / 2 + 4 << "\">rank " << r
       << "</text>\n";
    os << "<rect x=\"" << left << "\" y=\"" << y << "\" width=\""
       << sim.makespan * unit << "\" height=\"" << rowHeight - 4
       << "\" fill=\"#f2f2f2\"/>\n";
    for (const pp::Interval &iv : sim.timeline[r]) {
      if (!drawn(iv))
        continue;
      Color color = colorOf(iv.action.kind);
      double x = left + iv.start * unit, w = (iv.end - iv.start) * unit;
      std::string label = actionLabel(iv.action, s.chunks);
      os << "<g><title>" << escapeXml(pp::describe(iv.action)) << ", "
         << formatNumber(iv.start) << " to " << formatNumber(iv.end)
         << "</title><rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << w
         << "\" height=\"" << rowHeight - 4 << "\" fill=\"" << color.fill
         << "\" stroke=\"#ffffff\"/><text x=\"" << x + w / 2 << "\" y=\""
         << y + rowHeight / 2 + 2 << "\" text-anchor=\"middle\" fill=\""
         << color.text << "\">" << escapeXml(label) << "</text></g>\n";
    }
  }
  os << "<text x=\"4\" y=\"" << top + s.ranks * rowHeight + 20
     << "\">idle " << formatNumber(sim.idleTime) << " / (" << s.ranks
     << " ranks x makespan " << formatNumber(sim.makespan) << ")</text>\n";
  os << "</svg>\n";
  return os.str();
}

std::string renderScheduleHtml(const ScheduleChart &chart) {
  std::string text;
  raw_string_ostream textStream(text);
  printScheduleChart(chart, textStream);
  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n"
     << "<title>pipeline schedule " << escapeXml(chart.schedule->kind)
     << "</title>\n</head>\n<body>\n<h1>pipeline schedule "
     << escapeXml(chart.schedule->kind) << "</h1>\n"
     << renderScheduleSvg(chart) << "<pre>" << escapeXml(text)
     << "</pre>\n</body>\n</html>\n";
  return os.str();
}

} // namespace partita::plan_lowering
