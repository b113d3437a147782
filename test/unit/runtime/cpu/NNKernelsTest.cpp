//===- NNKernelsTest.cpp - cpu softmax, norms, rotary, attention, ... -----===//
//
// Each kernel against a naive double-precision loop written from the nn
// README's formula (no max subtraction where the inputs cannot overflow, no
// GEMM, no precomputed tables), plus analytic spot checks and error cases.
//
//===----------------------------------------------------------------------===//

#include "CpuTestUtil.h"
#include "runtime/lib/cpu/CpuKernels.h"

#include <limits>

using namespace partita::runtime;
using namespace partita::runtime::test;

namespace {

template <typename T> class NNKernelsTest : public ::testing::Test {};
TYPED_TEST_SUITE(NNKernelsTest, FloatTypes);

//===----------------------------------------------------------------------===//
// softmax
//===----------------------------------------------------------------------===//

TYPED_TEST(NNKernelsTest, SoftmaxMatchesReferenceAlongEveryDim) {
  using T = TypeParam;
  const std::vector<int64_t> shape = {2, 3, 4, 5};
  Tensor x = randomTensor<T>(shape, 500, -3, 3);
  std::vector<int64_t> strides = stridesOf(shape);
  for (int64_t dim = 0; dim < 4; ++dim) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    std::vector<double> want(x.numElements());
    forEachIndex(shape, [&](const std::vector<int64_t> &index) {
      int64_t base = 0;
      for (size_t d = 0; d < 4; ++d)
        base += (d == (size_t)dim ? 0 : index[d]) * strides[d];
      double sum = 0;
      for (int64_t j = 0; j < shape[dim]; ++j)
        sum += std::exp((double)x.data<T>()[base + j * strides[dim]]);
      int64_t self = base + index[dim] * strides[dim];
      want[self] = std::exp((double)x.data<T>()[self]) / sum;
    });
    Tensor y(dtypeOf<T>(), shape);
    KernelAttrs attrs;
    attrs.dim = dim;
    runKernel(KernelKind::Softmax, attrs, {&x}, {&y});
    expectNear<T>(y, want, 0.0);
  }
}

TYPED_TEST(NNKernelsTest, SoftmaxOfEqualValuesIsUniformAndStable) {
  using T = TypeParam;
  Tensor x = makeTensor<T>({2, 4}, {3, 3, 3, 3, 1000, 1000, 1000, 1000});
  Tensor y(dtypeOf<T>(), {2, 4});
  KernelAttrs attrs;
  attrs.dim = 1;
  runKernel(KernelKind::Softmax, attrs, {&x}, {&y});
  // exp(1000) overflows; a stable softmax never takes it.
  EXPECT_EQ(values<T>(y), std::vector<double>(8, 0.25));
  Tensor z = makeTensor<T>({2}, {-1000, 0});
  Tensor p(dtypeOf<T>(), {2});
  attrs.dim = 0;
  runKernel(KernelKind::Softmax, attrs, {&z}, {&p});
  EXPECT_EQ(values<T>(p), (std::vector<double>{0, 1}));
}

TEST(SoftmaxTest, RejectsBadDimAndTypes) {
  Tensor x(DType::F32, {2, 3}), y(DType::F32, {2, 3});
  KernelAttrs attrs; // dim defaults to -1: never wrapped
  expectError([&] { runKernel(KernelKind::Softmax, attrs, {&x}, {&y}); },
              {"softmax", "dim -1 is out of range for input 0 of rank 2"});
  attrs.dim = 1;
  Tensor z(DType::F32, {3, 2});
  expectError([&] { runKernel(KernelKind::Softmax, attrs, {&x}, {&z}); },
              {"input 0 is tensor<2x3xf32> but output 0 is tensor<3x2xf32>"});
  Tensor i(DType::I32, {2, 3}), j(DType::I32, {2, 3});
  expectError([&] { runKernel(KernelKind::Softmax, attrs, {&i}, {&j}); },
              {"softmax", "dtype i32 is not supported"});
  expectError([&] { runKernel(KernelKind::Softmax, attrs, {&x}, {&x}); },
              {"output 0 overlaps input 0", "does not run in place"});
}

//===----------------------------------------------------------------------===//
// layer_norm, rms_norm
//===----------------------------------------------------------------------===//

