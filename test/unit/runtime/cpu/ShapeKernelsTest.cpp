//===- ShapeKernelsTest.cpp - cpu broadcast, reduce, transpose, reshape ---===//
//
// References index every element through its multi-index, as the nn
// README defines each op; the kernels collapse dimensions and stride.
//
//===----------------------------------------------------------------------===//

#include "CpuTestUtil.h"

#include <algorithm>
#include <limits>

using namespace partita::runtime;
using namespace partita::runtime::test;

namespace {

template <typename T> class ShapeKernelsTest : public ::testing::Test {};
TYPED_TEST_SUITE(ShapeKernelsTest, FloatTypes);

int64_t offsetOf(const std::vector<int64_t> &shape,
                 const std::vector<int64_t> &index) {
  std::vector<int64_t> strides = stridesOf(shape);
  int64_t offset = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    offset += index[d] * strides[d];
  return offset;
}

//===----------------------------------------------------------------------===//
// broadcast
//===----------------------------------------------------------------------===//

struct BroadcastCase {
  std::vector<int64_t> in, dims, out;
};
const BroadcastCase kBroadcastCases[] = {
    {{5}, {2}, {2, 3, 5}},
    {{5}, {0}, {5, 3}},
    {{3, 1}, {0, 2}, {3, 4, 5}},
    {{1}, {1}, {2, 3}},
    {{}, {}, {2, 2}},
    {{2, 3}, {0, 1}, {2, 3}},
    {{4, 1, 3}, {0, 1, 3}, {4, 5, 2, 3}},
    {{1, 1}, {0, 1}, {3, 2}},
};

template <typename T>
std::vector<double> naiveBroadcast(const Tensor &in, const BroadcastCase &c) {
  std::vector<double> want;
  forEachIndex(c.out, [&](const std::vector<int64_t> &r) {
    std::vector<int64_t> s(c.in.size());
    for (size_t i = 0; i < c.in.size(); ++i)
      s[i] = c.in[i] == 1 ? 0 : r[c.dims[i]];
    want.push_back(in.data<T>()[offsetOf(c.in, s)]);
  });
  return want;
}

TYPED_TEST(ShapeKernelsTest, BroadcastMatchesReference) {
  using T = TypeParam;
  uint64_t seed = 100;
  for (const BroadcastCase &c : kBroadcastCases) {
    SCOPED_TRACE(::testing::PrintToString(c.out));
    Tensor in = randomTensor<T>(c.in, seed++);
    Tensor out(dtypeOf<T>(), c.out);
    KernelAttrs attrs;
    attrs.dims = c.dims;
    runKernel(KernelKind::Broadcast, attrs, {&in}, {&out});
    EXPECT_EQ(values<T>(out), naiveBroadcast<T>(in, c));
  }
}

TEST(BroadcastTest, MovesAnyDType) {
  Tensor in = makeTensor<int64_t>({2}, {-5, 7});
  Tensor out(DType::I64, {2, 3});
  KernelAttrs attrs;
  attrs.dims = {0};
  runKernel(KernelKind::Broadcast, attrs, {&in}, {&out});
  EXPECT_EQ(values<int64_t>(out), (std::vector<double>{-5, -5, -5, 7, 7, 7}));
  // bf16 is moved as 2-byte elements.
  Tensor h(DType::BF16, {2}), hout(DType::BF16, {2, 2});
  uint16_t bits[2] = {0x3f80, 0xc000};
  std::memcpy(h.data<uint16_t>(), bits, sizeof(bits));
  attrs.dims = {1};
  runKernel(KernelKind::Broadcast, attrs, {&h}, {&hout});
  const uint16_t *o = hout.data<uint16_t>();
  EXPECT_EQ((std::vector<uint16_t>(o, o + 4)),
            (std::vector<uint16_t>{0x3f80, 0xc000, 0x3f80, 0xc000}));
}

TEST(BroadcastTest, RejectsBadDims) {
  Tensor in(DType::F32, {3}), out(DType::F32, {2, 4});
  KernelAttrs attrs;
  attrs.dims = {0, 1};
  expectError(
      [&] { runKernel(KernelKind::Broadcast, attrs, {&in}, {&out}); },
      {"broadcast", "dims [0, 1] has 2 entries but input 0 has rank 1"});
  attrs.dims = {2};
  expectError([&] { runKernel(KernelKind::Broadcast, attrs, {&in}, {&out}); },
              {"dims[0] = 2 is out of range for output 0 of rank 2"});
  attrs.dims = {1};
  expectError([&] { runKernel(KernelKind::Broadcast, attrs, {&in}, {&out}); },
              {"input 0 dimension 0 has size 3 but output dimension 1 has size "
               "4"});
  Tensor in2(DType::F32, {2, 4}), out3(DType::F32, {2, 4, 5});
  attrs.dims = {1, 1};
  expectError([&] { runKernel(KernelKind::Broadcast, attrs, {&in2}, {&out3}); },
              {"dims [1, 1] is not strictly increasing"});
  Tensor d(DType::F64, {2, 4});
  attrs.dims = {0};
  expectError([&] { runKernel(KernelKind::Broadcast, attrs, {&in}, {&d}); },
              {"input 0 has dtype f32 but output 0 has f64"});
}

//===----------------------------------------------------------------------===//
// reduce
//===----------------------------------------------------------------------===//

template <typename T>
std::vector<double>
naiveReduce(const Tensor &in, const std::vector<int64_t> &dims, KernelKind kind,
            int64_t meanCount, std::vector<int64_t> &outShape) {
  const std::vector<int64_t> &shape = in.getShape();
  auto isReduced = [&](size_t d) {
    return std::find(dims.begin(), dims.end(), (int64_t)d) != dims.end();
  };
  outShape.clear();
  int64_t reducedCount = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (isReduced(d))
      reducedCount *= shape[d];
    else
      outShape.push_back(shape[d]);
  }
  int64_t outCount = 1;
  for (int64_t d : outShape)
    outCount *= d;
  std::vector<double> acc(outCount,
                          kind == KernelKind::ReduceMax
                              ? -std::numeric_limits<double>::infinity()
                              : 0.0);
  forEachIndex(shape, [&](const std::vector<int64_t> &index) {
    std::vector<int64_t> kept;
    for (size_t d = 0; d < shape.size(); ++d)
      if (!isReduced(d))
        kept.push_back(index[d]);
    double x = in.data<T>()[offsetOf(shape, index)];
    double &a = acc[offsetOf(outShape, kept)];
    a = kind == KernelKind::ReduceMax ? std::max(a, x) : a + x;
  });
  if (kind == KernelKind::ReduceMean)
    for (double &a : acc)
      a /= meanCount ? meanCount : reducedCount;
  return acc;
}

