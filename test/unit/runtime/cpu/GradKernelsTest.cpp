//===- GradKernelsTest.cpp - cpu backward, convert and optimizer kernels --===//
//
// Every gradient kernel against central finite differences of its forward
// kernel in f64: for L(x) = sum(dy * forward(x)), the kernel's dx must be
// dL/dx (the "VJP matches finite differences in float64" check, at kernel
// level). The f32 kernels are then checked against the f64 ones. sgd and
// adamw against PyTorch's formulas written out here; convert against hand
// bit patterns.
//
//===----------------------------------------------------------------------===//

#include "CpuTestUtil.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>

using namespace partita::runtime;
using namespace partita::runtime::test;

namespace {

/// sum(a * b) over every element (f64 tensors).
double dot(const Tensor &a, const Tensor &b) {
  double s = 0;
  for (int64_t i = 0; i < a.numElements(); ++i)
    s += a.data<double>()[i] * b.data<double>()[i];
  return s;
}

/// Central differences of `loss` with respect to every element of the f64
/// tensor `x`, which `loss` reads: (L(x + h) - L(x - h)) / 2h.
std::vector<double> finiteDifferences(Tensor &x,
                                      const std::function<double()> &loss,
                                      double h = 1e-6) {
  std::vector<double> grad(x.numElements());
  for (int64_t i = 0; i < x.numElements(); ++i) {
    double saved = x.data<double>()[i];
    x.data<double>()[i] = saved + h;
    double up = loss();
    x.data<double>()[i] = saved - h;
    double down = loss();
    x.data<double>()[i] = saved;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

/// Expects the f64 `got` to match finite differences: central differences
/// with h = 1e-6 are good to about 1e-8 absolute on these O(1) functions.
void expectMatchesFD(const Tensor &got, const std::vector<double> &fd) {
  expectNear<double>(got, fd, std::vector<double>{1.0}, 1e-7);
}

/// An f32 copy of an f64 tensor.
Tensor toF32(const Tensor &t) {
  Tensor out(DType::F32, t.getShape());
  for (int64_t i = 0; i < t.numElements(); ++i)
    out.data<float>()[i] = float(t.data<double>()[i]);
  return out;
}

/// Runs `kind` on f32 copies of the (float) inputs and expects the result
/// near `want64` (the f64 kernel's), relative to `scale`.
void expectF32Matches(KernelKind kind, const KernelAttrs &attrs,
                      std::vector<Tensor *> inputs, const Tensor &want64,
                      double scale, double tol = 1e-4) {
  std::vector<Tensor> copies;
  copies.reserve(inputs.size());
  std::vector<Tensor *> args;
  for (Tensor *t : inputs) {
    if (t->getDType() == DType::F64)
      copies.push_back(toF32(*t));
    else
      copies.push_back(*t);
  }
  for (Tensor &t : copies)
    args.push_back(&t);
  Tensor out(DType::F32, want64.getShape());
  runKernel(kind, attrs, args, {&out});
  expectNear<float>(out, values<double>(want64), std::vector<double>{scale},
                    tol);
}

//===----------------------------------------------------------------------===//
// relu_grad, silu_grad, gelu_grad, greater_equal
//===----------------------------------------------------------------------===//

TEST(ActivationGradTest, MatchesFiniteDifferencesOfTheForward) {
  struct Case {
    KernelKind forward, grad;
    bool tanh;
  };
  for (Case c : {Case{KernelKind::Relu, KernelKind::ReluGrad, false},
                 Case{KernelKind::Silu, KernelKind::SiluGrad, false},
                 Case{KernelKind::Gelu, KernelKind::GeluGrad, false},
                 Case{KernelKind::Gelu, KernelKind::GeluGrad, true}}) {
    SCOPED_TRACE(std::string(toString(c.grad)) + (c.tanh ? " tanh" : ""));
    Tensor x = randomTensor<double>({3, 7}, 100, -4, 4);
    // Keep relu's inputs away from its kink at 0.
    for (int64_t i = 0; i < x.numElements(); ++i)
      if (std::fabs(x.data<double>()[i]) < 1e-3)
        x.data<double>()[i] = 0.5;
    Tensor dy = randomTensor<double>({3, 7}, 101);
    KernelAttrs attrs;
    attrs.tanh = c.tanh;
    Tensor dx(DType::F64, {3, 7});
    runKernel(c.grad, attrs, {&x, &dy}, {&dx});
    Tensor y(DType::F64, {3, 7});
    std::vector<double> fd = finiteDifferences(x, [&] {
      runKernel(c.forward, attrs, {&x}, {&y});
      return dot(dy, y);
    });
    expectMatchesFD(dx, fd);
    expectF32Matches(c.grad, attrs, {&x, &dy}, dx, 1.0, 1e-5);
  }
}

TEST(ActivationGradTest, ReluGradIsZeroAtAndBelowZero) {
  Tensor x = makeTensor<float>({4}, {-1, 0, 2, NAN});
  Tensor dy = makeTensor<float>({4}, {5, 6, 7, 8});
  Tensor dx(DType::F32, {4});
  runKernel(KernelKind::ReluGrad, {}, {&x, &dy}, {&dx});
  EXPECT_EQ(values<float>(dx), (std::vector<double>{0, 0, 7, 0}));
  // In place over dy.
  runKernel(KernelKind::ReluGrad, {}, {&x, &dy}, {&dy});
  EXPECT_EQ(values<float>(dy), (std::vector<double>{0, 0, 7, 0}));
}

TEST(ActivationGradTest, GreaterEqualIsOneWhereAIsAtLeastB) {
  Tensor a = makeTensor<double>({5}, {1, 2, 3, -0.0, NAN});
  Tensor b = makeTensor<double>({5}, {2, 2, 1, 0.0, 0});
  Tensor c(DType::F64, {5});
  runKernel(KernelKind::GreaterEqual, {}, {&a, &b}, {&c});
  EXPECT_EQ(values<double>(c), (std::vector<double>{0, 1, 1, 1, 0}));
}

TEST(ActivationGradTest, RejectsMismatchedTypes) {
  Tensor x(DType::F32, {4}), dy(DType::F32, {5}), dx(DType::F32, {4});
  expectError([&] { runKernel(KernelKind::SiluGrad, {}, {&x, &dy}, {&dx}); },
              {"silu_grad", "input 1 is tensor<5xf32> but output 0 is "
                            "tensor<4xf32>"});
  Tensor i(DType::I32, {4}), j(DType::I32, {4}), k(DType::I32, {4});
  expectError([&] { runKernel(KernelKind::GeluGrad, {}, {&i, &j}, {&k}); },
              {"gelu_grad", "dtype i32 is not supported"});
}

//===----------------------------------------------------------------------===//
// layer_norm_grad, rms_norm_grad
//===----------------------------------------------------------------------===//

TEST(NormGradTest, LayerNormGradMatchesFiniteDifferences) {
  const std::vector<int64_t> shape = {2, 3, 8};
  Tensor x = randomTensor<double>(shape, 200, -2, 3);
  Tensor gamma = randomTensor<double>({8}, 201, 0.5, 1.5);
  Tensor beta = randomTensor<double>({8}, 202);
  Tensor dy = randomTensor<double>(shape, 203);
  KernelAttrs attrs;
  attrs.epsilon = 1e-3;
  Tensor dx(DType::F64, shape), y(DType::F64, shape);
  runKernel(KernelKind::LayerNormGrad, attrs, {&x, &gamma, &dy}, {&dx});
  std::vector<double> fd = finiteDifferences(x, [&] {
    runKernel(KernelKind::LayerNorm, attrs, {&x, &gamma, &beta}, {&y});
    return dot(dy, y);
  });
  expectMatchesFD(dx, fd);
  expectF32Matches(KernelKind::LayerNormGrad, attrs, {&x, &gamma, &dy}, dx,
                   1.0);
}

TEST(NormGradTest, RMSNormGradMatchesFiniteDifferences) {
  const std::vector<int64_t> shape = {4, 6};
  Tensor x = randomTensor<double>(shape, 210, -2, 2);
  Tensor gamma = randomTensor<double>({6}, 211, 0.5, 1.5);
  Tensor dy = randomTensor<double>(shape, 212);
  KernelAttrs attrs;
  attrs.epsilon = 1e-2;
  Tensor dx(DType::F64, shape), y(DType::F64, shape);
  runKernel(KernelKind::RMSNormGrad, attrs, {&x, &gamma, &dy}, {&dx});
  std::vector<double> fd = finiteDifferences(x, [&] {
    runKernel(KernelKind::RMSNorm, attrs, {&x, &gamma}, {&y});
    return dot(dy, y);
  });
  expectMatchesFD(dx, fd);
  expectF32Matches(KernelKind::RMSNormGrad, attrs, {&x, &gamma, &dy}, dx, 1.0);
}

// layer_norm_gamma_grad is layer_norm(x, 1, 0), mul by dy and reduce_sum
// over the leading dimensions in one kernel, with the same bits: rows not a
// multiple of 4 (accumulateRows' step) and a hidden size not a multiple of
// 16 (the vector width), f32 and f64.
template <typename T> void expectGammaGradIsTheThreeKernels(DType dtype) {
  const std::vector<int64_t> shape = {3, 37, 70};
  Tensor x = randomTensor<T>(shape, 220, -2, 3);
  Tensor dy = randomTensor<T>(shape, 221);
  Tensor ones(dtype, {70}), zeros(dtype, {70});
  for (int64_t i = 0; i < 70; ++i) {
    ones.data<T>()[i] = T(1);
    zeros.data<T>()[i] = T(0);
  }
  KernelAttrs attrs;
  attrs.epsilon = 1e-5;
  Tensor xhat(dtype, shape), product(dtype, shape), expected(dtype, {70});
  runKernel(KernelKind::LayerNorm, attrs, {&x, &ones, &zeros}, {&xhat});
  runKernel(KernelKind::Mul, {}, {&dy, &xhat}, {&product});
  KernelAttrs sum;
  sum.dims = {0, 1};
  runKernel(KernelKind::ReduceSum, sum, {&product}, {&expected});
  Tensor got(dtype, {70});
  runKernel(KernelKind::LayerNormGammaGrad, attrs, {&x, &dy}, {&got});
  for (int64_t i = 0; i < 70; ++i)
    ASSERT_EQ(expected.data<T>()[i], got.data<T>()[i]) << "column " << i;
}

TEST(NormGradTest, LayerNormGammaGradIsTheThreeKernels) {
  expectGammaGradIsTheThreeKernels<float>(DType::F32);
  expectGammaGradIsTheThreeKernels<double>(DType::F64);
}

TEST(NormGradTest, LayerNormGammaGradMatchesFiniteDifferences) {
  const std::vector<int64_t> shape = {2, 3, 8};
  Tensor x = randomTensor<double>(shape, 230, -2, 3);
  Tensor gamma = randomTensor<double>({8}, 231, 0.5, 1.5);
  Tensor beta = randomTensor<double>({8}, 232);
  Tensor dy = randomTensor<double>(shape, 233);
  KernelAttrs attrs;
  attrs.epsilon = 1e-3;
  Tensor dgamma(DType::F64, {8}), y(DType::F64, shape);
  runKernel(KernelKind::LayerNormGammaGrad, attrs, {&x, &dy}, {&dgamma});
  std::vector<double> fd = finiteDifferences(gamma, [&] {
    runKernel(KernelKind::LayerNorm, attrs, {&x, &gamma, &beta}, {&y});
    return dot(dy, y);
  });
  expectMatchesFD(dgamma, fd);
}

TEST(NormGradTest, LayerNormGammaGradOfNoRowsIsZero) {
  Tensor x(DType::F32, {0, 4}), dy(DType::F32, {0, 4});
  Tensor dgamma = makeTensor<float>({4}, {1, 2, 3, 4});
  runKernel(KernelKind::LayerNormGammaGrad, {}, {&x, &dy}, {&dgamma});
  for (int64_t i = 0; i < 4; ++i)
    EXPECT_EQ(0.0f, dgamma.data<float>()[i]);
}

TEST(NormGradTest, LayerNormGammaGradRejectsBadOperands) {
  Tensor x(DType::F32, {2, 4}), dy(DType::F32, {2, 4}), bad(DType::F32, {3});
  expectError(
      [&] { runKernel(KernelKind::LayerNormGammaGrad, {}, {&x, &dy}, {&bad}); },
      {"layer_norm_gamma_grad", "output 0 (dgamma) has shape [3], expected [4]"});
  Tensor dyBad(DType::F32, {4, 2}), dgamma(DType::F32, {4});
  expectError(
      [&] {
        runKernel(KernelKind::LayerNormGammaGrad, {}, {&x, &dyBad}, {&dgamma});
      },
      {"layer_norm_gamma_grad",
       "input 1 (dy) is tensor<4x2xf32> but input 0 (x) is tensor<2x4xf32>"});
  KernelAttrs attrs;
  attrs.epsilon = 0;
  expectError(
      [&] {
        runKernel(KernelKind::LayerNormGammaGrad, attrs, {&x, &dy}, {&dgamma});
      },
      {"layer_norm_gamma_grad", "epsilon must be positive and finite"});
}

TEST(NormGradTest, RejectsBadOperands) {
  Tensor x(DType::F32, {2, 4}), gamma(DType::F32, {3}), dy(DType::F32, {2, 4}),
      dx(DType::F32, {2, 4});
  expectError(
      [&] {
        runKernel(KernelKind::LayerNormGrad, {}, {&x, &gamma, &dy}, {&dx});
      },
      {"layer_norm_grad", "input 1 (gamma) has shape [3], expected [4]"});
  Tensor g4(DType::F32, {4}), dyBad(DType::F32, {4, 2});
  expectError(
      [&] { runKernel(KernelKind::RMSNormGrad, {}, {&x, &g4, &dyBad}, {&dx}); },
      {"rms_norm_grad", "input 2 (dy) is tensor<4x2xf32> but input 0 (x) is "
                        "tensor<2x4xf32>"});
  KernelAttrs attrs;
  attrs.epsilon = 0;
  expectError(
      [&] { runKernel(KernelKind::RMSNormGrad, attrs, {&x, &g4, &dy}, {&dx}); },
      {"rms_norm_grad", "epsilon must be positive and finite"});
}

//===----------------------------------------------------------------------===//
// rotary_grad
//===----------------------------------------------------------------------===//

TEST(RotaryGradTest, MatchesFiniteDifferencesWithPositionOffset) {
  const std::vector<int64_t> shape = {2, 3, 2, 6};
  Tensor x = randomTensor<double>(shape, 300);
  Tensor dy = randomTensor<double>(shape, 301);
  KernelAttrs attrs;
  attrs.theta = 500;
  attrs.positionOffset = 7;
  Tensor dx(DType::F64, shape), y(DType::F64, shape);
  runKernel(KernelKind::RotaryGrad, attrs, {&dy}, {&dx});
  std::vector<double> fd = finiteDifferences(x, [&] {
    runKernel(KernelKind::Rotary, attrs, {&x}, {&y});
    return dot(dy, y);
  });
  expectMatchesFD(dx, fd);
  expectF32Matches(KernelKind::RotaryGrad, attrs, {&dy}, dx, 1.0, 1e-5);
  // The transpose of a rotation is its inverse: rotary_grad(rotary(x)) = x.
  runKernel(KernelKind::Rotary, attrs, {&x}, {&y});
  runKernel(KernelKind::RotaryGrad, attrs, {&y}, {&dx});
  expectNear<double>(dx, values<double>(x), 1.0);
}

//===----------------------------------------------------------------------===//
// attention_grad
//===----------------------------------------------------------------------===//

struct AttentionCase {
  const char *name;
  int64_t batch, seqQ, seqKV, heads, kvHeads, headDim;
  bool causal;
  int64_t queryOffset;
  std::optional<double> scale;
};

class AttentionGradTest : public ::testing::TestWithParam<AttentionCase> {};

/// Each query row's log-sum-exp of its scaled, masked scores, [batch,
/// heads, seq_q], computed here from the definition (f64 inputs).
std::vector<double> referenceLse(const Tensor &q, const Tensor &k,
                                 const AttentionCase &c) {
  double scale = c.scale ? *c.scale : 1.0 / std::sqrt(double(c.headDim));
  int64_t group = c.heads / c.kvHeads;
  std::vector<double> lse;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t i = 0; i < c.seqQ; ++i) {
        int64_t keys = c.causal ? c.queryOffset + i + 1 : c.seqKV;
        std::vector<double> s;
        for (int64_t j = 0; j < keys; ++j) {
          double d = 0;
          for (int64_t x = 0; x < c.headDim; ++x)
            d += q.data<double>()[((b * c.seqQ + i) * c.heads + h) *
                                      c.headDim +
                                  x] *
                 k.data<double>()[((b * c.seqKV + j) * c.kvHeads + h / group) *
                                      c.headDim +
                                  x];
          s.push_back(d * scale);
        }
        double m = *std::max_element(s.begin(), s.end()), sum = 0;
        for (double x : s)
          sum += std::exp(x - m);
        lse.push_back(m + std::log(sum));
      }
  return lse;
}

TEST_P(AttentionGradTest, MatchesFiniteDifferencesForQKAndV) {
  const AttentionCase &c = GetParam();
  std::vector<int64_t> qShape = {c.batch, c.seqQ, c.heads, c.headDim};
  std::vector<int64_t> kShape = {c.batch, c.seqKV, c.kvHeads, c.headDim};
  Tensor q = randomTensor<double>(qShape, 400, -1.5, 1.5);
  Tensor k = randomTensor<double>(kShape, 401, -1.5, 1.5);
  Tensor v = randomTensor<double>(kShape, 402);
  Tensor dy = randomTensor<double>(qShape, 403);
  KernelAttrs attrs;
  attrs.causal = c.causal;
  attrs.queryOffset = c.queryOffset;
  attrs.scale = c.scale;
  Tensor o(DType::F64, qShape);
  auto loss = [&] {
    runKernel(KernelKind::Attention, attrs, {&q, &k, &v}, {&o});
    return dot(dy, o);
  };
  struct Wrt {
    const char *name;
    Tensor *x;
  };
  for (Wrt w : {Wrt{"q", &q}, Wrt{"k", &k}, Wrt{"v", &v}}) {
    SCOPED_TRACE(std::string("wrt ") + w.name);
    attrs.wrt = w.name;
    Tensor grad(DType::F64, w.x->getShape());
    // Garbage in the output: dk and dv must not accumulate onto it.
    for (int64_t i = 0; i < grad.numElements(); ++i)
      grad.data<double>()[i] = 1e3;
    runKernel(KernelKind::AttentionGrad, attrs, {&q, &k, &v, &dy}, {&grad});
    expectMatchesFD(grad, finiteDifferences(*w.x, loss));
    expectF32Matches(KernelKind::AttentionGrad, attrs, {&q, &k, &v, &dy}, grad,
                     1.0);
  }

  // The forward's lse output is each row's log-sum-exp, and gradients that
  // read the saved output and lse match those that recompute them.
  Tensor lse(DType::F64, {c.batch, c.heads, c.seqQ});
  runKernel(KernelKind::Attention, attrs, {&q, &k, &v}, {&o, &lse});
  expectNear<double>(lse, referenceLse(q, k, c), 1.0, 1e-13);
  for (const char *wrt : {"q", "k", "v", "qkv"}) {
    SCOPED_TRACE(std::string("saved, wrt ") + wrt);
    attrs.wrt = wrt;
    std::vector<Tensor> recomputed, saved;
    std::vector<Tensor *> outs, savedOuts;
    for (const char *l = wrt; *l; ++l) {
      const Tensor &like = *l == 'q' ? q : k;
      recomputed.emplace_back(DType::F64, like.getShape());
      saved.emplace_back(DType::F64, like.getShape());
    }
    for (size_t i = 0; i < recomputed.size(); ++i) {
      outs.push_back(&recomputed[i]);
      savedOuts.push_back(&saved[i]);
    }
    runKernel(KernelKind::AttentionGrad, attrs, {&q, &k, &v, &dy}, outs);
    runKernel(KernelKind::AttentionGrad, attrs, {&q, &k, &v, &dy, &o, &lse},
              savedOuts);
    for (size_t i = 0; i < saved.size(); ++i)
      expectNear<double>(saved[i], values<double>(recomputed[i]), 1.0, 1e-12);
  }
  // The saved lse is read, not recomputed: log 2 more halves P, so dv.
  Tensor shifted = lse;
  for (int64_t i = 0; i < shifted.numElements(); ++i)
    shifted.data<double>()[i] += std::log(2.0);
  attrs.wrt = "v";
  Tensor dv(DType::F64, k.getShape()), halfDv(DType::F64, k.getShape());
  runKernel(KernelKind::AttentionGrad, attrs, {&q, &k, &v, &dy}, {&dv});
  runKernel(KernelKind::AttentionGrad, attrs, {&q, &k, &v, &dy, &o, &shifted},
            {&halfDv});
  std::vector<double> half = values<double>(dv);
  for (double &x : half)
    x /= 2;
  expectNear<double>(halfDv, half, 1.0, 1e-12);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AttentionGradTest,
    ::testing::Values(
        AttentionCase{"Plain", 2, 3, 3, 2, 2, 4, false, 0, std::nullopt},
        AttentionCase{"CausalGQA", 1, 4, 4, 4, 2, 3, true, 0, 0.7},
        // Queries 2..4 of 6 keys (a sequence shard): key 5 is never seen.
        AttentionCase{"CausalQueryOffset", 2, 3, 6, 2, 1, 4, true, 2,
                      std::nullopt},
        AttentionCase{"CrossLengths", 1, 2, 5, 3, 3, 2, false, 0, 1.3},
        // More queries than a causal row block (kCausalRowBlock 32): three
        // blocks, each over the keys its rows see; then a query offset
        // with blocks of 32 and 8 rows.
        AttentionCase{"CausalRowBlocks", 1, 70, 70, 2, 1, 3, true, 0,
                      std::nullopt},
        AttentionCase{"CausalRowBlocksOffset", 1, 40, 75, 2, 2, 2, true, 35,
                      0.9}),
    [](const auto &info) { return std::string(info.param.name); });

TEST(AttentionGradErrorTest, RejectsBadWrtAndShapes) {
  Tensor q(DType::F32, {1, 2, 2, 4}), k(DType::F32, {1, 3, 1, 4}),
      v(DType::F32, {1, 3, 1, 4}), dy(DType::F32, {1, 2, 2, 4});
  Tensor dq(DType::F32, {1, 2, 2, 4}), dk(DType::F32, {1, 3, 1, 4});
  KernelAttrs attrs;
  expectError(
      [&] {
        runKernel(KernelKind::AttentionGrad, attrs, {&q, &k, &v, &dy}, {&dq});
      },
      {"attention_grad", "wrt is empty"});
  attrs.wrt = "k";
  expectError(
      [&] {
        runKernel(KernelKind::AttentionGrad, attrs, {&q, &k, &v, &dy}, {&dq});
      },
      {"output 0 (dk) is tensor<1x2x2x4xf32> but input 1 (key) is "
       "tensor<1x3x1x4xf32>"});
  attrs.wrt = "q";
  expectError(
      [&] {
        runKernel(KernelKind::AttentionGrad, attrs, {&q, &k, &v, &k}, {&dq});
      },
      {"input 3 (dy) is tensor<1x3x1x4xf32> but input 0 (query) is "
       "tensor<1x2x2x4xf32>"});
  attrs.causal = true;
  attrs.queryOffset = 2;
  expectError(
      [&] {
        runKernel(KernelKind::AttentionGrad, attrs, {&q, &k, &v, &dy}, {&dq});
      },
      {"queryOffset + seq_q <= seq_kv"});
  // The saved output and lse: the lse must be [batch, heads, seq_q].
  attrs.causal = false;
  attrs.queryOffset = 0;
  Tensor lse(DType::F32, {1, 2, 2}), badLse(DType::F32, {1, 2, 3});
  expectError(
      [&] {
        runKernel(KernelKind::AttentionGrad, attrs,
                  {&q, &k, &v, &dy, &dy, &badLse}, {&dq});
      },
      {"input 5 (lse) has shape [1, 2, 3], expected [1, 2, 2]"});
  expectError(
      [&] {
        runKernel(KernelKind::AttentionGrad, attrs,
                  {&q, &k, &v, &dy, &k, &lse}, {&dq});
      },
      {"input 4 (o) is tensor<1x3x1x4xf32> but input 0 (query) is "
       "tensor<1x2x2x4xf32>"});
  expectError(
      [&] {
        runKernel(KernelKind::AttentionGrad, attrs, {&q, &k, &v, &dy, &dy},
                  {&dq});
      },
      {"expects 4 input(s) and 1 output(s), got 5 and 1"});
  Tensor o(DType::F32, {1, 2, 2, 4});
  expectError(
      [&] { runKernel(KernelKind::Attention, attrs, {&q, &k, &v}, {&o, &badLse}); },
      {"output 1 (lse) has shape [1, 2, 3], expected [1, 2, 2]"});
  // With head_dim 0 the output is empty and nothing would write the lse.
  Tensor q0(DType::F32, {1, 2, 2, 0}), o0(DType::F32, {1, 2, 2, 0});
  expectError(
      [&] { runKernel(KernelKind::Attention, attrs, {&q0, &q0, &q0}, {&o0, &lse}); },
      {"output 1 (lse) needs head_dim >= 1"});
}

/// Runs attention_grad with `wrt` on `inputs` (q, k, v, dy) with `b`;
/// returns one output per letter (garbage-filled first: the kernel must
/// overwrite, not accumulate onto, it).
std::vector<Tensor> attentionGrads(Backend &b, const KernelAttrs &attrs,
                                   const std::string &wrt,
                                   std::vector<Tensor> &inputs) {
  KernelCall call{KernelKind::AttentionGrad, attrs, {}, {}};
  call.attrs.wrt = wrt;
  std::vector<Tensor> outs;
  for (char c : wrt)
    outs.emplace_back(inputs[0].getDType(),
                      (c == 'q' ? inputs[0] : inputs[1]).getShape());
  for (Tensor &t : inputs)
    call.inputs.push_back(t.view());
  for (Tensor &t : outs) {
    // An empty tensor may have no storage (data null): memset's pointer
    // must not be null even for 0 bytes.
    if (t.view().numBytes() > 0)
      std::memset(t.view().data, 0x7f, t.view().numBytes());
    call.outputs.push_back(t.view());
  }
  b.run(call);
  return outs;
}

bool sameBits(const Tensor &a, const Tensor &b) {
  return a.getShape() == b.getShape() && a.getDType() == b.getDType() &&
         std::memcmp(a.data<unsigned char>(), b.data<unsigned char>(),
                     a.numElements() * sizeOf(a.getDType())) == 0;
}

template <typename T> std::vector<Tensor> attentionInputs(const AttentionCase &c) {
  std::vector<int64_t> qShape = {c.batch, c.seqQ, c.heads, c.headDim};
  std::vector<int64_t> kShape = {c.batch, c.seqKV, c.kvHeads, c.headDim};
  std::vector<Tensor> in;
  in.push_back(randomTensor<T>(qShape, 410, -1.5, 1.5));
  in.push_back(randomTensor<T>(kShape, 411, -1.5, 1.5));
  in.push_back(randomTensor<T>(kShape, 412));
  in.push_back(randomTensor<T>(qShape, 413));
  return in;
}

template <typename T> void expectFusedMatchesSingles(const AttentionCase &c) {
  std::vector<Tensor> in = attentionInputs<T>(c);
  KernelAttrs attrs;
  attrs.causal = c.causal;
  attrs.queryOffset = c.queryOffset;
  attrs.scale = c.scale;
  std::map<char, Tensor> single;
  for (char w : {'q', 'k', 'v'})
    single.emplace(w, std::move(attentionGrads(backend(), attrs,
                                               std::string(1, w), in)[0]));
  for (const char *wrt : {"qk", "qv", "kv", "qkv"}) {
    std::vector<Tensor> fused = attentionGrads(backend(), attrs, wrt, in);
    for (size_t o = 0; o < fused.size(); ++o)
      EXPECT_TRUE(sameBits(fused[o], single.at(wrt[o])))
          << "wrt " << wrt << ": d" << wrt[o]
          << " differs from the single-letter call's";
  }
}

// Tests that one call asking for several gradients gives each the bits of
// a single-letter call (the fused kernel shares P and dS, not arithmetic),
// f32 and f64, on every shape case above.
TEST_P(AttentionGradTest, SeveralGradientsMatchSingleCallsBitwise) {
  expectFusedMatchesSingles<float>(GetParam());
  expectFusedMatchesSingles<double>(GetParam());
}

/// Expects attention_grad "qkv" and "k" on backends of 1, 2 and 3 threads to
/// give the bits of a 1-thread backend's "qkv" call.
void expectThreadIndependent(const AttentionCase &c) {
  std::vector<Tensor> in = attentionInputs<float>(c);
  KernelAttrs attrs;
  attrs.causal = c.causal;
  attrs.queryOffset = c.queryOffset;
  attrs.scale = c.scale;
  std::unique_ptr<Backend> one = createCpuBackend(1);
  std::vector<Tensor> want = attentionGrads(*one, attrs, "qkv", in);
  for (int threads : {1, 2, 3}) {
    std::unique_ptr<Backend> many = createCpuBackend(threads);
    for (const char *wrt : {"qkv", "k"}) {
      std::vector<Tensor> got = attentionGrads(*many, attrs, wrt, in);
      for (size_t o = 0; o < got.size(); ++o)
        EXPECT_TRUE(sameBits(got[o], want[std::string("qkv").find(wrt[o])]))
            << threads << " threads, wrt " << wrt << ": d" << wrt[o]
            << " differs from 1 thread's";
    }
  }
}

// Tests that attention_grad's (batch, kv head) pairs split over the
// intra-op pool give the bits of one thread: grouped heads accumulate into
// dk and dv in the same order whichever thread owns the pair. About 2^20
// multiply-adds a pair, so 2 and 3 threads split the 6 pairs (their GEMMs
// then one OpenBLAS thread each).
TEST(AttentionGradThreadsTest, SplitPairsDoNotDependOnThreadCount) {
  expectThreadIndependent(
      {"Split", 3, 96, 128, 4, 2, 48, true, 32, std::nullopt});
}

// Tests the same on one pair, which is not split: its GEMMs take OpenBLAS's
// threads. (Under ThreadSanitizer this one reports OpenBLAS's own workers,
// whose synchronization is not instrumented.)
TEST(AttentionGradThreadsTest, OnePairDoesNotDependOnThreadCount) {
  expectThreadIndependent({"OnePair", 1, 128, 128, 1, 1, 64, false, 0, 0.2});
}

// Tests that with no queries a "qkv" call writes zero dk and dv (no query
// attends to any key) and leaves the empty dq alone.
TEST(AttentionGradTest, NoQueriesGiveZeroKeyGradients) {
  AttentionCase c{"NoQueries", 2, 0, 5, 2, 1, 4, false, 0, std::nullopt};
  std::vector<Tensor> in = attentionInputs<double>(c);
  std::vector<Tensor> got = attentionGrads(backend(), {}, "qkv", in);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].numElements(), 0);
  for (int o : {1, 2})
    expectNear<double>(got[o], std::vector<double>(got[o].numElements(), 0.0));
}

