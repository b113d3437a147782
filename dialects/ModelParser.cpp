//===- ModelParser.cpp - parse nn IR keeping the source's value names -----===//

#include "dialects/ModelParser.h"

#include "dialects/InputLimits.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/AsmParser/AsmParserState.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir;

namespace partita {

/// The name a value is written with in the source ("%layers.0.attn.q"),
/// or empty when it is only a number or a printer default ("%0", "%arg3").
static StringRef sourceName(llvm::SMRange range) {
  if (!range.isValid())
    return {};
  StringRef text(range.Start.getPointer(),
                 range.End.getPointer() - range.Start.getPointer());
  if (!text.consume_front("%") || text.empty())
    return {};
  StringRef digits = text;
  digits.consume_front("arg");
  if (llvm::all_of(digits, [](char c) { return llvm::isDigit(c); }))
    return {};
  return text;
}

static Location named(Location loc, StringRef name) {
  if (name.empty() || isa<NameLoc>(loc))
    return loc;
  return NameLoc::get(StringAttr::get(loc.getContext(), name), loc);
}

/// Wraps each named value's location in a NameLoc carrying the name.
static void keepSourceNames(Block &top, const AsmParserState &state) {
  top.walk([&](Operation *op) {
    if (const auto *def = state.getOpDef(op))
      if (op->getNumResults() == 1 && def->resultGroups.size() == 1)
        op->setLoc(named(op->getLoc(),
                         sourceName(def->resultGroups[0].definition.loc)));
    for (Region &region : op->getRegions())
      for (Block &block : region) {
        const auto *def = state.getBlockDef(&block);
        if (!def || def->arguments.size() != block.getNumArguments())
          continue;
        for (auto [arg, argDef] :
             llvm::zip_equal(block.getArguments(), def->arguments))
          arg.setLoc(named(arg.getLoc(), sourceName(argDef.loc)));
      }
  });
}

OwningOpRef<ModuleOp> parseModelSource(llvm::SourceMgr &sourceMgr,
                                       MLIRContext &context,
                                       StringRef filename) {
  if (failed(checkNestingDepth(sourceMgr)))
    return {};

  Block parsed;
  AsmParserState state;
  // Verify after renaming, so that verifier errors already show the names.
  ParserConfig config(&context, /*verifyAfterParse=*/false);
  if (failed(parseAsmSourceFile(sourceMgr, &parsed, config, &state)))
    return {};
  keepSourceNames(parsed, state);

  OwningOpRef<ModuleOp> module;
  if (parsed.getOperations().size() == 1)
    if (auto single = dyn_cast<ModuleOp>(parsed.front())) {
      single->remove();
      module = single;
    }
  if (!module) {
    // Top-level ops without a module: wrap them, as mlir-opt does.
    module = ModuleOp::create(FileLineColLoc::get(&context, filename, 0, 0));
    Block *body = module->getBody();
    body->getOperations().splice(body->end(), parsed.getOperations());
  }
  if (failed(verify(*module)))
    return {};
  return module;
}

} // namespace partita
