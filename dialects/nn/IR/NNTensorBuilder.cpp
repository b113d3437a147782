//===- NNTensorBuilder.cpp - dist::TensorBuilderInterface for nn ----------===//

#include "dialects/nn/IR/NNTensorBuilder.h"

#include "dialects/dist/IR/TensorBuilder.h"
#include "dialects/nn/IR/NNOps.h"

#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;

namespace partita::nn {
namespace {

struct NNTensorBuilder : dist::TensorBuilderInterface {
  using TensorBuilderInterface::TensorBuilderInterface;

  Value buildZeros(OpBuilder &builder, Location loc,
                   RankedTensorType type) const override {
    return ConstantOp::create(
        builder, loc, type,
        DenseElementsAttr::get(type,
                               builder.getZeroAttr(type.getElementType())));
  }

  Value buildSum(OpBuilder &builder, Location loc, Value lhs,
                 Value rhs) const override {
    return AddOp::create(builder, loc, lhs.getType(), lhs, rhs);
  }

  Value buildCopy(OpBuilder &builder, Location loc,
                  Value value) const override {
    return ReshapeOp::create(builder, loc, value.getType(), value);
  }

  bool isSum(Operation *op) const override { return isa<AddOp>(op); }
};

} // namespace

void addNNTensorBuilder(NNDialect &dialect) {
  dialect.addInterfaces<NNTensorBuilder>();
}

} // namespace partita::nn
