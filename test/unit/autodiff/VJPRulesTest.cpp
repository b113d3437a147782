//===- VJPRulesTest.cpp - unit tests of the nn ops' VJP rules -------------===//

#include "passes/autodiff/VJPRules.h"
#include "dialects/nn/IR/NNOps.h"
#include "dialects/nn/Interfaces/VJPInterface.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

using namespace mlir;
using namespace partita;

namespace {

class VJPRulesTest : public ::testing::Test {
protected:
  VJPRulesTest() {
    DialectRegistry registry;
    registry.insert<nn::NNDialect, func::FuncDialect>();
    nn::registerVJPExternalModels(registry);
    context.appendDialectRegistry(registry);
    context.loadDialect<nn::NNDialect, func::FuncDialect>();
  }

  RankedTensorType tensor(ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, Float32Type::get(&context));
  }

  MLIRContext context;
};

// Every nn op is differentiable, except the backward and optimizer ops
// themselves: a new forward op without a rule fails here.
TEST_F(VJPRulesTest, EveryForwardOpHasARule) {
  const std::set<std::string> notDifferentiable = {"nn.relu_grad",
                                                   "nn.silu_grad",
                                                   "nn.gelu_grad",
                                                   "nn.layer_norm_grad",
                                                   "nn.layer_norm_gamma_grad",
                                                   "nn.rms_norm_grad",
                                                   "nn.rotary_grad",
                                                   "nn.attention_grad",
                                                   "nn.embedding_grad",
                                                   "nn.cross_entropy_grad",
                                                   "nn.sgd",
                                                   "nn.adamw"};
  int forwardOps = 0;
  for (RegisteredOperationName name : context.getRegisteredOperations()) {
    if (name.getDialectNamespace() != "nn")
      continue;
    std::string text = name.getStringRef().str();
    bool hasRule = name.hasInterface<nn::VJPOpInterface>();
    EXPECT_EQ(hasRule, !notDifferentiable.count(text)) << text;
    forwardOps += hasRule;
  }
  EXPECT_GE(forwardOps, 29);
}

/// Builds `nn.einsum spec` on fresh arguments of `shapes` into a function,
/// asks its VJP for operand `index`, and returns the cotangent (the
/// function verifies).
class EinsumVJP {
public:
  EinsumVJP(MLIRContext &context, StringRef spec,
            ArrayRef<RankedTensorType> operands, RankedTensorType result)
      : builder(&context) {
    Location loc = UnknownLoc::get(&context);
    module = ModuleOp::create(loc);
    builder.setInsertionPointToEnd(module.getBody());
    SmallVector<Type> types(operands.begin(), operands.end());
    types.push_back(result);
    auto func = func::FuncOp::create(builder, loc, "f",
                                     builder.getFunctionType(types, {}));
    Block *body = func.addEntryBlock();
    builder.setInsertionPointToEnd(body);
    op = nn::EinsumOp::create(builder, loc, result, spec,
                              body->getArguments().drop_back());
    dy = body->getArguments().back();
    terminator = func::ReturnOp::create(builder, loc);
  }
  ~EinsumVJP() { module.erase(); }

  Value cotangent(unsigned index) {
    builder.setInsertionPoint(terminator);
    FailureOr<Value> value = cast<nn::VJPOpInterface>(op.getOperation())
                                 .buildOperandCotangent(builder, index, {dy});
    EXPECT_TRUE(succeeded(value));
    EXPECT_TRUE(succeeded(verify(module)));
    return succeeded(value) ? *value : Value();
  }

  OpBuilder builder;
  ModuleOp module;
  nn::EinsumOp op;
  Value dy;
  Operation *terminator;
};

// "ij,jk->i": k is summed in the second operand alone, so the first
// operand's cotangent is einsum("i,jk->ij").
TEST_F(VJPRulesTest, EinsumLetterOnlyInTheOtherOperand) {
  EinsumVJP vjp(context, "ij,jk->i", {tensor({2, 3}), tensor({3, 4})},
                tensor({2}));
  Value grad = vjp.cotangent(0);
  auto einsum = grad.getDefiningOp<nn::EinsumOp>();
  ASSERT_TRUE(einsum);
  EXPECT_EQ(einsum.getSpec(), "i,jk->ij");
  EXPECT_EQ(grad.getType(), tensor({2, 3}));
  // The second operand: einsum("i,ij->jk") cannot name k; it is built as
  // "i,ij->j" and broadcast along k.
  Value second = vjp.cotangent(1);
  auto broadcast = second.getDefiningOp<nn::BroadcastOp>();
  ASSERT_TRUE(broadcast);
  EXPECT_EQ(broadcast.getDims(), ArrayRef<int64_t>({0}));
  EXPECT_EQ(second.getType(), tensor({3, 4}));
  auto inner = broadcast.getInput().getDefiningOp<nn::EinsumOp>();
  ASSERT_TRUE(inner);
  EXPECT_EQ(inner.getSpec(), "i,ij->j");
}

// A transposing one-operand einsum "ij->ji" has the cotangent "ji->ij".
TEST_F(VJPRulesTest, EinsumTranspose) {
  EinsumVJP vjp(context, "ij->ji", {tensor({2, 3})}, tensor({3, 2}));
  Value grad = vjp.cotangent(0);
  auto einsum = grad.getDefiningOp<nn::EinsumOp>();
  ASSERT_TRUE(einsum);
  EXPECT_EQ(einsum.getSpec(), "ji->ij");
  EXPECT_EQ(grad.getType(), tensor({2, 3}));
}

// An identity einsum passes the cotangent through unchanged.
TEST_F(VJPRulesTest, EinsumIdentity) {
  EinsumVJP vjp(context, "ij->ij", {tensor({2, 3})}, tensor({2, 3}));
  EXPECT_EQ(vjp.cotangent(0), vjp.dy);
}

} // namespace
