//===- Schedule.cpp - learning-rate schedules -----------------------------===//

#include "partita/runtime/Schedule.h"
#include "partita/runtime/Tensor.h"

#include <algorithm>
#include <cmath>

namespace partita::runtime {

const char *toString(ScheduleKind kind) {
  switch (kind) {
  case ScheduleKind::Constant:
    return "constant";
  case ScheduleKind::Cosine:
    return "cosine";
  case ScheduleKind::Linear:
    return "linear";
  }
  return "?";
}

ScheduleKind parseScheduleKind(const std::string &name) {
  for (ScheduleKind kind :
       {ScheduleKind::Constant, ScheduleKind::Cosine, ScheduleKind::Linear})
    if (name == toString(kind))
      return kind;
  throw Error("unknown schedule '" + name +
              "': expected constant, cosine or linear");
}

void checkSchedule(const LrSchedule &s) {
  auto bad = [](const std::string &what, double value) {
    return Error(what + ", got " + std::to_string(value));
  };
  if (!(s.lr >= 0) || !std::isfinite(s.lr))
    throw bad("the learning rate must be finite and >= 0", s.lr);
  if (!(s.minLr >= 0) || !std::isfinite(s.minLr) || s.minLr > s.lr)
    throw bad("the minimum learning rate must be in [0, lr]", s.minLr);
  if (s.warmupSteps < 0)
    throw bad("the warmup steps must be >= 0", double(s.warmupSteps));
  if (s.decaySteps < 1)
    throw bad("the decay steps must be >= 1", double(s.decaySteps));
}

double learningRateAt(const LrSchedule &s, int64_t step) {
  if (step < s.warmupSteps)
    return s.lr * double(step + 1) / double(s.warmupSteps);
  if (s.kind == ScheduleKind::Constant)
    return s.lr;
  double span = double(std::max<int64_t>(1, s.decaySteps - s.warmupSteps));
  double p = std::clamp(double(step - s.warmupSteps) / span, 0.0, 1.0);
  if (s.kind == ScheduleKind::Linear)
    return s.lr + (s.minLr - s.lr) * p;
  return s.minLr + (s.lr - s.minLr) * 0.5 * (1 + std::cos(M_PI * p));
}

} // namespace partita::runtime
