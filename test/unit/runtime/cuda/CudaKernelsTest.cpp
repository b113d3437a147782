//===- CudaKernelsTest.cpp - the cuda backend's kernels against the cpu's ===//
//
// Every ported kernel kind, run by the cuda backend and by the cpu backend
// on the same random inputs, f32 and f64, at block sizes 32 to 256 and
// shapes that do not divide by them; results agree within 1e-5 relative
// (max |a - b| / max |b|, the measure of `partita run --check`). The
// backend comes from cudaTestBackend(): the emulated device layer with the
// shared-memory race check on (CudaKernelsEmulatedMain.cpp), or a GPU
// (CudaGpuTestMain.cpp, which skips without one). Inputs and outputs move
// through the device's copies, so the same test runs on both.
//
//===----------------------------------------------------------------------===//

#include "CudaTestUtil.h"

#include <cmath>
#include <random>

namespace partita::runtime::test {
namespace {

const int kBlockSizes[] = {32, 64, 96, 128, 256};

template <typename T> Tensor random(std::vector<int64_t> shape, uint64_t seed,
                                    double lo = -3, double hi = 3) {
  Tensor t(sizeof(T) == 4 ? DType::F32 : DType::F64, std::move(shape));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < t.numElements(); ++i)
    t.data<T>()[i] = static_cast<T>(dist(rng));
  return t;
}

template <typename I> Tensor labels(std::vector<int64_t> shape, int64_t vocab,
                                    uint64_t seed) {
  Tensor t(sizeof(I) == 4 ? DType::I32 : DType::I64, std::move(shape));
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < t.numElements(); ++i)
    t.data<I>()[i] = static_cast<I>(rng() % vocab);
  if (t.numElements() > 2)
    t.data<I>()[1] = -1; // a padded token
  return t;
}

/// Runs `call` on both backends for every block size and expects agreement.
void expectSame(KernelKind kind, const KernelAttrs &attrs,
                const std::vector<Tensor> &inputs,
                const std::vector<OutputSpec> &outputs,
                double rtol = 1e-5) {
  std::unique_ptr<Backend> cpu = createCpuBackend(1);
  std::vector<Tensor> want = runOnBackend(*cpu, kind, attrs, inputs, outputs);
  for (int block : kBlockSizes) {
    std::unique_ptr<Backend> gpu = cudaTestBackend(block);
    std::vector<Tensor> got = runOnBackend(*gpu, kind, attrs, inputs, outputs);
    for (size_t o = 0; o < want.size(); ++o)
      EXPECT_LE(relativeDifference(got[o], want[o]), rtol)
          << toString(kind) << " output " << o << ", block size " << block;
  }
}

template <typename T> class CudaKernelsTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CudaKernelsTest, FloatTypes);

template <typename T> DType dt() {
  return sizeof(T) == 4 ? DType::F32 : DType::F64;
}

// Tests the binary kinds on 111 and 1000 elements.
TYPED_TEST(CudaKernelsTest, Binary) {
  using T = TypeParam;
  for (std::vector<int64_t> shape : {std::vector<int64_t>{3, 37}, {1000}})
    for (KernelKind kind : {KernelKind::Add, KernelKind::Sub, KernelKind::Mul,
                            KernelKind::Div, KernelKind::Max})
      expectSame(kind, {}, {random<T>(shape, 1), random<T>(shape, 2)},
                 {{dt<T>(), shape}});
}

// Tests the unary kinds (both GELUs) on 315 elements, including the very
// negative inputs where 1 + tanh cancels.
TYPED_TEST(CudaKernelsTest, Unary) {
  using T = TypeParam;
  std::vector<int64_t> shape{7, 45};
  for (KernelKind kind :
       {KernelKind::Neg, KernelKind::Exp, KernelKind::Tanh, KernelKind::Relu,
        KernelKind::Silu, KernelKind::Gelu})
    expectSame(kind, {}, {random<T>(shape, 3, -8, 8)}, {{dt<T>(), shape}});
  KernelAttrs tanhGelu;
  tanhGelu.tanh = true;
  expectSame(KernelKind::Gelu, tanhGelu, {random<T>(shape, 4, -8, 8)},
             {{dt<T>(), shape}});
  for (KernelKind kind : {KernelKind::Log, KernelKind::Sqrt, KernelKind::Rsqrt})
    expectSame(kind, {}, {random<T>(shape, 5, 0.1, 9)}, {{dt<T>(), shape}});
}

