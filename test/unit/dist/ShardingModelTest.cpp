//===- ShardingModelTest.cpp - unit tests of the sharding model -----------===//
//
// The plain C++ model of ShardingModel.h (queries, verification, printing)
// and its adapters to and from the dist attributes (ShardingAdapters.h):
// round trips attr -> model -> attr for every part of a sharding, every
// partial kind and sub-axes, and the diagnostics for invalid input. These
// replace the per-pass conversions that the resharding planner, the
// partitioner and propagation each had.
//
//===----------------------------------------------------------------------===//

#include "dialects/dist/IR/ShardingAdapters.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace partita::dist;

namespace {

class ShardingModelTest : public ::testing::Test {
protected:
  ShardingModelTest() { ctx.loadDialect<DistDialect>(); }

  ShardingAttr sharding(StringRef text) {
    auto attr = dyn_cast_or_null<ShardingAttr>(
        parseAttribute(("#dist.sharding" + text).str(), &ctx));
    EXPECT_TRUE(attr) << text.str();
    return attr;
  }
  MeshAttr meshAttr(StringRef text) {
    return dyn_cast_or_null<MeshAttr>(
        parseAttribute(("#dist.mesh" + text).str(), &ctx));
  }
  /// The 2x4 mesh @mesh ["dp"=2, "tp"=4].
  Mesh mesh() {
    Mesh m;
    m.name = "mesh";
    m.axes = {{"dp", 2}, {"tp", 4}};
    return m;
  }

  /// Runs `read` with a diagnostic handler; returns the message ("" when it
  /// succeeds) and stores the result in `out`.
  template <typename T, typename Fn>
  std::string capture(Fn read, std::optional<T> &out) {
    std::string message;
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &diag) {
      message = diag.str();
      return success();
    });
    FailureOr<T> result =
        read([&] { return emitError(UnknownLoc::get(&ctx)); });
    EXPECT_EQ(succeeded(result), message.empty()) << message;
    if (succeeded(result))
      out = *result;
    return message;
  }
  std::string readError(ShardingAttr attr, const Mesh &m) {
    std::optional<Sharding> out;
    return capture<Sharding>(
        [&](EmitErrorFn emit) { return shardingFromAttr(attr, m, emit); }, out);
  }
  Sharding read(ShardingAttr attr, const Mesh &m) {
    std::optional<Sharding> out;
    std::string error = capture<Sharding>(
        [&](EmitErrorFn emit) { return shardingFromAttr(attr, m, emit); }, out);
    EXPECT_EQ(error, "");
    return out.value_or(Sharding());
  }

  MLIRContext ctx;
};

// Tests that every part of a sharding survives attr -> model -> attr:
// ordered axes, empty dimensions, open dimensions, priorities, partial axes
// of every kind, and sub-axes.
TEST_F(ShardingModelTest, RoundTripsEveryPart) {
  Mesh m = mesh();
  for (StringRef text : {
           "<@mesh, []>",
           "<@mesh, [{}, {}]>",
           "<@mesh, [{\"dp\", \"tp\"}, {}]>",
           "<@mesh, [{\"tp\", \"dp\"}, {}]>",
           "<@mesh, [{\"dp\", ?}, {?}]>",
           "<@mesh, [{\"dp\"}p0, {\"tp\"}p3]>",
           "<@mesh, [{\"dp\"}, {}], partial={\"tp\"}>",
           "<@mesh, [{}, {}], partial=max{\"tp\", \"dp\"}>",
           "<@mesh, [{}], partial=min{\"dp\"}>",
           "<@mesh, [{\"tp\":(1)2}, {\"tp\":(2)2}]>",
           "<@mesh, [{\"dp\"}], partial={\"tp\":(2)2}>",
       }) {
    ShardingAttr attr = sharding(text);
    Sharding model = read(attr, m);
    EXPECT_EQ(shardingToAttr(&ctx, model, "mesh"), attr) << text.str();
  }
}

// Tests that the model holds exactly the fields of the attribute.
TEST_F(ShardingModelTest, ReadsFieldByField) {
  Sharding s = read(
      sharding(
          "<@mesh, [{\"tp\":(2)2, ?}p1, {\"dp\"}], partial=max{\"tp\":(1)2}>"),
      mesh());
  ASSERT_EQ(s.rank(), 2u);
  EXPECT_EQ(s.dims[0].axes, std::vector<AxisRef>{AxisRef("tp", 2, 2)});
  EXPECT_FALSE(s.dims[0].closed);
  EXPECT_EQ(s.dims[0].priority, std::optional<int64_t>(1));
  EXPECT_EQ(s.dims[1], DimSharding({"dp"}));
  EXPECT_EQ(s.partialAxes, std::vector<AxisRef>{AxisRef("tp", 1, 2)});
  EXPECT_EQ(s.partialKind, ReductionKind::Max);
  EXPECT_TRUE(s.hasSubAxes());
  EXPECT_EQ(s.toString(), "[{tp:(2)2, ?}p1, {dp}] partial=max{tp:(1)2}");
}

