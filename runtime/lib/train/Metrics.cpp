//===- Metrics.cpp - per-step training metrics: console, JSONL ------------===//

#include "partita/runtime/Metrics.h"
#include "partita/runtime/Backend.h"
#include "partita/runtime/Tensor.h"

#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <sys/resource.h>
#include <unistd.h>

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

uint32_t crc32c(const void *data, size_t size, uint32_t crc) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = c & 1 ? 0x82f63b78u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  const auto *p = static_cast<const unsigned char *>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i)
    crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

namespace {

/// TFRecord's masked CRC (so that a CRC of data holding CRCs stays strong).
uint32_t maskedCrc(const std::string &bytes) {
  uint32_t crc = crc32c(bytes.data(), bytes.size());
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// Protobuf's wire format, just what an Event needs.
void putVarint(std::string &out, uint64_t v) {
  while (v >= 0x80) {
    out += char(v | 0x80);
    v >>= 7;
  }
  out += char(v);
}

template <typename T> void putFixed(std::string &out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T)); // little-endian hosts (x86, arm)
  out.append(bytes, sizeof(T));
}

void putBytes(std::string &out, int field, const std::string &bytes) {
  putVarint(out, uint64_t(field) << 3 | 2);
  putVarint(out, bytes.size());
  out += bytes;
}

/// tensorflow.Event's wall_time = 1 (double) and step = 2 (int64); the
/// caller adds file_version = 3 (string) or summary = 5 (Summary).
std::string eventHeader(int64_t step) {
  std::string event;
  putVarint(event, 1 << 3 | 1);
  putFixed(event, std::chrono::duration<double>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count());
  putVarint(event, 2 << 3 | 0);
  putVarint(event, uint64_t(step));
  return event;
}

/// A TFRecord: length, its masked CRC, the data, its masked CRC.
void writeRecord(std::FILE *file, const std::string &data) {
  std::string length;
  putFixed(length, uint64_t(data.size()));
  std::string record = length;
  putFixed(record, maskedCrc(length));
  record += data;
  putFixed(record, maskedCrc(data));
  std::fwrite(record.data(), 1, record.size(), file);
  std::fflush(file);
}

} // namespace

void MetricsLog::writeScalars(
    int64_t step, const std::vector<std::pair<std::string, double>> &values) {
  if (!events)
    return;
  // Summary: repeated Value value = 1; Value: tag = 1, simple_value = 2.
  std::string summary;
  for (const auto &[tag, value] : values) {
    if (!std::isfinite(value))
      continue;
    std::string v;
    putBytes(v, 1, tag);
    putVarint(v, 2 << 3 | 5);
    putFixed(v, float(value));
    putBytes(summary, 1, v);
  }
  std::string event = eventHeader(step);
  putBytes(event, 5, summary);
  writeRecord(events, event);
}

MetricsLog::MetricsLog(std::ostream &console, bool progressLine,
                       const std::string &jsonlPath,
                       const std::string &tensorboardDir)
    : console(console), progressLine(progressLine) {
  if (!tensorboardDir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(tensorboardDir, ec);
    char host[256] = "localhost";
    gethostname(host, sizeof(host) - 1);
    auto now = std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count();
    std::string path = (std::filesystem::path(tensorboardDir) /
                        ("events.out.tfevents." + std::to_string(now) + "." +
                         host + ".partita"))
                           .string();
    events = std::fopen(path.c_str(), "ab");
    if (!events)
      throw Error("cannot write the TensorBoard event file '" + path +
                  "': " + std::strerror(errno));
    std::string first = eventHeader(0);
    putBytes(first, 3, "brain.Event:2");
    writeRecord(events, first);
  }
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
  if (events)
    std::fclose(events);
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

void MetricsLog::step(const StepMetrics &m, bool toConsole) {
  if (!toConsole) {
    // Nothing printed.
  } else if (progressLine) {
    // Clear to the end of the line: the previous one may be longer.
    console << "\r" << formatStep(m) << "\033[K";
    lineOpen = true;
  } else {
    console << formatStep(m) << "\n";
  }
  console.flush();
  writeScalars(m.step, {{"loss", m.loss},
                        {"lr", m.lr},
                        {"grad_norm", m.gradNorm},
                        {"tokens_per_s", m.tokensPerSecond},
                        {"mfu", m.mfu}});
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
  writeScalars(step, {{"val_loss", loss}, {"val_perplexity", std::exp(loss)}});
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