TYPED_TEST(ShapeKernelsTest, ReduceMatchesReference) {
  using T = TypeParam;
  const std::vector<std::vector<int64_t>> dimSets = {
      {0}, {3}, {1, 2}, {0, 2}, {3, 1}, {0, 1, 2, 3}, {}, {0, 3}, {2, 0, 3}};
  Tensor in = randomTensor<T>({2, 3, 4, 5}, 200);
  for (KernelKind kind :
       {KernelKind::ReduceSum, KernelKind::ReduceMax, KernelKind::ReduceMean}) {
    for (const auto &dims : dimSets) {
      for (int64_t meanCount : {int64_t(0), int64_t(1000)}) {
        if (meanCount && kind != KernelKind::ReduceMean)
          continue;
        SCOPED_TRACE(std::string(toString(kind)) + " dims " +
                     ::testing::PrintToString(dims) + " meanCount " +
                     std::to_string(meanCount));
        std::vector<int64_t> outShape;
        std::vector<double> want =
            naiveReduce<T>(in, dims, kind, meanCount, outShape);
        Tensor out(dtypeOf<T>(), outShape);
        KernelAttrs attrs;
        attrs.dims = dims;
        attrs.meanCount = meanCount;
        runKernel(kind, attrs, {&in}, {&out});
        // Up to 120 terms of magnitude < 1: the error scales with their
        // count, not with the (cancelled) sum.
        expectNear<T>(out, want, kind == KernelKind::ReduceMax ? 0.0 : 1.0);
      }
    }
  }
}

TYPED_TEST(ShapeKernelsTest, ReduceOfNothing) {
  using T = TypeParam;
  Tensor in(dtypeOf<T>(), {0, 3});
  Tensor out(dtypeOf<T>(), {3});
  KernelAttrs attrs;
  attrs.dims = {0};
  runKernel(KernelKind::ReduceSum, attrs, {&in}, {&out});
  EXPECT_EQ(values<T>(out), std::vector<double>(3, 0.0));
  runKernel(KernelKind::ReduceMax, attrs, {&in}, {&out});
  EXPECT_EQ(values<T>(out),
            std::vector<double>(3, -std::numeric_limits<double>::infinity()));
  runKernel(KernelKind::ReduceMean, attrs, {&in}, {&out});
  EXPECT_TRUE(std::isnan(out.data<T>()[0]));
  // A shard with no elements contributes 0 to a global mean.
  attrs.meanCount = 8;
  runKernel(KernelKind::ReduceMean, attrs, {&in}, {&out});
  EXPECT_EQ(values<T>(out), std::vector<double>(3, 0.0));
}

TYPED_TEST(ShapeKernelsTest, ReduceMeanWithGlobalCount) {
  using T = TypeParam;
  Tensor in = makeTensor<T>({2, 2}, {1, 2, 3, 4});
  Tensor out(dtypeOf<T>(), {2});
  KernelAttrs attrs;
  attrs.dims = {1};
  runKernel(KernelKind::ReduceMean, attrs, {&in}, {&out});
  EXPECT_EQ(values<T>(out), (std::vector<double>{1.5, 3.5}));
  // This shard holds 2 of 8 elements per row: the local sum over 8.
  attrs.meanCount = 8;
  runKernel(KernelKind::ReduceMean, attrs, {&in}, {&out});
  EXPECT_EQ(values<T>(out), (std::vector<double>{3.0 / 8, 7.0 / 8}));
}