TYPED_TEST(NNKernelsTest, LayerNormMatchesReference) {
  using T = TypeParam;
  const int64_t hidden = 16;
  Tensor x = randomTensor<T>({2, 3, hidden}, 600, -2, 3);
  Tensor gamma = randomTensor<T>({hidden}, 601, 0.5, 1.5);
  Tensor beta = randomTensor<T>({hidden}, 602);
  Tensor y(dtypeOf<T>(), {2, 3, hidden});
  KernelAttrs attrs;
  attrs.epsilon = 1e-3;
  runKernel(KernelKind::LayerNorm, attrs, {&x, &gamma, &beta}, {&y});
  std::vector<double> want;
  for (int64_t r = 0; r < 6; ++r) {
    const T *row = x.data<T>() + r * hidden;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < hidden; ++i)
      mean += row[i] / double(hidden);
    for (int64_t i = 0; i < hidden; ++i)
      var += (row[i] - mean) * (row[i] - mean) / double(hidden);
    for (int64_t i = 0; i < hidden; ++i)
      want.push_back((row[i] - mean) / std::sqrt(var + 1e-3) *
                         (double)gamma.data<T>()[i] +
                     (double)beta.data<T>()[i]);
  }
  expectNear<T>(y, want, 1.0);
}

TYPED_TEST(NNKernelsTest, LayerNormOutputHasMeanZeroVarianceOne) {
  using T = TypeParam;
  const int64_t hidden = 64;
  Tensor x = randomTensor<T>({3, hidden}, 610, -5, 20);
  Tensor gamma = makeTensor<T>({hidden}, std::vector<double>(hidden, 1.0));
  Tensor beta(dtypeOf<T>(), {hidden});
  Tensor y(dtypeOf<T>(), {3, hidden});
  KernelAttrs attrs;
  attrs.epsilon = 1e-30;
  runKernel(KernelKind::LayerNorm, attrs, {&x, &gamma, &beta}, {&y});
  for (int64_t r = 0; r < 3; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < hidden; ++i)
      mean += y.data<T>()[r * hidden + i] / double(hidden);
    for (int64_t i = 0; i < hidden; ++i) {
      double d = y.data<T>()[r * hidden + i] - mean;
      var += d * d / hidden;
    }
    EXPECT_NEAR(mean, 0.0, relTol<T>()) << "row " << r;
    EXPECT_NEAR(var, 1.0, relTol<T>()) << "row " << r;
  }
}

TYPED_TEST(NNKernelsTest, RMSNormMatchesReference) {
  using T = TypeParam;
  const int64_t hidden = 12;
  Tensor x = randomTensor<T>({4, hidden}, 620, -2, 2);
  Tensor gamma = randomTensor<T>({hidden}, 621, 0.5, 1.5);
  Tensor y(dtypeOf<T>(), {4, hidden});
  KernelAttrs attrs;
  attrs.epsilon = 1e-2;
  runKernel(KernelKind::RMSNorm, attrs, {&x, &gamma}, {&y});
  std::vector<double> want;
  for (int64_t r = 0; r < 4; ++r) {
    const T *row = x.data<T>() + r * hidden;
    double ms = 0;
    for (int64_t i = 0; i < hidden; ++i)
      ms += (double)row[i] * row[i] / hidden;
    for (int64_t i = 0; i < hidden; ++i)
      want.push_back(row[i] / std::sqrt(ms + 1e-2) * gamma.data<T>()[i]);
  }
  expectNear<T>(y, want, 0.0);
}

TYPED_TEST(NNKernelsTest, RMSNormOfAConstantRowIsItsSign) {
  using T = TypeParam;
  Tensor x = makeTensor<T>({2, 3}, {3, 3, 3, -0.5, -0.5, -0.5});
  Tensor gamma = makeTensor<T>({3}, {1, 2, 1});
  Tensor y(dtypeOf<T>(), {2, 3});
  KernelAttrs attrs;
  attrs.epsilon = 1e-30;
  runKernel(KernelKind::RMSNorm, attrs, {&x, &gamma}, {&y});
  expectNear<T>(y, {1, 2, 1, -1, -2, -1}, 0.0);
}

