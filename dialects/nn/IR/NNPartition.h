//===- NNPartition.h - PartitionOpInterface of the nn ops -------*- C++ -*-===//
//
// Attaches the partition hooks (dist::PartitionOpInterface) of the nn ops
// that have a local form of their own; every other nn op is cloned on its
// local operands (dist::partitionByClone).
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_NN_IR_NNPARTITION_H
#define PARTITA_DIALECTS_NN_IR_NNPARTITION_H

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace partita::nn {
/// Called from NNDialect::initialize, so every context with nn has them.
void attachNNPartitionModels(mlir::MLIRContext &context);
} // namespace partita::nn

#endif // PARTITA_DIALECTS_NN_IR_NNPARTITION_H