TEST(ReduceTest, RejectsBadDims) {
  Tensor in(DType::F32, {2, 3}), out(DType::F32, {2});
  KernelAttrs attrs;
  attrs.dims = {2};
  expectError([&] { runKernel(KernelKind::ReduceSum, attrs, {&in}, {&out}); },
              {"reduce_sum", "names 2, out of range for input 0 of rank 2"});
  attrs.dims = {1, 1};
  expectError([&] { runKernel(KernelKind::ReduceMax, attrs, {&in}, {&out}); },
              {"reduce_max", "names 1 twice"});
  attrs.dims = {0};
  expectError([&] { runKernel(KernelKind::ReduceSum, attrs, {&in}, {&out}); },
              {"output 0 has shape [2], expected [3]"});
  attrs.dims = {1};
  attrs.meanCount = -1;
  expectError([&] { runKernel(KernelKind::ReduceMean, attrs, {&in}, {&out}); },
              {"reduce_mean", "meanCount must be >= 0, got -1"});
  attrs.meanCount = 0;
  Tensor h(DType::F16, {2, 3}), ho(DType::F16, {2});
  // f16 runs on widened copies (LowPrecisionTest checks values).
  EXPECT_NO_THROW(runKernel(KernelKind::ReduceSum, attrs, {&h}, {&ho}));
}

//===----------------------------------------------------------------------===//
// transpose
//===----------------------------------------------------------------------===//

TYPED_TEST(ShapeKernelsTest, TransposeMatchesReferenceForEveryPermutation) {
  using T = TypeParam;
  const std::vector<int64_t> shape = {2, 3, 4, 5};
  Tensor in = randomTensor<T>(shape, 300);
  std::vector<int64_t> perm = {0, 1, 2, 3};
  do {
    SCOPED_TRACE(::testing::PrintToString(perm));
    std::vector<int64_t> outShape;
    for (int64_t p : perm)
      outShape.push_back(shape[p]);
    std::vector<double> want;
    forEachIndex(outShape, [&](const std::vector<int64_t> &r) {
      std::vector<int64_t> s(4);
      for (size_t i = 0; i < 4; ++i)
        s[perm[i]] = r[i];
      want.push_back(in.data<T>()[offsetOf(shape, s)]);
    });
    Tensor out(dtypeOf<T>(), outShape);
    KernelAttrs attrs;
    attrs.dims = perm;
    runKernel(KernelKind::Transpose, attrs, {&in}, {&out});
    EXPECT_EQ(values<T>(out), want);
  } while (std::next_permutation(perm.begin(), perm.end()));
}

TEST(TransposeTest, MovesIntegersAndRejectsBadPermutations) {
  Tensor in = makeTensor<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor out(DType::I32, {3, 2});
  KernelAttrs attrs;
  attrs.dims = {1, 0};
  runKernel(KernelKind::Transpose, attrs, {&in}, {&out});
  EXPECT_EQ(values<int32_t>(out), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  attrs.dims = {0, 0};
  expectError([&] { runKernel(KernelKind::Transpose, attrs, {&in}, {&out}); },
              {"transpose", "[0, 0] is not a permutation of [0, 2)"});
  attrs.dims = {1};
  expectError([&] { runKernel(KernelKind::Transpose, attrs, {&in}, {&out}); },
              {"permutation [1] has 1 entries but input 0 has rank 2"});
  attrs.dims = {0, 1};
  expectError([&] { runKernel(KernelKind::Transpose, attrs, {&in}, {&out}); },
              {"output 0 has shape [3, 2], expected [2, 3]"});
}

//===----------------------------------------------------------------------===//
// reshape
//===----------------------------------------------------------------------===//

TYPED_TEST(ShapeKernelsTest, ReshapeCopiesTheRowMajorSequence) {
  using T = TypeParam;
  Tensor in = randomTensor<T>({2, 3, 4}, 400);
  Tensor out(dtypeOf<T>(), {4, 6});
  runKernel(KernelKind::Reshape, {}, {&in}, {&out});
  EXPECT_EQ(values<T>(out), values<T>(in));
  // In place is allowed: a reshape of a buffer onto itself.
  KernelCall call{KernelKind::Reshape, {}, {in.view()}, {in.view()}};
  call.outputs[0].shape = {24};
  backend().run(call);
  EXPECT_EQ(values<T>(out), values<T>(in));
}

TEST(ReshapeTest, RejectsCountAndDTypeMismatch) {
  Tensor in(DType::F32, {2, 3}), out(DType::F32, {5}), i(DType::I32, {6});
  expectError([&] { runKernel(KernelKind::Reshape, {}, {&in}, {&out}); },
              {"reshape", "input 0 (tensor<2x3xf32>) has 6 elements but output "
                          "0 (tensor<5xf32>) has 5"});
  expectError([&] { runKernel(KernelKind::Reshape, {}, {&in}, {&i}); },
              {"input 0 has dtype f32 but output 0 has i32"});
}

} // namespace
