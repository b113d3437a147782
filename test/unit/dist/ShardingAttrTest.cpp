//===- ShardingAttrTest.cpp - unit tests of #dist.sharding ----------------===//
//
// The C++ API of the dist attributes: parsing from strings, local shapes,
// shard counts, verifyFor (including the checks that text cannot reach,
// because the parser already rejects those forms), and the helpers that
// read and write `dist.sharding` annotations.
//
//===----------------------------------------------------------------------===//

#include "dialects/dist/IR/DistOps.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace partita::dist;

namespace {

class ShardingAttrTest : public ::testing::Test {
protected:
  ShardingAttrTest() {
    ctx.loadDialect<DistDialect, func::FuncDialect>();
  }

  template <typename T>
  T parse(StringRef text) {
    return dyn_cast_or_null<T>(parseAttribute(text, &ctx));
  }

  MeshAttr mesh() { return parse<MeshAttr>("#dist.mesh<[\"dp\"=2, \"tp\"=4]>"); }

  /// Runs verifyFor and returns the diagnostic text ("" when it passes).
  std::string verify(ShardingAttr sharding, MeshAttr mesh, ShapedType type) {
    std::string message;
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &diag) {
      message = diag.str();
      return success();
    });
    LogicalResult result = sharding.verifyFor(
        [&] { return emitError(UnknownLoc::get(&ctx)); }, mesh, type);
    EXPECT_EQ(succeeded(result), message.empty()) << message;
    return message;
  }

  RankedTensorType tensor(ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, Float32Type::get(&ctx));
  }

  MLIRContext ctx;
};

std::string str(Attribute attr) {
  std::string text;
  llvm::raw_string_ostream os(text);
  attr.print(os);
  return text;
}

TEST_F(ShardingAttrTest, ReplicatedHasEmptyDims) {
  ShardingAttr s = ShardingAttr::getReplicated(&ctx, "mesh", 3);
  EXPECT_EQ(s.getRank(), 3);
  EXPECT_EQ(s.getMeshName().getValue(), "mesh");
  EXPECT_TRUE(s.getPartialAxes().empty());
  for (DimShardingAttr dim : s.getDims()) {
    EXPECT_TRUE(dim.getAxes().empty());
    EXPECT_TRUE(dim.getIsClosed());
    EXPECT_FALSE(dim.getPriority().has_value());
  }
  EXPECT_EQ(str(s), "#dist.sharding<@mesh, [{}, {}, {}]>");
  EXPECT_EQ(str(ShardingAttr::getReplicated(&ctx, "m", 2, /*closed=*/false)),
            "#dist.sharding<@m, [{?}, {?}]>");
  EXPECT_EQ(str(ShardingAttr::getReplicated(&ctx, "m", 0)),
            "#dist.sharding<@m, []>");
}

TEST_F(ShardingAttrTest, ParsesEveryPart) {
  auto s = parse<ShardingAttr>(
      "#dist.sharding<@mesh, [{\"dp\", \"tp\":(2)2}, {?}p0, {\"tp\":(1)2, "
      "?}p3], partial=max{\"x\"}>");
  ASSERT_TRUE(s);
  EXPECT_EQ(s.getMeshName().getValue(), "mesh");
  ASSERT_EQ(s.getRank(), 3);

  DimShardingAttr d0 = s.getDims()[0];
  ASSERT_EQ(d0.getAxes().size(), 2u);
  EXPECT_EQ(d0.getAxes()[0].getName(), "dp");
  EXPECT_FALSE(d0.getAxes()[0].isSubAxis());
  EXPECT_EQ(d0.getAxes()[1].getName(), "tp");
  EXPECT_TRUE(d0.getAxes()[1].isSubAxis());
  EXPECT_EQ(d0.getAxes()[1].getPreSize(), 2);
  EXPECT_EQ(d0.getAxes()[1].getSubSize(), 2);
  EXPECT_TRUE(d0.getIsClosed());
  EXPECT_FALSE(d0.getPriority().has_value());

  DimShardingAttr d1 = s.getDims()[1];
  EXPECT_TRUE(d1.getAxes().empty());
  EXPECT_FALSE(d1.getIsClosed());
  EXPECT_EQ(d1.getPriority(), std::optional<int64_t>(0));

  DimShardingAttr d2 = s.getDims()[2];
  EXPECT_FALSE(d2.getIsClosed());
  EXPECT_EQ(d2.getPriority(), std::optional<int64_t>(3));

  ASSERT_EQ(s.getPartialAxes().size(), 1u);
  EXPECT_EQ(s.getPartialAxes()[0].getName(), "x");
  EXPECT_EQ(s.getPartialKind(), ReductionKind::Max);
}

