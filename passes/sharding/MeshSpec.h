//===- MeshSpec.h - mesh specs such as "dp=2,tp=4" --------------*- C++ -*-===//
//
// The text form of a mesh that dist-annotate's `mesh` option and
// `partita plan --mesh` take: axis names and sizes, major axis first.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_SHARDING_MESHSPEC_H
#define PARTITA_PASSES_SHARDING_MESHSPEC_H

#include "dialects/dist/IR/DistDialect.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace partita::sharding {

/// Parses a mesh spec "dp=2,tp=4" into axes, major to minor. Reports bad
/// syntax, sizes below 1 and repeated axis names through `emitError`.
mlir::FailureOr<llvm::SmallVector<dist::MeshAxisAttr>>
parseMeshSpec(llvm::StringRef spec, mlir::MLIRContext *ctx,
              llvm::function_ref<mlir::InFlightDiagnostic()> emitError);

/// Prints axes in the mesh-spec syntax, "dp=2,tp=4".
std::string printMeshSpec(llvm::ArrayRef<dist::MeshAxisAttr> axes);

} // namespace partita::sharding

#endif // PARTITA_PASSES_SHARDING_MESHSPEC_H