// Tests that each partial kind is read, printed and compared.
TEST_F(ShardingModelTest, EveryPartialKind) {
  for (ReductionKind kind :
       {ReductionKind::Sum, ReductionKind::Max, ReductionKind::Min}) {
    Sharding s({{"dp"}, {}}, {"tp"}, kind);
    ShardingAttr attr = shardingToAttr(&ctx, s, "mesh");
    EXPECT_EQ(attr.getPartialKind(), kind);
    EXPECT_EQ(read(attr, mesh()), s);
    EXPECT_EQ(s.toString(),
              "[{dp}, {}] partial=" + reductionKindName(kind) + "{tp}");
  }
  EXPECT_NE(Sharding({{}}, {"tp"}, ReductionKind::Sum),
            Sharding({{}}, {"tp"}, ReductionKind::Max));
  Sharding partial({{}}, {"tp"}, ReductionKind::Max);
  partial.clearPartial();
  EXPECT_EQ(partial, Sharding::replicated(1));
  EXPECT_EQ(partial.toString(), "[{}]");
}

// Tests the queries the passes use: shard counts, padded local shapes, the
// axes used, replication, and the layout without propagation hints.
TEST_F(ShardingModelTest, Queries) {
  Mesh m = mesh();
  EXPECT_EQ(m.numDevices(), 8);
  EXPECT_EQ(m.findAxis("tp"), std::optional<size_t>(1));
  EXPECT_EQ(m.findAxis("pp"), std::nullopt);
  EXPECT_EQ(m.axisSize("tp"), 4);
  EXPECT_EQ(m.toString(), "@mesh [\"dp\"=2, \"tp\"=4]");

  Sharding s({{"dp", "tp"}, {}, {AxisRef("tp", 1, 2)}});
  EXPECT_EQ(s.shardCount(0, m), 8);
  EXPECT_EQ(s.shardCount(1, m), 1);
  EXPECT_EQ(s.shardCount(2, m), 2);
  EXPECT_EQ(s.shardCount(7, m), 1);
  EXPECT_EQ(s.shardCount(m), 16);
  // 10 over 8 shards is padded to ceil(10 / 8) = 2; dynamic sizes stay.
  EXPECT_EQ(s.localShape(m, {16, 5, 10}), (std::vector<int64_t>{2, 5, 5}));
  EXPECT_EQ(s.localShape(m, {10, -1, -1}), (std::vector<int64_t>{2, -1, -1}));
  EXPECT_EQ(s.axesUsed(),
            (std::vector<AxisRef>{"dp", "tp", AxisRef("tp", 1, 2)}));
  EXPECT_TRUE(s.usesAxis("dp"));
  EXPECT_FALSE(s.isReplicated());
  EXPECT_TRUE(Sharding::replicated(3).isReplicated());
  EXPECT_FALSE(Sharding({{}}, {"dp"}).isReplicated());

  Sharding hinted = read(sharding("<@mesh, [{\"dp\", ?}p2, {?}]>"), m);
  EXPECT_NE(hinted, Sharding({{"dp"}, {}}));
  EXPECT_EQ(hinted.layoutOnly(), Sharding({{"dp"}, {}}));
  EXPECT_EQ(Sharding::replicated(2, /*closed=*/false).toString(), "[{?}, {?}]");
}

// Tests that a sub-axis spans its own size and overlaps only the parts of
// its axis it shares.
TEST_F(ShardingModelTest, SubAxes) {
  Mesh m = mesh();
  AxisRef low("tp", 1, 2), high("tp", 2, 2);
  EXPECT_EQ(low.size(m), 2);
  EXPECT_EQ(AxisRef("tp").size(m), 4);
  EXPECT_FALSE(low.overlaps(high, m));
  EXPECT_TRUE(low.overlaps(AxisRef("tp"), m));
  EXPECT_FALSE(low.overlaps(AxisRef("dp"), m));
  EXPECT_EQ(high.toString(), "tp:(2)2");
  EXPECT_EQ(high.toIRString(), "\"tp\":(2)2");
  EXPECT_EQ(AxisRef("tp").toIRString(), "\"tp\"");
}