TEST_F(ShardingAttrTest, PrintsCanonically) {
  // Extra spaces and an explicit `sum` disappear; everything else stays.
  auto s = parse<ShardingAttr>(
      "#dist.sharding< @mesh , [ { \"dp\" , ? } p1 , {} ] , partial = sum "
      "{ \"tp\" } >");
  ASSERT_TRUE(s);
  EXPECT_EQ(str(s),
            "#dist.sharding<@mesh, [{\"dp\", ?}p1, {}], partial={\"tp\"}>");
  // Parsing the printed form gives back the same attribute.
  EXPECT_EQ(parse<ShardingAttr>(str(s)), s);
}

TEST_F(ShardingAttrTest, MeshParsesAndCounts) {
  MeshAttr m = parse<MeshAttr>(
      "#dist.mesh<[\"dp\"=2, \"tp\"=2], devices=[3, 2, 1, 0]>");
  ASSERT_TRUE(m);
  EXPECT_EQ(m.getNumDevices(), 4);
  ASSERT_EQ(m.getAxes().size(), 2u);
  EXPECT_EQ(m.getAxis("tp").getSize(), 2);
  EXPECT_FALSE(m.getAxis("pp"));
  EXPECT_EQ(m.getDeviceIds(), ArrayRef<int64_t>({3, 2, 1, 0}));
  MeshAttr single = parse<MeshAttr>("#dist.mesh<[]>");
  ASSERT_TRUE(single);
  EXPECT_EQ(single.getNumDevices(), 1);
}

TEST_F(ShardingAttrTest, BadTextGivesNoAttribute) {
  // The diagnostics themselves are checked in invalid.mlir.
  ScopedDiagnosticHandler silence(&ctx, [](Diagnostic &) { return success(); });
  EXPECT_FALSE(parseAttribute("#dist.mesh<[\"dp\"=0]>", &ctx));
  EXPECT_FALSE(parseAttribute("#dist.sharding<@m, [{dp}]>", &ctx));
  EXPECT_FALSE(parseAttribute("#dist.dim_sharding<{?, \"dp\"}>", &ctx));
}

TEST_F(ShardingAttrTest, ShardCountsAndLocalShape) {
  MeshAttr m = mesh();
  auto s = parse<ShardingAttr>(
      "#dist.sharding<@mesh, [{\"dp\"}, {}, {\"tp\":(1)2}], partial={\"tp\":(2)2}>");
  ASSERT_TRUE(s);
  EXPECT_EQ(s.getDims()[0].getShardCount(m), 2);
  EXPECT_EQ(s.getDims()[1].getShardCount(m), 1);
  EXPECT_EQ(s.getDims()[2].getShardCount(m), 2);
  // Partial axes do not split the tensor.
  EXPECT_EQ(s.getShardCount(m), 4);
  EXPECT_EQ(s.getLocalShape(m, {8, 3, 10}),
            SmallVector<int64_t>({4, 3, 5}));
  // Dynamic sizes stay dynamic.
  EXPECT_EQ(s.getLocalShape(m, {ShapedType::kDynamic, 3, 10}),
            SmallVector<int64_t>({ShapedType::kDynamic, 3, 5}));

  auto both = parse<ShardingAttr>("#dist.sharding<@mesh, [{\"dp\", \"tp\"}]>");
  EXPECT_EQ(both.getDims()[0].getShardCount(m), 8);
  EXPECT_EQ(both.getLocalShape(m, {64}), SmallVector<int64_t>({8}));
  // A padded dimension: ceil(size / count) per shard.
  EXPECT_EQ(both.getLocalShape(m, {50}), SmallVector<int64_t>({7}));
}

