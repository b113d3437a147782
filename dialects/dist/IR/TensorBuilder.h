//===- TensorBuilder.h - values generic passes build in a model's dialect -===//
//
// The pipeline passes add microbatch gradients into accumulators, share a
// stage's value over the pipeline axis from a zero on the other stages, and
// give a function result its own buffer. They know the model's ops only
// through interfaces, so the dialect the model is written in builds these
// few values for them: a zero tensor, the sum of two tensors, a copy. The nn
// dialect implements it (NNTensorBuilder.cpp); a dialect without it can
// still be sharded and partitioned, but not split into pipeline stages or
// microbatches.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_DIST_IR_TENSORBUILDER_H
#define PARTITA_DIALECTS_DIST_IR_TENSORBUILDER_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectInterface.h"
#include "mlir/IR/Operation.h"

namespace partita::dist {

/// Builds a zero tensor, a sum and a copy as ops of the dialect that
/// registers it, and recognises the sum it builds.
class TensorBuilderInterface
    : public mlir::DialectInterface::Base<TensorBuilderInterface> {
public:
  explicit TensorBuilderInterface(mlir::Dialect *dialect) : Base(dialect) {}

  /// A tensor of `type` whose elements are all zero.
  virtual mlir::Value buildZeros(mlir::OpBuilder &builder, mlir::Location loc,
                                 mlir::RankedTensorType type) const = 0;
  /// `lhs + rhs` elementwise; both of one type, which the result has.
  virtual mlir::Value buildSum(mlir::OpBuilder &builder, mlir::Location loc,
                               mlir::Value lhs, mlir::Value rhs) const = 0;
  /// A new value equal to `value`, of its type, in a buffer of its own.
  virtual mlir::Value buildCopy(mlir::OpBuilder &builder, mlir::Location loc,
                                mlir::Value value) const = 0;
  /// Whether `op` (an op of this dialect) is an elementwise sum of its two
  /// operands, the op `buildSum` builds.
  virtual bool isSum(mlir::Operation *op) const = 0;
};

/// The builder of the first op's dialect under `scope` (in walk order) that
/// has one, or nullptr (a diagnostic is the caller's: it knows what it
/// needed the builder for).
const TensorBuilderInterface *findTensorBuilder(mlir::Operation *scope);

/// Whether `op` is its dialect's elementwise sum (false where the dialect
/// has no builder).
bool isTensorSum(mlir::Operation *op);

} // namespace partita::dist

#endif // PARTITA_DIALECTS_DIST_IR_TENSORBUILDER_H
