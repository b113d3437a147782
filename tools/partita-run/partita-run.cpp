//===- partita-run.cpp - runs plans with the runtime library alone --------===//
//
// `partita-run PLAN.pb [options]`: the command line of `partita run`
// (RunTool.h) without the compiler, for machines that run plans compiled
// elsewhere. Links only libpartita_runtime: no LLVM or MLIR.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/RunTool.h"

#include <string>
#include <vector>

int main(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return partita::runtime::runTool("partita-run", args);
}
