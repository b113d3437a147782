//===- MeshSpec.h - mesh specs such as "dp=2,tp=4" --------------*- C++ -*-===//
//
// The text form of a mesh that dist-annotate's `mesh` option and
// `partita plan --mesh` take: axis names and sizes, major axis first; the
// mesh op a pass finds or creates from it; and which axes' groups span
// nodes when devices are numbered node by node.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_SHARDING_MESHSPEC_H
#define PARTITA_PASSES_SHARDING_MESHSPEC_H

#include "dialects/dist/IR/DistOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>
#include <utility>

namespace partita::sharding {

/// Parses a mesh spec "dp=2,tp=4" into axes, major to minor. Reports bad
/// syntax, sizes below 1 and repeated axis names through `emitError`.
mlir::FailureOr<llvm::SmallVector<dist::MeshAxisAttr>>
parseMeshSpec(llvm::StringRef spec, mlir::MLIRContext *ctx,
              llvm::function_ref<mlir::InFlightDiagnostic()> emitError);

/// Prints axes in the mesh-spec syntax, "dp=2,tp=4".
std::string printMeshSpec(llvm::ArrayRef<dist::MeshAxisAttr> axes);

/// The mesh called `meshName` in `module`; created at the module's start
/// from `spec` (a mesh spec; blank: none) when absent, checked against it
/// when present. Reports at the module or the mesh op.
mlir::FailureOr<dist::MeshOp> getOrCreateMesh(mlir::ModuleOp module,
                                              llvm::StringRef meshName,
                                              llvm::StringRef spec);

/// Whether some group of devices that differ only in `groupAxes` of the
/// mesh `axes` (row-major over device numbers) holds devices of two nodes
/// of `devicesPerNode` (0: one node).
bool groupSpansNodes(llvm::ArrayRef<std::pair<std::string, int64_t>> axes,
                     llvm::ArrayRef<std::string> groupAxes,
                     int64_t devicesPerNode);

} // namespace partita::sharding

#endif // PARTITA_PASSES_SHARDING_MESHSPEC_H
