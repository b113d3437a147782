//===- Driver.cpp - shared pieces of the partita subcommands --------------===//

#include "tools/partita/Driver.h"

#include "mlir/IR/OperationSupport.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

using namespace llvm;

namespace partita::driver {

int reportError(StringRef command, const Twine &message) {
  std::string prefix = "partita";
  if (!command.empty())
    prefix += (" " + command).str();
  if (errs().has_colors()) {
    WithColor::error(errs(), prefix) << message << "\n";
    return 1;
  }
  // One write: under mpirun every rank's errors share one stream, and a line
  // written in pieces is torn by the others'.
  errs() << (prefix + ": error: " + message + "\n").str();
  return 1;
}

int parseInteger(StringRef command, const cl::opt<std::string> &option,
                 int64_t &value) {
  if (StringRef(option).getAsInteger(/*Radix=*/10, value))
    return reportError(command, "--" + option.ArgStr +
                                    " expects a whole number, got '" +
                                    option + "'");
  return 0;
}

int parseNumber(StringRef command, const cl::opt<std::string> &option,
                double &value) {
  // getAsDouble takes "nan" and "inf"; a training flag never wants them.
  if (StringRef(option).trim().getAsDouble(value) || !std::isfinite(value))
    return reportError(command, "--" + option.ArgStr +
                                    " expects a finite number, got '" +
                                    option + "'");
  return 0;
}

int writeModule(StringRef command, mlir::Operation *module,
                StringRef filename) {
  std::string message;
  std::unique_ptr<ToolOutputFile> output =
      mlir::openOutputFile(filename, &message);
  if (!output)
    return reportError(command, message);
  raw_fd_ostream &os = output->os();
  // Large models print megabytes: write them in big blocks.
  os.SetBufferSize(1 << 20);
  mlir::OpPrintingFlags flags;
  flags.printNameLocAsPrefix().assumeVerified();
  module->print(os, flags);
  os.flush();
  if (os.has_error()) {
    std::string error = os.error().message();
    os.clear_error();
    return reportError(command, "cannot write '" + filename + "': " + error);
  }
  output->keep();
  return 0;
}

void Progress::done(const Twine &what) {
  if (quiet)
    return;
  double seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - begin)
                       .count();
  errs() << "partita " << command << ": " << what << " in "
         << format("%.2f", seconds) << " s\n";
}

} // namespace partita::driver
