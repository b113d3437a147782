//===- ReshardTest.cpp - unit tests of the resharding planner -------------===//
//
// Every expected plan below was derived by hand; the comment above each test
// says why no cheaper (or equally cheap but shorter, or lexicographically
// smaller) plan exists under the cost model of Reshard.cpp. Unless said
// otherwise the tensor is 8x8 f32: 256 bytes in all.
//
//===----------------------------------------------------------------------===//

#include "passes/partition/Reshard.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>

using namespace partita::partition;
using partita::dist::MeshAxis;

namespace {

Mesh makeMesh(std::initializer_list<std::pair<const char *, int64_t>> axes) {
  Mesh mesh;
  for (auto [name, size] : axes)
    mesh.axes.push_back(MeshAxis{name, size});
  return mesh;
}

Sharding makeSharding(std::initializer_list<std::initializer_list<const char *>> dims,
                      std::initializer_list<const char *> partial = {},
                      ReductionKind kind = ReductionKind::Sum) {
  Sharding sharding;
  for (auto dim : dims) {
    sharding.dims.emplace_back();
    for (const char *axis : dim)
      sharding.dims.back().axes.push_back(axis);
  }
  for (const char *axis : partial)
    sharding.partialAxes.push_back(axis);
  sharding.partialKind = kind;
  return sharding;
}

TensorInfo tensor8x8() { return TensorInfo{{8, 8}, 4}; }

/// The plan's string, or "error: <message>".
std::string plan(const Mesh &mesh, const TensorInfo &tensor,
                 const Sharding &source, const Sharding &target,
                 const ReshardOptions &options = {}) {
  llvm::Expected<ReshardPlan> result =
      planReshard(mesh, tensor, source, target, options);
  if (!result)
    return "error: " + llvm::toString(result.takeError());
  return result->toString();
}

const Mesh kMesh2x2 = makeMesh({{"x", 2}, {"y", 2}});

// The source already is the target: nothing to do, and nothing is cheaper
// than nothing.
TEST(ReshardTest, IdentityIsEmptyPlan) {
  Mesh mesh = makeMesh({{"x", 2}, {"y", 4}});
  Sharding s = makeSharding({{"x"}, {"y"}});
  EXPECT_EQ(plan(mesh, tensor8x8(), s, s), "no-op (cost 0)");
  Sharding partial = makeSharding({{"x"}, {}}, {"y"});
  EXPECT_EQ(plan(mesh, tensor8x8(), partial, partial), "no-op (cost 0)");
}

// Replicated to split: each device keeps its block, which costs 0, and
// every non-slice step costs more than 0. One slice step per dimension that
// changes is the fewest steps; of the two orders, dimension 0 first is the
// lexicographically smaller.
TEST(ReshardTest, ReplicatedToSplitIsLocalSlice) {
  Mesh mesh = makeMesh({{"x", 2}, {"y", 4}});
  EXPECT_EQ(plan(mesh, tensor8x8(), makeSharding({{}, {}}),
                 makeSharding({{"x"}, {"y"}})),
            "local_slice(dim=0, axes=[x]) ; local_slice(dim=1, axes=[y]) "
            "(cost 0)");
  // Two axes into one dimension: one step, in the target's order.
  EXPECT_EQ(plan(mesh, tensor8x8(), makeSharding({{}, {}}),
                 makeSharding({{}, {"y", "x"}})),
            "local_slice(dim=1, axes=[y, x]) (cost 0)");
}

// [{x,y},{}] -> replicated on 2x2: each device holds 64 of the 256 bytes
// and must receive the other 192; no step costs less than the bytes a device
// receives in it, so 192 is the least. One all_gather over both axes sends
// (4-1)/4 * 256 = 192 in one step (y then x also costs 64 + 128 = 192, in
// two steps).
TEST(ReshardTest, SplitToReplicatedIsAllGather) {
  EXPECT_EQ(plan(kMesh2x2, tensor8x8(), makeSharding({{"x", "y"}, {}}),
                 makeSharding({{}, {}})),
            "all_gather(dim=0, axes=[x, y]) (cost 192)");
  // One axis of size 4: (4-1)/4 * 256 = 192.
  Mesh mesh4 = makeMesh({{"x", 4}});
  EXPECT_EQ(plan(mesh4, tensor8x8(), makeSharding({{"x"}, {}}),
                 makeSharding({{}, {}})),
            "all_gather(dim=0, axes=[x]) (cost 192)");
}

// [{x},{}] -> [{},{x}] with x of size 4: a device holds a 2x8 row block
// (64 bytes) and needs an 8x2 column block, of which it has 2x2 (16 bytes):
// it must receive 48, and all_to_all sends 3/4 * 64 = 48 in one step.
// all_gather then slice would send 3/4 * 256 = 192.
TEST(ReshardTest, DimMoveIsAllToAll) {
  Mesh mesh4 = makeMesh({{"x", 4}});
  EXPECT_EQ(plan(mesh4, tensor8x8(), makeSharding({{"x"}, {}}),
                 makeSharding({{}, {"x"}})),
            "all_to_all(axes=[x], 0->1) (cost 48)");
}

// A partial sum over x (size 4) of a 256-byte tensor, to replicated:
// all_reduce sends 2 * 3/4 * 256 = 384. reduce_scatter then all_gather
// sends 192 + 192 = 384 too, in two steps, so all_reduce wins on steps.
// The partial kind is carried into the step.
TEST(ReshardTest, PartialToReplicatedIsAllReduce) {
  Mesh mesh4 = makeMesh({{"x", 4}});
  EXPECT_EQ(plan(mesh4, tensor8x8(), makeSharding({{}, {}}, {"x"}),
                 makeSharding({{}, {}})),
            "all_reduce(axes=[x], sum) (cost 384)");
  EXPECT_EQ(plan(mesh4, tensor8x8(),
                 makeSharding({{}, {}}, {"x"}, ReductionKind::Max),
                 makeSharding({{}, {}})),
            "all_reduce(axes=[x], max) (cost 384)");
}

// A partial sum over x (size 4) to split over x on dim 0: reduce_scatter
// sends 3/4 * 256 = 192, half of all_reduce (384) followed by a free slice.
// Any plan must resolve x, and the resolving step reads the whole 256-byte
// local value (nothing is split before it: no other axis exists), so 192 is
// the least.
TEST(ReshardTest, PartialToSplitIsReduceScatter) {
  Mesh mesh4 = makeMesh({{"x", 4}});
  EXPECT_EQ(plan(mesh4, tensor8x8(), makeSharding({{}, {}}, {"x"}),
                 makeSharding({{"x"}, {}})),
            "reduce_scatter(dim=0, axes=[x], sum) (cost 192)");
}

// Partial over {x, y}; the target keeps x partial and splits dim 1 over y.
// x must not be resolved. reduce_scatter over y sends 1/2 * 256 = 128;
// all_reduce over y then slicing sends 2 * 1/2 * 256 = 256.
TEST(ReshardTest, PartialStaysPartialWhenTargetKeepsIt) {
  EXPECT_EQ(plan(kMesh2x2, tensor8x8(), makeSharding({{}, {}}, {"x", "y"}),
                 makeSharding({{}, {"y"}}, {"x"})),
            "reduce_scatter(dim=1, axes=[y], sum) (cost 128)");
}

// [{x,y},{}] -> [{y},{x}] on 2x2. No step changes the local block size
// below 64 bytes (4 shards at most), so a step over one size-2 axis costs at
// least 32 and one over both at least 48. No single step reaches the target
// (a permute needs equal shard counts: 4,1 vs 2,2). The steps from the
// source under 80 are all_to_all y 0->1 (32), all_to_all [x,y] 0->1 (48),
// all_gather y (64) and the permute to [{y,x},{}] (64). From [{x},{y}] (at
// 32) the next steps are all_to_all x 0->1 to [{},{y,x}] or y back (both at
// 64, then no step of at most 16 remains) or cost 64: nothing reaches the
// target by 80. After all_gather y or the permute (64) only a free slice
// fits, and it does not reach the target. From [{},{x,y}] (48) the one step
// of at most 32 is all_to_all y 1->0, which reaches [{y},{x}]: 80, and the
// only plan of that cost. (The permute-based plans cost 96.)
TEST(ReshardTest, TwoAxesSplitToTwoDims) {
  llvm::Expected<ReshardPlan> result =
      planReshard(kMesh2x2, tensor8x8(), makeSharding({{"x", "y"}, {}}),
                  makeSharding({{"y"}, {"x"}}));
  ASSERT_TRUE(static_cast<bool>(result)) << llvm::toString(result.takeError());
  EXPECT_EQ(result->toString(),
            "all_to_all(axes=[x, y], 0->1) ; all_to_all(axes=[y], 1->0) "
            "(cost 80)");
  ASSERT_EQ(result->steps.size(), 2u);
  EXPECT_EQ(result->steps[0].result.toString(), "[{}, {x, y}]");
  EXPECT_EQ(result->steps[0].cost, 48);
  EXPECT_EQ(result->steps[1].result.toString(), "[{y}, {x}]");
  EXPECT_EQ(result->steps[1].cost, 32);
}

// [{x},{y}] -> [{y},{x}] on 2x2: both shard counts are 2, so one
// collective_permute of the 64-byte block does it (64). Device (x=0, y=1)
// holds rows 0-3 x columns 4-7 and needs rows 4-7 x columns 0-3: it must
// receive 64 bytes, and no step costs less than the bytes a device
// receives, so 64 is the least; the permute is the one-step plan.
TEST(ReshardTest, SwapOfEqualAxesIsCollectivePermute) {
  EXPECT_EQ(plan(kMesh2x2, tensor8x8(), makeSharding({{"x"}, {"y"}}),
                 makeSharding({{"y"}, {"x"}})),
            "collective_permute(axes=[x, y]) (cost 64)");
}

// A permute names only the axes whose place changes: on 2x2x2 (local 64
// bytes), [{x},{z}] -> [{y},{z}] keeps z and exchanges over x and y. Device
// (x=0, y=1, z=0) holds rows 0-3 and needs rows 4-7 of the same columns: it
// must receive 64 bytes, so 64 is the least, and the permute is one step.
TEST(ReshardTest, CollectivePermuteNamesChangedAxes) {
  Mesh mesh = makeMesh({{"x", 2}, {"y", 2}, {"z", 2}});
  EXPECT_EQ(plan(mesh, tensor8x8(), makeSharding({{"x"}, {"z"}}),
                 makeSharding({{"y"}, {"z"}})),
            "collective_permute(axes=[x, y]) (cost 64)");
}

// A 1-D 32-byte tensor, [{x,y}] -> [{}] on 2x2, local 8 bytes. Unweighted,
// one all_gather over both axes sends 3/4 * 32 = 24, as does y then x
// (8 + 16), so the single step wins. With x weighing 8 the single ring costs
// 24 * 8 = 192; y then x costs 8 + 16 * 8 = 136. The only other first step
// is the permute to [{y,x}] (8 * 8 = 64), after which gathering x (8 * 8)
// and y (16) makes 144. After gathering y, [{x}] can only gather x (128),
// permute to [{y}] (16 * 8 = 128, then more) or slice y back for free.
// Rank 1 admits no all_to_all, so 136 is the least.
TEST(ReshardTest, AxisWeightsMakeGatherHierarchical) {
  TensorInfo tensor{{8}, 4};
  EXPECT_EQ(plan(kMesh2x2, tensor, makeSharding({{"x", "y"}}),
                 makeSharding({{}})),
            "all_gather(dim=0, axes=[x, y]) (cost 24)");
  ReshardOptions options;
  options.axisWeights["x"] = 8.0;
  EXPECT_EQ(plan(kMesh2x2, tensor, makeSharding({{"x", "y"}}),
                 makeSharding({{}}), options),
            "all_gather(dim=0, axes=[y]) ; all_gather(dim=0, axes=[x]) "
            "(cost 136)");
}

// [{x},{y}] -> [{y},{x}] on 2x2 (unweighted: one permute, 64) with x
// weighing 8. Local blocks never go below 64 bytes. Every permute between
// these states moves x, so costs at least 8 * 64 = 512; so does every
// all_gather over x; all_to_all over x alone costs 8 * L/2 >= 256, over
// [x,y] 8 * 3/4 * L >= 384. x must move from dim 0 to dim 1. With one
// all_to_all of x alone, dim 1 must be empty when x arrives and dim 0 must
// then be [x] (y cannot get ahead of x), i.e. the state [{x},{}] with 128-
// byte blocks, where that step costs 512. So a plan under 512 uses one
// [x,y] all_to_all (384) and y-steps (>= 32 each): from [{x},{y}], move y to
// dim 0 (32), both to dim 1 (384), y back (32): 448. With a single y-step
// no sequence reaches the target, so 448 is the least, and the plan is the
// only one at that cost (an all_gather of y costs 64 and leaves more).
TEST(ReshardTest, AxisWeightsTurnPermuteIntoAllToAlls) {
  ReshardOptions options;
  options.axisWeights["x"] = 8.0;
  EXPECT_EQ(plan(kMesh2x2, tensor8x8(), makeSharding({{"x"}, {"y"}}),
                 makeSharding({{"y"}, {"x"}}), options),
            "all_to_all(axes=[y], 1->0) ; all_to_all(axes=[x, y], 0->1) ; "
            "all_to_all(axes=[y], 1->0) (cost 448)");
}

// Axes of size 1 move no data: shardings that differ only in them need
// nothing.
TEST(ReshardTest, SizeOneAxesAreIgnored) {
  Mesh mesh = makeMesh({{"x", 2}, {"one", 1}});
  EXPECT_EQ(plan(mesh, tensor8x8(), makeSharding({{"x", "one"}, {}}),
                 makeSharding({{"x"}, {"one"}})),
            "no-op (cost 0)");
}

// all_reduce of a 8-byte value over 3 devices: 2 * 2/3 * 8 = 10.667.
TEST(ReshardTest, FractionalCostIsPrinted) {
  Mesh mesh3 = makeMesh({{"x", 3}});
  EXPECT_EQ(plan(mesh3, TensorInfo{{2}, 4}, makeSharding({{}}, {"x"}),
                 makeSharding({{}})),
            "all_reduce(axes=[x], sum) (cost 10.667)");
}

TEST(ReshardTest, UnknownAxisHasNoPlan) {
  EXPECT_EQ(plan(kMesh2x2, tensor8x8(), makeSharding({{"z"}, {}}),
                 makeSharding({{}, {}})),
            "error: source sharding: unknown axis 'z' in tensor dim 0 (mesh "
            "axes [x, y])");
  EXPECT_EQ(plan(kMesh2x2, tensor8x8(), makeSharding({{}, {}}),
                 makeSharding({{}, {}}, {"w"})),
            "error: target sharding: unknown partial axis 'w' (mesh axes [x, "
            "y])");
}

TEST(ReshardTest, IndivisibleDimHasNoPlan) {
  Mesh mesh = makeMesh({{"x", 2}, {"y", 4}});
  EXPECT_EQ(plan(mesh, TensorInfo{{8, 6}, 4}, makeSharding({{}, {}}),
                 makeSharding({{}, {"x", "y"}})),
            "error: target sharding: tensor dim 1 of size 6 is not divisible "
            "by 8, the product of the sizes of its axes [x, y]");
}

TEST(ReshardTest, InvalidShardingsHaveNoPlan) {
  EXPECT_EQ(plan(kMesh2x2, tensor8x8(), makeSharding({{"x"}, {"x"}}),
                 makeSharding({{}, {}})),
            "error: source sharding: axis 'x' is used twice (tensor dim 0 and "
            "tensor dim 1)");
  EXPECT_EQ(plan(kMesh2x2, tensor8x8(), makeSharding({{"x"}, {}}, {"x"}),
                 makeSharding({{}, {}})),
            "error: source sharding: axis 'x' is used twice (tensor dim 0 and "
            "the partial axes)");
  EXPECT_EQ(plan(kMesh2x2, tensor8x8(), makeSharding({{}, {}, {}}),
                 makeSharding({{}, {}})),
            "error: source sharding has 3 dims but the tensor has rank 2");
  // The model can hold sub-axes; the planner names the first one it meets.
  Sharding sub = makeSharding({{}, {}});
  sub.dims[1].axes.push_back(partita::dist::AxisRef("y", 1, 2));
  EXPECT_EQ(plan(kMesh2x2, tensor8x8(), makeSharding({{}, {}}), sub),
            "error: sub-axis of 'y' is not supported by the resharding "
            "planner");
  EXPECT_EQ(plan(kMesh2x2, TensorInfo{{8, -1}, 4}, makeSharding({{}, {}}),
                 makeSharding({{}, {}})),
            "error: tensor dim 1 has dynamic or negative size -1; the planner "
            "needs static shapes");
}

TEST(ReshardTest, PartialTargetNeedsPartialSource) {
  EXPECT_EQ(plan(kMesh2x2, tensor8x8(), makeSharding({{}, {}}),
                 makeSharding({{}, {}}, {"y"})),
            "error: target is partial over axis 'y' where the source is not; "
            "the planner does not make values partial");
  EXPECT_EQ(plan(kMesh2x2, tensor8x8(), makeSharding({{}, {}}, {"y"}),
                 makeSharding({{}, {}}, {"y"}, ReductionKind::Max)),
            "error: source is a partial sum but the target a partial max");
}

TEST(ReshardTest, InvalidOptionsOrMeshHaveNoPlan) {
  ReshardOptions options;
  options.axisWeights["w"] = 2.0;
  EXPECT_EQ(plan(kMesh2x2, tensor8x8(), makeSharding({{}, {}}),
                 makeSharding({{}, {}}), options),
            "error: cost weight given for unknown mesh axis 'w'");
  options.axisWeights.clear();
  options.axisWeights["x"] = 0.0;
  EXPECT_EQ(plan(kMesh2x2, tensor8x8(), makeSharding({{}, {}}),
                 makeSharding({{}, {}}), options),
            "error: cost weight of mesh axis 'x' must be a positive finite "
            "number");
  EXPECT_EQ(plan(makeMesh({{"x", 2}, {"x", 2}}), tensor8x8(),
                 makeSharding({{}, {}}), makeSharding({{}, {}})),
            "error: mesh axis 'x' is declared twice");
  EXPECT_EQ(plan(makeMesh({{"x", 0}}), tensor8x8(), makeSharding({{}, {}}),
                 makeSharding({{}, {}})),
            "error: mesh axis 'x' has size 0; sizes must be at least 1");
}

// A partial sum over x (4) of a value replicated over y (4), to replicated.
// Bandwidth only, reducing a quarter and gathering it beats reducing the
// whole: slice dim 0 over y (free, 64 bytes left), all_reduce x on them
// (2 * 3/4 * 64 = 96), all_gather y (3 * 64 = 192): 288 against 384 for
// one all_reduce. A cost of 1 MiB a step makes the two extra steps dearer
// than the 96 bytes they save, so the one all_reduce wins (384 + 1 MiB).
// At 4 MiB (1024x1024 f32) the decomposition saves 3/8 of 4 MiB = 1.5 MiB,
// more than its extra step: 4.5 MiB + 2 steps against 6 MiB + 1 step.
TEST(ReshardTest, StepCostKeepsSmallReductionsWhole) {
  Mesh mesh = makeMesh({{"x", 4}, {"y", 4}});
  Sharding partial = makeSharding({{}, {}}, {"x"});
  Sharding whole = makeSharding({{}, {}});
  llvm::Expected<ReshardPlan> bandwidth =
      planReshard(mesh, tensor8x8(), partial, whole);
  ASSERT_TRUE(bool(bandwidth)) << llvm::toString(bandwidth.takeError());
  EXPECT_EQ(bandwidth->cost, 288);
  ASSERT_EQ(bandwidth->steps.size(), 3u);
  EXPECT_EQ(bandwidth->steps[0].kind, StepKind::LocalSlice);

  ReshardOptions options;
  options.stepCost = 1 << 20;
  EXPECT_EQ(plan(mesh, tensor8x8(), partial, whole, options),
            "all_reduce(axes=[x], sum) (cost 1048960)");

  TensorInfo large{{1024, 1024}, 4};
  llvm::Expected<ReshardPlan> decomposed =
      planReshard(mesh, large, partial, whole, options);
  ASSERT_TRUE(bool(decomposed)) << llvm::toString(decomposed.takeError());
  EXPECT_EQ(decomposed->cost, 4.5 * (1 << 20) + 2 * (1 << 20));
  ASSERT_EQ(decomposed->steps.size(), 3u);
  EXPECT_EQ(decomposed->steps[1].kind, StepKind::AllReduce);
  EXPECT_EQ(decomposed->steps[2].kind, StepKind::AllGather);

  options.stepCost = -1;
  EXPECT_EQ(plan(mesh, tensor8x8(), partial, whole, options),
            "error: the cost of a step must be a finite number of at least 0");
  options.stepCost = std::nan("");
  EXPECT_EQ(plan(mesh, tensor8x8(), partial, whole, options),
            "error: the cost of a step must be a finite number of at least 0");
}

// A bound of one expanded state cannot reach a target two steps away.
TEST(ReshardTest, StateBoundFailsInsteadOfSearching) {
  ReshardOptions options;
  options.maxStates = 1;
  EXPECT_EQ(plan(kMesh2x2, tensor8x8(), makeSharding({{"x", "y"}, {}}),
                 makeSharding({{"y"}, {"x"}}), options),
            "error: no resharding plan found within 1 search states; raise "
            "the bound or simplify the mesh");
}

// Six axes of size 2 and a rank-4 tensor: every axis moves. The search must
// finish well inside its bound, quickly, and give the same plan every time.
TEST(ReshardTest, SixAxisSearchIsBoundedAndDeterministic) {
  Mesh mesh = makeMesh(
      {{"a", 2}, {"b", 2}, {"c", 2}, {"d", 2}, {"e", 2}, {"f", 2}});
  TensorInfo tensor{{64, 64, 64, 64}, 2};
  Sharding source = makeSharding({{"a", "b"}, {"c"}, {"d"}, {"e", "f"}});
  Sharding target = makeSharding({{"f"}, {"e", "d"}, {"c", "b", "a"}, {}});
  auto start = std::chrono::steady_clock::now();
  llvm::Expected<ReshardPlan> first = planReshard(mesh, tensor, source, target);
  double seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  ASSERT_TRUE(static_cast<bool>(first)) << llvm::toString(first.takeError());
  EXPECT_LT(first->expandedStates, ReshardOptions().maxStates);
  EXPECT_LT(seconds, 20.0);
  EXPECT_EQ(first->steps.back().result, target);
  for (int i = 0; i < 3; ++i) {
    llvm::Expected<ReshardPlan> again =
        planReshard(mesh, tensor, source, target);
    ASSERT_TRUE(static_cast<bool>(again));
    EXPECT_EQ(again->toString(), first->toString());
  }
}

} // namespace
