//===- RunTool.h - the command line that runs and trains plans --*- C++ -*-===//
//
// One implementation of the command line behind both `partita run` and the
// runtime-only `partita-run`: option parsing (plain C++, no LLVM), running
// a forward plan or training a train step on local threads or as one MPI
// rank, --check against the plan's reference program, .npy inputs and
// outputs, checkpoints and the profile table. Output goes to stdout,
// errors to stderr as "<tool>: error: <message>".
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_RUNTOOL_H
#define PARTITA_RUNTIME_RUNTOOL_H

#include <string>
#include <vector>

namespace partita::runtime {

/// Runs the command line `args` (without the program name). `toolName`
/// ("partita run", "partita-run") prefixes every message. Returns the exit
/// code: 0 on success, 1 after reporting an error.
int runTool(const std::string &toolName, const std::vector<std::string> &args);

/// Ignores SIGXFSZ for the rest of the process, so that a file size limit
/// (`ulimit -f`) fails the write that passes it with EFBIG, which the
/// checkpoint and output writers report with the file's name, instead of
/// ending the process (a core dump; under the LLVM-linked `partita` driver,
/// LLVM's crash report, whose one-shot handler also let a second rank's
/// signal end the process). runTool calls it; so does `partita train`. A
/// program that embeds the runtime keeps its own disposition.
void ignoreFileSizeSignal();

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_RUNTOOL_H
