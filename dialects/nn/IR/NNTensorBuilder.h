//===- NNTensorBuilder.h - dist::TensorBuilderInterface for nn --*- C++ -*-===//
//
// Adds the nn dialect's dist::TensorBuilderInterface (NNTensorBuilder.cpp):
// zeros as nn.constant, sums as nn.add, copies as an nn.reshape to the same
// type. The nn dialect calls it from initialize.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_NN_IR_NNTENSORBUILDER_H
#define PARTITA_DIALECTS_NN_IR_NNTENSORBUILDER_H

namespace partita::nn {
class NNDialect;
void addNNTensorBuilder(NNDialect &dialect);
} // namespace partita::nn

#endif // PARTITA_DIALECTS_NN_IR_NNTENSORBUILDER_H
