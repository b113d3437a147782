//===- DistCostTest.cpp - unit tests of CostOpInterface on dist ops -------===//
//
// Expected numbers are derived by hand from the ring formulas in
// DistCost.cpp, written as the arithmetic they come from (f32: 4 bytes).
//
//===----------------------------------------------------------------------===//

#include "dialects/dist/IR/CostInterface.h"
#include "test/unit/CostTestModule.h"
#include "dialects/dist/IR/DistOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace partita;
using dist::OpCost;

namespace {

constexpr const char *kOps = R"mlir(
dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @ops(%a: tensor<4x8xf32>, %b: tensor<32x8xf32>, %c: tensor<8x8xf32>,
               %d: tensor<2x16xf32>, %e: tensor<8xf32>, %f: tensor<4x32xf32>) {
  %0 = dist.all_gather %a on @mesh axes = ["tp"] dim = 1 : tensor<4x8xf32> -> tensor<4x32xf32> loc("all_gather")
  %1 = dist.reduce_scatter %b on @mesh axes = ["tp"] dim = 0 kind = sum : tensor<32x8xf32> -> tensor<8x8xf32> loc("reduce_scatter")
  %2 = dist.all_reduce %c on @mesh axes = ["tp"] kind = sum : tensor<8x8xf32> loc("all_reduce")
  %3 = dist.all_reduce %c on @mesh axes = ["dp", "tp"] kind = sum : tensor<8x8xf32> loc("all_reduce_8")
  %4 = dist.all_reduce %c on @mesh axes = [] kind = sum : tensor<8x8xf32> loc("all_reduce_1")
  %5 = dist.all_to_all %d on @mesh axes = ["tp"] split_dim = 1 concat_dim = 0 : tensor<2x16xf32> -> tensor<8x4xf32> loc("all_to_all")
  %6 = dist.collective_permute %e on @mesh axes = ["tp"] pairs = [0, 1, 1, 0] : tensor<8xf32> loc("permute")
  %7 = dist.collective_permute %e on @mesh axes = ["tp"] pairs = [0, 0] : tensor<8xf32> loc("permute_self")
  %8 = dist.slice %f on @mesh axes = ["tp"] dim = 1 : tensor<4x32xf32> -> tensor<4x8xf32> loc("slice")
  %9 = dist.mask %d on @mesh axes = ["dp"] dim = 0 size = 3 value = 0.0 : tensor<2x16xf32> loc("mask")
  %10 = dist.axis_index on @mesh axes = ["tp"] : tensor<i32> loc("axis_index")
  dist.send %a on @mesh axis = "dp" to 1 : tensor<4x8xf32> loc("send")
  %11 = dist.recv on @mesh axis = "dp" from 0 : tensor<4x8xf32> loc("recv")
  %12 = dist.constraint %a <@mesh, [{"dp"}, {}]> : tensor<4x8xf32> loc("constraint")
  return
}
)mlir";

OpCost cost(double flops, double read, double written, double wire) {
  OpCost c;
  c.flops = flops;
  c.bytesRead = read;
  c.bytesWritten = written;
  c.wireBytes = wire;
  return c;
}

class DistCostTest : public ::testing::Test, protected test::CostTestModule {
protected:
  DistCostTest() {
    context.loadDialect<dist::DistDialect, func::FuncDialect>();
    parse(kOps);
  }
};

// Tests the ring volumes of the collectives over tp (n = 4) and dp x tp (8).
TEST_F(DistCostTest, Collectives) {
  // Gathers 4 blocks of 128 bytes: each device sends its block to 3 others
  // along the ring, (4-1)/4 of the 512-byte output.
  EXPECT_COST("all_gather", cost(0, 128, 512, 3.0 / 4 * 512));
  // 1024 input bytes, (n-1)/n of them sent; (n-1)/n of the 256 input
  // elements added.
  EXPECT_COST("reduce_scatter", cost(3.0 / 4 * 256, 1024, 256, 3.0 / 4 * 1024));
  EXPECT_COST("all_reduce", cost(3.0 / 4 * 64, 256, 256, 2 * 3.0 / 4 * 256));
  EXPECT_COST("all_reduce_8", cost(7.0 / 8 * 64, 256, 256, 2 * 7.0 / 8 * 256));
  // A group of one moves and adds nothing.
  EXPECT_COST("all_reduce_1", cost(0, 256, 256, 0));
  EXPECT_COST("all_to_all", cost(0, 128, 128, 3.0 / 4 * 128));
  EXPECT_COST("permute", cost(0, 32, 32, 32));
  EXPECT_COST("permute_self", cost(0, 32, 32, 0));
  EXPECT_COST("send", cost(0, 128, 0, 128));
  EXPECT_COST("recv", cost(0, 0, 128, 128));
}

// Tests the ops that do not communicate.
TEST_F(DistCostTest, LocalOps) {
  // Only the kept 4x8 block is read.
  EXPECT_COST("slice", cost(0, 128, 128, 0));
  EXPECT_COST("mask", cost(0, 128, 128, 0));
  EXPECT_COST("axis_index", cost(0, 0, 4, 0));
}

// Tests that the all-reduce's cost follows a local shape it is given.
TEST_F(DistCostTest, AtLocalShapes) {
  auto op = cast<dist::CostOpInterface>(opNamed("all_reduce"));
  dist::TensorShape half{{4, 8}, Float32Type::get(&context)};
  FailureOr<OpCost> c = op.getCost({half}, {half});
  ASSERT_TRUE(succeeded(c));
  EXPECT_EQ(c->toString(),
            cost(3.0 / 4 * 32, 128, 128, 2 * 3.0 / 4 * 128).toString());
  EXPECT_TRUE(failed(op.getCost({half, half}, {half})));
}

// Tests that every dist op that runs on a device has a cost, and that the
// mesh declaration and the constraint annotation have none.
TEST(DistCostRegistrationTest, EveryDeviceOpHasACost) {
  MLIRContext context;
  context.loadDialect<dist::DistDialect>();
  int count = 0;
  for (RegisteredOperationName name : context.getRegisteredOperations()) {
    if (name.getDialectNamespace() != "dist")
      continue;
    ++count;
    bool annotation = name.getStringRef() == "dist.mesh" ||
                      name.getStringRef() == "dist.constraint";
    EXPECT_EQ(name.hasInterface<dist::CostOpInterface>(), !annotation)
        << name.getStringRef().str();
  }
  EXPECT_GT(count, 0);
}

// Tests the helpers: element sizes and the printed form.
TEST(CostInterfaceTest, Helpers) {
  MLIRContext context;
  Builder b(&context);
  EXPECT_EQ(dist::getElementBytes(b.getF32Type()), 4);
  EXPECT_EQ(dist::getElementBytes(b.getBF16Type()), 2);
  EXPECT_EQ(dist::getElementBytes(b.getI1Type()), 1);
  EXPECT_EQ(dist::getElementBytes(b.getIndexType()), 8);
  EXPECT_EQ(dist::getElementBytes(b.getNoneType()), std::nullopt);
  OpCost c = cost(1.5, 2, 3, 0);
  c += cost(1, 0, 0, 4);
  EXPECT_EQ(c.toString(),
            "flops=2.5 transcendentals=0 read=2 written=3 wire=4");
  // A training step's FLOPs beyond int64_t's 9.2e18 (6 * 1e12 parameters *
  // 4e6 tokens) still add up in a double.
  OpCost big = cost(6 * 1e12 * 4e6, 0, 0, 0);
  big += big;
  EXPECT_DOUBLE_EQ(big.flops, 4.8e19);
}

} // namespace