// Tests the activation gradients and greater_equal.
TYPED_TEST(CudaKernelsTest, ElementwiseGrad) {
  using T = TypeParam;
  std::vector<int64_t> shape{5, 41};
  KernelAttrs tanhGelu;
  tanhGelu.tanh = true;
  for (KernelKind kind : {KernelKind::ReluGrad, KernelKind::SiluGrad,
                          KernelKind::GeluGrad, KernelKind::GreaterEqual})
    expectSame(kind, {}, {random<T>(shape, 6, -6, 6), random<T>(shape, 7)},
               {{dt<T>(), shape}});
  expectSame(KernelKind::GeluGrad, tanhGelu,
             {random<T>(shape, 8, -6, 6), random<T>(shape, 9)},
             {{dt<T>(), shape}});
}

// Tests softmax over the last dimension (rows shorter and longer than a
// block) and over a middle one (elements `inner` apart).
TYPED_TEST(CudaKernelsTest, Softmax) {
  using T = TypeParam;
  KernelAttrs last;
  last.dim = 1;
  for (std::vector<int64_t> shape :
       {std::vector<int64_t>{5, 100}, {4, 300}, {3, 1}})
    expectSame(KernelKind::Softmax, last, {random<T>(shape, 10, -10, 10)},
               {{dt<T>(), shape}});
  KernelAttrs middle;
  middle.dim = 1;
  expectSame(KernelKind::Softmax, middle, {random<T>({3, 77, 5}, 11, -10, 10)},
             {{dt<T>(), {3, 77, 5}}});
}

// Tests layer_norm on rows of 200 and 33.
TYPED_TEST(CudaKernelsTest, LayerNorm) {
  using T = TypeParam;
  for (int64_t h : {200, 33}) {
    std::vector<int64_t> shape{6, h};
    expectSame(KernelKind::LayerNorm, {},
               {random<T>(shape, 12), random<T>({h}, 13), random<T>({h}, 14)},
               {{dt<T>(), shape}});
  }
}

// Tests rms_norm on rows of 200 and 33.
TYPED_TEST(CudaKernelsTest, RMSNorm) {
  using T = TypeParam;
  for (int64_t h : {200, 33}) {
    std::vector<int64_t> shape{6, h};
    expectSame(KernelKind::RMSNorm, {}, {random<T>(shape, 34), random<T>({h}, 35)},
               {{dt<T>(), shape}});
  }
}

// Tests embedding with i32 and i64 ids, and a vocab shard (vocabOffset):
// ids outside the shard give zero rows.
TYPED_TEST(CudaKernelsTest, Embedding) {
  using T = TypeParam;
  Tensor table = random<T>({50, 37}, 36);
  expectSame(KernelKind::Embedding, {}, {table, labels<int32_t>({3, 7}, 50, 37)},
             {{dt<T>(), {3, 7, 37}}});
  KernelAttrs shard;
  shard.vocabOffset = 30;
  Tensor ids = labels<int64_t>({3, 7}, 80, 38);
  ids.data<int64_t>()[1] = 31; // inside the shard (labels() put -1 there)
  expectSame(KernelKind::Embedding, shard, {table, ids}, {{dt<T>(), {3, 7, 37}}});
}

// Tests cross_entropy with i32 and i64 labels (one of them -1, a padded
// token), with and without meanCount.
TYPED_TEST(CudaKernelsTest, CrossEntropy) {
  using T = TypeParam;
  std::vector<int64_t> shape{2, 7, 130};
  expectSame(KernelKind::CrossEntropy, {},
             {random<T>(shape, 15, -5, 5), labels<int32_t>({2, 7}, 130, 16)},
             {{dt<T>(), {}}});
  KernelAttrs global;
  global.meanCount = 40;
  expectSame(KernelKind::CrossEntropy, global,
             {random<T>(shape, 17, -5, 5), labels<int64_t>({2, 7}, 130, 18)},
             {{dt<T>(), {}}});
}

// Tests reduce_sum, reduce_max and reduce_mean over inner, outer and
// several dimensions (and a size-1 one), with and without meanCount.
TYPED_TEST(CudaKernelsTest, Reduce) {
  using T = TypeParam;
  // Small: every output is a block of barriers in the emulator.
  Tensor x = random<T>({2, 1, 13, 3}, 29);
  struct Case {
    std::vector<int64_t> dims, out;
  } cases[] = {{{3}, {2, 1, 13}},
               {{0}, {1, 13, 3}},
               {{0, 2}, {1, 3}},
               {{1, 2}, {2, 3}},
               {{0, 1, 2, 3}, {}}};
  for (const Case &c : cases)
    for (KernelKind kind :
         {KernelKind::ReduceSum, KernelKind::ReduceMax, KernelKind::ReduceMean}) {
      KernelAttrs a;
      a.dims = c.dims;
      expectSame(kind, a, {x}, {{dt<T>(), c.out}});
    }
  KernelAttrs global;
  global.dims = {2};
  global.meanCount = 100;
  expectSame(KernelKind::ReduceMean, global, {x}, {{dt<T>(), {2, 1, 3}}});
  // A bias's gradient, [batch, seq, hidden] over batch and seq: the
  // two-pass column reduction, 111 rows in 4 chunks of 32 (the last one
  // short), 45 columns in 2 tiles (the last one short).
  Tensor tokens = random<T>({3, 37, 45}, 30);
  for (KernelKind kind :
       {KernelKind::ReduceSum, KernelKind::ReduceMax, KernelKind::ReduceMean}) {
    KernelAttrs a;
    a.dims = {0, 1};
    expectSame(kind, a, {tokens}, {{dt<T>(), {45}}});
  }
}