// Tests attention_grad's checks of wrt and of its outputs: each names the
// kernel and what is wrong.
TEST(AttentionGradErrorTest, RejectsBadWrtForms) {
  Tensor q(DType::F32, {1, 2, 2, 4}), k(DType::F32, {1, 3, 1, 4}),
      v(DType::F32, {1, 3, 1, 4}), dy(DType::F32, {1, 2, 2, 4});
  Tensor dq(DType::F32, {1, 2, 2, 4}), dk(DType::F32, {1, 3, 1, 4}),
      dv(DType::F32, {1, 3, 1, 4});
  KernelAttrs attrs;
  auto run = [&](const char *wrt, std::vector<Tensor *> outs) {
    return [&, wrt, outs] {
      KernelAttrs a = attrs;
      a.wrt = wrt;
      runKernel(KernelKind::AttentionGrad, a, {&q, &k, &v, &dy}, outs);
    };
  };
  expectError(run("qx", {&dq, &dk}),
              {"attention_grad", "wrt \"qx\" has 'x' at position 1: its "
                                 "letters must be q, k or v"});
  expectError(run("Q", {&dq}), {"attention_grad", "wrt \"Q\" has 'Q'"});
  expectError(run("kk", {&dk, &dv}),
              {"attention_grad", "wrt \"kk\" names 'k' twice"});
  expectError(run("vk", {&dv, &dk}),
              {"attention_grad", "wrt \"vk\" has 'k' after 'v': its letters "
                                 "must come in the order q, k, v"});
  expectError(run("", {&dq}), {"attention_grad", "wrt is empty"});
  expectError(run("qkv", {&dq, &dk}),
              {"attention_grad", "wrt \"qkv\" asks for 3 gradient(s), one "
                                 "output each, but the call has 2 output(s)"});
  expectError(run("q", {&dq, &dk}), {"attention_grad", "wrt \"q\" asks for 1"});
  // The second output of "qv" is dv, shaped as the key.
  expectError(run("qv", {&dq, &dq}),
              {"attention_grad", "output 1 (dv) is tensor<1x2x2x4xf32> but "
                                 "input 1 (key) is tensor<1x3x1x4xf32>"});
  Tensor dv64(DType::F64, {1, 3, 1, 4});
  expectError(run("kv", {&dk, &dv64}),
              {"attention_grad", "output 1 (dv) is tensor<1x3x1x4xf64>"});
  expectError(run("kv", {&dk, &dk}),
              {"attention_grad", "output 1 overlaps output 0"});
  expectError(run("qkv", {&dq, &dk, &v}),
              {"attention_grad", "output 2 overlaps input 2"});
}