TEST_F(ShardingAttrTest, AxisOverlaps) {
  MeshAttr m = parse<MeshAttr>("#dist.mesh<[\"tp\"=8, \"dp\"=2]>");
  auto axis = [&](StringRef text) { return parse<AxisRefAttr>(text); };
  AxisRefAttr whole = axis("#dist.axis<\"tp\">");
  AxisRefAttr major = axis("#dist.axis<\"tp\":(1)2>");
  AxisRefAttr middle = axis("#dist.axis<\"tp\":(2)2>");
  AxisRefAttr minor4 = axis("#dist.axis<\"tp\":(2)4>");
  AxisRefAttr other = axis("#dist.axis<\"dp\">");
  ASSERT_TRUE(whole && major && middle && minor4 && other);
  EXPECT_EQ(whole.getSize(m), 8);
  EXPECT_EQ(middle.getSize(m), 2);
  EXPECT_TRUE(whole.overlaps(middle, m));
  EXPECT_TRUE(middle.overlaps(whole, m));
  EXPECT_FALSE(major.overlaps(middle, m));
  EXPECT_TRUE(middle.overlaps(minor4, m));
  EXPECT_FALSE(major.overlaps(minor4, m));
  EXPECT_FALSE(whole.overlaps(other, m));
  EXPECT_TRUE(whole.overlaps(whole, m));
  EXPECT_EQ(middle.toString(), "\"tp\":(2)2");
  EXPECT_EQ(whole.toString(), "\"tp\"");
}

TEST_F(ShardingAttrTest, VerifyForAcceptsValidShardings) {
  MeshAttr m = mesh();
  EXPECT_EQ(verify(parse<ShardingAttr>(
                       "#dist.sharding<@mesh, [{\"dp\"}, {\"tp\"}]>"),
                   m, tensor({8, 16})),
            "");
  EXPECT_EQ(verify(parse<ShardingAttr>(
                       "#dist.sharding<@mesh, [{\"tp\":(1)2}, {\"tp\":(2)2}], "
                       "partial={\"dp\"}>"),
                   m, tensor({2, 2})),
            "");
  EXPECT_EQ(verify(parse<ShardingAttr>("#dist.sharding<@mesh, []>"), m,
                   tensor({})),
            "");
  EXPECT_EQ(verify(parse<ShardingAttr>("#dist.sharding<@mesh, [{\"tp\"}]>"), m,
                   tensor({ShapedType::kDynamic})),
            "");
}

TEST_F(ShardingAttrTest, VerifyForRejectsWhatTextCanReach) {
  MeshAttr m = mesh();
  EXPECT_EQ(verify(parse<ShardingAttr>("#dist.sharding<@mesh, [{}, {\"tp\"}]>"),
                   m, tensor({8, 3})),
            "dimension 1 of size 3 in 'tensor<8x3xf32>' is not divisible "
            "by 4, the product of axes {\"tp\"}, and is too small to pad: a "
            "padded dimension needs at least one element per shard");
  // Not divisible but large enough: padded, so valid.
  EXPECT_EQ(verify(parse<ShardingAttr>("#dist.sharding<@mesh, [{}, {\"tp\"}]>"),
                   m, tensor({8, 30})),
            "");
  EXPECT_EQ(verify(parse<ShardingAttr>("#dist.sharding<@mesh, [{}]>"), m,
                   tensor({8, 30})),
            "sharding has 1 dimension(s), but 'tensor<8x30xf32>' has rank 2");
  EXPECT_EQ(verify(parse<ShardingAttr>("#dist.sharding<@mesh, [{\"pp\"}]>"), m,
                   tensor({8})),
            "dimension 0 names axis \"pp\", which mesh @mesh does not have");
  EXPECT_EQ(
      verify(parse<ShardingAttr>("#dist.sharding<@mesh, [{\"dp\"}, {\"dp\"}]>"),
             m, tensor({8, 8})),
      "axis \"dp\" is used twice in the sharding");
  EXPECT_EQ(verify(parse<ShardingAttr>(
                       "#dist.sharding<@mesh, [{\"tp\":(3)2}]>"),
                   m, tensor({8})),
            "sub-axis \"tp\":(3)2 does not fit axis \"tp\" of size 4: 3*2 "
            "does not divide 4");
}