// Tests cross_entropy_grad with i32 and i64 labels (one -1) and meanCount.
TYPED_TEST(CudaKernelsTest, CrossEntropyGrad) {
  using T = TypeParam;
  std::vector<int64_t> shape{2, 7, 130};
  Tensor dloss(dt<T>(), {});
  dloss.data<T>()[0] = T(1.5);
  expectSame(KernelKind::CrossEntropyGrad, {},
             {random<T>(shape, 30, -5, 5), labels<int32_t>({2, 7}, 130, 31),
              dloss},
             {{dt<T>(), shape}});
  KernelAttrs global;
  global.meanCount = 40;
  expectSame(KernelKind::CrossEntropyGrad, global,
             {random<T>(shape, 32, -5, 5), labels<int64_t>({2, 7}, 130, 33),
              dloss},
             {{dt<T>(), shape}});
}

// Tests AdamW at step 3 with weight decay, on 1001 elements.
TYPED_TEST(CudaKernelsTest, AdamW) {
  using T = TypeParam;
  std::vector<int64_t> shape{1001};
  KernelAttrs a;
  a.lr = 1e-2;
  a.weightDecay = 0.1;
  Tensor step(dt<T>(), {});
  step.data<T>()[0] = T(3);
  expectSame(KernelKind::AdamW, a,
             {random<T>(shape, 19), random<T>(shape, 20),
              random<T>(shape, 21, -0.1, 0.1), random<T>(shape, 22, 0, 0.1),
              step},
             {{dt<T>(), shape}, {dt<T>(), shape}, {dt<T>(), shape}});
}

// Tests SGD with momentum and weight decay on 1001 elements (not a multiple
// of any block size).
TYPED_TEST(CudaKernelsTest, Sgd) {
  using T = TypeParam;
  std::vector<int64_t> shape{1001};
  KernelAttrs a;
  a.lr = 1e-2;
  a.momentum = 0.9;
  a.weightDecay = 0.1;
  expectSame(KernelKind::SGD, a,
             {random<T>(shape, 23), random<T>(shape, 24),
              random<T>(shape, 25, -0.1, 0.1)},
             {{dt<T>(), shape}, {dt<T>(), shape}});
}

// Tests layer_norm_grad and rms_norm_grad on rows of 1 (a degenerate
// variance), 77 and 300 (more than a block of 256) elements.
TYPED_TEST(CudaKernelsTest, NormGrads) {
  using T = TypeParam;
  KernelAttrs a;
  a.epsilon = 1e-5;
  for (int64_t hidden : {1, 77, 300})
    for (KernelKind kind : {KernelKind::LayerNormGrad, KernelKind::RMSNormGrad})
      expectSame(kind, a,
                 {random<T>({3, 5, hidden}, 30), random<T>({hidden}, 31),
                  random<T>({3, 5, hidden}, 32)},
                 {{dt<T>(), {3, 5, hidden}}});
}

// Tests embedding_grad: ids repeating (sums over tokens) and outside the
// shard (offset 5 of a 37-row shard; -1 too), i32 and i64 ids, a hidden
// size that no block size divides.
TYPED_TEST(CudaKernelsTest, EmbeddingGrad) {
  using T = TypeParam;
  KernelAttrs a;
  a.vocabOffset = 5;
  expectSame(KernelKind::EmbeddingGrad, a,
             {random<T>({3, 11, 19}, 26), labels<int32_t>({3, 11}, 50, 27)},
             {{dt<T>(), {37, 19}}});
  expectSame(KernelKind::EmbeddingGrad, {},
             {random<T>({2, 7, 33}, 28), labels<int64_t>({2, 7}, 9, 29)},
             {{dt<T>(), {9, 33}}});
}

