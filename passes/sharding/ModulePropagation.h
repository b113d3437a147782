//===- ModulePropagation.h - dist-propagate on a module ---------*- C++ -*-===//
//
// Builds the propagation graph (Propagation.h) from a module's functions,
// checks its annotations, solves, and writes every tensor's sharding back.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_SHARDING_MODULEPROPAGATION_H
#define PARTITA_PASSES_SHARDING_MODULEPROPAGATION_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"

#include <cstdint>

namespace partita::sharding {

struct PropagateOptions {
  /// Attach `dist.origin` to every value.
  bool recordOrigins = false;
};

/// Propagates the module's shardings and writes a closed `dist.sharding` on
/// every tensor: function argument and result attributes, and an array (one
/// per result) on each op whose results are all tensors. Returns the number
/// of sweeps, or failure after a diagnostic at the first value that breaks a
/// precondition (nothing is written then). A module without a mesh and
/// without annotations is left as it is.
mlir::FailureOr<int64_t> propagateModule(mlir::ModuleOp module,
                                         const PropagateOptions &options);

} // namespace partita::sharding

#endif // PARTITA_PASSES_SHARDING_MODULEPROPAGATION_H
