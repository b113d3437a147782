//===- RunCommand.cpp - `partita run`: execute a plan ---------------------===//
//
// `partita run` is the runtime library's command line (RunTool.h), the same
// one the runtime-only `partita-run` executable runs: its arguments go to it
// unparsed, so both tools take the same flags and print the same lines.
// The SubCommand is registered only so that `partita --help` lists it.
//
//===----------------------------------------------------------------------===//

#include "tools/partita/Driver.h"

#include "partita/runtime/RunTool.h"

#include <string>
#include <vector>

using namespace llvm;

namespace partita::driver {
namespace {
cl::SubCommand runCommand("run", "Execute a plan on N ranks (local threads or "
                                 "MPI) and print its results (see 'partita "
                                 "run --help')");

int runWithArgs(int argc, char **argv) {
  std::vector<std::string> args(argv, argv + argc);
  return runtime::runTool("partita run", args);
}

/// Unreachable: partita.cpp hands `run` its arguments before llvm::cl
/// parses them.
int runParsed() { return runWithArgs(0, nullptr); }
} // namespace

Command getRunCommand() { return {runCommand, runParsed, runWithArgs}; }

} // namespace partita::driver
