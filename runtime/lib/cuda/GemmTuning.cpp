//===- GemmTuning.cpp - choosing among cuBLASLt's GEMM algorithms ---------===//

#include "runtime/lib/cuda/GemmTuning.h"

#include <cstdio>

namespace partita::runtime::gpu {

int chooseGemmAlgorithm(const std::vector<double> &ms, double margin) {
  int fastest = -1;
  for (int i = 0; i < int(ms.size()); ++i)
    if (ms[i] >= 0 && (fastest < 0 || ms[i] < ms[fastest]))
      fastest = i;
  if (fastest > 0 && ms[0] >= 0 && ms[fastest] * (1 + margin) > ms[0])
    return 0;
  return fastest;
}

std::string describeGemmTuning(const std::string &shape,
                               const std::vector<double> &ms, int kept) {
  int ran = 0;
  for (double t : ms)
    ran += t >= 0;
  char text[256];
  std::string line = shape + ": ";
  std::snprintf(text, sizeof text, "%d of %zu algorithms ran", ran, ms.size());
  line += text;
  if (kept < 0)
    return line + "; none kept";
  if (ms[0] >= 0)
    std::snprintf(text, sizeof text, "; heuristic's first %.3f ms", ms[0]);
  else
    std::snprintf(text, sizeof text, "; heuristic's first failed");
  line += text;
  if (kept == 0)
    return line + ", kept";
  std::snprintf(text, sizeof text, ", kept #%d %.3f ms", kept, ms[kept]);
  line += text;
  if (ms[0] > 0) {
    std::snprintf(text, sizeof text, " (%.2fx)", ms[0] / ms[kept]);
    line += text;
  }
  return line;
}

} // namespace partita::runtime::gpu