//===----------------------------------------------------------------------===//
// embedding_grad
//===----------------------------------------------------------------------===//

TEST(EmbeddingGradTest, MatchesFiniteDifferencesOnAShard) {
  // The shard holds global rows [3, 7); ids outside it (and negative ones)
  // add nothing, repeated ids accumulate.
  Tensor table = randomTensor<double>({4, 5}, 500);
  Tensor ids = makeTensor<int64_t>({2, 4}, {3, 6, 4, 3, 0, 7, -1, 5});
  Tensor dy = randomTensor<double>({2, 4, 5}, 501);
  KernelAttrs attrs;
  attrs.vocabOffset = 3;
  Tensor grad(DType::F64, {4, 5});
  for (int64_t i = 0; i < grad.numElements(); ++i)
    grad.data<double>()[i] = 7; // overwritten, not accumulated onto
  runKernel(KernelKind::EmbeddingGrad, attrs, {&dy, &ids}, {&grad});
  Tensor y(DType::F64, {2, 4, 5});
  std::vector<double> fd = finiteDifferences(table, [&] {
    runKernel(KernelKind::Embedding, attrs, {&table, &ids}, {&y});
    return dot(dy, y);
  });
  expectMatchesFD(grad, fd);
  // Row 0 (id 3) gets tokens 0 and 3; row 2 (id 5) only token 7.
  for (int64_t h = 0; h < 5; ++h) {
    EXPECT_NEAR(grad.data<double>()[h],
                dy.data<double>()[0 * 5 + h] + dy.data<double>()[3 * 5 + h],
                1e-15);
    EXPECT_EQ(grad.data<double>()[2 * 5 + h], dy.data<double>()[7 * 5 + h]);
  }
  Tensor ids32 = makeTensor<int32_t>({2, 4}, {3, 6, 4, 3, 0, 7, -1, 5});
  expectF32Matches(KernelKind::EmbeddingGrad, attrs, {&dy, &ids32}, grad, 1.0,
                   1e-6);
}

