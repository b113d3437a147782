//===- Schedule.h - learning-rate schedules ---------------------*- C++ -*-===//
//
// The learning rate as a function of the global step, so that a run
// resumed at step k (on any mesh) continues the same curve. One plan runs
// the whole schedule: the training loop sets each step's value on the
// executor (Executor::setLearningRate, TrainOptions::learningRate).
//
//   constant:  lr
//   linear warmup over `warmupSteps` (step s < warmup: lr * (s + 1) /
//   warmup), then
//     cosine:  minLr + (lr - minLr) * (1 + cos(pi * p)) / 2
//     linear:  lr + (minLr - lr) * p
//   with p = (s - warmup) / max(1, decaySteps - warmup), clamped to
//   [0, 1]: the decay reaches minLr at step decaySteps (by default the
//   run's last step) and stays there.
//
// nanoGPT's get_lr and torchtitan's warmup + decay follow the same shape.
// Plain C++17; errors are runtime::Error.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_SCHEDULE_H
#define PARTITA_RUNTIME_SCHEDULE_H

#include <cstdint>
#include <string>

namespace partita::runtime {

enum class ScheduleKind { Constant, Cosine, Linear };

struct LrSchedule {
  ScheduleKind kind = ScheduleKind::Constant;
  /// The peak learning rate (after warmup).
  double lr = 1e-3;
  /// Where cosine and linear decay end.
  double minLr = 0;
  int64_t warmupSteps = 0;
  /// The step at which the decay reaches minLr (usually the run's steps).
  int64_t decaySteps = 1;
};

/// "constant", "cosine", "linear".
const char *toString(ScheduleKind kind);
/// The kind named `name`; throws Error listing the known names.
ScheduleKind parseScheduleKind(const std::string &name);

/// Throws Error (naming the field) unless lr >= 0, 0 <= minLr <= lr,
/// warmupSteps >= 0 and decaySteps >= 1, all finite.
void checkSchedule(const LrSchedule &schedule);

/// The learning rate of global step `step` (0-based).
double learningRateAt(const LrSchedule &schedule, int64_t step);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_SCHEDULE_H