TEST_F(ShardingAttrTest, VerifyForRejectsWhatOnlyCxxCanBuild) {
  MeshAttr m = mesh();
  FlatSymbolRefAttr name = FlatSymbolRefAttr::get(&ctx, "mesh");
  auto dim = [&](ArrayRef<AxisRefAttr> axes, std::optional<int64_t> priority) {
    return DimShardingAttr::get(&ctx, axes, true, priority);
  };
  auto sharding = [&](ArrayRef<DimShardingAttr> dims,
                      ArrayRef<AxisRefAttr> partial = {},
                      ReductionKind kind = ReductionKind::Sum) {
    return ShardingAttr::get(&ctx, name, dims, partial, kind);
  };

  EXPECT_EQ(verify(sharding({dim({}, -1)}), m, tensor({8})),
            "dimension 0 has priority -1; priorities must be >= 0");
  EXPECT_EQ(verify(sharding({dim({}, std::nullopt)}, {}, ReductionKind::Max),
                   m, tensor({8})),
            "partial kind max is given without any partial axis");
  EXPECT_EQ(verify(sharding({dim({AxisRefAttr::get(&ctx, "tp", 2, 0)},
                                 std::nullopt)}),
                   m, tensor({8})),
            "axis \"tp\" has a pre-size but no sub-axis size");
  EXPECT_EQ(verify(sharding({dim({AxisRefAttr::get(&ctx, "tp", 0, 2)},
                                 std::nullopt)}),
                   m, tensor({8})),
            "sub-axis \"tp\":(0)2 needs a pre-size and a size >= 1");
  EXPECT_EQ(verify(sharding({DimShardingAttr()}), m, tensor({8})),
            "dimension 0 has a null sharding");
  EXPECT_EQ(verify(sharding({dim({AxisRefAttr()}, std::nullopt)}), m,
                   tensor({8})),
            "null axis in dimension 0");
  EXPECT_EQ(verify(sharding({}), MeshAttr(), tensor({})),
            "no mesh to check the sharding against");
  EXPECT_EQ(verify(sharding({}), m,
                   UnrankedTensorType::get(Float32Type::get(&ctx))),
            "expected a ranked tensor type, got 'tensor<*xf32>'");
}

TEST_F(ShardingAttrTest, MeshVerifyRejectsCxxBuiltMeshes) {
  std::string message;
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &diag) {
    message = diag.str();
    return success();
  });
  MeshAxisAttr dp = MeshAxisAttr::get(&ctx, "dp", 2);
  auto emit = [&] { return emitError(UnknownLoc::get(&ctx)); };
  EXPECT_TRUE(failed(MeshAttr::verify(emit, {dp, MeshAxisAttr()}, {})));
  EXPECT_EQ(message, "mesh axis is null");
  EXPECT_TRUE(succeeded(MeshAttr::verify(emit, {dp}, {1, 0})));

  // MeshOp::verify re-checks a mesh that MeshAttr::get did not verify.
  OpBuilder builder(&ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(&ctx));
  builder.setInsertionPointToEnd(module->getBody());
  MeshAttr bad = MeshAttr::get(&ctx, {dp, MeshAxisAttr::get(&ctx, "tp", 0)},
                               {});
  MeshOp::create(builder, UnknownLoc::get(&ctx), "mesh", bad);
  EXPECT_TRUE(failed(mlir::verify(*module)));
  EXPECT_EQ(message,
            "'dist.mesh' op mesh axis \"tp\" has size 0; sizes must be >= 1");
}