TEST(EmbeddingGradTest, RejectsBadShapes) {
  Tensor dy(DType::F32, {2, 3, 4}), ids(DType::I32, {2, 3}),
      out(DType::F32, {10, 5});
  expectError(
      [&] { runKernel(KernelKind::EmbeddingGrad, {}, {&dy, &ids}, {&out}); },
      {"embedding_grad", "input 0 (dy) has shape [2, 3, 4], expected "
                         "[2, 3, 5]"});
  Tensor fids(DType::F32, {2, 3}), out4(DType::F32, {10, 4});
  expectError(
      [&] { runKernel(KernelKind::EmbeddingGrad, {}, {&dy, &fids}, {&out4}); },
      {"input 1 (ids) has dtype f32, expected i32 or i64"});
}

//===----------------------------------------------------------------------===//
// cross_entropy_grad
//===----------------------------------------------------------------------===//

TEST(CrossEntropyGradTest, MatchesFiniteDifferencesWithGlobalCount) {
  // Six tokens of a batch of 10 (meanCount: the mean is global).
  Tensor logits = randomTensor<double>({2, 3, 5}, 600, -3, 3);
  Tensor labels = makeTensor<int32_t>({2, 3}, {0, 4, 2, 1, 1, 3});
  Tensor dloss = makeTensor<double>({}, {1.7});
  KernelAttrs attrs;
  attrs.meanCount = 10;
  Tensor grad(DType::F64, {2, 3, 5});
  runKernel(KernelKind::CrossEntropyGrad, attrs, {&logits, &labels, &dloss},
            {&grad});
  Tensor loss(DType::F64, {});
  std::vector<double> fd = finiteDifferences(logits, [&] {
    runKernel(KernelKind::CrossEntropy, attrs, {&logits, &labels}, {&loss});
    return 1.7 * loss.data<double>()[0];
  });
  expectMatchesFD(grad, fd);
  // Each row sums to 0 (softmax sums to the one-hot's 1).
  double row0 = 0;
  for (int64_t j = 0; j < 5; ++j)
    row0 += grad.data<double>()[j];
  EXPECT_NEAR(row0, 0.0, 1e-15);
  Tensor dloss32 = makeTensor<float>({}, {1.7});
  expectF32Matches(KernelKind::CrossEntropyGrad, attrs,
                   {&logits, &labels, &dloss32}, grad, 0.2, 1e-5);

  // A negative label (a padded token, which the forward skips) gets a zero
  // row and leaves the other rows as they were.
  Tensor skipped = makeTensor<int32_t>({2, 3}, {0, 4, 2, 1, -1, 3});
  Tensor grad2(DType::F64, {2, 3, 5});
  runKernel(KernelKind::CrossEntropyGrad, attrs, {&logits, &skipped, &dloss},
            {&grad2});
  for (int64_t i = 0; i < grad.numElements(); ++i)
    EXPECT_EQ(grad2.data<double>()[i],
              i / 5 == 4 ? 0.0 : grad.data<double>()[i])
        << "element " << i;
}

