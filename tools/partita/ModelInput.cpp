//===- ModelInput.cpp - read a model file for a partita subcommand --------===//

#include "tools/partita/ModelInput.h"

#include "tools/partita/Driver.h"

#include "dialects/ModelParser.h"

#include "mlir/Support/FileUtilities.h"

using namespace mlir;

namespace partita::driver {

OwningOpRef<ModuleOp> readModel(StringRef command, StringRef filename,
                                MLIRContext &context,
                                llvm::SourceMgr &sourceMgr) {
  std::string message;
  std::unique_ptr<llvm::MemoryBuffer> buffer =
      openInputFile(filename, &message);
  if (!buffer) {
    reportError(command, message);
    return {};
  }
  sourceMgr.AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
  return parseModelSource(sourceMgr, context, filename);
}

} // namespace partita::driver
