//===- InitAllDialects.h - register Partita's dialects ----------*- C++ -*-===//
//
// One place that lists the dialects every Partita tool loads.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_INITALLDIALECTS_H
#define PARTITA_DIALECTS_INITALLDIALECTS_H

#include "dialects/dist/IR/DistOps.h"
#include "dialects/nn/IR/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"

namespace partita {
inline void registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<dist::DistDialect, nn::NNDialect, mlir::func::FuncDialect>();
}
} // namespace partita

#endif // PARTITA_DIALECTS_INITALLDIALECTS_H
