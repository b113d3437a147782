//===- InputLimits.h - reject IR text the MLIR parser cannot take -*- C++ -*-===//
//
// MLIR's parser is recursive descent with no depth limit: a few thousand
// nested brackets overflow the stack and crash the process (found by
// scripts/fuzz.sh). Partita's tools check the nesting depth of their input
// text first and reject deeper input with a located diagnostic instead.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_INPUTLIMITS_H
#define PARTITA_DIALECTS_INPUTLIMITS_H

#include "mlir/Support/LLVM.h"
#include "llvm/Support/SourceMgr.h"

namespace partita {

/// The deepest bracket nesting accepted: far beyond any real program, and
/// safely below the depth at which the parser overflows an 8 MiB stack
/// (about 4000 nested modules on x86-64).
constexpr unsigned kMaxNestingDepth = 1000;

/// Checks that ( [ { < nest at most `maxDepth` deep in the main buffer of
/// `sourceMgr`, outside string literals and // comments. On failure prints
/// "file:line:col: error: ..." through the source manager and fails.
mlir::LogicalResult checkNestingDepth(llvm::SourceMgr &sourceMgr,
                                      unsigned maxDepth = kMaxNestingDepth);

/// The same check on a bare buffer; returns the offset of the first
/// character past the limit, or -1 when the text is within it.
int64_t findExcessiveNesting(llvm::StringRef text,
                             unsigned maxDepth = kMaxNestingDepth);

} // namespace partita

#endif // PARTITA_DIALECTS_INPUTLIMITS_H