TEST(CrossEntropyGradTest, DividesByTheLocalCountByDefaultAndIsStable) {
  // Logits of 1000 would overflow exp without the max subtracted.
  Tensor logits = makeTensor<float>({2, 2}, {1000, 1000, 0, 0});
  Tensor labels = makeTensor<int64_t>({2}, {0, 1});
  Tensor dloss = makeTensor<float>({}, {1});
  Tensor grad(DType::F32, {2, 2});
  runKernel(KernelKind::CrossEntropyGrad, {}, {&logits, &labels, &dloss},
            {&grad});
  // (0.5 - onehot) / 2 per row.
  EXPECT_EQ(values<float>(grad),
            (std::vector<double>{-0.25, 0.25, 0.25, -0.25}));
}

TEST(CrossEntropyGradTest, RejectsBadOperands) {
  Tensor logits(DType::F32, {2, 3}), labels = makeTensor<int32_t>({2}, {0, 3});
  Tensor dloss(DType::F32, {}), grad(DType::F32, {2, 3});
  expectError(
      [&] {
        runKernel(KernelKind::CrossEntropyGrad, {}, {&logits, &labels, &dloss},
                  {&grad});
      },
      {"cross_entropy_grad", "label 3 of token 1 is outside [0, 3)"});
  Tensor labelsOk = makeTensor<int32_t>({2}, {0, 2});
  Tensor dloss1(DType::F32, {1});
  expectError(
      [&] {
        runKernel(KernelKind::CrossEntropyGrad, {},
                  {&logits, &labelsOk, &dloss1}, {&grad});
      },
      {"input 2 (dloss) has shape [1], expected []"});
  KernelAttrs attrs;
  attrs.vocabOffset = 3;
  expectError(
      [&] {
        runKernel(KernelKind::CrossEntropyGrad, attrs,
                  {&logits, &labelsOk, &dloss}, {&grad});
      },
      {"vocab-parallel cross_entropy_grad (vocabOffset 3)"});
}

