//===- StrategiesTest.cpp - unit tests of the dist-annotate recipes -------===//

#include "passes/sharding/Strategies.h"
#include "passes/sharding/MeshSpec.h"
#include "passes/sharding/RecipeAnnotation.h"

#include "dialects/dist/IR/DistDialect.h"
#include "dialects/dist/IR/DistOps.h"
#include "dialects/nn/IR/NNAttributes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace partita;
using namespace partita::sharding;

namespace {

TEST(StrategiesTest, LayerIndexMatchesDigitsOnly) {
  EXPECT_TRUE(matchesParamPattern("layers.{i}.mlp.w1", "layers.0.mlp.w1"));
  EXPECT_TRUE(matchesParamPattern("layers.{i}.mlp.w1", "layers.123.mlp.w1"));
  EXPECT_FALSE(matchesParamPattern("layers.{i}.mlp.w1", "layers..mlp.w1"));
  EXPECT_FALSE(matchesParamPattern("layers.{i}.mlp.w1", "layers.a.mlp.w1"));
  EXPECT_FALSE(matchesParamPattern("layers.{i}.mlp.w1", "layers.0.mlp.w12"));
  EXPECT_FALSE(matchesParamPattern("layers.{i}.mlp.w1", "xlayers.0.mlp.w1"));
  EXPECT_TRUE(matchesParamPattern("wte", "wte"));
  EXPECT_FALSE(matchesParamPattern("wte", "wte2"));
}

TEST(StrategiesTest, KnownStrategiesAndTheirAxes) {
  ASSERT_EQ(getStrategies().size(), 13u);
  const Strategy *dp = lookupStrategy("dp");
  const Strategy *megatron = lookupStrategy("megatron");
  const Strategy *both = lookupStrategy("dp+megatron");
  ASSERT_TRUE(dp && megatron && both);
  EXPECT_EQ(lookupStrategy("zero4"), nullptr);
  EXPECT_TRUE(dp->needsDataAxis());
  EXPECT_FALSE(dp->needsTensorAxis());
  EXPECT_FALSE(megatron->needsDataAxis());
  EXPECT_TRUE(megatron->needsTensorAxis());
  EXPECT_TRUE(both->needsDataAxis() && both->needsTensorAxis());
  EXPECT_FALSE(dp->needsContextAxis() || both->needsContextAxis());
  const Strategy *cp = lookupStrategy("cp");
  const Strategy *dpcp = lookupStrategy("dp+cp");
  ASSERT_TRUE(cp && dpcp);
  EXPECT_TRUE(cp->needsContextAxis() && !cp->needsDataAxis() &&
              !cp->needsTensorAxis() && cp->replicatesAllParams);
  EXPECT_TRUE(dpcp->needsContextAxis() && dpcp->needsDataAxis() &&
              !dpcp->needsTensorAxis());
}

TEST(StrategiesTest, MegatronTableRanksMatchDimNames) {
  // Every row's roles must give one role per named dimension.
  for (const ParamRecipe &recipe : lookupStrategy("megatron")->params) {
    SmallVector<StringRef> names;
    recipe.dimNames.split(names, ',');
    EXPECT_EQ(names.size(), recipe.roles.size()) << recipe.pattern.str();
  }
  const ParamRecipe *wo =
      lookupParamRecipe(*lookupStrategy("megatron"), "layers.3.attn.wo");
  ASSERT_TRUE(wo);
  EXPECT_EQ(wo->roles[0], AxisRole::Tensor);
  EXPECT_EQ(wo->roles[2], AxisRole::Replicated);
  EXPECT_EQ(lookupParamRecipe(*lookupStrategy("dp"), "wte"), nullptr);
}

class MeshSpecTest : public ::testing::Test {
protected:
  MLIRContext ctx;
  std::string error;
  FailureOr<SmallVector<dist::MeshAxisAttr>> parse(StringRef spec) {
    error.clear();
    ctx.getOrLoadDialect<dist::DistDialect>();
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &diag) {
      error = diag.str();
      return success();
    });
    return parseMeshSpec(spec, &ctx,
                         [&] { return emitError(UnknownLoc::get(&ctx)); });
  }
};

TEST_F(MeshSpecTest, ParsesAxesMajorToMinor) {
  auto axes = parse(" dp=2 , tp=4 ");
  ASSERT_TRUE(succeeded(axes));
  EXPECT_EQ(printMeshSpec(*axes), "dp=2,tp=4");
  EXPECT_EQ(error, "");
}

TEST_F(MeshSpecTest, RejectsBadSpecsWithAReason) {
  EXPECT_TRUE(failed(parse("  ")));
  EXPECT_EQ(error, "mesh spec is empty; expected axes like \"dp=2,tp=4\"");
  EXPECT_TRUE(failed(parse("dp=2,")));
  EXPECT_NE(error.find("empty axis entry"), std::string::npos);
  EXPECT_TRUE(failed(parse("dp=1,tp=0")));
  EXPECT_EQ(error, "mesh axis 'tp' has size 0; axis sizes must be at least 1");
  EXPECT_TRUE(failed(parse("dp=99999999999999999999")));
  EXPECT_NE(error.find("not an integer"), std::string::npos);
  EXPECT_TRUE(failed(parse("dp=2,dp=2")));
  EXPECT_NE(error.find("appears twice"), std::string::npos);
  EXPECT_TRUE(failed(parse("=2")));
  EXPECT_NE(error.find("not an identifier"), std::string::npos);
}

TEST(AnnotateFunctionTest, MissingAxisIsAnErrorNotACrash) {
  MLIRContext ctx;
  ctx.loadDialect<dist::DistDialect, func::FuncDialect>();
  std::string error;
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &diag) {
    error = diag.str();
    return success();
  });
  OpBuilder builder(&ctx);
  Location loc = UnknownLoc::get(&ctx);
  auto module = ModuleOp::create(loc);
  builder.setInsertionPointToEnd(module.getBody());
  auto type = RankedTensorType::get({8, 16}, builder.getF32Type());
  auto func = func::FuncOp::create(builder, loc, "f",
                                   builder.getFunctionType({type}, {}));
  nn::paramAttr.setArg(func, 0, "layers.0.mlp.w1");
  auto mesh =
      dist::MeshAttr::get(&ctx, {dist::MeshAxisAttr::get(&ctx, "dp", 2)}, {});
  AnnotateOptions options{"mesh", mesh, "dp", "tp"};
  EXPECT_TRUE(failed(annotateFunction(cast<FunctionOpInterface>(*func),
                                      *lookupStrategy("megatron"), options)));
  EXPECT_EQ(error, "mesh @mesh has no axis \"tp\"");
  module->erase();
}

} // namespace
