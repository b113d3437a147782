//===- NNAttributesTest.cpp - the nn dialect's declared attributes --------===//
//
// The typed accessors of NNAttributes.h write what the dialect's verifier
// accepts and read back what they wrote.
//
//===----------------------------------------------------------------------===//

#include "dialects/nn/IR/NNAttributes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace partita;

namespace {

// Tests each accessor's round trip on a function and an op, and that the
// result verifies.
TEST(NNAttributesTest, AccessorsRoundTripAndVerify) {
  MLIRContext context;
  context.loadDialect<nn::NNDialect, func::FuncDialect>();
  OpBuilder builder(&context);
  Location loc = builder.getUnknownLoc();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  builder.setInsertionPointToEnd(module->getBody());
  auto type = RankedTensorType::get({4}, builder.getF32Type());
  auto func = func::FuncOp::create(
      builder, loc, "f", builder.getFunctionType({type, type}, {type}));
  Block *body = func.addEntryBlock();
  builder.setInsertionPointToEnd(body);
  auto relu = nn::ReluOp::create(builder, loc, type, body->getArgument(0));
  func::ReturnOp::create(builder, loc, relu.getResult());

  nn::paramAttr.setArg(func, 0, "w");
  nn::inputAttr.setArg(func, 1, "x");
  nn::outputAttr.setResult(func, 0, "loss");
  EXPECT_EQ(nn::paramAttr.getArg(func, 0).getValue(), "w");
  EXPECT_FALSE(nn::paramAttr.getArg(func, 1));
  EXPECT_EQ(nn::inputAttr.getArg(func, 1).getValue(), "x");
  EXPECT_EQ(nn::outputAttr.getResult(func, 0).getValue(), "loss");
  nn::paramAttr.removeArg(func, 0);
  EXPECT_FALSE(nn::paramAttr.onArg(func, 0));
  nn::stateAttr.setArg(func, 0, "w.m");

  EXPECT_FALSE(nn::getLayerIndex(relu));
  nn::setLayerIndex(relu, 3);
  EXPECT_EQ(nn::getLayerIndex(relu), 3);
  EXPECT_FALSE(nn::getGradKind(relu));
  nn::setGradKind(relu, nn::GradKind::Weight);
  EXPECT_EQ(nn::getGradKind(relu), nn::GradKind::Weight);
  EXPECT_EQ(relu->getAttrOfType<StringAttr>("nn.grad_kind").getValue(), "W");
  EXPECT_FALSE(nn::isRecomputed(relu));
  nn::setRecomputed(relu);
  EXPECT_TRUE(nn::isRecomputed(relu));
  nn::setMeanCount(relu, 8);
  EXPECT_EQ(nn::getMeanCount(relu), 8);
  EXPECT_TRUE(succeeded(verify(*module)));
}

// Tests the grad kinds' spellings, which tests and zero-bubble schedules
// read.
TEST(NNAttributesTest, GradKindSpellings) {
  EXPECT_EQ(nn::stringifyGradKind(nn::GradKind::Input), "B");
  EXPECT_EQ(nn::stringifyGradKind(nn::GradKind::Weight), "W");
  EXPECT_EQ(nn::stringifyGradKind(nn::GradKind::Update), "update");
  EXPECT_EQ(nn::symbolizeGradKind("W"), nn::GradKind::Weight);
  EXPECT_FALSE(nn::symbolizeGradKind("backward"));
}

} // namespace
