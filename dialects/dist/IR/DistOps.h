//===- DistOps.h - dist operations ------------------------------*- C++ -*-===//
//
// Declares the dist operations, ShardingRuleOpInterface and
// PartitionOpInterface.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_DIST_IR_DISTOPS_H
#define PARTITA_DIALECTS_DIST_IR_DISTOPS_H

#include "dialects/dist/IR/DistDialect.h"
#include "dialects/dist/IR/DistTraits.h"
#include "dialects/dist/IR/PartitionHooks.h"
#include "dialects/dist/IR/ShardingRule.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/dist/IR/DistInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/dist/IR/DistOps.h.inc"

namespace partita::dist {
/// The mesh that `symbol` names, looked up from `from`; null when absent.
MeshOp lookupMesh(mlir::Operation *from, mlir::FlatSymbolRefAttr symbol);

/// The mesh that `sharding` names, looked up from `from`; null when absent.
MeshAttr lookupMeshAttr(mlir::Operation *from, ShardingAttr sharding);

/// The `dist.sharding` annotation of `value`: the arg attribute of a function
/// entry block argument, or the result's entry of the op's array. Null when
/// the value has none (or the annotation is malformed; the verifier reports
/// that). A `dist.constraint`'s own `sharding` is not read here.
ShardingAttr getSharding(mlir::Value value);

/// Sets the `dist.sharding` annotation of `value` (a function entry block
/// argument or an op result). For an op result, other results that have no
/// annotation yet get an open, replicated sharding on the same mesh. A null
/// `sharding` removes the annotation (on a result of a multi-result op: sets
/// it to open and replicated). Other block arguments are left unchanged.
void setSharding(mlir::Value value, ShardingAttr sharding);

/// The `dist.sharding` result attribute of result `index` of `func`, or null.
ShardingAttr getFuncResultSharding(mlir::FunctionOpInterface func,
                                   unsigned index);
/// Sets (or, when null, removes) the `dist.sharding` result attribute of
/// result `index` of `func`.
void setFuncResultSharding(mlir::FunctionOpInterface func, unsigned index,
                           ShardingAttr sharding);

/// Checks `sharding` as the annotation of a value of `type` seen from `op`:
/// a ranked tensor type, a mesh symbol that names a `dist.mesh`, and
/// ShardingAttr::verifyFor. Diagnostics are emitted at `op` and start with
/// `what` (e.g. "'dist.sharding' of result #0").
mlir::LogicalResult verifyShardingOfValue(mlir::Operation *op,
                                          ShardingAttr sharding,
                                          mlir::Type type,
                                          const llvm::Twine &what);
} // namespace partita::dist

#endif // PARTITA_DIALECTS_DIST_IR_DISTOPS_H
