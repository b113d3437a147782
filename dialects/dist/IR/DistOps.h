//===- DistOps.h - dist operations ------------------------------*- C++ -*-===//
//
// Declares the dist operations and ShardingRuleOpInterface.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_DIST_IR_DISTOPS_H
#define PARTITA_DIALECTS_DIST_IR_DISTOPS_H

#include "dialects/dist/IR/DistDialect.h"
#include "dialects/dist/IR/ShardingRule.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/dist/IR/DistInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/dist/IR/DistOps.h.inc"

namespace partita::dist {
/// The mesh that `symbol` names, looked up from `from`; null when absent.
MeshOp lookupMesh(mlir::Operation *from, mlir::FlatSymbolRefAttr symbol);
} // namespace partita::dist

#endif // PARTITA_DIALECTS_DIST_IR_DISTOPS_H