//===----------------------------------------------------------------------===//
// convert
//===----------------------------------------------------------------------===//

Tensor bits16(DType dtype, const std::vector<uint16_t> &bits) {
  Tensor t(dtype, {int64_t(bits.size())});
  std::memcpy(t.data<uint16_t>(), bits.data(), bits.size() * 2);
  return t;
}

std::vector<uint16_t> bitsOf16(const Tensor &t) {
  return std::vector<uint16_t>(t.data<uint16_t>(),
                               t.data<uint16_t>() + t.numElements());
}

float fromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(ConvertTest, F32ToF16RoundsToNearestEven) {
  const float inf = std::numeric_limits<float>::infinity();
  // 1 + 2^-11 is half-way between 1 and 1 + 2^-10: ties to even (1);
  // 1 + 3 * 2^-11 is half-way between 1 + 2^-10 and 1 + 2^-9: to 1 + 2^-9.
  // 65519 rounds down to the largest half (65504), 65520 up to inf. 2^-24
  // is the smallest subnormal, 2^-25 a tie with 0 (even), 3 * 2^-26 rounds
  // up to 2^-24.
  Tensor x = makeTensor<float>(
      {12}, {1.0, -2.0, 1 + 0x1p-11, 1 + 3 * 0x1p-11, 65504, 65519, 65520, inf,
             0x1p-24, 0x1p-25, 3 * 0x1p-26, -0.0});
  Tensor y(DType::F16, {12});
  runKernel(KernelKind::Convert, {}, {&x}, {&y});
  EXPECT_EQ(bitsOf16(y),
            (std::vector<uint16_t>{0x3c00, 0xc000, 0x3c00, 0x3c02, 0x7bff,
                                   0x7bff, 0x7c00, 0x7c00, 0x0001, 0x0000,
                                   0x0001, 0x8000}));
  Tensor nan = makeTensor<float>({1}, {NAN});
  Tensor h(DType::F16, {1});
  runKernel(KernelKind::Convert, {}, {&nan}, {&h});
  EXPECT_EQ(h.data<uint16_t>()[0] & 0x7c00, 0x7c00);
  EXPECT_NE(h.data<uint16_t>()[0] & 0x03ff, 0);
}

