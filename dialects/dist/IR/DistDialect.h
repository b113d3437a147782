//===- DistDialect.h - the dist dialect -------------------------*- C++ -*-===//
//
// Declares the dist dialect, its enums and attributes.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_DIST_IR_DISTDIALECT_H
#define PARTITA_DIALECTS_DIST_IR_DISTDIALECT_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpImplementation.h"

#include "dialects/dist/IR/DistDialect.h.inc"
#include "dialects/dist/IR/DistEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/dist/IR/DistAttrs.h.inc"

#endif // PARTITA_DIALECTS_DIST_IR_DISTDIALECT_H
