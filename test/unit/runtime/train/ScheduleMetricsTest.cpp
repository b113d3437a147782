//===- ScheduleMetricsTest.cpp - learning-rate schedules, metrics, splits -===//

#include "partita/runtime/Metrics.h"
#include "partita/runtime/Schedule.h"
#include "partita/runtime/TokenData.h"
#include "partita/runtime/TrainLoop.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace partita::runtime;

namespace {

// Tests the warmup ramp and the three shapes against their formulas:
// warmup reaches lr at its last step, cosine passes the midpoint half way
// and reaches minLr at decaySteps, linear falls in equal steps, and every
// schedule stays at its floor after decaySteps.
TEST(Schedule, WarmupThenDecay) {
  LrSchedule s;
  s.lr = 1.0;
  s.minLr = 0.1;
  s.warmupSteps = 4;
  s.decaySteps = 14;
  s.kind = ScheduleKind::Constant;
  EXPECT_DOUBLE_EQ(learningRateAt(s, 0), 0.25);
  EXPECT_DOUBLE_EQ(learningRateAt(s, 3), 1.0);
  EXPECT_DOUBLE_EQ(learningRateAt(s, 100), 1.0);
  s.kind = ScheduleKind::Cosine;
  EXPECT_DOUBLE_EQ(learningRateAt(s, 4), 1.0);
  EXPECT_NEAR(learningRateAt(s, 9), 0.55, 1e-12);
  EXPECT_NEAR(learningRateAt(s, 14), 0.1, 1e-12);
  EXPECT_NEAR(learningRateAt(s, 1000), 0.1, 1e-12);
  s.kind = ScheduleKind::Linear;
  EXPECT_NEAR(learningRateAt(s, 5), 1.0 - 0.09, 1e-12);
  EXPECT_NEAR(learningRateAt(s, 14), 0.1, 1e-12);
  for (int64_t step = 5; step < 20; ++step)
    EXPECT_LE(learningRateAt(s, step), learningRateAt(s, step - 1));
}

// Tests that bad schedules and names are errors naming what is wrong.
TEST(Schedule, RejectsBadValues) {
  LrSchedule s;
  s.minLr = 1;
  s.lr = 0.5;
  EXPECT_THROW(checkSchedule(s), Error);
  s.minLr = 0;
  s.decaySteps = 0;
  EXPECT_THROW(checkSchedule(s), Error);
  s.decaySteps = 1;
  s.lr = NAN;
  EXPECT_THROW(checkSchedule(s), Error);
  EXPECT_EQ(parseScheduleKind("cosine"), ScheduleKind::Cosine);
  try {
    parseScheduleKind("step");
    FAIL() << "no error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("constant, cosine or linear"),
              std::string::npos);
  }
}

// Tests the console line and the JSONL records: every metric present, NaN
// written as null (JSON has no NaN), perplexity exp(loss).
TEST(Metrics, ConsoleAndJsonl) {
  std::string path = ::testing::TempDir() + "partita-metrics.jsonl";
  std::remove(path.c_str());
  std::ostringstream console;
  {
    MetricsLog log(console, /*progressLine=*/false, path);
    StepMetrics m;
    m.step = 3;
    m.steps = 10;
    m.loss = 2.5;
    m.lr = 1e-3;
    m.gradNorm = NAN;
    m.seconds = 0.02;
    m.tokensPerSecond = 1000;
    m.mfu = 0.25;
    m.peakMemoryBytes = 3 << 20;
    m.etaSeconds = 75;
    log.step(m);
    log.eval(3, std::log(4.0));
  }
  EXPECT_EQ(console.str(),
            "step 3/10  loss 2.5000  lr 1.000e-03  20.0 ms  1.0k tok/s  MFU "
            "25.0%  mem 3.0 MiB  ETA 1m15s\n"
            "eval at step 3: val loss 1.3863, perplexity 4.000\n");
  std::ifstream in(path);
  std::string step, eval;
  std::getline(in, step);
  std::getline(in, eval);
  EXPECT_NE(step.find("\"grad_norm\":null"), std::string::npos) << step;
  EXPECT_NE(step.find("\"step\":3,\"steps\":10,\"loss\":2.5"), std::string::npos)
      << step;
  EXPECT_NE(eval.find("\"val_perplexity\":4"), std::string::npos) << eval;
}

// Tests CRC-32C (TensorBoard's record framing) on its check value.
TEST(Metrics, Crc32cCheckValue) {
  EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u);
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xe3069283u);
}

// Tests that a token file splits into a train and a validation part.
TEST(TokenData, Slice) {
  std::string path = ::testing::TempDir() + "partita-slice.bin";
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 10; ++i)
      out.put(char(i));
  }
  TokenData data = TokenData::load(path, 1);
  TokenData tail = data.slice(8, 10);
  EXPECT_EQ(tail.size(), 2);
  int32_t ids[1], labels[1];
  tail.batch(0, 1, 1, ids, labels);
  EXPECT_EQ(ids[0], 8);
  EXPECT_EQ(labels[0], 9);
  EXPECT_THROW(data.slice(5, 5), Error);
  EXPECT_THROW(data.slice(0, 11), Error);
}

// Tests that the newest complete checkpoint is found: a directory without
// a manifest (a save in progress) does not count, nor does anything that
// is not step-<k>.
TEST(TrainLoop, FindsNewestCompleteCheckpoint) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(::testing::TempDir()) / "partita-ckpts";
  fs::remove_all(dir);
  EXPECT_EQ(findNewestCheckpoint(dir.string()), "");
  for (int64_t steps : {5, 10, 20}) {
    fs::create_directories(checkpointPath(dir.string(), steps));
    if (steps != 20)
      std::ofstream(fs::path(checkpointPath(dir.string(), steps)) /
                    "manifest.txt")
          << "x";
  }
  fs::create_directories(dir / "step-00000030.partial");
  std::ofstream(dir / "step-00000030.partial" / "manifest.txt") << "x";
  EXPECT_EQ(findNewestCheckpoint(dir.string()),
            checkpointPath(dir.string(), 10));
  fs::remove_all(dir);
}

} // namespace
