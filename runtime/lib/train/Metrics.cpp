//===- Metrics.cpp - per-step training metrics: console, JSONL ------------===//

#include "partita/runtime/Metrics.h"
#include "partita/runtime/Backend.h"
#include "partita/runtime/Tensor.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <sys/resource.h>

namespace partita::runtime {

namespace {

template <typename... Args>
std::string format(const char *fmt, Args... args) {
  char buf[512];
  int n = std::snprintf(buf, sizeof(buf), fmt, args...);
  return std::string(buf, n > 0 ? std::min<size_t>(n, sizeof(buf) - 1) : 0);
}

/// A JSON number, or null for NaN and infinities (JSON has none).
std::string json(double value) {
  return std::isfinite(value) ? format("%.17g", value) : "null";
}

std::string bytesText(double bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return format(u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
}

std::string rateText(double perSecond) {
  if (perSecond >= 1e6)
    return format("%.2fM", perSecond / 1e6);
  if (perSecond >= 1e3)
    return format("%.1fk", perSecond / 1e3);
  return format("%.0f", perSecond);
}

} // namespace

std::string formatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0)
    return "?";
  int64_t s = int64_t(std::llround(seconds));
  if (s >= 3600)
    return format("%lldh%02lldm", (long long)(s / 3600),
                  (long long)(s % 3600 / 60));
  if (s >= 60)
    return format("%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
  return format("%llds", (long long)s);
}

MetricsLog::MetricsLog(std::ostream &console, bool progressLine,
                       const std::string &jsonlPath)
    : console(console), progressLine(progressLine) {
  if (jsonlPath.empty())
    return;
  std::filesystem::path path(jsonlPath);
  std::error_code ec;
  if (path.has_parent_path())
    std::filesystem::create_directories(path.parent_path(), ec);
  // Appended: a resumed run continues the same file (a step logged twice,
  // before a kill and after the resume, counts once in plot-metrics.py:
  // the later record wins).
  jsonl = std::fopen(jsonlPath.c_str(), "a");
  if (!jsonl)
    throw Error("cannot write the metrics file '" + jsonlPath +
                "': " + std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  endProgressLine();
  if (jsonl)
    std::fclose(jsonl);
}

void MetricsLog::endProgressLine() {
  if (!lineOpen)
    return;
  console << "\n";
  console.flush();
  lineOpen = false;
}

std::string MetricsLog::formatStep(const StepMetrics &m) {
  std::string line = format("step %lld/%lld  loss %.4f  lr %.3e",
                            (long long)m.step, (long long)m.steps, m.loss,
                            m.lr);
  if (std::isfinite(m.gradNorm))
    line += format("  grad norm %.3f", m.gradNorm);
  line += format("  %.1f ms", m.seconds * 1e3);
  if (m.tokensPerSecond > 0)
    line += "  " + rateText(m.tokensPerSecond) + " tok/s";
  if (std::isfinite(m.mfu))
    line += format("  MFU %.1f%%", 100 * m.mfu);
  line += "  mem " + bytesText(double(m.peakMemoryBytes));
  line += "  ETA " + formatDuration(m.etaSeconds);
  return line;
}

void MetricsLog::step(const StepMetrics &m) {
  if (progressLine) {
    // Clear to the end of the line: the previous one may be longer.
    console << "\r" << formatStep(m) << "\033[K";
    lineOpen = true;
  } else {
    console << formatStep(m) << "\n";
  }
  console.flush();
  if (!jsonl)
    return;
  std::string record =
      "{\"type\":\"step\",\"step\":" + std::to_string(m.step) +
      ",\"steps\":" + std::to_string(m.steps) + ",\"loss\":" + json(m.loss) +
      ",\"lr\":" + json(m.lr) + ",\"grad_norm\":" + json(m.gradNorm) +
      ",\"step_time_s\":" + json(m.seconds) +
      ",\"tokens_per_s\":" + json(m.tokensPerSecond) +
      ",\"flops_per_s\":" + json(m.flopsPerSecond) +
      ",\"mfu\":" + json(m.mfu) +
      ",\"peak_memory_bytes\":" + std::to_string(m.peakMemoryBytes) +
      ",\"eta_s\":" + json(m.etaSeconds) + "}\n";
  std::fputs(record.c_str(), jsonl);
  std::fflush(jsonl);
}

void MetricsLog::eval(int64_t step, double loss) {
  message(format("eval at step %lld: val loss %.4f, perplexity %.3f",
                 (long long)step, loss, std::exp(loss)));
  if (!jsonl)
    return;
  std::string record = "{\"type\":\"eval\",\"step\":" + std::to_string(step) +
                       ",\"val_loss\":" + json(loss) +
                       ",\"val_perplexity\":" + json(std::exp(loss)) + "}\n";
  std::fputs(record.c_str(), jsonl);
  std::fflush(jsonl);
}

void MetricsLog::message(const std::string &line) {
  endProgressLine();
  console << line << "\n";
  console.flush();
}

int64_t peakResidentBytes() {
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) != 0)
    return 0;
  return int64_t(usage.ru_maxrss) * 1024; // Linux reports KiB
}

double measureCpuPeakFlops() {
  static std::once_flag once;
  static double peak = 0;
  std::call_once(once, [] {
    const int64_t n = 1024;
    auto backend = createCpuBackend();
    Tensor a(DType::F32, {n, n}), b(DType::F32, {n, n}), c(DType::F32, {n, n});
    for (int64_t i = 0; i < n * n; ++i) {
      a.data<float>()[i] = float((i % 7) - 3) / 8;
      b.data<float>()[i] = float((i % 5) - 2) / 8;
    }
    KernelCall call;
    call.kind = KernelKind::Einsum;
    call.attrs.spec = "ij,jk->ik";
    call.inputs = {a.view(), b.view()};
    call.outputs = {c.view()};
    backend->run(call); // warm up (threads, pages)
    double best = 0;
    for (int rep = 0; rep < 5; ++rep) {
      auto begin = std::chrono::steady_clock::now();
      backend->run(call);
      double s = std::chrono::duration<double>(
                     std::chrono::steady_clock::now() - begin)
                     .count();
      if (s > 0)
        best = std::max(best, 2.0 * n * n * n / s);
    }
    peak = best;
  });
  return peak;
}

} // namespace partita::runtime