TEST(NormTest, RejectsBadParameters) {
  Tensor x(DType::F32, {2, 4}), y(DType::F32, {2, 4});
  Tensor g(DType::F32, {4}), b(DType::F32, {4}), g3(DType::F32, {3}),
      b64(DType::F64, {4});
  KernelAttrs attrs;
  expectError(
      [&] {
        runKernel(KernelKind::LayerNorm, attrs, {&x, &g3, &b}, {&y});
      },
      {"layer_norm", "input 1 (gamma) has shape [3], expected [4]"});
  expectError(
      [&] {
        runKernel(KernelKind::LayerNorm, attrs, {&x, &g, &b64}, {&y});
      },
      {"layer_norm", "input 2 (beta) has dtype f64, expected f32"});
  expectError(
      [&] {
        runKernel(KernelKind::RMSNorm, attrs, {&x, &g3}, {&y});
      },
      {"rms_norm", "input 1 (gamma) has shape [3], expected [4]"});
  attrs.epsilon = 0;
  expectError(
      [&] {
        runKernel(KernelKind::LayerNorm, attrs, {&x, &g, &b}, {&y});
      },
      {"layer_norm", "epsilon must be positive and finite"});
  attrs.epsilon = std::numeric_limits<double>::infinity();
  expectError(
      [&] {
        runKernel(KernelKind::RMSNorm, attrs, {&x, &g}, {&y});
      },
      {"rms_norm", "epsilon must be positive and finite"});
  attrs.epsilon = 1e-5;
  Tensor s(DType::F32, {}), so(DType::F32, {});
  expectError(
      [&] {
        runKernel(KernelKind::RMSNorm, attrs, {&s, &g}, {&so});
      },
      {"rms_norm", "rank >= 1"});
  expectError(
      [&] {
        runKernel(KernelKind::LayerNorm, attrs, {&x, &g}, {&y});
      },
      {"layer_norm", "expects 3 input(s)"});
}

//===----------------------------------------------------------------------===//
// rotary
//===----------------------------------------------------------------------===//

template <typename T>
std::vector<double> naiveRotary(const Tensor &x, double theta, int64_t offset) {
  const std::vector<int64_t> &s = x.getShape();
  std::vector<double> want(x.numElements());
  forEachIndex(
      {s[0], s[1], s[2], s[3] / 2}, [&](const std::vector<int64_t> &i) {
        int64_t base = ((i[0] * s[1] + i[1]) * s[2] + i[2]) * s[3] + 2 * i[3];
        double angle = (offset + i[1]) / std::pow(theta, 2.0 * i[3] / s[3]);
        double x0 = x.data<T>()[base], x1 = x.data<T>()[base + 1];
        want[base] = x0 * std::cos(angle) - x1 * std::sin(angle);
        want[base + 1] = x0 * std::sin(angle) + x1 * std::cos(angle);
      });
  return want;
}

TYPED_TEST(NNKernelsTest, RotaryMatchesReference) {
  using T = TypeParam;
  Tensor x = randomTensor<T>({2, 5, 3, 8}, 700);
  for (int64_t offset : {0, 7, 3000}) {
    for (double theta : {10000.0, 500000.0, 2.0}) {
      SCOPED_TRACE("offset " + std::to_string(offset) + " theta " +
                   std::to_string(theta));
      Tensor y(dtypeOf<T>(), {2, 5, 3, 8});
      KernelAttrs attrs;
      attrs.theta = theta;
      attrs.positionOffset = offset;
      runKernel(KernelKind::Rotary, attrs, {&x}, {&y});
      expectNear<T>(y, naiveRotary<T>(x, theta, offset), 1.0);
    }
  }
}

TYPED_TEST(NNKernelsTest, RotaryIsIdentityAtPositionZeroAndShardsByOffset) {
  using T = TypeParam;
  Tensor x = randomTensor<T>({1, 10, 2, 4}, 710);
  Tensor y(dtypeOf<T>(), {1, 10, 2, 4});
  runKernel(KernelKind::Rotary, {}, {&x}, {&y});
  for (int64_t i = 0; i < 8; ++i) // position 0: angle 0
    EXPECT_EQ(y.data<T>()[i], x.data<T>()[i]);
  // Rows 4..9 rotated alone, with positionOffset 4, equal the full result.
  Tensor part(dtypeOf<T>(), {1, 6, 2, 4}), partOut(dtypeOf<T>(), {1, 6, 2, 4});
  std::copy(x.data<T>() + 4 * 8, x.data<T>() + 10 * 8, part.data<T>());
  KernelAttrs attrs;
  attrs.positionOffset = 4;
  runKernel(KernelKind::Rotary, attrs, {&part}, {&partOut});
  EXPECT_EQ(values<T>(partOut),
            std::vector<double>(y.data<T>() + 4 * 8, y.data<T>() + 10 * 8));
}

