//===- ExplainCommand.cpp - `partita explain`: what a plan costs ----------===//
//
// Loads a plan (validated by the runtime exactly as `partita run` loads it)
// and prints the report of passes/plan/PlanExplain.h on its step program.
//
// Compiled with exceptions: the runtime reports errors as runtime::Error.
//
//===----------------------------------------------------------------------===//

#include "tools/partita/Driver.h"

#include "partita/runtime/Executor.h"
#include "passes/plan/PlanExplain.h"
#include "runtime/plan/plan.pb.h"

#include "llvm/Support/raw_ostream.h"

#include <fstream>
#include <sstream>

using namespace llvm;
namespace rt = partita::runtime;

namespace partita::driver {
namespace {
cl::SubCommand explainCommand("explain",
                              "Print a plan's mesh, memory per device, "
                              "parameter shardings and collectives");

cl::opt<std::string> planFile(cl::Positional, cl::sub(explainCommand),
                              cl::desc("<plan.pb>"));

constexpr StringLiteral kCommand = "explain";

int runExplain() {
  if (planFile.empty())
    return reportError(kCommand, "missing the plan file (partita explain "
                                 "PLAN.pb)");
  return explainPlanFile(planFile);
}
} // namespace

int explainPlanFile(StringRef path) {
  std::string planFile = path.str();
  plan::Plan proto;
  std::string programName;
  try {
    // The runtime's own validation: a plan explained is a plan that loads.
    std::shared_ptr<const rt::PlanFile> loaded = rt::PlanFile::load(planFile);
    programName = loaded->programNames().front();
    std::ifstream in(planFile, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    if (!in || !proto.ParseFromString(bytes.str()))
      return reportError(kCommand, "cannot read plan file '" + planFile + "'");
  } catch (const rt::Error &e) {
    return reportError(kCommand, e.what());
  } catch (const std::exception &e) {
    return reportError(kCommand,
                       std::string("unexpected failure: ") + e.what());
  }
  const plan::Program *program = nullptr;
  for (const plan::Program &p : proto.programs())
    if (p.name() == programName)
      program = &p;
  if (!program)
    return reportError(kCommand, "the plan has no program '" + programName + "'");
  plan_lowering::explainPlan(proto, *program, planFile, outs());
  return 0;
}

Command getExplainCommand() { return {explainCommand, runExplain}; }

} // namespace partita::driver
