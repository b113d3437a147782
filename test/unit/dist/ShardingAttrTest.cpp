//===- ShardingAttrTest.cpp - unit tests of #dist.sharding ----------------===//

#include "dialects/dist/IR/DistOps.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace partita::dist;

namespace {

TEST(ShardingAttrTest, ReplicatedHasEmptyDims) {
  MLIRContext ctx;
  ctx.loadDialect<DistDialect>();
  ShardingAttr s = ShardingAttr::getReplicated(&ctx, "mesh", 3);
  EXPECT_EQ(s.getRank(), 3);
  for (DimShardingAttr dim : s.getDims())
    EXPECT_TRUE(dim.getAxes().empty());
}

} // namespace