TEST(RotaryTest, RejectsBadInputs) {
  Tensor odd(DType::F32, {1, 2, 1, 3}), oddOut(DType::F32, {1, 2, 1, 3});
  KernelAttrs attrs;
  expectError([&] { runKernel(KernelKind::Rotary, attrs, {&odd}, {&oddOut}); },
              {"rotary", "head_dim must be even, got 3"});
  Tensor r3(DType::F32, {2, 4, 8}), r3o(DType::F32, {2, 4, 8});
  expectError(
      [&] { runKernel(KernelKind::Rotary, attrs, {&r3}, {&r3o}); },
      {"rotary", "[batch, seq, heads, head_dim], got tensor<2x4x8xf32>"});
  Tensor x(DType::F32, {1, 2, 1, 4}), y(DType::F32, {1, 2, 1, 4});
  attrs.theta = 0;
  expectError([&] { runKernel(KernelKind::Rotary, attrs, {&x}, {&y}); },
              {"theta must be positive and finite"});
  attrs.theta = 10000;
  attrs.positionOffset = -1;
  expectError([&] { runKernel(KernelKind::Rotary, attrs, {&x}, {&y}); },
              {"positionOffset must be >= 0, got -1"});
}

//===----------------------------------------------------------------------===//
// attention
//===----------------------------------------------------------------------===//

struct AttentionCase {
  int64_t batch, seqQ, seqKV, heads, kvHeads, headDim;
  bool causal;
  int64_t queryOffset;
  std::optional<double> scale;
};

template <typename T>
std::vector<double> naiveAttention(const Tensor &q, const Tensor &k,
                                   const Tensor &v, const AttentionCase &c) {
  double scale = c.scale ? *c.scale : 1 / std::sqrt((double)c.headDim);
  std::vector<double> out(q.numElements());
  auto at = [](const Tensor &t, int64_t b, int64_t s, int64_t h, int64_t d) {
    const std::vector<int64_t> &sh = t.getShape();
    return (double)t.data<T>()[((b * sh[1] + s) * sh[2] + h) * sh[3] + d];
  };
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads; ++h) {
      int64_t g = h / (c.heads / c.kvHeads);
      for (int64_t i = 0; i < c.seqQ; ++i) {
        int64_t keys = c.causal ? c.queryOffset + i + 1 : c.seqKV;
        std::vector<double> p(keys);
        double sum = 0;
        for (int64_t j = 0; j < keys; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < c.headDim; ++d)
            dot += at(q, b, i, h, d) * at(k, b, j, g, d);
          p[j] = std::exp(scale * dot); // |scores| are small here
          sum += p[j];
        }
        for (int64_t d = 0; d < c.headDim; ++d) {
          double o = 0;
          for (int64_t j = 0; j < keys; ++j)
            o += p[j] / sum * at(v, b, j, g, d);
          out[((b * c.seqQ + i) * c.heads + h) * c.headDim + d] = o;
        }
      }
    }
  return out;
}

KernelAttrs attentionAttrs(const AttentionCase &c) {
  KernelAttrs attrs;
  attrs.causal = c.causal;
  attrs.queryOffset = c.queryOffset;
  attrs.scale = c.scale;
  return attrs;
}

TYPED_TEST(NNKernelsTest, AttentionMatchesReference) {
  using T = TypeParam;
  const AttentionCase cases[] = {
      {2, 5, 5, 4, 4, 8, false, 0, std::nullopt},
      {2, 5, 5, 4, 4, 8, true, 0, std::nullopt},
      {2, 6, 6, 4, 2, 8, true, 0, std::nullopt},    // grouped-query
      {1, 6, 6, 4, 1, 4, false, 0, std::nullopt},   // multi-query
      {2, 4, 4, 2, 2, 6, true, 0, 0.7},             // explicit scale
      {2, 3, 7, 2, 2, 4, false, 0, std::nullopt},   // seq_q != seq_kv
      {2, 3, 7, 4, 2, 4, true, 4, std::nullopt},    // the last 3 queries
      {1, 3, 7, 2, 1, 4, true, 2, std::nullopt},    // keys past the diagonal
      {1, 40, 40, 2, 2, 16, true, 0, std::nullopt}, // longer rows
      // Three causal row blocks (kCausalRowBlock 32: 32, 32 and 6 rows),
      // grouped, the last 70 of 90 positions.
      {2, 70, 90, 4, 2, 8, true, 20, std::nullopt},
  };
  uint64_t seed = 800;
  for (const AttentionCase &c : cases) {
    SCOPED_TRACE("heads " + std::to_string(c.heads) + "/" +
                 std::to_string(c.kvHeads) + " seq " + std::to_string(c.seqQ) +
                 "x" + std::to_string(c.seqKV) + (c.causal ? " causal" : "") +
                 " offset " + std::to_string(c.queryOffset));
    Tensor q = randomTensor<T>({c.batch, c.seqQ, c.heads, c.headDim}, seed++);
    Tensor k =
        randomTensor<T>({c.batch, c.seqKV, c.kvHeads, c.headDim}, seed++);
    Tensor v =
        randomTensor<T>({c.batch, c.seqKV, c.kvHeads, c.headDim}, seed++);
    Tensor o(dtypeOf<T>(), {c.batch, c.seqQ, c.heads, c.headDim});
    runKernel(KernelKind::Attention, attentionAttrs(c), {&q, &k, &v}, {&o});
    expectNear<T>(o, naiveAttention<T>(q, k, v, c), 1.0);
  }
}

