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

std::string capDiagnosticText(StringRef text, size_t limit) {
  if (text.size() <= limit)
    return text.str();
  // Most of the room for the start (what went wrong), some for the end
  // (often the other half of a comparison).
  size_t tail = limit / 8, head = limit - tail;
  return (text.take_front(head) + " ... [" +
          Twine(text.size() - head - tail) + " characters elided] ... " +
          text.take_back(tail))
      .str();
}

/// Whether the source line `loc` points at is longer than the cap (a
/// model's function signature is one line, hundreds of kilobytes long for a
/// large model), so the printer should not echo it.
static bool sourceLineTooLong(SourceMgr &sourceMgr, mlir::Location loc) {
  auto fileLoc = loc->findInstanceOf<mlir::FileLineColLoc>();
  if (!fileLoc)
    return false;
  for (unsigned i = 1, e = sourceMgr.getNumBuffers(); i <= e; ++i) {
    const MemoryBuffer *buffer = sourceMgr.getMemoryBuffer(i);
    if (buffer->getBufferIdentifier() != fileLoc.getFilename().getValue())
      continue;
    SMLoc start = sourceMgr.FindLocForLineAndColumn(i, fileLoc.getLine(), 1);
    if (!start.isValid())
      return false;
    StringRef rest(start.getPointer(),
                   buffer->getBufferEnd() - start.getPointer());
    return rest.find('\n') > kMaxDiagnosticChars;
  }
  return false;
}

DiagnosticCap::DiagnosticCap(mlir::MLIRContext &context, SourceMgr &sourceMgr,
                             mlir::SourceMgrDiagnosticHandler &printer)
    : context(context) {
  id = context.getDiagEngine().registerHandler(
      [&printer, &sourceMgr](mlir::Diagnostic &diag) -> LogicalResult {
        auto tooLong = [&](mlir::Diagnostic &d) {
          return d.str().size() > kMaxDiagnosticChars ||
                 sourceLineTooLong(sourceMgr, d.getLocation());
        };
        bool any = tooLong(diag);
        for (mlir::Diagnostic &note : diag.getNotes())
          any |= tooLong(note);
        if (!any)
          return failure(); // the printer prints it as it is
        auto emit = [&](mlir::Diagnostic &d) {
          printer.emitDiagnostic(
              d.getLocation(), capDiagnosticText(d.str()), d.getSeverity(),
              /*displaySourceLine=*/
              !sourceLineTooLong(sourceMgr, d.getLocation()));
        };
        emit(diag);
        for (mlir::Diagnostic &note : diag.getNotes())
          emit(note);
        return success();
      });
}

DiagnosticCap::~DiagnosticCap() {
  context.getDiagEngine().eraseHandler(id);
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