// Tests the diagnostics for shardings that are invalid on the mesh.
TEST_F(ShardingModelTest, RejectsInvalidShardings) {
  Mesh m = mesh();
  EXPECT_EQ(readError(sharding("<@mesh, [{\"pp\"}]>"), m),
            "invalid sharding #dist.sharding<@mesh, [{\"pp\"}]>: dimension 0 "
            "names axis \"pp\", which mesh @mesh does not have");
  EXPECT_EQ(readError(sharding("<@mesh, [{\"tp\"}, {\"tp\"}]>"), m),
            "invalid sharding #dist.sharding<@mesh, [{\"tp\"}, {\"tp\"}]>: "
            "axis \"tp\" is used twice in the sharding");
  EXPECT_EQ(readError(sharding("<@mesh, [{\"dp\"}], partial={\"dp\"}>"), m),
            "invalid sharding #dist.sharding<@mesh, [{\"dp\"}], "
            "partial={\"dp\"}>: axis \"dp\" is used twice in the sharding");
  EXPECT_EQ(readError(sharding("<@mesh, [{\"tp\":(1)2}, {\"tp\"}]>"), m),
            "invalid sharding #dist.sharding<@mesh, [{\"tp\":(1)2}, "
            "{\"tp\"}]>: axis \"tp\" overlaps \"tp\":(1)2, used earlier in "
            "the sharding");
  EXPECT_EQ(readError(sharding("<@mesh, [{\"tp\":(2)3}]>"), m),
            "invalid sharding #dist.sharding<@mesh, [{\"tp\":(2)3}]>: "
            "sub-axis \"tp\":(2)3 does not fit axis \"tp\" of size 4: 2*3 "
            "does not divide 4");
  EXPECT_EQ(readError(sharding("<@other, [{}]>"), m),
            "sharding #dist.sharding<@other, [{}]> names mesh @other, not "
            "@mesh");
  // Only C++ can build these; the parser rejects them.
  ShardingAttr kindOnly = ShardingAttr::get(
      &ctx, FlatSymbolRefAttr::get(&ctx, "mesh"), {}, {}, ReductionKind::Max);
  EXPECT_EQ(readError(kindOnly, m),
            "invalid sharding #dist.sharding<@mesh, []>: partial kind max is "
            "given without any partial axis");
  EXPECT_EQ(readError(ShardingAttr(), m), "missing sharding");
  EXPECT_EQ(Sharding({{AxisRef("tp", 2, 0)}}).verify(m),
            std::optional<std::string>(
                "axis \"tp\" has a pre-size but no sub-axis size"));
  DimSharding negative({}, true, -1);
  Sharding withNegative;
  withNegative.dims.push_back(negative);
  EXPECT_EQ(withNegative.verify(m),
            std::optional<std::string>(
                "dimension 0 has priority -1; priorities must be >= 0"));
}

// Tests that verifyFor checks the rank and which dimensions can be split:
// dividing ones, padded ones with an element per shard, but not smaller.
TEST_F(ShardingModelTest, VerifyForShape) {
  Mesh m = mesh();
  Sharding s({{"tp"}, {}});
  EXPECT_EQ(s.verifyFor(m, {8, 3}), std::nullopt);
  EXPECT_EQ(s.verifyFor(m, {6, 3}), std::nullopt);  // padded to 2 per shard
  EXPECT_EQ(s.verifyFor(m, {-1, 3}), std::nullopt); // dynamic
  EXPECT_EQ(s.verifyFor(m, {3, 3}),
            std::optional<std::string>(
                "dimension 0 of size 3 is not divisible by 4, the product of "
                "axes {\"tp\"}, and is too small to pad: a padded dimension "
                "needs at least one element per shard"));
  EXPECT_EQ(s.verifyFor(m, {8}),
            std::optional<std::string>(
                "sharding has 2 dimension(s), but the tensor has rank 1"));
}

// Tests that meshes round trip through the attribute and the op, device
// order included, and that invalid ones are reported.
TEST_F(ShardingModelTest, MeshAdapters) {
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(
      "dist.mesh @m <[\"x\"=2, \"y\"=2], devices=[3, 2, 1, 0]>", &ctx);
  ASSERT_TRUE(module);
  auto op = *module->getOps<MeshOp>().begin();
  FailureOr<Mesh> m = meshFromOp(op);
  ASSERT_TRUE(succeeded(m));
  EXPECT_EQ(m->name, "m");
  EXPECT_EQ(m->axes, (std::vector<MeshAxis>{{"x", 2}, {"y", 2}}));
  EXPECT_EQ(m->deviceIds, (std::vector<int64_t>{3, 2, 1, 0}));
  EXPECT_EQ(meshToAttr(&ctx, *m), op.getMesh());

  // A mesh built in C++ that the attribute's verifier would reject.
  std::optional<Mesh> out;
  MeshAttr twice = MeshAttr::get(
      &ctx, {MeshAxisAttr::get(&ctx, "x", 2), MeshAxisAttr::get(&ctx, "x", 2)},
      {});
  EXPECT_EQ(
      capture<Mesh>(
          [&](EmitErrorFn emit) { return meshFromAttr(twice, "m", emit); },
          out),
      "invalid mesh @m [\"x\"=2, \"x\"=2]: mesh axis \"x\" is declared "
      "twice");
  EXPECT_EQ(
      capture<Mesh>(
          [&](EmitErrorFn emit) { return meshFromAttr(MeshAttr(), "m", emit); },
          out),
      "missing mesh @m");
  Mesh bad;
  bad.axes = {{"x", 0}};
  EXPECT_EQ(bad.verify(),
            std::optional<std::string>(
                "mesh axis \"x\" has size 0; sizes must be >= 1"));
  bad.axes = {{"x", 2}};
  bad.deviceIds = {1, 1};
  EXPECT_EQ(bad.verify(),
            std::optional<std::string>("device id 1 is listed twice"));
  bad.deviceIds = {0};
  EXPECT_EQ(bad.verify(),
            std::optional<std::string>(
                "devices lists 1 ids, but the mesh has 2 devices"));
}

} // namespace