constexpr const char *kModule = R"mlir(
  dist.mesh @mesh <["dp"=2, "tp"=4]>
  func.func private @two() -> (tensor<8xf32>, tensor<4x4xf32>)
  func.func @f(%a: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>},
               %b: tensor<16xf32>) -> (tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}]>}) {
    %0 = dist.constraint %b <@mesh, [{"tp"}]> {dist.sharding = [#dist.sharding<@mesh, [{"dp"}]>]} : tensor<16xf32>
    %1:2 = func.call @two() : () -> (tensor<8xf32>, tensor<4x4xf32>)
    %2 = dist.all_gather %1#0 on @mesh axes = ["dp", "tp"] dim = 0 : tensor<8xf32> -> tensor<64xf32>
    dist.send %1#0 on @mesh axis = "tp" to 1 : tensor<8xf32>
    return %1#0 : tensor<8xf32>
  }
)mlir";

TEST_F(ShardingAttrTest, GetAndSetSharding) {
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(kModule, &ctx);
  ASSERT_TRUE(module);
  auto func = module->lookupSymbol<func::FuncOp>("f");
  ASSERT_TRUE(func);
  Value a = func.getArgument(0), b = func.getArgument(1);
  auto constraint = *func.getOps<ConstraintOp>().begin();
  auto call = *func.getOps<func::CallOp>().begin();

  // Reading.
  EXPECT_EQ(str(getSharding(a)), "#dist.sharding<@mesh, [{\"dp\"}, {}]>");
  EXPECT_FALSE(getSharding(b));
  EXPECT_EQ(str(getSharding(constraint.getResult())),
            "#dist.sharding<@mesh, [{\"dp\"}]>");
  EXPECT_FALSE(getSharding(call.getResult(0)));
  EXPECT_EQ(str(getFuncResultSharding(func, 0)),
            "#dist.sharding<@mesh, [{\"tp\"}]>");
  EXPECT_FALSE(getFuncResultSharding(func, 1));
  EXPECT_EQ(lookupMeshAttr(func, getSharding(a)).getNumDevices(), 8);
  EXPECT_FALSE(lookupMeshAttr(
      func, ShardingAttr::getReplicated(&ctx, "nowhere", 1)));

  // Writing a function argument.
  auto tp = parse<ShardingAttr>("#dist.sharding<@mesh, [{\"tp\"}]>");
  setSharding(b, tp);
  EXPECT_EQ(getSharding(b), tp);
  setSharding(b, nullptr);
  EXPECT_FALSE(getSharding(b));

  // Writing one result of a two-result op fills the other with an open,
  // replicated sharding of its rank.
  auto dp = parse<ShardingAttr>("#dist.sharding<@mesh, [{\"dp\"}]>");
  setSharding(call.getResult(0), dp);
  EXPECT_EQ(getSharding(call.getResult(0)), dp);
  EXPECT_EQ(str(getSharding(call.getResult(1))),
            "#dist.sharding<@mesh, [{?}, {?}]>");
  // ... and leaves an existing entry alone.
  auto rows = parse<ShardingAttr>("#dist.sharding<@mesh, [{\"tp\"}, {}]>");
  setSharding(call.getResult(1), rows);
  EXPECT_EQ(getSharding(call.getResult(0)), dp);
  EXPECT_EQ(getSharding(call.getResult(1)), rows);
  // Clearing a result of a multi-result op makes it open and replicated.
  setSharding(call.getResult(0), nullptr);
  EXPECT_EQ(str(getSharding(call.getResult(0))),
            "#dist.sharding<@mesh, [{?}]>");
  // Clearing the only result removes the attribute.
  setSharding(constraint.getResult(), nullptr);
  EXPECT_FALSE(constraint->hasAttr(DistDialect::kShardingAttrName));

  // Function results.
  setFuncResultSharding(func, 0, dp);
  EXPECT_EQ(getFuncResultSharding(func, 0), dp);
  setFuncResultSharding(func, 0, nullptr);
  EXPECT_FALSE(getFuncResultSharding(func, 0));

  // What was written verifies.
  EXPECT_TRUE(succeeded(mlir::verify(*module)));
}

TEST_F(ShardingAttrTest, GroupSizes) {
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(kModule, &ctx);
  ASSERT_TRUE(module);
  auto func = module->lookupSymbol<func::FuncOp>("f");
  EXPECT_EQ((*func.getOps<AllGatherOp>().begin()).getGroupSize(), 8);
  EXPECT_EQ((*func.getOps<SendOp>().begin()).getGroupSize(), 4);
}

} // namespace