TYPED_TEST(NNKernelsTest, CausalAttentionAtPositionZeroReturnsTheFirstValue) {
  using T = TypeParam;
  Tensor q = randomTensor<T>({2, 4, 2, 8}, 900, -5, 5);
  Tensor k = randomTensor<T>({2, 4, 2, 8}, 901, -5, 5);
  Tensor v = randomTensor<T>({2, 4, 2, 8}, 902);
  Tensor o(dtypeOf<T>(), {2, 4, 2, 8});
  KernelAttrs attrs;
  attrs.causal = true;
  runKernel(KernelKind::Attention, attrs, {&q, &k, &v}, {&o});
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 16; ++i) { // position 0, both heads
      int64_t at = b * 4 * 16 + i;
      EXPECT_EQ(o.data<T>()[at], v.data<T>()[at]) << "b " << b << " i " << i;
    }
}

TYPED_TEST(NNKernelsTest, AttentionWithZeroQueryAveragesTheValues) {
  using T = TypeParam;
  Tensor q(dtypeOf<T>(), {1, 3, 1, 2});
  Tensor k = randomTensor<T>({1, 3, 1, 2}, 910);
  Tensor v = makeTensor<T>({1, 3, 1, 2}, {3, 6, 9, 12, 0, 3});
  Tensor o(dtypeOf<T>(), {1, 3, 1, 2});
  KernelAttrs attrs;
  attrs.causal = true;
  runKernel(KernelKind::Attention, attrs, {&q, &k, &v}, {&o});
  // Equal scores: query i averages values 0..i.
  expectNear<T>(o, {3, 6, 6, 9, 4, 7}, 0.0);
}

TYPED_TEST(NNKernelsTest, CausalAttentionShardsByQueryOffset) {
  using T = TypeParam;
  Tensor q = randomTensor<T>({2, 8, 2, 4}, 920);
  Tensor k = randomTensor<T>({2, 8, 2, 4}, 921);
  Tensor v = randomTensor<T>({2, 8, 2, 4}, 922);
  Tensor full(dtypeOf<T>(), {2, 8, 2, 4});
  KernelAttrs attrs;
  attrs.causal = true;
  runKernel(KernelKind::Attention, attrs, {&q, &k, &v}, {&full});
  // Queries 5..7 alone, at offset 5, against all keys.
  Tensor qPart(dtypeOf<T>(), {2, 3, 2, 4}), part(dtypeOf<T>(), {2, 3, 2, 4});
  for (int64_t b = 0; b < 2; ++b)
    std::copy(q.data<T>() + (b * 8 + 5) * 8, q.data<T>() + (b * 8 + 8) * 8,
              qPart.data<T>() + b * 3 * 8);
  attrs.queryOffset = 5;
  runKernel(KernelKind::Attention, attrs, {&qPart, &k, &v}, {&part});
  std::vector<double> want;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = (b * 8 + 5) * 8; i < (b * 8 + 8) * 8; ++i)
      want.push_back(full.data<T>()[i]);
  expectNear<T>(part, want, 1.0);
}

