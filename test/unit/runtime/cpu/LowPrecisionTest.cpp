//===- LowPrecisionTest.cpp - bf16 and f16 on the cpu backend -------------===//
//
// The scalar conversions against hand-derived bit patterns (round to
// nearest even, ties, overflow, subnormals, NaN), and kernels on bf16 and
// f16 operands against the f32 kernel on the same values, rounded once.
//
//===----------------------------------------------------------------------===//

#include "CpuTestUtil.h"

#include <cmath>
#include <cstring>
#include <limits>

using namespace partita::runtime;
using namespace partita::runtime::test;

namespace {

float floatOfBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(LowPrecisionTest, BF16RoundsToNearestEven) {
  // 1 + 2^-8 lies halfway between 1 (0x3f80) and 1 + 2^-7 (0x3f81): even.
  EXPECT_EQ(narrowFloat(floatOfBits(0x3f808000u), DType::BF16), 0x3f80);
  // 1 + 3 * 2^-8 halfway between 0x3f81 and 0x3f82: even is 0x3f82.
  EXPECT_EQ(narrowFloat(floatOfBits(0x3f818000u), DType::BF16), 0x3f82);
  // Just above halfway rounds up.
  EXPECT_EQ(narrowFloat(floatOfBits(0x3f808001u), DType::BF16), 0x3f81);
  // The largest finite f32 rounds to inf; NaN stays NaN.
  EXPECT_EQ(narrowFloat(std::numeric_limits<float>::max(), DType::BF16),
            0x7f80);
  EXPECT_TRUE(std::isnan(widenFloat(
      narrowFloat(std::numeric_limits<float>::quiet_NaN(), DType::BF16),
      DType::BF16)));
  EXPECT_EQ(widenFloat(0xc040, DType::BF16), -3.0f);
}

TEST(LowPrecisionTest, F16RoundsToNearestEven) {
  EXPECT_EQ(narrowFloat(1.0f, DType::F16), 0x3c00);
  EXPECT_EQ(narrowFloat(-2.0f, DType::F16), 0xc000);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: even (1).
  EXPECT_EQ(narrowFloat(1.0f + std::ldexp(1.0f, -11), DType::F16), 0x3c00);
  // 1 + 3 * 2^-11: even is 1 + 2^-9 (0x3c02).
  EXPECT_EQ(narrowFloat(1.0f + 3 * std::ldexp(1.0f, -11), DType::F16), 0x3c02);
  // 65504 is the largest finite; 65520 (halfway to 65536) rounds to inf.
  EXPECT_EQ(narrowFloat(65504.0f, DType::F16), 0x7bff);
  EXPECT_EQ(narrowFloat(65519.0f, DType::F16), 0x7bff);
  EXPECT_EQ(narrowFloat(65520.0f, DType::F16), 0x7c00);
  EXPECT_EQ(narrowFloat(-1e9f, DType::F16), 0xfc00);
  // Subnormals: 2^-24 is the smallest; 2^-25 ties to 0, a bit above to
  // 2^-24; 3 * 2^-25 ties to even, 2 * 2^-24.
  EXPECT_EQ(narrowFloat(std::ldexp(1.0f, -24), DType::F16), 0x0001);
  EXPECT_EQ(narrowFloat(std::ldexp(1.0f, -25), DType::F16), 0x0000);
  EXPECT_EQ(narrowFloat(std::ldexp(1.0f, -25) * 1.0001f, DType::F16), 0x0001);
  EXPECT_EQ(narrowFloat(3 * std::ldexp(1.0f, -25), DType::F16), 0x0002);
  // The largest subnormal rounds up into the smallest normal, 2^-14.
  EXPECT_EQ(narrowFloat(std::ldexp(1.0f, -14) * (1 - std::ldexp(1.0f, -12)),
                        DType::F16),
            0x0400);
  EXPECT_TRUE(std::isnan(widenFloat(
      narrowFloat(std::numeric_limits<float>::quiet_NaN(), DType::F16),
      DType::F16)));
  // Widening every finite f16 and narrowing again gives it back.
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    if ((h & 0x7c00u) == 0x7c00u)
      continue;
    ASSERT_EQ(narrowFloat(widenFloat(uint16_t(h), DType::F16), DType::F16), h)
        << h;
  }
}

/// `t` (f32) rounded into a tensor of `dtype`.
Tensor narrowed(const Tensor &t, DType dtype) {
  Tensor out(dtype, t.getShape());
  for (int64_t i = 0; i < t.numElements(); ++i)
    out.data<uint16_t>()[i] = narrowFloat(t.data<float>()[i], dtype);
  return out;
}

Tensor widened(const Tensor &t) {
  Tensor out(DType::F32, t.getShape());
  for (int64_t i = 0; i < t.numElements(); ++i)
    out.data<float>()[i] = widenFloat(t.data<uint16_t>()[i], t.getDType());
  return out;
}

