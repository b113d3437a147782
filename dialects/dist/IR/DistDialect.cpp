//===- DistDialect.cpp - the dist dialect ---------------------------------===//
//
// Dialect registration and verification of the `dist.sharding` attribute
// wherever it is attached.
//
//===----------------------------------------------------------------------===//

#include "dialects/dist/IR/DistDialect.h"
#include "dialects/dist/IR/DistOps.h"

using namespace mlir;
using namespace partita::dist;

#include "dialects/dist/IR/DistDialect.cpp.inc"

void DistDialect::initialize() {
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "dialects/dist/IR/DistOps.cpp.inc"
      >();
}

// TODO(dist): check that dist.sharding is an array of shardings, one per
// result, each valid for its result's type and mesh.
LogicalResult DistDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  return success();
}

LogicalResult DistDialect::verifyRegionArgAttribute(Operation *op,
                                                    unsigned regionIndex,
                                                    unsigned argIndex,
                                                    NamedAttribute attr) {
  return success();
}

LogicalResult DistDialect::verifyRegionResultAttribute(Operation *op,
                                                       unsigned regionIndex,
                                                       unsigned resultIndex,
                                                       NamedAttribute attr) {
  return success();
}
