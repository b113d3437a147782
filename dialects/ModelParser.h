//===- ModelParser.h - parse nn IR keeping the source's value names -*- C++ -*-===//
//
// What `partita plan` and the Python package's partita.parse share: parsing
// a model, where values keep the names they have in the source text.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_MODELPARSER_H
#define PARTITA_DIALECTS_MODELPARSER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/SourceMgr.h"

namespace partita {

/// Parses the main buffer of `sourceMgr` into a module (top-level ops
/// without a module are wrapped in one, as mlir-opt does), reporting parse
/// and verifier errors as diagnostics on `context`. Values keep the names
/// they have in the text: an op whose result is written `%layers.0.attn.q`
/// gets the location NameLoc("layers.0.attn.q", file:line:col), so printing
/// it again with printNameLocAsPrefix keeps the name and diagnostics still
/// point at the line. Returns null after reporting.
mlir::OwningOpRef<mlir::ModuleOp> parseModelSource(llvm::SourceMgr &sourceMgr,
                                                   mlir::MLIRContext &context,
                                                   llvm::StringRef filename);

} // namespace partita

#endif // PARTITA_DIALECTS_MODELPARSER_H
