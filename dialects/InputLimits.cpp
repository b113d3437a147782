//===- InputLimits.cpp - reject IR text the MLIR parser cannot take -------===//

#include "dialects/InputLimits.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace partita {

int64_t findExcessiveNesting(StringRef text, unsigned maxDepth) {
  unsigned depth = 0;
  for (size_t i = 0, e = text.size(); i < e; ++i) {
    char c = text[i];
    if (c == '"') {
      // Skip a string literal, honouring backslash escapes.
      for (++i; i < e && text[i] != '"'; ++i)
        if (text[i] == '\\')
          ++i;
      continue;
    }
    if (c == '/' && i + 1 < e && text[i + 1] == '/') {
      while (i < e && text[i] != '\n')
        ++i;
      continue;
    }
    if (c == '(' || c == '[' || c == '{' || c == '<') {
      if (++depth > maxDepth)
        return static_cast<int64_t>(i);
    } else if ((c == ')' || c == ']' || c == '}' || c == '>') && depth > 0) {
      // '>' also ends "->"; never going below zero keeps that harmless.
      --depth;
    }
  }
  return -1;
}

LogicalResult checkNestingDepth(llvm::SourceMgr &sourceMgr, unsigned maxDepth) {
  const llvm::MemoryBuffer *buffer =
      sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID());
  int64_t offset = findExcessiveNesting(buffer->getBuffer(), maxDepth);
  if (offset < 0)
    return success();
  sourceMgr.PrintMessage(
      llvm::errs(), llvm::SMLoc::getFromPointer(buffer->getBufferStart() + offset),
      llvm::SourceMgr::DK_Error,
      "brackets nest deeper than " + std::to_string(maxDepth) +
          " levels; Partita rejects such input because MLIR's parser would "
          "overflow its stack");
  return failure();
}

} // namespace partita