TEST(AttentionTest, RejectsBadShapesAndAttributes) {
  auto t = [](std::vector<int64_t> s, DType d = DType::F32) {
    return Tensor(d, std::move(s));
  };
  Tensor q = t({1, 4, 3, 8}), k = t({1, 4, 2, 8}), v = t({1, 4, 2, 8}),
         o = t({1, 4, 3, 8});
  KernelAttrs attrs;
  expectError(
      [&] {
        runKernel(KernelKind::Attention, attrs, {&q, &k, &v}, {&o});
      },
      {"attention", "heads (3) must be a multiple of kv_heads (2)"});
  Tensor q2 = t({1, 4, 2, 8}), o2 = t({1, 4, 2, 8}), kb = t({2, 4, 2, 8}),
         vb = t({2, 4, 2, 8});
  expectError(
      [&] {
        runKernel(KernelKind::Attention, attrs, {&q2, &kb, &vb}, {&o2});
      },
      {"does not share batch and head_dim"});
  Tensor v5 = t({1, 5, 2, 8});
  expectError(
      [&] {
        runKernel(KernelKind::Attention, attrs, {&q2, &k, &v5}, {&o2});
      },
      {"input 2 (value) is tensor<1x5x2x8xf32> but input 1 (key) is "
       "tensor<1x4x2x8xf32>"});
  Tensor k64 = t({1, 4, 2, 8}, DType::F64), v64 = t({1, 4, 2, 8}, DType::F64);
  expectError(
      [&] {
        runKernel(KernelKind::Attention, attrs, {&q2, &k64, &v64}, {&o2});
      },
      {"input 1 (key) has dtype f64, expected f32"});
  attrs.scale = 0.0;
  expectError(
      [&] {
        runKernel(KernelKind::Attention, attrs, {&q2, &k, &v}, {&o2});
      },
      {"scale must be positive and finite, got 0"});
  attrs.scale.reset();
  attrs.causal = true;
  attrs.queryOffset = 1;
  expectError(
      [&] {
        runKernel(KernelKind::Attention, attrs, {&q2, &k, &v}, {&o2});
      },
      {"queryOffset + seq_q <= seq_kv", "queryOffset 1, seq_q 4, seq_kv 4"});
  attrs.causal = false;
  Tensor k0 = t({1, 0, 2, 8}), v0 = t({1, 0, 2, 8});
  expectError(
      [&] {
        runKernel(KernelKind::Attention, attrs, {&q2, &k0, &v0}, {&o2});
      },
      {"no keys"});
  Tensor r3 = t({4, 2, 8});
  expectError(
      [&] {
        runKernel(KernelKind::Attention, attrs, {&r3, &k, &v}, {&r3});
      },
      {"input 0 (query) must be [batch, seq_q, heads, head_dim]"});
}

//===----------------------------------------------------------------------===//
// embedding
//===----------------------------------------------------------------------===//

template <typename Id, typename T> void checkEmbedding(int64_t vocabOffset) {
  const int64_t localV = 6, hidden = 4;
  Tensor table = randomTensor<T>({localV, hidden}, 1000);
  Tensor ids = makeTensor<Id>({2, 4}, {0, 5, 6, 9, -1, 11, 12, 3});
  Tensor out(dtypeOf<T>(), {2, 4, hidden});
  KernelAttrs attrs;
  attrs.vocabOffset = vocabOffset;
  runKernel(KernelKind::Embedding, attrs, {&table, &ids}, {&out});
  for (int64_t t = 0; t < 8; ++t) {
    int64_t local = (int64_t)ids.data<Id>()[t] - vocabOffset;
    for (int64_t h = 0; h < hidden; ++h) {
      double want = local >= 0 && local < localV
                        ? (double)table.data<T>()[local * hidden + h]
                        : 0.0;
      EXPECT_EQ(out.data<T>()[t * hidden + h], want)
          << "token " << t << " id " << ids.data<Id>()[t];
    }
  }
}

TYPED_TEST(NNKernelsTest, EmbeddingGathersRowsAndZerosOutsideTheShard) {
  using T = TypeParam;
  checkEmbedding<int32_t, T>(0);
  checkEmbedding<int64_t, T>(0);
  checkEmbedding<int32_t, T>(6);
  checkEmbedding<int64_t, T>(6);
}

TEST(EmbeddingTest, RejectsBadInputs) {
  Tensor table(DType::F32, {5, 4}), ids(DType::I32, {3}),
      out(DType::F32, {3, 4});
  Tensor fids(DType::F32, {3});
  KernelAttrs attrs;
  expectError(
      [&] {
        runKernel(KernelKind::Embedding, attrs, {&table, &fids}, {&out});
      },
      {"embedding", "input 1 (ids) has dtype f32, expected i32 or i64"});
  Tensor wrong(DType::F32, {3, 5});
  expectError(
      [&] {
        runKernel(KernelKind::Embedding, attrs, {&table, &ids}, {&wrong});
      },
      {"output 0 has shape [3, 5], expected [3, 4]"});
  Tensor t3(DType::F32, {5, 4, 1});
  expectError(
      [&] {
        runKernel(KernelKind::Embedding, attrs, {&t3, &ids}, {&out});
      },
      {"input 0 (table) must be [vocab, hidden]"});
  attrs.vocabOffset = -2;
  expectError(
      [&] {
        runKernel(KernelKind::Embedding, attrs, {&table, &ids}, {&out});
      },
      {"vocabOffset must be >= 0, got -2"});
}

//===----------------------------------------------------------------------===//
// cross_entropy
//===----------------------------------------------------------------------===//

