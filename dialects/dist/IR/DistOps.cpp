//===- DistOps.cpp - dist operations --------------------------------------===//
//
// Verifiers of the mesh, the constraint and the collectives.
//
//===----------------------------------------------------------------------===//

#include "dialects/dist/IR/DistOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace partita::dist;

#include "dialects/dist/IR/DistInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "dialects/dist/IR/DistOps.cpp.inc"

MeshOp partita::dist::lookupMesh(Operation *from, FlatSymbolRefAttr symbol) {
  return SymbolTable::lookupNearestSymbolFrom<MeshOp>(from, symbol);
}

// TODO(dist): verifiers.
LogicalResult MeshOp::verify() { return success(); }

LogicalResult ConstraintOp::verifySymbolUses(SymbolTableCollection &) {
  return success();
}

#define PARTITA_COLLECTIVE_STUB(Op)                                            \
  LogicalResult Op::verifySymbolUses(SymbolTableCollection &) {                \
    return success();                                                          \
  }                                                                            \
  int64_t Op::getGroupSize() { return 1; }
PARTITA_COLLECTIVE_STUB(AllGatherOp)
PARTITA_COLLECTIVE_STUB(ReduceScatterOp)
PARTITA_COLLECTIVE_STUB(AllReduceOp)
PARTITA_COLLECTIVE_STUB(AllToAllOp)
PARTITA_COLLECTIVE_STUB(CollectivePermuteOp)
PARTITA_COLLECTIVE_STUB(SendOp)
PARTITA_COLLECTIVE_STUB(RecvOp)