TEST(ConvertTest, F32ToBF16RoundsToNearestEven) {
  // bf16 keeps 7 mantissa bits: 1 + 2^-8 ties to 1, 1 + 3 * 2^-8 to
  // 1 + 2^-6; the largest float rounds to inf.
  Tensor x = makeTensor<float>(
      {6}, {1.0, 1 + 0x1p-8, 1 + 3 * 0x1p-8, -3.0, 0, 0x1p-130});
  Tensor big(DType::F32, {1});
  big.data<float>()[0] = fromBits(0x7f7fffff);
  Tensor y(DType::BF16, {6}), yBig(DType::BF16, {1});
  runKernel(KernelKind::Convert, {}, {&x}, {&y});
  runKernel(KernelKind::Convert, {}, {&big}, {&yBig});
  // 2^-130 = 2^19 * 2^-149 is a float subnormal with mantissa bit 19 set
  // (0x00080000), exactly representable in bf16: 0x0008.
  EXPECT_EQ(bitsOf16(y), (std::vector<uint16_t>{0x3f80, 0x3f80, 0x3f82, 0xc040,
                                                0x0000, 0x0008}));
  EXPECT_EQ(yBig.data<uint16_t>()[0], 0x7f80);
}

TEST(ConvertTest, EveryF16AndBF16ValueRoundTripsThroughF32AndF64) {
  for (DType narrow : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(toString(narrow));
    std::vector<uint16_t> all;
    for (uint32_t u = 0; u < 65536; ++u) {
      bool nan = narrow == DType::F16 ? (u & 0x7c00) == 0x7c00 && (u & 0x3ff)
                                      : (u & 0x7f80) == 0x7f80 && (u & 0x7f);
      if (!nan)
        all.push_back(uint16_t(u));
    }
    int64_t n = all.size();
    Tensor x = bits16(narrow, all), wide(DType::F32, {n}),
           wide64(DType::F64, {n}), back(narrow, {n});
    runKernel(KernelKind::Convert, {}, {&x}, {&wide});
    runKernel(KernelKind::Convert, {}, {&wide}, {&back});
    EXPECT_EQ(bitsOf16(back), all);
    runKernel(KernelKind::Convert, {}, {&x}, {&wide64});
    for (int64_t i = 0; i < n; ++i)
      if (double(wide.data<float>()[i]) != wide64.data<double>()[i] &&
          !(std::isnan(wide.data<float>()[i])))
        ADD_FAILURE() << "element " << i << " widens differently to f64";
  }
  // Known values: the smallest f16 subnormal, the largest f16, bf16 1.5.
  Tensor h = bits16(DType::F16, {0x0001, 0x7bff, 0xfc00});
  Tensor hw(DType::F32, {3});
  runKernel(KernelKind::Convert, {}, {&h}, {&hw});
  EXPECT_EQ(values<float>(hw),
            (std::vector<double>{0x1p-24, 65504,
                                 -std::numeric_limits<double>::infinity()}));
  Tensor b = bits16(DType::BF16, {0x3fc0});
  Tensor bw(DType::F32, {1});
  runKernel(KernelKind::Convert, {}, {&b}, {&bw});
  EXPECT_EQ(bw.data<float>()[0], 1.5f);
}

TEST(ConvertTest, F32AndF64Convert) {
  Tensor x = makeTensor<double>({3}, {1.0 / 3, 1e300, -2.5});
  Tensor y(DType::F32, {3}), z(DType::F64, {3});
  runKernel(KernelKind::Convert, {}, {&x}, {&y});
  EXPECT_EQ(y.data<float>()[0], 1.0f / 3);
  EXPECT_EQ(y.data<float>()[1], std::numeric_limits<float>::infinity());
  EXPECT_EQ(y.data<float>()[2], -2.5f);
  runKernel(KernelKind::Convert, {}, {&y}, {&z});
  EXPECT_EQ(z.data<double>()[0], double(1.0f / 3));
}

TEST(ConvertTest, RejectsIntegersShapesAndDoubleRounding) {
  Tensor i(DType::I32, {2}), f(DType::F32, {2}), g(DType::F32, {3}),
      d(DType::F64, {2}), h(DType::F16, {2});
  expectError([&] { runKernel(KernelKind::Convert, {}, {&i}, {&f}); },
              {"convert", "converts floats only, got i32 to f32"});
  expectError([&] { runKernel(KernelKind::Convert, {}, {&f}, {&g}); },
              {"convert keeps the shape"});
  expectError([&] { runKernel(KernelKind::Convert, {}, {&d}, {&h}); },
              {"converting f64 to f16 is not supported"});
}

//===----------------------------------------------------------------------===//
// sgd, adamw
//===----------------------------------------------------------------------===//

