//===- Driver.h - shared pieces of the partita subcommands -------*- C++ -*-===//
//
// Each subcommand lives in its own file with its own llvm::cl::SubCommand
// and options; partita.cpp dispatches to the one the command line selects.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_TOOLS_PARTITA_DRIVER_H
#define PARTITA_TOOLS_PARTITA_DRIVER_H

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/SourceMgr.h"

#include <chrono>
#include <cstdint>
#include <string>

namespace partita::driver {

/// A subcommand: its command-line parser and what runs when it is chosen.
struct Command {
  llvm::cl::SubCommand &subCommand;
  int (*run)();
  /// Set for a subcommand with its own parser (`run`, shared with the
  /// runtime-only partita-run): gets the words after the subcommand's name
  /// before llvm::cl sees them.
  int (*runArgs)(int argc, char **argv) = nullptr;
};

Command getModelCommand();
Command getPlanCommand();
Command getRunCommand();
Command getExplainCommand();
Command getGradcheckCommand();
Command getTrainCommand();

/// `partita explain PATH`'s report of a plan file on stdout (of pipeline
/// stage `stage` of a pipelined plan; -1: its first program, stage 0's
/// update). Returns 1 after reporting when the plan does not load or has
/// no such stage.
int explainPlanFile(llvm::StringRef path, int stage = -1);

/// Prints "partita <command>: error: <message>" on stderr; returns 1, the
/// exit code of every failure.
int reportError(llvm::StringRef command, const llvm::Twine &message);

/// Reads the whole number given to `option` (for size flags; range checks
/// come later, with the other sizes). Returns 1 after reporting, naming the
/// flag, when the value is not a whole number.
int parseInteger(llvm::StringRef command, const llvm::cl::opt<std::string> &option,
                 int64_t &value);

/// Reads the finite real number given to `option`. Returns 1 after
/// reporting, naming the flag, when the value is not one.
int parseNumber(llvm::StringRef command, const llvm::cl::opt<std::string> &option,
                double &value);

/// Prints `module` to `filename` ("-" for stdout) through a buffered stream,
/// naming values after their NameLocs. Returns 1 (after reporting) when the
/// file cannot be written, else 0.
int writeModule(llvm::StringRef command, mlir::Operation *module,
                llvm::StringRef filename);

/// Diagnostics longer than this many characters are printed with their
/// middle elided (a type or a function signature of a large model can run
/// to hundreds of kilobytes).
constexpr size_t kMaxDiagnosticChars = 4096;

/// `text` if it fits in `limit` characters; else its start and its end
/// around "... [N characters elided] ...".
std::string capDiagnosticText(llvm::StringRef text,
                              size_t limit = kMaxDiagnosticChars);

/// While alive, prints every diagnostic (or note) longer than
/// kMaxDiagnosticChars through `printer`, elided (capDiagnosticText), and
/// one whose source line (in `sourceMgr`) is longer without echoing that
/// line; passes the others on. Register it after `printer` and before
/// handlers that only count diagnostics.
class DiagnosticCap {
public:
  DiagnosticCap(mlir::MLIRContext &context, llvm::SourceMgr &sourceMgr,
                mlir::SourceMgrDiagnosticHandler &printer);
  ~DiagnosticCap();

private:
  mlir::MLIRContext &context;
  mlir::DiagnosticEngine::HandlerID id;
};

/// Progress lines on stderr ("partita plan: parsed m.mlir in 0.02 s"),
/// silent when `quiet`.
class Progress {
public:
  Progress(llvm::StringRef command, bool quiet)
      : command(command), quiet(quiet) {}
  /// Starts timing a step.
  void start() { begin = std::chrono::steady_clock::now(); }
  /// Reports the step started last: "<what> in <seconds> s".
  void done(const llvm::Twine &what);

private:
  llvm::StringRef command;
  bool quiet;
  std::chrono::steady_clock::time_point begin = std::chrono::steady_clock::now();
};

} // namespace partita::driver

#endif // PARTITA_TOOLS_PARTITA_DRIVER_H
