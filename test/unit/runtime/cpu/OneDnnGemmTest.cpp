//===- OneDnnGemmTest.cpp - bf16 contractions through oneDNN --------------===//
//
// The native bf16 path (runtime/lib/cpu/OneDnnGemm.h: bf16 operands as they
// are, f32 accumulation, one rounding) against the widened one (f32 copies,
// sgemm, one rounding) on the same inputs. The two sum in different orders,
// so a bf16 result may differ by one ulp (a rounding that falls the other
// way), and a result that cancels far below its terms by the f32
// accumulation error of those terms. Skipped, with the reason, where bf16
// contractions do not run natively (no oneDNN in the build, no AMX,
// PARTITA_ONEDNN=OFF).
//
//===----------------------------------------------------------------------===//

#include "CpuTestUtil.h"

#include "runtime/lib/cpu/CpuKernels.h"
#include "runtime/lib/cpu/OneDnnGemm.h"

#include <cmath>
#include <cstring>

using namespace partita::runtime;
using namespace partita::runtime::test;

namespace {

bool native() { return describeBF16Gemm().rfind("oneDNN", 0) == 0; }

#define SKIP_UNLESS_NATIVE()                                                   \
  if (!native())                                                               \
  GTEST_SKIP() << "bf16 contractions are not native here: "                    \
               << describeBF16Gemm()

/// `t` (f32) rounded to bf16.
Tensor toBF16(const Tensor &t) {
  Tensor out(DType::BF16, t.getShape());
  for (int64_t i = 0; i < t.numElements(); ++i)
    out.data<uint16_t>()[i] = narrowFloat(t.data<float>()[i], DType::BF16);
  return out;
}

/// `t` (bf16) widened to f32, optionally as absolute values.
Tensor toF32(const Tensor &t, bool absolute = false) {
  Tensor out(DType::F32, t.getShape());
  for (int64_t i = 0; i < t.numElements(); ++i) {
    float v = widenFloat(t.data<uint16_t>()[i], DType::BF16);
    out.data<float>()[i] = absolute ? std::fabs(v) : v;
  }
  return out;
}

/// A cpu backend on one thread whose bf16 contractions run natively
/// (oneDNN) or on widened copies.
std::unique_ptr<Backend> oneThreadBackend(bool native) {
  CpuBackendOptions options;
  options.numThreads = 1;
  options.nativeBF16Gemm = native;
  return createCpuBackend(options);
}

std::vector<Tensor> runOn(Backend &backend, const KernelAttrs &attrs,
                          std::vector<Tensor *> inputs, DType dtype,
                          const std::vector<int64_t> &outShape) {
  std::vector<Tensor> out;
  out.emplace_back(dtype, outShape);
  KernelCall call{KernelKind::Einsum, attrs, {}, {}};
  for (Tensor *t : inputs)
    call.inputs.push_back(t->view());
  call.outputs.push_back(out[0].view());
  backend.run(call);
  return out;
}

/// Expects bf16 `got` within one ulp of bf16 `want` (adjacent bit patterns
/// of one sign), or within 2^-20 of `scale` (sum |a||b| of the element: the
/// f32 accumulation error, for results that cancel); returns how many
/// elements differ at all.
int64_t expectWithinOneUlp(const Tensor &got, const Tensor &want,
                           const Tensor &scale) {
  int64_t differ = 0, failures = 0;
  for (int64_t i = 0; i < want.numElements(); ++i) {
    uint16_t g = got.data<uint16_t>()[i], w = want.data<uint16_t>()[i];
    if (g == w)
      continue;
    ++differ;
    bool sameSign = (g & 0x8000) == (w & 0x8000);
    int distance = std::abs(int(g & 0x7fff) - int(w & 0x7fff));
    float gv = widenFloat(g, DType::BF16), wv = widenFloat(w, DType::BF16);
    bool ok = (sameSign && distance <= 1) ||
              std::fabs(gv - wv) <= std::ldexp(scale.data<float>()[i], -20);
    if (!ok && ++failures <= 5)
      ADD_FAILURE() << "element " << i << ": native " << gv << ", widened "
                    << wv << " (sum |a||b| " << scale.data<float>()[i] << ")";
  }
  return differ;
}

struct Case {
  const char *spec;
  std::vector<int64_t> a, b, c;
};

// Tests that bf16 einsums through oneDNN give the widened path's results
// within one bf16 ulp: plain, either operand transposed, batched, with a
// permuted result, GPT-sized linears and their gradients, odd sizes.
TEST(OneDnnGemmTest, EinsumMatchesTheWidenedPathWithinOneUlp) {
  SKIP_UNLESS_NATIVE();
  const std::vector<Case> cases = {
      {"mk,kn->mn", {256, 512}, {512, 384}, {256, 384}},
      {"mk,nk->mn", {128, 256}, {192, 256}, {128, 192}},
      {"km,kn->mn", {300, 64}, {300, 96}, {64, 96}},
      {"bmk,bkn->bmn", {4, 64, 32}, {4, 32, 48}, {4, 64, 48}},
      {"bhqd,bhkd->bhqk", {2, 4, 64, 32}, {2, 4, 64, 32}, {2, 4, 64, 64}},
      {"bsh,hf->bsf", {8, 128, 256}, {256, 512}, {8, 128, 512}},
      {"bsf,bsh->fh", {8, 64, 128}, {8, 64, 96}, {128, 96}},
      {"bsf,fh->bsh", {8, 64, 128}, {128, 96}, {8, 64, 96}},
      {"mk,kn->nm", {33, 70}, {70, 19}, {19, 33}},
      {"bik,bkj->bji", {3, 17, 5}, {3, 5, 1}, {3, 1, 17}},
      {"ij,jk->ik", {1, 7}, {7, 9}, {1, 9}},
  };
  std::unique_ptr<Backend> nativeBackend = oneThreadBackend(true);
  std::unique_ptr<Backend> widenedBackend = oneThreadBackend(false);
  int64_t differ = 0, total = 0;
  uint64_t seed = 1;
  for (const Case &c : cases) {
    SCOPED_TRACE(c.spec);
    KernelAttrs attrs;
    attrs.spec = c.spec;
    Tensor a = toBF16(randomTensor<float>(c.a, seed++));
    Tensor b = toBF16(randomTensor<float>(c.b, seed++));
    Tensor got = runOn(*nativeBackend, attrs, {&a, &b}, DType::BF16, c.c)[0];
    Tensor want = runOn(*widenedBackend, attrs, {&a, &b}, DType::BF16, c.c)[0];
    Tensor absA = toF32(a, true), absB = toF32(b, true);
    Tensor scale =
        runOn(*widenedBackend, attrs, {&absA, &absB}, DType::F32, c.c)[0];
    differ += expectWithinOneUlp(got, want, scale);
    total += want.numElements();
    // Run to run, the same bits.
    Tensor again = runOn(*nativeBackend, attrs, {&a, &b}, DType::BF16, c.c)[0];
    EXPECT_EQ(
        std::memcmp(again.view().data, got.view().data, got.view().numBytes()),
        0);
  }
  // For the record (the two need not differ at all).
  std::cout << "[          ] " << differ << " of " << total
            << " bf16 elements differ by one ulp\n";
}

// Tests bf16 einsums with an addend (a fused bias or gradient sum) against
// the widened path: a result the GEMM writes itself accumulates onto the
// copied addend in oneDNN (its sum post-op: one rounding, so within one
// ulp, also when the output is the addend); a permuted result goes through
// a bf16 product, then the add (two roundings: within 2^-8 of
// sum |a||b| + |addend|).
TEST(OneDnnGemmTest, EinsumWithAddendMatchesTheWidenedPath) {
  SKIP_UNLESS_NATIVE();
  struct AddendCase {
    const char *spec;
    std::vector<int64_t> a, b, c, addend, dims;
    bool direct;
  };
  const std::vector<AddendCase> cases = {
      {"bsh,hf->bsf", {8, 128, 256}, {256, 512}, {8, 128, 512}, {512}, {2},
       true},
      {"mk,kn->mn", {256, 512}, {512, 384}, {256, 384}, {256, 384}, {0, 1},
       true},
      {"mk,kn->nm", {33, 70}, {70, 19}, {19, 33}, {19, 1}, {0, 1}, false},
  };
  std::unique_ptr<Backend> nativeBackend = oneThreadBackend(true);
  std::unique_ptr<Backend> widenedBackend = oneThreadBackend(false);
  uint64_t seed = 50;
  for (const AddendCase &c : cases) {
    SCOPED_TRACE(c.spec);
    KernelAttrs attrs;
    attrs.spec = c.spec;
    attrs.dims = c.dims;
    Tensor a = toBF16(randomTensor<float>(c.a, seed++));
    Tensor b = toBF16(randomTensor<float>(c.b, seed++));
    Tensor addend = toBF16(randomTensor<float>(c.addend, seed++));
    Tensor got =
        runOn(*nativeBackend, attrs, {&a, &b, &addend}, DType::BF16, c.c)[0];
    Tensor want =
        runOn(*widenedBackend, attrs, {&a, &b, &addend}, DType::BF16, c.c)[0];
    Tensor absA = toF32(a, true), absB = toF32(b, true);
    Tensor absAddend = toF32(addend, true);
    Tensor scale = runOn(*widenedBackend, attrs, {&absA, &absB, &absAddend},
                         DType::F32, c.c)[0];
    if (c.direct) {
      expectWithinOneUlp(got, want, scale);
    } else {
      for (int64_t i = 0; i < want.numElements(); ++i)
        EXPECT_LE(std::fabs(widenFloat(got.data<uint16_t>()[i], DType::BF16) -
                            widenFloat(want.data<uint16_t>()[i], DType::BF16)),
                  std::ldexp(scale.data<float>()[i], -8))
            << "element " << i;
    }
    if (c.addend != c.c)
      continue;
    // In place: the output is the addend.
    Tensor acc(DType::BF16, c.addend);
    std::memcpy(acc.data<uint16_t>(), addend.data<uint16_t>(),
                size_t(addend.numElements()) * 2);
    KernelCall call{KernelKind::Einsum, attrs, {a.view(), b.view(), acc.view()},
                    {acc.view()}};
    nativeBackend->run(call);
    expectWithinOneUlp(acc, want, scale);
  }
}

// Tests gemmBF16 itself, with a bf16 and an f32 result: it runs (returns
// true) on transposed and batched operands with the dense leading
// dimensions einsum passes, and the f32 result matches sgemm on the widened
// operands within 1e-6 of sum |a||b| (the same exact products, summed in f32
// in other orders). With padded leading dimensions it may decline (oneDNN
// 2.6 has no implementation for them), but must not compute wrongly.
TEST(OneDnnGemmTest, GemmBF16MatchesSgemmOnWidenedOperands) {
  SKIP_UNLESS_NATIVE();
  using cpu::gemm;
  using cpu::gemmBF16;
  for (int64_t pad : {0, 8})
    for (bool transA : {false, true})
      for (bool transB : {false, true}) {
        SCOPED_TRACE(std::string("transA ") + (transA ? "1" : "0") +
                     " transB " + (transB ? "1" : "0") + " pad " +
                     std::to_string(pad));
        const int64_t batches = 3, m = 40, n = 72, k = 96;
        // Stored shapes, with leading dimensions padded by `pad`.
        int64_t rowsA = transA ? k : m, colsA = transA ? m : k;
        int64_t rowsB = transB ? n : k, colsB = transB ? k : n;
        int64_t lda = colsA + pad, ldb = colsB + pad, ldc = n + pad;
        int64_t strideA = rowsA * lda, strideB = rowsB * ldb, strideC = m * ldc;
        Tensor a = toBF16(randomTensor<float>({batches, rowsA, lda}, 11));
        Tensor b = toBF16(randomTensor<float>({batches, rowsB, ldb}, 12));
        Tensor a32 = toF32(a), b32 = toF32(b);
        Tensor absA = toF32(a, true), absB = toF32(b, true);
        Tensor c32(DType::F32, {batches, m, ldc}),
            want(DType::F32, {batches, m, ldc}),
            scale(DType::F32, {batches, m, ldc});
        Tensor c16(DType::BF16, {batches, m, ldc});
        bool ran32 =
            gemmBF16(transA, transB, batches, m, n, k, a.data<uint16_t>(), lda,
                     strideA, b.data<uint16_t>(), ldb, strideB,
                     c32.data<float>(), DType::F32, ldc, strideC);
        bool ran16 =
            gemmBF16(transA, transB, batches, m, n, k, a.data<uint16_t>(), lda,
                     strideA, b.data<uint16_t>(), ldb, strideB,
                     c16.data<uint16_t>(), DType::BF16, ldc, strideC);
        if (pad == 0) {
          ASSERT_TRUE(ran32);
          ASSERT_TRUE(ran16);
        } else if (!ran32 || !ran16) {
          continue;
        }
        for (int64_t i = 0; i < batches; ++i) {
          gemm(KernelKind::Einsum, transA, transB, m, n, k, 1.0f,
               a32.data<float>() + i * strideA, lda,
               b32.data<float>() + i * strideB, ldb, 0.0f,
               want.data<float>() + i * strideC, ldc);
          gemm(KernelKind::Einsum, transA, transB, m, n, k, 1.0f,
               absA.data<float>() + i * strideA, lda,
               absB.data<float>() + i * strideB, ldb, 0.0f,
               scale.data<float>() + i * strideC, ldc);
        }
        int failures = 0;
        for (int64_t i = 0; i < batches; ++i)
          for (int64_t r = 0; r < m; ++r)
            for (int64_t j = 0; j < n; ++j) {
              int64_t e = i * strideC + r * ldc + j;
              float w = want.data<float>()[e], s = scale.data<float>()[e];
              float g32 = c32.data<float>()[e];
              float g16 = widenFloat(c16.data<uint16_t>()[e], DType::BF16);
              float w16 = widenFloat(narrowFloat(w, DType::BF16), DType::BF16);
              // The bf16 result within one bf16 ulp of sgemm's rounded.
              bool ok = std::fabs(g32 - w) <= 1e-6f * s &&
                        std::fabs(g16 - w16) <=
                            std::ldexp(std::fabs(w), -7) + 1e-6f * s;
              if (!ok && ++failures <= 5)
                ADD_FAILURE() << "batch " << i << " (" << r << ", " << j
                              << "): f32 " << g32 << ", bf16 " << g16
                              << ", sgemm " << w << " (sum |a||b| " << s << ")";
            }
      }
}

} // namespace
