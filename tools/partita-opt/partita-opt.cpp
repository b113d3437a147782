//===- partita-opt.cpp - mlir-opt with Partita's dialects and passes ------===//
//
// mlir-opt's main, plus one check before parsing: input nested too deep for
// MLIR's recursive parser is rejected with a diagnostic instead of crashing.
//
//===----------------------------------------------------------------------===//

#include "dialects/InitAllDialects.h"
#include "dialects/InputLimits.h"
#include "passes/InitAllPasses.h"
#include "passes/Pipelines.h"
#include "test/lib/TestDialect.h"
#include "test/lib/TestPasses.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  registerTransformsPasses();
  partita::registerAllPasses();
  partita::registerPipelines();
  partita::test::registerTestPasses();
  DialectRegistry registry;
  partita::registerAllDialects(registry);
  partita::test::registerTestDialect(registry);

  auto [inputFilename, outputFilename] = registerAndParseCLIOptions(
      argc, argv, "Partita optimizer driver\n", registry);
  MlirOptMainConfig config = MlirOptMainConfig::createFromCLOptions();
  if (config.shouldShowDialects() || config.shouldListPasses())
    return asMainReturnCode(
        MlirOptMain(argc, argv, inputFilename, outputFilename, registry));

  std::string message;
  std::unique_ptr<llvm::MemoryBuffer> input =
      openInputFile(inputFilename, &message);
  if (!input) {
    llvm::errs() << message << "\n";
    return EXIT_FAILURE;
  }
  {
    llvm::SourceMgr sourceMgr;
    sourceMgr.AddNewSourceBuffer(
        llvm::MemoryBuffer::getMemBuffer(input->getMemBufferRef()),
        llvm::SMLoc());
    if (failed(partita::checkNestingDepth(sourceMgr)))
      return EXIT_FAILURE;
  }
  std::unique_ptr<llvm::ToolOutputFile> output =
      openOutputFile(outputFilename, &message);
  if (!output) {
    llvm::errs() << message << "\n";
    return EXIT_FAILURE;
  }
  if (failed(MlirOptMain(output->os(), std::move(input), registry, config)))
    return EXIT_FAILURE;
  output->keep();
  return EXIT_SUCCESS;
}