// Tests broadcast (a bias over rows, and a size-1 dimension), transpose and
// reshape, which only move elements.
TYPED_TEST(CudaKernelsTest, DataMovement) {
  using T = TypeParam;
  KernelAttrs bias;
  bias.dims = {1};
  expectSame(KernelKind::Broadcast, bias, {random<T>({37}, 23)},
             {{dt<T>(), {9, 37}}});
  // A bias over [batch, seq, hidden]: the two stride-0 dimensions merge.
  KernelAttrs tokens;
  tokens.dims = {2};
  expectSame(KernelKind::Broadcast, tokens, {random<T>({37}, 27)},
             {{dt<T>(), {4, 9, 37}}});
  KernelAttrs ones;
  ones.dims = {0, 2};
  expectSame(KernelKind::Broadcast, ones, {random<T>({3, 1}, 24)},
             {{dt<T>(), {3, 5, 7}}});
  KernelAttrs perm;
  perm.dims = {2, 0, 1};
  expectSame(KernelKind::Transpose, perm, {random<T>({3, 5, 7}, 25)},
             {{dt<T>(), {7, 3, 5}}});
  // Heads out of [batch, seq, heads, dim]: batch and the last two stay.
  KernelAttrs heads;
  heads.dims = {0, 2, 1, 3};
  expectSame(KernelKind::Transpose, heads, {random<T>({2, 5, 3, 7}, 28)},
             {{dt<T>(), {2, 3, 5, 7}}});
  expectSame(KernelKind::Reshape, {}, {random<T>({3, 5, 7}, 26)},
             {{dt<T>(), {15, 7}}});
}

// Tests fill of floats and integers.
TEST(CudaKernelsFillTest, Fill) {
  KernelAttrs a;
  a.fillValue = -2.5;
  expectSame(KernelKind::Fill, a, {}, {{DType::F32, {3, 11}}});
  expectSame(KernelKind::Fill, a, {}, {{DType::F64, {5}}});
  a.fillValue = 7;
  expectSame(KernelKind::Fill, a, {}, {{DType::I32, {33}}});
  expectSame(KernelKind::Fill, a, {}, {{DType::I64, {2, 3}}});
}

// Tests the einsums that are one GEMM: plain, transposed operands, batched,
// and a result with the operands' roles swapped.
TYPED_TEST(CudaKernelsTest, EinsumAsGemm) {
  using T = TypeParam;
  struct Case {
    const char *spec;
    std::vector<int64_t> a, b, c;
  } cases[] = {
      {"bh,hf->bf", {9, 17}, {17, 13}, {9, 13}},
      {"bf,hf->bh", {9, 13}, {17, 13}, {9, 17}},
      {"kb,kf->bf", {17, 9}, {17, 13}, {9, 13}},
      {"bik,bkj->bij", {3, 5, 7}, {3, 7, 4}, {3, 5, 4}},
      {"bkj,bik->bij", {3, 7, 4}, {3, 5, 7}, {3, 5, 4}},
      {"bsh,hf->bsf", {2, 3, 8}, {8, 6}, {2, 3, 6}},
      {"ij,jk->ik", {1, 8}, {8, 1}, {1, 1}},
      {"ij,jk->ki", {2, 3}, {3, 4}, {4, 2}},
  };
  for (const Case &c : cases) {
    KernelAttrs a;
    a.spec = c.spec;
    expectSame(KernelKind::Einsum, a, {random<T>(c.a, 27), random<T>(c.b, 28)},
               {{dt<T>(), c.c}});
  }
}

// Tests that an einsum that is not one GEMM, and a kind with no port, fail
// with an error that names them.
TEST(CudaKernelsErrorTest, UnportedWorkIsNamed) {
  std::unique_ptr<Backend> gpu = cudaTestBackend(64);
  KernelAttrs a;
  a.spec = "ijk,jl->ilk";
  std::string error = runError(*gpu, KernelKind::Einsum, a,
                               {random<float>({2, 3, 5}, 1),
                                random<float>({3, 4}, 2)},
                               {{DType::F32, {2, 4, 5}}});
  EXPECT_NE(error.find("einsum: spec \"ijk,jl->ilk\" is not one GEMM"),
            std::string::npos)
      << error;
  // (rms_norm_grad, the kind this used, is ported now.)
  error = runError(*gpu, KernelKind::Convert, {}, {random<float>({2, 8}, 3)},
                   {{DType::F64, {2, 8}}});
  EXPECT_NE(error.find("kernel kind 'convert' is not ported to the cuda "
                       "backend"),
            std::string::npos)
      << error;
  // The cpu backend's checks: a shape mismatch is named the same way.
  error = runError(*gpu, KernelKind::Add, {},
                   {random<float>({2, 3}, 5), random<float>({3, 2}, 6)},
                   {{DType::F32, {2, 3}}});
  EXPECT_NE(error.find("add: input 1 is tensor<3x2xf32>"), std::string::npos)
      << error;
}

} // namespace
} // namespace partita::runtime::test
