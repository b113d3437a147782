//===- Metrics.h - per-step training metrics: console, JSONL ----*- C++ -*-===//
//
// What a training run reports each step and at each evaluation, written to
// the console (one line rewritten in place on a terminal, plain lines
// otherwise) and as JSON lines to a file that scripts/plot-metrics.py
// reads:
//
//   {"type":"step","step":12,"steps":200,"loss":3.1,"lr":0.001,
//    "grad_norm":1.2,"step_time_s":0.05,"tokens_per_s":10240,
//    "flops_per_s":1.1e9,"mfu":0.12,"peak_memory_bytes":1.2e8,"eta_s":9.4}
//   {"type":"eval","step":50,"val_loss":2.9,"val_perplexity":18.2}
//
// Steps count from 1 (step k: k steps done), as everywhere Partita prints
// them. Plain C++17.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_METRICS_H
#define PARTITA_RUNTIME_METRICS_H

#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace partita::runtime {

struct StepMetrics {
  int64_t step = 0;  // 1-based: steps done
  int64_t steps = 0; // of the run
  double loss = 0;
  double lr = 0;
  double gradNorm = 0; // NaN: not computed
  double seconds = 0;
  double tokensPerSecond = 0;
  /// Model FLOPs per second and their fraction of the peak (NaN: unknown).
  double flopsPerSecond = 0;
  double mfu = 0;
  int64_t peakMemoryBytes = 0;
  double etaSeconds = 0;
};

/// Writes metrics to a console stream and, when `jsonlPath` is not empty,
/// appends them to that file (created with its directory); when
/// `tensorboardDir` is not empty, also as TensorBoard scalars (loss, lr,
/// grad_norm, tokens_per_s, mfu, val_loss, val_perplexity) into a new event
/// file DIR/events.out.tfevents.<time>.<host>.partita: TFRecord framing
/// (length, masked CRC-32C of it, an Event protobuf, its masked CRC-32C),
/// first an Event with file_version "brain.Event:2", then one Event per
/// step with Summary.Value{tag, simple_value}s.
class MetricsLog {
public:
  /// `progressLine`: rewrite one line in place ("\r"), for a terminal.
  MetricsLog(std::ostream &console, bool progressLine,
             const std::string &jsonlPath,
             const std::string &tensorboardDir = "");
  ~MetricsLog();
  MetricsLog(const MetricsLog &) = delete;
  MetricsLog &operator=(const MetricsLog &) = delete;

  /// Records step `m` (JSONL, TensorBoard) and, with `toConsole`, prints
  /// it.
  void step(const StepMetrics &m, bool toConsole = true);
  void eval(int64_t step, double loss);
  /// A line of its own (ends a progress line first).
  void message(const std::string &line);

  /// The console line of `m` (without a newline).
  static std::string formatStep(const StepMetrics &m);

private:
  void endProgressLine();
  /// One TensorBoard event of scalars at `step`.
  void writeScalars(int64_t step,
                    const std::vector<std::pair<std::string, double>> &values);

  std::ostream &console;
  bool progressLine;
  bool lineOpen = false;
  std::FILE *jsonl = nullptr;
  std::FILE *events = nullptr;
};

/// CRC-32C (Castagnoli), as TFRecord framing uses it, continuing from
/// `crc`.
uint32_t crc32c(const void *data, size_t size, uint32_t crc = 0);

/// This process's peak resident memory in bytes (getrusage), all ranks of
/// the process together.
int64_t peakResidentBytes();

/// The float32 FLOP rate of one large matrix product on the CPU backend
/// (BLAS, all its threads): the peak MFU is measured against when no peak
/// is named. Takes about a second the first time; cached after.
double measureCpuPeakFlops();

/// "1h02m", "3m05s", "12s".
std::string formatDuration(double seconds);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_METRICS_H