TEST(OptimizerTest, SGDFollowsPyTorchOverTwoSteps) {
  Tensor p = makeTensor<double>({3}, {1.0, -2.0, 0.5});
  Tensor g1 = makeTensor<double>({3}, {0.1, 0.2, -0.3});
  Tensor g2 = makeTensor<double>({3}, {-0.4, 0.0, 0.25});
  Tensor buf(DType::F64, {3});
  KernelAttrs attrs;
  attrs.lr = 0.1;
  attrs.momentum = 0.9;
  attrs.weightDecay = 0.01;
  // In place, as the plan runs a step over persistent buffers.
  runKernel(KernelKind::SGD, attrs, {&p, &g1, &buf}, {&p, &buf});
  runKernel(KernelKind::SGD, attrs, {&p, &g2, &buf}, {&p, &buf});
  std::vector<double> wantP = {1.0, -2.0, 0.5}, wantBuf(3, 0.0);
  for (const Tensor *g : {&g1, &g2})
    for (int i = 0; i < 3; ++i) {
      double d = g->data<double>()[i] + 0.01 * wantP[i];
      wantBuf[i] = 0.9 * wantBuf[i] + d;
      wantP[i] -= 0.1 * wantBuf[i];
    }
  expectNear<double>(p, wantP, 1.0);
  expectNear<double>(buf, wantBuf, 1.0);
  // Spot check by hand, first element: buf = 0.11, p = 0.989; then
  // buf = 0.9 * 0.11 - 0.4 + 0.00989 = -0.29111, p = 0.989 + 0.029111.
  EXPECT_NEAR(p.data<double>()[0], 1.018111, 1e-12);
}

TEST(OptimizerTest, AdamWFollowsPyTorch) {
  Tensor p = makeTensor<float>({2}, {1.0, -0.5});
  Tensor g = makeTensor<float>({2}, {0.2, -0.1});
  Tensor m = makeTensor<float>({2}, {0.01, 0.02});
  Tensor v = makeTensor<float>({2}, {0.001, 0.004});
  Tensor step = makeTensor<float>({}, {3});
  KernelAttrs attrs;
  attrs.lr = 0.01;
  attrs.beta1 = 0.9;
  attrs.beta2 = 0.99;
  attrs.eps = 1e-6;
  attrs.weightDecay = 0.1;
  Tensor p2(DType::F32, {2}), m2(DType::F32, {2}), v2(DType::F32, {2});
  runKernel(KernelKind::AdamW, attrs, {&p, &g, &m, &v, &step}, {&p2, &m2, &v2});
  std::vector<double> wantP, wantM, wantV;
  for (int i = 0; i < 2; ++i) {
    double pi = p.data<float>()[i], gi = g.data<float>()[i];
    double mi = 0.9 * m.data<float>()[i] + 0.1 * gi;
    double vi = 0.99 * v.data<float>()[i] + 0.01 * gi * gi;
    double mhat = mi / (1 - std::pow(0.9, 3)), vhat = vi / (1 - std::pow(0.99, 3));
    wantP.push_back(pi * (1 - 0.01 * 0.1) - 0.01 * mhat / (std::sqrt(vhat) + 1e-6));
    wantM.push_back(mi);
    wantV.push_back(vi);
  }
  expectNear<float>(p2, wantP, 1.0);
  expectNear<float>(m2, wantM, 0.0);
  expectNear<float>(v2, wantV, 0.0);
  // First step from zero state: the update is lr * sign(g) (up to eps).
  Tensor zm(DType::F64, {1}), zv(DType::F64, {1});
  Tensor p1 = makeTensor<double>({1}, {2.0}), g1 = makeTensor<double>({1}, {-3});
  Tensor t1 = makeTensor<double>({}, {1});
  attrs.weightDecay = 0;
  attrs.eps = 1e-12;
  runKernel(KernelKind::AdamW, attrs, {&p1, &g1, &zm, &zv, &t1}, {&p1, &zm, &zv});
  EXPECT_NEAR(p1.data<double>()[0], 2.01, 1e-12);
}

// Tests that sgd and adamw read the learning rate at lrOnDevice when it is
// set (a recorded step's rates live in device memory, the cpu device's
// being the host's), and attrs.lr otherwise.
TEST(OptimizerTest, LearningRateFromDeviceMemory) {
  for (KernelKind kind : {KernelKind::SGD, KernelKind::AdamW}) {
    SCOPED_TRACE(toString(kind));
    auto run = [&](double lr, const double *lrOnDevice) {
      Tensor p = makeTensor<double>({2}, {1.0, -0.5});
      Tensor g = makeTensor<double>({2}, {0.2, -0.1});
      Tensor m(DType::F64, {2}), v(DType::F64, {2});
      Tensor step = makeTensor<double>({}, {1});
      KernelAttrs attrs;
      attrs.lr = lr;
      attrs.lrOnDevice = lrOnDevice;
      if (kind == KernelKind::SGD)
        runKernel(kind, attrs, {&p, &g, &m}, {&p, &m});
      else
        runKernel(kind, attrs, {&p, &g, &m, &v, &step}, {&p, &m, &v});
      return std::vector<double>(p.data<double>(), p.data<double>() + 2);
    };
    double onDevice = 0.25;
    EXPECT_EQ(run(0.01, &onDevice), run(0.25, nullptr));
    EXPECT_NE(run(0.01, &onDevice), run(0.01, nullptr));
  }
}

TEST(OptimizerTest, RejectsBadAttributesAndStep) {
  Tensor p(DType::F32, {2}), g(DType::F32, {2}), b(DType::F32, {2}),
      v(DType::F32, {2}), p2(DType::F32, {2}), b2(DType::F32, {2}),
      v2(DType::F32, {2});
  KernelAttrs attrs;
  attrs.lr = -1;
  expectError(
      [&] { runKernel(KernelKind::SGD, attrs, {&p, &g, &b}, {&p2, &b2}); },
      {"sgd", "lr must be finite and >= 0, got -1"});
  attrs.lr = 0.1;
  Tensor step = makeTensor<float>({}, {0});
  expectError(
      [&] {
        runKernel(KernelKind::AdamW, attrs, {&p, &g, &b, &v, &step},
                  {&p2, &b2, &v2});
      },
      {"adamw", "input 4 (step) must hold the step number t >= 1"});
  attrs.beta2 = 1;
  expectError(
      [&] {
        runKernel(KernelKind::AdamW, attrs, {&p, &g, &b, &v, &step},
                  {&p2, &b2, &v2});
      },
      {"beta2 must be finite and in [0, 1), got 1"});
  Tensor g3(DType::F32, {3});
  expectError(
      [&] { runKernel(KernelKind::SGD, {}, {&p, &g3, &b}, {&p2, &b2}); },
      {"input 1 is tensor<3xf32> but input 0 (p) is tensor<2xf32>"});
  expectError(
      [&] { runKernel(KernelKind::SGD, {}, {&p, &g, &b}, {&p2}); },
      {"expects 3 input(s) and 2 output(s), got 3 and 1"});
}

TEST(KernelKindTest, NamesOfTheBackwardKinds) {
  for (const char *name :
       {"relu_grad", "silu_grad", "gelu_grad", "greater_equal",
        "layer_norm_grad", "rms_norm_grad", "rotary_grad", "attention_grad",
        "embedding_grad", "cross_entropy_grad", "convert", "sgd", "adamw"}) {
    std::optional<KernelKind> kind = kernelKindFromString(name);
    ASSERT_TRUE(kind) << name;
    EXPECT_STREQ(toString(*kind), name);
  }
}

} // namespace
