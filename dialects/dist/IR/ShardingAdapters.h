//===- ShardingAdapters.h - sharding model <-> dist attributes --*- C++ -*-===//
//
// The one place where `dist.mesh` / `#dist.mesh` and `#dist.sharding` become
// the plain model of ShardingModel.h and back. Reading checks what the model
// cannot hold or what would make it inconsistent and reports it through the
// caller's diagnostic; writing never fails (a model that does not verify
// writes an attribute that does not verify either, which the IR verifiers
// then report).
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_DIST_IR_SHARDINGADAPTERS_H
#define PARTITA_DIALECTS_DIST_IR_SHARDINGADAPTERS_H

#include "dialects/dist/IR/DistOps.h"
#include "dialects/dist/IR/ShardingModel.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Support/LLVM.h"

namespace partita::dist {

using EmitErrorFn = llvm::function_ref<mlir::InFlightDiagnostic()>;

/// Reads a mesh attribute under the symbol name `name` (may be empty).
/// Fails, through `emitError`, on a null attribute or a mesh that
/// Mesh::verify rejects.
mlir::FailureOr<Mesh> meshFromAttr(MeshAttr attr, llvm::StringRef name,
                                   EmitErrorFn emitError);
/// Reads a `dist.mesh` op; diagnostics at the op.
mlir::FailureOr<Mesh> meshFromOp(MeshOp op);
/// The attribute of `mesh` (its name goes on the op, not the attribute).
MeshAttr meshToAttr(mlir::MLIRContext *ctx, const Mesh &mesh);

/// Reads a sharding without a mesh to check it against: fails only on a
/// null attribute or null entries. Use the overload with a mesh where one
/// is at hand.
mlir::FailureOr<Sharding> shardingFromAttr(ShardingAttr attr,
                                           EmitErrorFn emitError);
/// Reads a sharding of a value on `mesh` and verifies it there
/// (Sharding::verify): fails on a sharding naming another mesh than
/// `mesh.name` (when that is not empty), an unknown axis, an axis used
/// twice, a sub-axis that does not fit, and the other cases Sharding::verify
/// lists.
mlir::FailureOr<Sharding> shardingFromAttr(ShardingAttr attr, const Mesh &mesh,
                                           EmitErrorFn emitError);
/// The attribute of `sharding` on the mesh named `meshName`.
ShardingAttr shardingToAttr(mlir::MLIRContext *ctx, const Sharding &sharding,
                            llvm::StringRef meshName);

} // namespace partita::dist

#endif // PARTITA_DIALECTS_DIST_IR_SHARDINGADAPTERS_H