TEST(LowPrecisionTest, KernelsComputeOnWidenedValuesAndRoundOnce) {
  for (DType dtype : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(toString(dtype));
    // A contraction (sgemm on widened copies: a backend that runs bf16
    // ones natively is tested in OneDnnGemmTest) and a softmax.
    CpuBackendOptions widenedOnly;
    widenedOnly.nativeBF16Gemm = false;
    std::unique_ptr<Backend> widenedBackend = createCpuBackend(widenedOnly);
    Tensor a = narrowed(randomTensor<float>({4, 6}, 1), dtype);
    Tensor b = narrowed(randomTensor<float>({6, 5}, 2), dtype);
    Tensor c(dtype, {4, 5});
    KernelAttrs einsum;
    einsum.spec = "mk,kn->mn";
    widenedBackend->run(KernelCall{
        KernelKind::Einsum, einsum, {a.view(), b.view()}, {c.view()}});
    Tensor a32 = widened(a), b32 = widened(b), c32(DType::F32, {4, 5});
    runKernel(KernelKind::Einsum, einsum, {&a32, &b32}, {&c32});
    Tensor want = narrowed(c32, dtype);
    for (int64_t i = 0; i < c.numElements(); ++i)
      EXPECT_EQ(c.data<uint16_t>()[i], want.data<uint16_t>()[i]) << i;

    Tensor s(dtype, {4, 6}), s32(DType::F32, {4, 6});
    KernelAttrs softmax;
    softmax.dim = 1;
    runKernel(KernelKind::Softmax, softmax, {&a}, {&s});
    runKernel(KernelKind::Softmax, softmax, {&a32}, {&s32});
    Tensor softWant = narrowed(s32, dtype);
    for (int64_t i = 0; i < s.numElements(); ++i)
      EXPECT_EQ(s.data<uint16_t>()[i], softWant.data<uint16_t>()[i]) << i;

    // In place (an elementwise kernel writing over its input).
    Tensor x = narrowed(randomTensor<float>({3, 3}, 3), dtype);
    Tensor x32 = widened(x), y32(DType::F32, {3, 3});
    runKernel(KernelKind::Exp, {}, {&x32}, {&y32});
    runKernel(KernelKind::Exp, {}, {&x}, {&x});
    Tensor expWant = narrowed(y32, dtype);
    for (int64_t i = 0; i < x.numElements(); ++i)
      EXPECT_EQ(x.data<uint16_t>()[i], expWant.data<uint16_t>()[i]) << i;
  }
}

// Tests that elementwise kernels on 16-bit tensors larger than a piece
// (widened, computed and narrowed piece by piece over the intra-op pool)
// give exactly the f32 kernel's result on the widened values, rounded once:
// binary, unary and gradient kinds, out of place and in place, at 1 and 3
// threads, on a length that leaves a short last piece.
TEST(LowPrecisionTest, LargeElementwiseCallsRoundOnceInPieces) {
  const int64_t n = 3 * 8192 * 4 + 1234;
  for (DType dtype : {DType::BF16, DType::F16})
    for (int threads : {1, 3}) {
      SCOPED_TRACE(std::string(toString(dtype)) + " threads " +
                   std::to_string(threads));
      std::unique_ptr<Backend> backend = createCpuBackend(threads);
      Tensor x = narrowed(randomTensor<float>({n}, 21, -3, 3), dtype);
      Tensor y = narrowed(randomTensor<float>({n}, 22, -3, 3), dtype);
      Tensor x32 = widened(x), y32 = widened(y);
      KernelAttrs tanh;
      tanh.tanh = true;
      struct Kind {
        KernelKind kind;
        KernelAttrs attrs;
        bool binary;
      };
      for (const Kind &k :
           {Kind{KernelKind::Add, {}, true}, Kind{KernelKind::Mul, {}, true},
            Kind{KernelKind::Gelu, tanh, false},
            Kind{KernelKind::Exp, {}, false},
            Kind{KernelKind::GeluGrad, tanh, true}}) {
        SCOPED_TRACE(toString(k.kind));
        std::vector<TensorView> in16{x.view()}, in32{x32.view()};
        if (k.binary) {
          in16.push_back(y.view());
          in32.push_back(y32.view());
        }
        Tensor want32(DType::F32, {n});
        KernelCall wide{k.kind, k.attrs, in32, {want32.view()}};
        backend->run(wide);
        Tensor want = narrowed(want32, dtype);
        Tensor got(dtype, {n});
        backend->run(KernelCall{k.kind, k.attrs, in16, {got.view()}});
        EXPECT_EQ(std::memcmp(got.view().data, want.view().data,
                              want.view().numBytes()),
                  0);
        // In place over the first input.
        Tensor inPlace = narrowed(widened(x), dtype);
        std::vector<TensorView> ins = in16;
        ins[0] = inPlace.view();
        backend->run(KernelCall{k.kind, k.attrs, ins, {inPlace.view()}});
        EXPECT_EQ(std::memcmp(inPlace.view().data, want.view().data,
                              want.view().numBytes()),
                  0);
      }
    }
}

} // namespace