template <typename T, typename Label>
void checkCrossEntropy(int64_t meanCount) {
  const int64_t vocab = 7;
  Tensor logits = randomTensor<T>({2, 3, vocab}, 1100, -4, 4);
  Tensor labels = makeTensor<Label>({2, 3}, {0, 6, 3, 3, 1, 5});
  Tensor loss(dtypeOf<T>(), {});
  KernelAttrs attrs;
  attrs.meanCount = meanCount;
  runKernel(KernelKind::CrossEntropy, attrs, {&logits, &labels}, {&loss});
  double total = 0;
  for (int64_t t = 0; t < 6; ++t) {
    double sum = 0;
    for (int64_t j = 0; j < vocab; ++j)
      sum += std::exp((double)logits.data<T>()[t * vocab + j]);
    total += std::log(sum) -
             (double)logits.data<T>()[t * vocab + labels.data<Label>()[t]];
  }
  expectNear<T>(loss, {total / (meanCount ? meanCount : 6)}, 0.0);
}

TYPED_TEST(NNKernelsTest, CrossEntropyMatchesReference) {
  using T = TypeParam;
  checkCrossEntropy<T, int32_t>(0);
  checkCrossEntropy<T, int64_t>(0);
  checkCrossEntropy<T, int32_t>(24); // a shard of a 24-token batch
}

TYPED_TEST(NNKernelsTest, CrossEntropyOfUniformLogitsIsLogV) {
  using T = TypeParam;
  for (double level : {0.0, 5.0, 1000.0}) { // 1000: exp would overflow
    Tensor logits = makeTensor<T>({3, 10}, std::vector<double>(30, level));
    Tensor labels = makeTensor<int32_t>({3}, {0, 4, 9});
    Tensor loss(dtypeOf<T>(), {});
    runKernel(KernelKind::CrossEntropy, {}, {&logits, &labels}, {&loss});
    expectNear<T>(loss, {std::log(10.0)}, 0.0);
  }
}

TYPED_TEST(NNKernelsTest, CrossEntropySkipsNegativeLabels) {
  using T = TypeParam;
  // Token 1 (label -1, e.g. a padded token) adds nothing, even with
  // non-finite logits; the mean still divides by all 3 tokens:
  // (log 10 + log 10) / 3.
  std::vector<double> values(30, 2.0);
  for (int j = 10; j < 20; ++j)
    values[j] = std::numeric_limits<double>::quiet_NaN();
  Tensor logits = makeTensor<T>({3, 10}, values);
  Tensor labels = makeTensor<int32_t>({3}, {0, -1, 9});
  Tensor loss(dtypeOf<T>(), {});
  runKernel(KernelKind::CrossEntropy, {}, {&logits, &labels}, {&loss});
  expectNear<T>(loss, {2.0 * std::log(10.0) / 3.0}, 0.0);
}

TEST(CrossEntropyTest, RejectsBadInputs) {
  Tensor logits(DType::F32, {2, 5}), labels = makeTensor<int32_t>({2}, {1, 5});
  Tensor loss(DType::F32, {});
  KernelAttrs attrs;
  expectError(
      [&] {
        runKernel(KernelKind::CrossEntropy, attrs, {&logits, &labels}, {&loss});
      },
      {"cross_entropy", "label 5 of token 1 is outside [0, 5)"});
  Tensor labels3(DType::I32, {3});
  expectError(
      [&] {
        runKernel(KernelKind::CrossEntropy, attrs, {&logits, &labels3},
                  {&loss});
      },
      {"input 1 (labels) has shape [3], expected [2]"});
  Tensor ok(DType::I64, {2}), loss1(DType::F32, {1}), loss64(DType::F64, {});
  expectError(
      [&] {
        runKernel(KernelKind::CrossEntropy, attrs, {&logits, &ok}, {&loss1});
      },
      {"output 0 has shape [1], expected []"});
  expectError(
      [&] {
        runKernel(KernelKind::CrossEntropy, attrs, {&logits, &ok}, {&loss64});
      },
      {"output 0 has dtype f64, expected f32"});
  attrs.vocabOffset = 5;
  expectError(
      [&] {
        runKernel(KernelKind::CrossEntropy, attrs, {&logits, &ok}, {&loss});
      },
      {"vocab-parallel cross_entropy (vocabOffset 5) is not supported yet"});
  attrs.vocabOffset = 0;
  attrs.meanCount = -3;
  expectError(
      [&] {
        runKernel(KernelKind::CrossEntropy, attrs, {&logits, &ok}, {&loss});
      },
      {"meanCount must be >= 0, got -3"});
  Tensor h(DType::BF16, {2, 5}), hl(DType::BF16, {});
  attrs.meanCount = 0;
  // bf16 runs on widened copies: uniform logits give log(5), rounded.
  EXPECT_NO_THROW(
      runKernel(KernelKind::CrossEntropy, attrs, {&h, &ok}, {&hl}));
  EXPECT_EQ(hl.data<uint16_t>()[0], narrowFloat(std::log(5.0f), DType::BF16));
}

