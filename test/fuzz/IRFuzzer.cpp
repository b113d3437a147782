//===- IRFuzzer.cpp - libFuzzer target for Partita's IR -------------------===//
//
// Feeds arbitrary bytes to the MLIR parser with Partita's dialects loaded,
// then checks the properties every input must have: parsing and verification
// either succeed or fail with a diagnostic (never a crash), and whatever
// parses and verifies prints to text that parses and verifies again to the
// same text. With PARTITA_FUZZ_PASSES set at build time it also runs the
// sharding passes on what verifies, which must not crash either.
//
//===----------------------------------------------------------------------===//

#include "dialects/InitAllDialects.h"
#include "dialects/InputLimits.h"
#include "passes/InitAllPasses.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <cstdlib>
#include <string>

using namespace mlir;

namespace {
MLIRContext &getContext() {
  static MLIRContext *context = [] {
    partita::registerAllPasses();
    DialectRegistry registry;
    partita::registerAllDialects(registry);
    auto *ctx = new MLIRContext(registry, MLIRContext::Threading::DISABLED);
    ctx->loadAllAvailableDialects();
    // Diagnostics are expected; keep them off stderr.
    ctx->getDiagEngine().registerHandler([](Diagnostic &) { return success(); });
    return ctx;
  }();
  return *context;
}

std::string print(ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os);
  return text;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  MLIRContext &ctx = getContext();
  std::string input(reinterpret_cast<const char *>(data), size);
  // The tools reject input nested beyond what MLIR's parser can take.
  if (partita::findExcessiveNesting(input) >= 0)
    return 0;
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(input, &ctx);
  if (!module)
    return 0;
  // parseSourceString verifies; print and reparse must round-trip.
  std::string first = print(*module);
  OwningOpRef<ModuleOp> again = parseSourceString<ModuleOp>(first, &ctx);
  if (!again) {
    llvm::errs() << "printed IR does not parse back:\n" << first << "\n";
    std::abort();
  }
  std::string second = print(*again);
  if (first != second) {
    llvm::errs() << "printing is not stable:\n" << first << "\n---\n"
                 << second << "\n";
    std::abort();
  }
#ifdef PARTITA_FUZZ_PASSES
  PassManager pm(&ctx);
  if (succeeded(parsePassPipeline("dist-propagate", pm)) &&
      succeeded(pm.run(*module)) && failed(verify(*module))) {
    llvm::errs() << "dist-propagate produced invalid IR\n";
    std::abort();
  }
#endif
  return 0;
}
