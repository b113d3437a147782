//===- partita-opt.cpp - mlir-opt with Partita's dialects and passes ------===//

#include "dialects/InitAllDialects.h"
#include "passes/InitAllPasses.h"
#include "test/lib/TestPasses.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::registerTransformsPasses();
  partita::registerAllPasses();
  partita::test::registerTestPasses();
  mlir::DialectRegistry registry;
  partita::registerAllDialects(registry);
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "Partita optimizer driver\n", registry));
}