// rowMaxF32 takes 16 lanes at a time and a tail: the max wherever it
// falls, NaN wherever one is, -inf for nothing.
float inf32() { return std::numeric_limits<float>::infinity(); }

TEST(RowMaxF32, LanesTailAndNaN) {
  std::vector<float> v(37);
  for (int64_t j = 0; j < 37; ++j)
    v[j] = float(j % 11) - 20.0f;
  EXPECT_EQ(-inf32(), cpu::rowMaxF32(v.data(), 0));
  EXPECT_EQ(-10.0f, cpu::rowMaxF32(v.data(), 37));
  for (int64_t at : {0, 5, 15, 16, 31, 32, 36}) {
    std::vector<float> w = v;
    w[at] = 3.0f;
    EXPECT_EQ(3.0f, cpu::rowMaxF32(w.data(), 37)) << "max at " << at;
    w[at] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_TRUE(std::isnan(cpu::rowMaxF32(w.data(), 37))) << "NaN at " << at;
  }
  std::vector<float> negInf(20, -inf32());
  EXPECT_EQ(-inf32(), cpu::rowMaxF32(negInf.data(), 20));
}

// Rows of width 0 (a zero-size normalized dimension): nothing to write and
// no crash; the row kernels size their pool chunks by the width
// (itemsForWork), which once divided by it.
TYPED_TEST(NNKernelsTest, NormsOfZeroWidthRows) {
  using T = TypeParam;
  KernelAttrs attrs;
  attrs.epsilon = 1e-5;
  Tensor x(dtypeOf<T>(), {4, 0}), gamma(dtypeOf<T>(), {0}),
      beta(dtypeOf<T>(), {0}), dy(dtypeOf<T>(), {4, 0});
  Tensor y(dtypeOf<T>(), {4, 0}), dx(dtypeOf<T>(), {4, 0});
  EXPECT_NO_THROW(
      runKernel(KernelKind::LayerNorm, attrs, {&x, &gamma, &beta}, {&y}));
  EXPECT_NO_THROW(
      runKernel(KernelKind::LayerNormGrad, attrs, {&x, &gamma, &dy}, {&dx}));
}

} // namespace

/// The f32 softmax's exp (no libm call, CpuKernels.h expNonPositive) over
/// scores spread across [-90, 0] below the row maximum: every probability
/// within 1e-6 of the f64 value relative to itself (measured 6.6e-7, the
/// same as with libm's expf: the f32 normalization dominates), -inf scores
/// (masked keys) exactly 0, and those more than 87 below the maximum 0.
/// The reference takes the f32 difference score - max as the kernel does
/// (its rounding, up to 4e-6 relative in exp at -87, is the input's).
TEST(SoftmaxF32, MatchesF64OverAWideRange) {
  const int64_t n = 2049;
  std::vector<float> scores(n);
  for (int64_t j = 0; j < n; ++j)
    scores[j] = -90.0f * float(j) / float(n - 1) + 5.0f; // max 5 at j = 0
  scores[7] = -std::numeric_limits<float>::infinity();
  Tensor x = makeTensor<float>({n}, std::vector<double>(scores.begin(),
                                                        scores.end()));
  Tensor y(DType::F32, {n});
  KernelAttrs attrs;
  attrs.dim = 0;
  runKernel(KernelKind::Softmax, attrs, {&x}, {&y});
  auto shifted = [&](int64_t j) {
    return double(x.data<float>()[j] - 5.0f); // rounded to f32 first
  };
  double sum = 0;
  for (int64_t j = 0; j < n; ++j)
    sum += std::exp(shifted(j));
  double worst = 0;
  for (int64_t j = 0; j < n; ++j) {
    float got = y.data<float>()[j];
    if (j == 7 || shifted(j) < -87.0) {
      EXPECT_EQ(got, 0.0f) << "element " << j;
      continue;
    }
    double want = std::exp(shifted(j)) / sum;
    worst = std::max(worst, std::fabs(got - want) / want);
  }
  EXPECT_LT(worst, 1e-6) << "worst relative error";
}
