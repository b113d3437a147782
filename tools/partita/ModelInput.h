//===- ModelInput.h - read a model file for a partita subcommand -*- C++ -*-===//

#ifndef PARTITA_TOOLS_PARTITA_MODELINPUT_H
#define PARTITA_TOOLS_PARTITA_MODELINPUT_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/SourceMgr.h"

namespace partita::driver {

/// Parses `filename` ("-" for stdin) into a module, reporting parse and
/// verifier errors as file:line:col diagnostics through `sourceMgr`'s
/// handler (which the caller installs). Values keep the names they have in
/// the file: an op whose result is written `%layers.0.attn.q` gets the
/// location NameLoc("layers.0.attn.q", file:line:col), so printing it again
/// with printNameLocAsPrefix keeps the name and diagnostics still point at
/// the line. Returns null after reporting when the file cannot be read or
/// parsed.
mlir::OwningOpRef<mlir::ModuleOp> readModel(llvm::StringRef command,
                                            llvm::StringRef filename,
                                            mlir::MLIRContext &context,
                                            llvm::SourceMgr &sourceMgr);

} // namespace partita::driver

#endif // PARTITA_TOOLS_PARTITA_MODELINPUT_H
