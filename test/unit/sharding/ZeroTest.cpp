//===- ZeroTest.cpp - unit tests of the ZeRO recipes and memory model -----===//

#include "passes/sharding/ModelStateMemory.h"
#include "passes/sharding/RecipeAnnotation.h"
#include "passes/sharding/Strategies.h"

#include <gtest/gtest.h>

using namespace partita::sharding;

namespace {

TEST(ZeroTest, StrategiesCarryTheirStage) {
  struct Expected {
    const char *name;
    ZeroStage stage;
    bool tensor;
  } expected[] = {
      {"dp", ZeroStage::None, false},
      {"zero1", ZeroStage::OptimizerState, false},
      {"zero2", ZeroStage::Gradients, false},
      {"zero3", ZeroStage::Parameters, false},
      {"fsdp", ZeroStage::Parameters, false},
      {"dp+megatron", ZeroStage::None, true},
      {"zero1+megatron", ZeroStage::OptimizerState, true},
      {"zero2+megatron", ZeroStage::Gradients, true},
      {"zero3+megatron", ZeroStage::Parameters, true},
      {"fsdp+megatron", ZeroStage::Parameters, true},
  };
  for (const Expected &e : expected) {
    const Strategy *strategy = lookupStrategy(e.name);
    ASSERT_NE(strategy, nullptr) << e.name;
    EXPECT_EQ(strategy->zero, e.stage) << e.name;
    EXPECT_TRUE(strategy->needsDataAxis()) << e.name;
    EXPECT_EQ(strategy->needsTensorAxis(), e.tensor) << e.name;
  }
}

TEST(ZeroTest, ChoosesTheLargestFreeDivisibleDimension) {
  // [H=16, F=32]: F is larger.
  EXPECT_EQ(chooseZeroDim({16, 32}, {false, false}, 2), 1u);
  // F split by tp: H is the one left.
  EXPECT_EQ(chooseZeroDim({16, 32}, {false, true}, 2), 0u);
  // The largest (50) is not divisible by 4; 8 is.
  EXPECT_EQ(chooseZeroDim({8, 50}, {false, false}, 4), 0u);
  // Ties go to the first dimension.
  EXPECT_EQ(chooseZeroDim({8, 8}, {false, false}, 2), 0u);
  // An [H,n,d] projection with heads split: H.
  EXPECT_EQ(chooseZeroDim({64, 8, 8}, {false, true, false}, 4), 0u);
}

TEST(ZeroTest, NoDimensionWhenNothingFits) {
  // Nothing divisible: stays whole over the data axis.
  EXPECT_EQ(chooseZeroDim({3, 5}, {false, false}, 2), std::nullopt);
  // Divisible, but every such dimension is taken.
  EXPECT_EQ(chooseZeroDim({16, 3}, {true, false}, 2), std::nullopt);
  // Smaller than the axis.
  EXPECT_EQ(chooseZeroDim({2}, {false}, 4), std::nullopt);
  // Rank 0.
  EXPECT_EQ(chooseZeroDim({}, {}, 2), std::nullopt);
  // A data axis of size 1 divides everything: the largest dimension.
  EXPECT_EQ(chooseZeroDim({3, 5}, {false, false}, 1), 1u);
}

// Tests the per-tensor shards from a plan's layout: the tensor-parallel
// share (ceil per split dimension: padded), and the data axis only where a
// free dimension divides (as dist-annotate chooses the ZeRO dimension).
TEST(ZeroTest, ShardsFollowThePlansLayout) {
  // [255, 32] on dp=3: 255 divides, so every part the stage shards is a
  // third.
  ModelStateTensor t = zeroShards({255, 32}, {1, 1}, ZeroStage::Gradients, 3);
  EXPECT_EQ(t.elements, 255 * 32);
  EXPECT_EQ(t.stateShards, 3);
  EXPECT_EQ(t.gradShards, 3);
  EXPECT_EQ(t.paramShards, 1);
  // [256, 32] on dp=3: nothing divides; whole in every stage.
  t = zeroShards({256, 32}, {1, 1}, ZeroStage::Parameters, 3);
  EXPECT_EQ(t.stateShards, 1);
  EXPECT_EQ(t.paramShards, 1);
  // A vocabulary of 97 split over tp=2: 49 padded rows; dp=2 on the
  // hidden dimension.
  t = zeroShards({97, 32}, {2, 1}, ZeroStage::Parameters, 2);
  EXPECT_EQ(t.elements, 49 * 32);
  EXPECT_EQ(t.paramShards, 2);
  // b1 [128] split over tp: its one dimension is taken, whole over dp.
  t = zeroShards({128}, {2}, ZeroStage::Parameters, 2);
  EXPECT_EQ(t.elements, 64);
  EXPECT_EQ(t.paramShards, 1);
  EXPECT_EQ(computeModelStateBytes({t}, PrecisionRecipe::fp32Adam()).total(),
            64 * 16);
}

// The ZeRO paper (Rajbhandari et al. 2020, Figure 1): a 7.5B-parameter
// model, Nd = 64 data-parallel devices, mixed-precision Adam (K = 12):
// baseline (2 + 2 + K) Psi = 120 GB, P_os 2Psi + 2Psi + K Psi / Nd = 31.4 GB,
// P_os+g 2Psi + (2 + K) Psi / Nd = 16.6 GB, P_os+g+p (2 + 2 + K) Psi / Nd =
// 1.9 GB (GB = 1e9 bytes). Exact values: 31.40625, 16.640625, 1.875.
TEST(ZeroTest, ReproducesTheZeroPaperFigure) {
  constexpr int64_t psi = 7'500'000'000;
  constexpr int64_t nd = 64;
  PrecisionRecipe mixed = PrecisionRecipe::mixedPrecisionAdam();
  auto bytes = [&](ZeroStage stage) {
    return computeModelStateBytes({zeroShards(psi, stage, nd)}, mixed);
  };
  ModelStateBytes base = bytes(ZeroStage::None);
  EXPECT_EQ(base.params, 15'000'000'000);
  EXPECT_EQ(base.grads, 15'000'000'000);
  EXPECT_EQ(base.optimizerState, 90'000'000'000);
  EXPECT_EQ(base.total(), 120'000'000'000);
  ModelStateBytes os = bytes(ZeroStage::OptimizerState);
  EXPECT_EQ(os.optimizerState, 1'406'250'000);
  EXPECT_EQ(os.total(), 31'406'250'000);
  EXPECT_EQ(bytes(ZeroStage::Gradients).total(), 16'640'625'000);
  EXPECT_EQ(bytes(ZeroStage::Parameters).total(), 1'875'000'000);
  // The paper's rounded figures.
  EXPECT_NEAR(os.total() / 1e9, 31.4, 0.05);
  EXPECT_NEAR(bytes(ZeroStage::Gradients).total() / 1e9, 16.6, 0.05);
  EXPECT_NEAR(bytes(ZeroStage::Parameters).total() / 1e9, 1.9, 0.05);
}

TEST(ZeroTest, Fp32AdamAndUnevenShards) {
  // fp32 Adam is 4 + 4 + 8 bytes per element.
  ModelStateBytes fp32 = computeModelStateBytes(
      {zeroShards(10, ZeroStage::None, 4)}, PrecisionRecipe::fp32Adam());
  EXPECT_EQ(fp32.params, 40);
  EXPECT_EQ(fp32.grads, 40);
  EXPECT_EQ(fp32.optimizerState, 80);
  // 10 elements over 4 devices: the largest shard holds ceil(10/4) = 3.
  ModelStateBytes z3 = computeModelStateBytes(
      {zeroShards(10, ZeroStage::Parameters, 4)}, PrecisionRecipe::fp32Adam());
  EXPECT_EQ(z3.params, 12);
  EXPECT_EQ(z3.grads, 12);
  EXPECT_EQ(z3.optimizerState, 24);
  // Tensors add up; a shard count of 0 is read as whole.
  ModelStateTensor whole{6, 0, 0, 0};
  ModelStateBytes sum = computeModelStateBytes(
      {whole, zeroShards(8, ZeroStage::Gradients, 2)},
      PrecisionRecipe::fp32Adam());
  EXPECT_EQ(sum.params, 6 * 4 + 8 * 4);
  EXPECT_EQ(sum.grads, 6 * 4 + 4 * 4);
  EXPECT_EQ(sum.optimizerState, 6 * 8 + 4 * 8);
}

} // namespace
