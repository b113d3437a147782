//===- NNCost.h - CostOpInterface of the nn ops -----------------*- C++ -*-===//
//
// Attaches dist::CostOpInterface to every nn op (NNCost.cpp). The nn dialect
// calls it from initialize, so every context that loads nn has the costs.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_NN_IR_NNCOST_H
#define PARTITA_DIALECTS_NN_IR_NNCOST_H

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace partita::nn {
void attachNNCostModels(mlir::MLIRContext &context);
} // namespace partita::nn

#endif // PARTITA_DIALECTS_NN_IR_NNCOST_H
