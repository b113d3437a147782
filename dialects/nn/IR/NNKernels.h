//===- NNKernels.h - KernelOpInterface of the nn ops ------------*- C++ -*-===//
//
// Attaches dist::KernelOpInterface to every nn op (NNKernels.cpp): which
// runtime kernel computes it, with which attributes. The nn dialect calls it
// from initialize, so every context that loads nn has them.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_NN_IR_NNKERNELS_H
#define PARTITA_DIALECTS_NN_IR_NNKERNELS_H

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace partita::nn {
void attachNNKernelModels(mlir::MLIRContext &context);
} // namespace partita::nn

#endif // PARTITA_DIALECTS_NN_IR_NNKERNELS_H
