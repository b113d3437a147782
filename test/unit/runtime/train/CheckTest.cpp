//===- CheckTest.cpp - partita run --check's comparisons ------------------===//

#include "partita/runtime/Executor.h"
#include "partita/runtime/Train.h"
#include "runtime/plan/PlanChecksum.h"
#include "runtime/plan/plan.pb.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace partita::runtime;
namespace plan = partita::plan;

namespace {

/// A program over parameters w1 and w2 whose results are relu(w1) and
/// relu(w2); `replaces` says which parameter each result updates ("" for
/// none), `names` names the results.
void addProgram(plan::Plan &p, const std::string &name,
                std::vector<std::string> replaces,
                std::vector<std::string> names) {
  plan::Program *prog = p.add_programs();
  prog->set_name(name);
  for (const char *param : {"w1", "w2"}) {
    plan::Buffer *b = prog->add_buffers();
    b->set_id(prog->buffers_size() - 1);
    b->set_role(plan::PARAMETER);
    b->set_name(param);
    b->add_local_shape(2);
    b->add_global_shape(2);
    prog->add_arguments(b->id());
  }
  for (int i = 0; i < 2; ++i) {
    plan::Buffer *b = prog->add_buffers();
    b->set_id(prog->buffers_size() - 1);
    b->add_local_shape(2);
    b->add_global_shape(2);
    b->set_offset(64 * i);
    b->set_first_use(i);
    b->set_last_use(2);
    b->set_name(names[i]);
    b->set_replaces(replaces[i]);
    plan::Kernel *k = prog->add_instructions()->mutable_kernel();
    k->set_kind(plan::Kernel::RELU);
    k->add_inputs(i);
    k->add_outputs(b->id());
    prog->add_results(b->id());
  }
  prog->set_arena_bytes(64 + 8);
}

std::shared_ptr<const PlanFile> parse(plan::Plan &p) {
  p.set_format_version(kPlanFormatVersion);
  plan::sealPlan(p);
  return PlanFile::parse(p.SerializeAsString(), "check.pb");
}

Tensor values(float a, float b) {
  Tensor t(DType::F32, {2});
  t.data<float>()[0] = a;
  t.data<float>()[1] = b;
  return t;
}

bool hasLine(const CheckReport &report, const std::string &line) {
  return std::find(report.lines.begin(), report.lines.end(), line) !=
         report.lines.end();
}

// Tests that a parameter the train step stops updating is a failed check
// (it used to drop out of the comparison, and the run passed).
TEST(Check, AParameterTheStepNoLongerUpdatesFails) {
  plan::Plan p;
  addProgram(p, "train_step", {"w1", ""}, {"w1", "other"});
  addProgram(p, "reference", {"w1", "w2"}, {"w1", "w2"});
  std::shared_ptr<const PlanFile> file = parse(p);
  TrainRun run, ref;
  run.finalResults = {values(1, 2), values(3, 4)};
  ref.finalResults = {values(1, 2), values(3, 4)};
  CheckReport report = compareTraining(*file, "train_step", run, ref, 1e-5,
                                       1e-5);
  EXPECT_FALSE(report.ok);
  EXPECT_TRUE(hasLine(report, "check param w2: the train step does not "
                              "update it (FAILED)"));
  // Both updating it: the check passes.
  plan::Plan q;
  addProgram(q, "train_step", {"w1", "w2"}, {"w1", "w2"});
  addProgram(q, "reference", {"w1", "w2"}, {"w1", "w2"});
  EXPECT_TRUE(compareTraining(*parse(q), "train_step", run, ref, 1e-5, 1e-5)
                  .ok);
}

// Tests that parameters are matched by name, not result position.
TEST(Check, ParametersAreMatchedByName) {
  plan::Plan p;
  addProgram(p, "train_step", {"w2", "w1"}, {"w2", "w1"});
  addProgram(p, "reference", {"w1", "w2"}, {"w1", "w2"});
  std::shared_ptr<const PlanFile> file = parse(p);
  TrainRun run, ref;
  run.finalResults = {values(3, 4), values(1, 2)};
  ref.finalResults = {values(1, 2), values(3, 4)};
  CheckReport report = compareTraining(*file, "train_step", run, ref, 1e-5,
                                       1e-5);
  EXPECT_TRUE(report.ok);
  EXPECT_TRUE(hasLine(report, "check param w1: max abs diff 0.000e+00, max "
                              "rel diff 0.000e+00 (ok, rtol 1e-05)"));
}

// Tests that results are compared by name: a result the reference lacks
// fails, and named results in another order still meet their own.
TEST(Check, ResultsAreComparedByName) {
  plan::Plan p;
  addProgram(p, "main", {"", ""}, {"b", "a"});
  addProgram(p, "reference", {"", ""}, {"a", "c"});
  std::shared_ptr<const PlanFile> file = parse(p);
  CheckReport report =
      compareResults(*file, "main", {values(3, 4), values(1, 2)},
                     {values(1, 2), values(3, 4)}, 1e-5);
  EXPECT_FALSE(report.ok);
  EXPECT_TRUE(hasLine(report, "check b: the reference has no result of that "
                              "name (FAILED)"));
  EXPECT_TRUE(hasLine(report, "check a: max abs diff 0.000e+00, max rel "
                              "diff 0.000e+00 (ok, rtol 1e-05)"));
  EXPECT_TRUE(hasLine(report, "check c: the step program has no result of "
                              "that name (FAILED)"));
}

// Tests the absolute floor: a gradient that is zero in exact arithmetic
// differs by rounding noise only, which passes below atol and fails above.
TEST(Check, AbsoluteFloorBesideTheRelativeTolerance) {
  plan::Plan p;
  addProgram(p, "main", {"", ""}, {"a", "b"});
  addProgram(p, "reference", {"", ""}, {"a", "b"});
  std::shared_ptr<const PlanFile> file = parse(p);
  Tensor zero = values(0, 1e-12f), noise = values(1e-11f, 0);
  CheckReport report = compareResults(*file, "main", {values(1, 2), noise},
                                      {values(1, 2), zero}, 1e-5);
  EXPECT_TRUE(report.ok);
  EXPECT_TRUE(hasLine(report, "check b: max abs diff 1.000e-11, max rel "
                              "diff 1.000e+01 (ok by atol 1e-08, rtol "
                              "1e-05)"));
  report = compareResults(*file, "main", {values(1, 2), noise},
                          {values(1, 2), zero}, 1e-5, 1e-12);
  EXPECT_FALSE(report.ok);
  report = compareResults(*file, "main", {values(1, 2), values(1e-6f, 0)},
                          {values(1, 2), zero}, 1e-5);
  EXPECT_FALSE(report.ok);
}

} // namespace
