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

#include "partita/runtime/Communicator.h"
#include "runtime/lib/cuda/NcclApi.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <thread>

namespace partita::runtime::test {
namespace {

const int kBlockSizes[] = {32, 64, 96, 128, 256};

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
                double rtol = 1e-5,
                CudaAttention attention = CudaAttention::Gemm) {
  std::unique_ptr<Backend> cpu = createCpuBackend(1);
  std::vector<Tensor> want = runOnBackend(*cpu, kind, attrs, inputs, outputs);
  for (int block : kBlockSizes) {
    // The tensor-core kernels launch blocks of their own size.
    if (attention == CudaAttention::Tensor && block != kBlockSizes[0])
      break;
    std::unique_ptr<Backend> gpu =
        cudaTestBackend(block, /*tf32=*/false, attention);
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

// Tests the unary kinds (both GELUs) on 315 elements (one at a time) and
// 360 (16-byte groups), including the very negative inputs where 1 + tanh
// cancels.
TYPED_TEST(CudaKernelsTest, Unary) {
  using T = TypeParam;
  for (std::vector<int64_t> shape : {std::vector<int64_t>{7, 45}, {8, 45}}) {
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
}

// Tests the activation gradients and greater_equal on 205 elements (one
// at a time) and 328 (16-byte groups).
TYPED_TEST(CudaKernelsTest, ElementwiseGrad) {
  using T = TypeParam;
  for (std::vector<int64_t> shape : {std::vector<int64_t>{5, 41}, {8, 41}}) {
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
}

// Tests elementwise kinds written over their first input (allowed in
// place), by 16-byte groups (1000 elements) and one at a time (999).
TYPED_TEST(CudaKernelsTest, ElementwiseInPlace) {
  using T = TypeParam;
  std::unique_ptr<Backend> cpu = createCpuBackend(1);
  std::unique_ptr<Backend> gpu = cudaTestBackend(64);
  for (int64_t n : {1000, 999}) {
    std::vector<int64_t> shape{n};
    for (KernelKind kind : {KernelKind::Add, KernelKind::GeluGrad}) {
      std::vector<Tensor> in = {random<T>(shape, 90), random<T>(shape, 91)};
      Tensor want = runOnBackend(*cpu, kind, {}, in, {{dt<T>(), shape}})[0];
      Tensor got = runOnBackend(*gpu, kind, {}, in, {{dt<T>(), shape}},
                                /*outputOverInput=*/0)[0];
      EXPECT_LE(relativeDifference(got, want), 1e-6)
          << toString(kind) << ", " << n << " elements";
    }
    std::vector<Tensor> in = {random<T>(shape, 92, -4, 4)};
    Tensor want =
        runOnBackend(*cpu, KernelKind::Gelu, {}, in, {{dt<T>(), shape}})[0];
    Tensor got = runOnBackend(*gpu, KernelKind::Gelu, {}, in,
                              {{dt<T>(), shape}}, /*outputOverInput=*/0)[0];
    EXPECT_LE(relativeDifference(got, want), 1e-6) << n << " elements";
  }
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

/// The message of the Error that checkDeviceErrors throws ("" if none).
std::string deviceError(Backend &backend) {
  try {
    backend.checkDeviceErrors();
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

// Tests that labels at or beyond the vocabulary, which the host cannot read
// before launching on a device, are found there and reported after the
// step (Backend::checkDeviceErrors) as the cpu backend words them, naming
// the smallest such token whichever block meets one first; once (the
// record is cleared), and never when every label is in range. Both kernels,
// i32 and i64 labels (one past 32 bits, which the record clamps).
TYPED_TEST(CudaKernelsTest, LabelsOutsideTheVocabularyAreFoundOnTheDevice) {
  using T = TypeParam;
  std::vector<int64_t> shape{3, 5, 9}; // 15 tokens, vocabulary 9
  Tensor x = random<T>(shape, 40, -3, 3);
  Tensor dloss(dt<T>(), {});
  dloss.data<T>()[0] = T(1);
  std::unique_ptr<Backend> cpu = createCpuBackend(1);
  const char *tail = " (found on the device after the step; the loss is NaN)";
  for (int block : {32, 256}) {
    std::unique_ptr<Backend> gpu = cudaTestBackend(block);
    Tensor good = labels<int32_t>({3, 5}, 9, 41);
    runOnBackend(*gpu, KernelKind::CrossEntropy, {}, {x, good},
                 {{dt<T>(), {}}});
    runOnBackend(*gpu, KernelKind::CrossEntropyGrad, {}, {x, good, dloss},
                 {{dt<T>(), shape}});
    EXPECT_EQ(deviceError(*gpu), "") << "block " << block;

    Tensor bad = labels<int32_t>({3, 5}, 9, 42);
    bad.data<int32_t>()[13] = 100;
    bad.data<int32_t>()[11] = 9;
    bad.data<int32_t>()[6] = 12;
    std::string want =
        runError(*cpu, KernelKind::CrossEntropy, {}, {x, bad}, {{dt<T>(), {}}});
    EXPECT_EQ(want, "cross_entropy: label 12 of token 6 is outside [0, 9)");
    std::vector<Tensor> loss = runOnBackend(*gpu, KernelKind::CrossEntropy, {},
                                            {x, bad}, {{dt<T>(), {}}});
    EXPECT_TRUE(std::isnan(double(loss[0].data<T>()[0])));
    EXPECT_EQ(deviceError(*gpu), want + tail) << "block " << block;
    EXPECT_EQ(deviceError(*gpu), "") << "block " << block << ": not cleared";

    want = runError(*cpu, KernelKind::CrossEntropyGrad, {}, {x, bad, dloss},
                    {{dt<T>(), shape}});
    EXPECT_EQ(want,
              "cross_entropy_grad: label 12 of token 6 is outside [0, 9)");
    runOnBackend(*gpu, KernelKind::CrossEntropyGrad, {}, {x, bad, dloss},
                 {{dt<T>(), shape}});
    EXPECT_EQ(deviceError(*gpu), want + tail) << "block " << block;

    Tensor wide = labels<int64_t>({3, 5}, 9, 43);
    wide.data<int64_t>()[14] = 9;
    wide.data<int64_t>()[4] = int64_t(5) << 32;
    runOnBackend(*gpu, KernelKind::CrossEntropy, {}, {x, wide},
                 {{dt<T>(), {}}});
    EXPECT_EQ(deviceError(*gpu),
              std::string("cross_entropy: label 4294967295 or more of token 4 "
                          "is outside [0, 9)") +
                  tail)
        << "block " << block;
  }
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

// Tests cross_entropy and its gradient where the kernels' one read of a
// row (rowMaxSum) must rescale: rows of 132 logits (16-byte loads in f32
// and f64) and 131 (element loads), wide-ranged so exp(x) alone would
// overflow, one row rising (every element a new running maximum), one
// falling, and -inf (a masked logit) at the start of rows and at the end.
TYPED_TEST(CudaKernelsTest, CrossEntropyRescalesItsRunningMaximum) {
  using T = TypeParam;
  for (int64_t vocab : {132, 131}) {
    Tensor x = random<T>({4, vocab}, 40, -60, 60);
    T *row = x.data<T>();
    for (int64_t j = 0; j < vocab; ++j) {
      row[j] = T(-70 + j);             // row 0 rising
      row[vocab + j] = T(70 - j);      // row 1 falling
    }
    for (int64_t j : {int64_t(0), int64_t(1), vocab - 1})
      row[2 * vocab + j] = -std::numeric_limits<T>::infinity(); // row 2 masked
    Tensor y = labels<int32_t>({4}, vocab, 41);
    y.data<int32_t>()[0] = int32_t(vocab - 2);
    y.data<int32_t>()[1] = 3;
    y.data<int32_t>()[2] = 5;
    expectSame(KernelKind::CrossEntropy, {}, {x, y}, {{dt<T>(), {}}});
    Tensor dloss(dt<T>(), {});
    dloss.data<T>()[0] = T(0.75);
    expectSame(KernelKind::CrossEntropyGrad, {}, {x, y, dloss},
               {{dt<T>(), {4, vocab}}});
  }
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

// Tests AdamW's step as the cpu backend reads it: a NaN step (fp16-mixed's
// skipped step) leaves every output its input's value; a step below 1 or
// infinite, which the host cannot read before the launch, fails after the
// step in the cpu backend's words.
TYPED_TEST(CudaKernelsTest, AdamWStepIsCheckedOnTheDevice) {
  using T = TypeParam;
  std::vector<int64_t> shape{300};
  KernelAttrs a;
  a.lr = 1e-2;
  a.weightDecay = 0.1;
  std::vector<Tensor> state = {random<T>(shape, 23), random<T>(shape, 24),
                               random<T>(shape, 25, -0.1, 0.1),
                               random<T>(shape, 26, 0, 0.1)};
  auto withStep = [&](double t) {
    std::vector<Tensor> inputs = state;
    inputs.emplace_back(dt<T>(), std::vector<int64_t>{});
    inputs.back().template data<T>()[0] = T(t);
    return inputs;
  };
  std::vector<OutputSpec> outs = {
      {dt<T>(), shape}, {dt<T>(), shape}, {dt<T>(), shape}};
  std::unique_ptr<Backend> cpu = createCpuBackend(1);
  for (int block : {32, 256}) {
    std::unique_ptr<Backend> gpu = cudaTestBackend(block);
    std::vector<Tensor> got =
        runOnBackend(*gpu, KernelKind::AdamW, a, withStep(NAN), outs);
    for (int o = 0; o < 3; ++o)
      EXPECT_EQ(relativeDifference(got[o], state[o == 0 ? 0 : o + 1]), 0.0)
          << "output " << o << ", block " << block;
    EXPECT_EQ(deviceError(*gpu), "") << "block " << block;
    for (double t : {0.0, 0.5, double(INFINITY)}) {
      std::string want = runError(*cpu, KernelKind::AdamW, a, withStep(t), outs);
      EXPECT_NE(want.find("must hold the step number t >= 1"), std::string::npos)
          << want;
      runOnBackend(*gpu, KernelKind::AdamW, a, withStep(t), outs);
      EXPECT_EQ(deviceError(*gpu),
                want + " (found on the device after the step; the update "
                       "there is not finite)")
          << "step " << t << ", block " << block;
    }
  }
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

// Tests layer_norm_gamma_grad (row statistics, then column sums in row
// chunks): rows of 1, 77 and 300 elements over 15 rows (one chunk), and 77
// over 70 rows (three chunks of 32 in the column reduction). The emulator
// runs every thread of a block: a case costs seconds.
TYPED_TEST(CudaKernelsTest, LayerNormGammaGrad) {
  using T = TypeParam;
  KernelAttrs a;
  a.epsilon = 1e-5;
  for (auto [rows, hidden] : {std::pair<int64_t, int64_t>{15, 1},
                              {15, 77}, {15, 300}, {70, 77}})
    expectSame(KernelKind::LayerNormGammaGrad, a,
               {random<T>({rows, hidden}, 33), random<T>({rows, hidden}, 34)},
               {{dt<T>(), {hidden}}});
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

// Tests attention and attention_grad (dq, dk, dv): causal and not, grouped
// kv heads (2 and 3 query heads a kv head), a query offset, seq_q != seq_kv,
// an explicit scale, and head_dims that leave some lanes of a row partly
// (40, 70) or wholly (40, 70) padding (16 dimensions a lane, a power of two
// lanes a row), or one lane a row (8); sequences that no tile or block size
// divides.
TYPED_TEST(CudaKernelsTest, Attention) {
  using T = TypeParam;
  struct Case {
    int64_t batch, seqQ, seqKV, heads, kvHeads, headDim;
    bool causal;
    int64_t offset;
    double scale; // 0: the default 1/sqrt(head_dim)
    bool tensorOnly = false; // sized for the tensor-core kernels' tiles
  } cases[] = {
      // Small: each row's partial sums meet in warp shuffles, which the
      // emulator runs as real exchanges between host threads.
      {1, 11, 11, 2, 1, 40, true, 0, 0},
      {2, 7, 13, 2, 2, 24, false, 0, 0.3},
      {1, 5, 12, 3, 1, 8, true, 7, 0},
      {1, 6, 6, 1, 1, 70, true, 0, 0},
      // Several 64-row tiles of queries and keys (the tensor-core kernels'
      // blocks and tiles), the last ones partial; causal with an offset
      // and grouped heads, and not causal with seq_q != seq_kv.
      // Run by that path only: the emulator takes seconds for them.
      {1, 70, 75, 2, 1, 64, true, 5, 0, true},
      {1, 66, 97, 3, 1, 36, false, 0, 0, true},
  };
  uint64_t seed = 40;
  for (const Case &c : cases) {
    KernelAttrs a;
    a.causal = c.causal;
    a.queryOffset = c.offset;
    if (c.scale > 0)
      a.scale = c.scale;
    std::vector<int64_t> qShape{c.batch, c.seqQ, c.heads, c.headDim};
    std::vector<int64_t> kvShape{c.batch, c.seqKV, c.kvHeads, c.headDim};
    Tensor q = random<T>(qShape, seed++, -1.5, 1.5);
    Tensor k = random<T>(kvShape, seed++, -1.5, 1.5);
    Tensor v = random<T>(kvShape, seed++);
    Tensor dy = random<T>(qShape, seed++);
    SCOPED_TRACE("attention [" + std::to_string(c.batch) + ", " +
                 std::to_string(c.seqQ) + "/" + std::to_string(c.seqKV) +
                 ", " + std::to_string(c.heads) + "/" +
                 std::to_string(c.kvHeads) + ", " + std::to_string(c.headDim) +
                 "] causal " + std::to_string(c.causal));
    // Every path: GEMMs and the row kernel (the default), and the
    // flash-style kernels on CUDA cores and on tensor cores (f32 with
    // head_dim <= 64; other calls run by GEMMs).
    for (CudaAttention kind : kAttentionKinds) {
      if (c.tensorOnly && (kind != CudaAttention::Tensor || sizeof(T) != 4))
        continue;
      SCOPED_TRACE(std::string("--attention ") + toString(kind));
      a.wrt.clear();
      expectSame(KernelKind::Attention, a, {q, k, v}, {{dt<T>(), qShape}},
                 1e-5, kind);
      // dq, dk and dv in one call (AttentionGradMatchesSingleCalls: the
      // bits of one call each).
      a.wrt = "qkv";
      expectSame(KernelKind::AttentionGrad, a, {q, k, v, dy},
                 {{dt<T>(), qShape}, {dt<T>(), kvShape}, {dt<T>(), kvShape}},
                 1e-5, kind);
      // The lse output, and gradients that read the saved output and lse
      // (the cpu backend's, so both backends read the same): every path
      // takes its row statistics from them (AttentionRows op 2 or 3).
      std::vector<int64_t> lseShape{c.batch, c.heads, c.seqQ};
      a.wrt.clear();
      expectSame(KernelKind::Attention, a, {q, k, v},
                 {{dt<T>(), qShape}, {dt<T>(), lseShape}}, 1e-5, kind);
      std::unique_ptr<Backend> cpu = createCpuBackend(1);
      std::vector<Tensor> saved =
          runOnBackend(*cpu, KernelKind::Attention, a, {q, k, v},
                       {{dt<T>(), qShape}, {dt<T>(), lseShape}});
      a.wrt = "qkv";
      expectSame(KernelKind::AttentionGrad, a,
                 {q, k, v, dy, saved[0], saved[1]},
                 {{dt<T>(), qShape}, {dt<T>(), kvShape}, {dt<T>(), kvShape}},
                 1e-5, kind);
      // Every path reads them: an lse shifted by log 2 (P halved) gives
      // what the cpu backend gives for it.
      {
        Tensor shifted = saved[1];
        for (int64_t i = 0; i < shifted.numElements(); ++i)
          shifted.data<T>()[i] += T(std::log(2.0));
        expectSame(KernelKind::AttentionGrad, a,
                   {q, k, v, dy, saved[0], shifted},
                   {{dt<T>(), qShape}, {dt<T>(), kvShape}, {dt<T>(), kvShape}},
                   1e-5, kind);
      }
    }
  }
}

// Tests that an attention_grad call asking for several gradients ("qkv",
// "kv") gives each the bits of the single-letter call, by GEMMs (P
// and dS shared) and by the flash-style kernels (one statistics launch
// shared; on tensor cores dk and dv also share a launch): grouped kv
// heads, causal with a query offset, seq_q != seq_kv.
TYPED_TEST(CudaKernelsTest, AttentionGradMatchesSingleCalls) {
  using T = TypeParam;
  KernelAttrs a;
  a.causal = true;
  a.queryOffset = 4;
  std::vector<int64_t> qShape{2, 7, 4, 24}, kvShape{2, 11, 2, 24};
  std::vector<Tensor> in = {
      random<T>(qShape, 60, -1.5, 1.5), random<T>(kvShape, 61, -1.5, 1.5),
      random<T>(kvShape, 62), random<T>(qShape, 63)};
  auto grads = [&](Backend &gpu, const std::string &wrt) {
    a.wrt = wrt;
    std::vector<OutputSpec> out;
    for (char c : wrt)
      out.push_back({dt<T>(), c == 'q' ? qShape : kvShape});
    return runOnBackend(gpu, KernelKind::AttentionGrad, a, in, out);
  };
  for (CudaAttention kind : kAttentionKinds) {
    std::unique_ptr<Backend> gpu = cudaTestBackend(64, false, kind);
    std::map<char, Tensor> single;
    for (char c : {'q', 'k', 'v'})
      single.emplace(c, std::move(grads(*gpu, std::string(1, c))[0]));
    for (const char *wrt : {"qkv", "kv"}) {
      std::vector<Tensor> got = grads(*gpu, wrt);
      for (size_t o = 0; o < got.size(); ++o) {
        const Tensor &want = single.at(wrt[o]);
        EXPECT_EQ(std::memcmp(got[o].data<T>(), want.data<T>(),
                              want.numElements() * sizeof(T)),
                  0)
            << "wrt " << wrt << ": d" << wrt[o] << " differs from the "
            << "single-letter call's (--attention " << toString(kind) << ")";
      }
    }
  }
}

// Tests that attention's results do not depend on timing (no atomics, a
// fixed order of every sum): two runs give the same bits.
TEST(CudaKernelsAttentionTest, Deterministic) {
  KernelAttrs a;
  a.causal = true;
  std::vector<int64_t> qShape{1, 13, 2, 40}, kvShape{1, 13, 1, 40};
  std::vector<Tensor> in = {random<float>(qShape, 50), random<float>(kvShape, 51),
                            random<float>(kvShape, 52), random<float>(qShape, 53)};
  for (CudaAttention path : kAttentionKinds)
  for (const char *wrt : {"", "q", "k", "v", "qkv"}) {
    std::unique_ptr<Backend> gpu = cudaTestBackend(64, false, path);
    a.wrt = wrt;
    KernelKind kind = *wrt ? KernelKind::AttentionGrad : KernelKind::Attention;
    std::vector<Tensor> inputs(in.begin(), in.begin() + (*wrt ? 4 : 3));
    std::vector<OutputSpec> out = {{DType::F32, wrt[0] == 'k' || wrt[0] == 'v'
                                                    ? kvShape
                                                    : qShape}};
    for (const char *c = *wrt ? wrt + 1 : wrt; *c; ++c)
      out.push_back({DType::F32, kvShape});
    std::vector<Tensor> first = runOnBackend(*gpu, kind, a, inputs, out);
    std::vector<Tensor> second = runOnBackend(*gpu, kind, a, inputs, out);
    for (size_t o = 0; o < out.size(); ++o)
      EXPECT_EQ(std::memcmp(first[o].data<float>(), second[o].data<float>(),
                            first[o].numElements() * sizeof(float)),
                0)
          << "attention " << wrt << " output " << o << " (--attention "
          << toString(path) << ")";
  }
}

// Tests that with no queries a "qkv" call succeeds on both paths with dk
// and dv zero (no kernel runs: the outputs are zero-filled).
TEST(CudaKernelsAttentionTest, NoQueriesGiveZeroKeyGradients) {
  KernelAttrs a;
  a.wrt = "qkv";
  std::vector<int64_t> qShape{2, 0, 2, 8}, kvShape{2, 5, 1, 8};
  std::vector<Tensor> in = {random<float>(qShape, 57), random<float>(kvShape, 58),
                            random<float>(kvShape, 59), random<float>(qShape, 60)};
  for (CudaAttention kind : kAttentionKinds) {
    std::unique_ptr<Backend> gpu = cudaTestBackend(64, false, kind);
    std::vector<Tensor> got =
        runOnBackend(*gpu, KernelKind::AttentionGrad, a, in,
                     {{DType::F32, qShape}, {DType::F32, kvShape},
                      {DType::F32, kvShape}});
    for (int o : {1, 2})
      for (int64_t i = 0; i < got[o].numElements(); ++i)
        ASSERT_EQ(got[o].data<float>()[i], 0.0f)
            << "output " << o << " (--attention " << toString(kind) << ")";
  }
}

// Tests the tensor-core kernels with --tf32 (one TF32 product instead of
// three): within TF32's error of the cpu backend, and not the bits of the
// three-product default (so the flag reaches the kernels).
TEST(CudaKernelsAttentionTest, TensorCoresWithTf32) {
  KernelAttrs a;
  a.causal = true;
  std::vector<int64_t> shape{1, 40, 2, 32};
  std::vector<Tensor> in = {random<float>(shape, 70, -1.5, 1.5),
                            random<float>(shape, 71, -1.5, 1.5),
                            random<float>(shape, 72), random<float>(shape, 73)};
  std::unique_ptr<Backend> cpu = createCpuBackend(1);
  for (const char *wrt : {"", "qkv"}) {
    a.wrt = wrt;
    KernelKind kind = *wrt ? KernelKind::AttentionGrad : KernelKind::Attention;
    std::vector<Tensor> inputs(in.begin(), in.begin() + (*wrt ? 4 : 3));
    std::vector<OutputSpec> out(*wrt ? 3 : 1, OutputSpec{DType::F32, shape});
    std::vector<Tensor> want = runOnBackend(*cpu, kind, a, inputs, out);
    std::unique_ptr<Backend> one =
        cudaTestBackend(64, /*tf32=*/true, CudaAttention::Tensor);
    std::unique_ptr<Backend> three =
        cudaTestBackend(64, /*tf32=*/false, CudaAttention::Tensor);
    std::vector<Tensor> got1 = runOnBackend(*one, kind, a, inputs, out);
    std::vector<Tensor> got3 = runOnBackend(*three, kind, a, inputs, out);
    for (size_t o = 0; o < out.size(); ++o) {
      double d1 = relativeDifference(got1[o], want[o]);
      double d3 = relativeDifference(got3[o], want[o]);
      EXPECT_LE(d1, 5e-3) << "wrt '" << wrt << "' output " << o;
      EXPECT_LE(d3, 1e-5) << "wrt '" << wrt << "' output " << o;
      EXPECT_GT(d1, 4 * d3) << "wrt '" << wrt << "' output " << o
                            << ": --tf32 is no coarser than three products";
    }
  }
}

// Tests attention's refusals: a head_dim beyond the CUDA-core kernels'
// register slices, and the cpu backend's checks (a causal offset past the
// keys).
TEST(CudaKernelsAttentionTest, Errors) {
  std::unique_ptr<Backend> gpu =
      cudaTestBackend(64, false, CudaAttention::Simt);
  Tensor q = random<double>({1, 2, 1, 513}, 54);
  std::string error =
      runError(*gpu, KernelKind::Attention, {}, {q, q, q},
               {{DType::F64, {1, 2, 1, 513}}});
  EXPECT_NE(error.find("attention: head_dim 513 is more than the cuda "
                       "kernels' limit of 512"),
            std::string::npos)
      << error;
  KernelAttrs a;
  a.causal = true;
  a.queryOffset = 1;
  Tensor small = random<float>({1, 2, 1, 8}, 55);
  error = runError(*gpu, KernelKind::Attention, a, {small, small, small},
                   {{DType::F32, {1, 2, 1, 8}}});
  EXPECT_NE(error.find("causal attention needs 0 <= queryOffset"),
            std::string::npos)
      << error;
  // attention_grad's wrt and outputs, checked as the cpu backend does.
  a = {};
  Tensor kv = random<float>({1, 2, 1, 8}, 56);
  for (CudaAttention kind : kAttentionKinds) {
    std::unique_ptr<Backend> g = cudaTestBackend(64, false, kind);
    a.wrt = "kq";
    error = runError(*g, KernelKind::AttentionGrad, a, {small, kv, kv, small},
                     {{DType::F32, {1, 2, 1, 8}}, {DType::F32, {1, 2, 1, 8}}});
    EXPECT_NE(error.find("attention_grad: wrt \"kq\" has 'q' after 'k': its "
                         "letters must come in the order q, k, v"),
              std::string::npos)
        << error;
    a.wrt = "qkv";
    error = runError(*g, KernelKind::AttentionGrad, a, {small, kv, kv, small},
                     {{DType::F32, {1, 2, 1, 8}}});
    EXPECT_NE(error.find("attention_grad: wrt \"qkv\" asks for 3 gradient(s), "
                         "one output each, but the call has 1 output(s)"),
              std::string::npos)
        << error;
  }
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

// Tests einsums with an addend (the plan's fused bias add or gradient sum,
// LowerToPlanOptions::fuseAdds) against the cpu kernel: a bias broadcast
// into a GEMM's own result, into a swapped one (C^T = B^T A^T), a size-1
// dimension that repeats, a result written through scratch (then permuted
// and added), and a whole addend, also as the output itself (in place).
TYPED_TEST(CudaKernelsTest, EinsumWithAddend) {
  using T = TypeParam;
  struct Case {
    const char *spec;
    std::vector<int64_t> a, b, c, addend, dims;
  } cases[] = {
      {"bsh,hf->bsf", {2, 3, 8}, {8, 6}, {2, 3, 6}, {6}, {2}},
      {"bsh,hnd->bsnd", {2, 5, 8}, {8, 3, 4}, {2, 5, 3, 4}, {3, 4}, {2, 3}},
      {"ij,jk->ki", {2, 3}, {3, 4}, {4, 2}, {4, 1}, {0, 1}},
      {"ibj,jbk->kib", {4, 3, 5}, {5, 3, 2}, {2, 4, 3}, {2, 4, 3}, {0, 1, 2}},
      {"bf,hf->bh", {9, 13}, {17, 13}, {9, 17}, {9, 17}, {0, 1}},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.spec);
    KernelAttrs a;
    a.spec = c.spec;
    a.dims = c.dims;
    std::vector<Tensor> in = {random<T>(c.a, 61), random<T>(c.b, 62),
                              random<T>(c.addend, 63)};
    expectSame(KernelKind::Einsum, a, in, {{dt<T>(), c.c}});
    if (c.addend != c.c)
      continue;
    std::unique_ptr<Backend> cpu = createCpuBackend(1);
    Tensor apart = runOnBackend(*cpu, KernelKind::Einsum, a, in,
                                {{dt<T>(), c.c}})[0];
    Tensor want = runOnBackend(*cpu, KernelKind::Einsum, a, in,
                               {{dt<T>(), c.c}}, /*outputOverInput=*/2)[0];
    EXPECT_LE(relativeDifference(want, apart), 1e-6);
    for (int block : kBlockSizes) {
      std::unique_ptr<Backend> gpu = cudaTestBackend(block);
      Tensor got = runOnBackend(*gpu, KernelKind::Einsum, a, in,
                                {{dt<T>(), c.c}}, /*outputOverInput=*/2)[0];
      EXPECT_LE(relativeDifference(got, want), 1e-5) << "block " << block;
    }
  }
}

// Tests --gemm-autotune (CudaBackendOptions::gemmAutotune): on a GPU the
// first run of each shape times several cuBLASLt algorithms, their trial
// runs writing the real output (beta 0) or a scratch one (beta 1: an
// addend, copied into the output first or the output itself), and the
// results must be those of the cpu backend, the first run and the next
// (the kept algorithm) alike; every shape says what it kept. Emulated, the
// backend says once that there is nothing to tune.
TYPED_TEST(CudaKernelsTest, GemmAutotuneKeepsEveryResult) {
  using T = TypeParam;
  struct Case {
    const char *spec;
    std::vector<int64_t> a, b, c, addend, dims;
    int outputOverInput;
  } cases[] = {
      {"bsh,hf->bsf", {4, 32, 96}, {96, 80}, {4, 32, 80}, {}, {}, -1},
      {"bsh,hf->bsf", {4, 32, 96}, {96, 80}, {4, 32, 80}, {80}, {2}, -1},
      {"bf,hf->bh", {128, 64}, {72, 64}, {128, 72}, {128, 72}, {0, 1}, 2},
      {"bij,bjk->bik", {3, 40, 24}, {3, 24, 56}, {3, 40, 56}, {}, {}, -1},
  };
  std::vector<std::string> lines;
  CudaBackendOptions options;
  options.gemmAutotune = true;
  options.log = [&](const std::string &line) { lines.push_back(line); };
  std::unique_ptr<Backend> gpu = cudaTestBackend(options);
  std::unique_ptr<Backend> cpu = createCpuBackend(1);
  for (const Case &c : cases) {
    SCOPED_TRACE(c.spec);
    KernelAttrs a;
    a.spec = c.spec;
    a.dims = c.dims;
    std::vector<Tensor> in = {random<T>(c.a, 71), random<T>(c.b, 72)};
    if (!c.addend.empty())
      in.push_back(random<T>(c.addend, 73));
    Tensor want = runOnBackend(*cpu, KernelKind::Einsum, a, in,
                               {{dt<T>(), c.c}}, c.outputOverInput)[0];
    for (int run = 0; run < 2; ++run) {
      Tensor got = runOnBackend(*gpu, KernelKind::Einsum, a, in,
                                {{dt<T>(), c.c}}, c.outputOverInput)[0];
      EXPECT_LE(relativeDifference(got, want), 1e-5) << "run " << run;
    }
  }
  if (cudaTestEmulated()) {
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_NE(lines[0].find("nothing to tune"), std::string::npos) << lines[0];
    return;
  }
  // One line per GEMM plan: the two bsh,hf->bsf cases differ only in
  // beta, which the plan (and the algorithm) does not depend on, so they
  // share one unless their outputs' alignments differ. The output that is
  // its own addend (beta 1, a shape of its own) is tuned through a scratch
  // output: its line marks the read C.
  EXPECT_GE(lines.size(), std::size(cases) - 1);
  EXPECT_LE(lines.size(), std::size(cases));
  bool scratch = false;
  for (const std::string &line : lines) {
    EXPECT_NE(line.find("gemm autotune"), std::string::npos) << line;
    scratch |= line.find("GEMM m 128 n 72 k 64") != std::string::npos &&
               line.find(" + C:") != std::string::npos;
  }
  EXPECT_TRUE(scratch) << "no line for the beta-1 GEMM m 128 n 72 k 64";
}

// Tests recording a step on the compute stream as a graph (what
// --cuda-graph does; on a GPU, CUDA's stream capture of a cuBLASLt GEMM and
// kernels): an einsum with a bias addend (its copy kernel, a GEMM with
// beta 1) and a GELU, run once eagerly (the GEMM plan and any workspace
// are made there), then recorded: nothing runs until the graph is
// launched, a launch gives the eager bits, and a launch after new inputs
// are copied in computes from them.
TYPED_TEST(CudaKernelsTest, StepRecordedAsAGraphReplays) {
  using T = TypeParam;
  std::unique_ptr<Backend> gpu = cudaTestBackend(128);
  std::unique_ptr<Backend> cpu = createCpuBackend(1);
  Device &dev = gpu->device();
  Stream &stream = dev.computeStream();
  std::vector<Tensor> in = {random<T>({64, 48}, 81), random<T>({48, 40}, 82),
                            random<T>({40}, 83)};
  std::vector<DeviceBuffer> buffers;
  auto place = [&](DType dtype, std::vector<int64_t> shape) {
    TensorView view{nullptr, dtype, std::move(shape)};
    buffers.push_back(dev.allocateBuffer(view.numBytes()));
    view.data = buffers.back().get();
    return view;
  };
  std::vector<TensorView> views;
  for (const Tensor &t : in) {
    views.push_back(place(t.getDType(), t.getShape()));
    dev.copyFromHost(views.back().data, t.data<unsigned char>(),
                     views.back().numBytes(), stream);
  }
  TensorView c = place(dt<T>(), {64, 40}), d = place(dt<T>(), {64, 40});
  KernelAttrs einsum;
  einsum.spec = "ij,jk->ik";
  einsum.dims = {1};
  KernelAttrs gelu;
  gelu.tanh = true;
  auto step = [&] {
    gpu->run({KernelKind::Einsum, einsum, {views[0], views[1], views[2]}, {c}});
    gpu->run({KernelKind::Gelu, gelu, {c}, {d}});
  };
  auto read = [&] {
    Tensor out(dt<T>(), {64, 40});
    dev.copyToHost(out.data<unsigned char>(), d.data, d.numBytes(), stream);
    return out;
  };
  step();
  Tensor eager = read();
  dev.zero(d.data, d.numBytes(), stream);
  ASSERT_TRUE(stream.canCapture());
  stream.beginCapture();
  step();
  std::unique_ptr<Graph> graph = stream.endCapture();
  EXPECT_EQ(relativeDifference(read(), Tensor(dt<T>(), {64, 40})), 0)
      << "the recorded work ran before its launch";
  graph->launch(stream);
  EXPECT_EQ(relativeDifference(read(), eager), 0);
  // New inputs, the same graph.
  in[0] = random<T>({64, 48}, 84);
  dev.copyFromHost(views[0].data, in[0].data<unsigned char>(),
                   views[0].numBytes(), stream);
  graph->launch(stream);
  Tensor biased = runOnBackend(*cpu, KernelKind::Einsum, einsum, in,
                               {{dt<T>(), {64, 40}}})[0];
  Tensor want =
      runOnBackend(*cpu, KernelKind::Gelu, gelu, {biased}, {{dt<T>(), {64, 40}}})[0];
  EXPECT_LE(relativeDifference(read(), want), 1e-5);
}

// Tests bf16 and f16 GEMMs (fp32 accumulation, the result rounded once)
// against the cpu backend, which widens the operands to f32, runs sgemm and
// narrows the result: within one ulp of the 16-bit result relative to the
// largest (bf16: 2^-7; f16: 2^-10), since the two may sum in different
// orders.
TEST(CudaGemmPrecisionTest, HalfPrecisionOperandsAccumulateInF32) {
  for (DType dtype : {DType::BF16, DType::F16}) {
    auto narrow = [&](const Tensor &f) {
      Tensor t(dtype, f.getShape());
      for (int64_t i = 0; i < f.numElements(); ++i)
        t.data<uint16_t>()[i] = narrowFloat(f.data<float>()[i], dtype);
      return t;
    };
    KernelAttrs a;
    a.spec = "bik,bkj->bij";
    Tensor x = narrow(random<float>({2, 33, 70}, 41)),
           y = narrow(random<float>({2, 70, 19}, 42));
    std::unique_ptr<Backend> cpu = createCpuBackend(1);
    Tensor want = runOnBackend(*cpu, KernelKind::Einsum, a, {x, y},
                               {{dtype, {2, 33, 19}}})[0];
    std::unique_ptr<Backend> gpu = cudaTestBackend(64);
    Tensor got = runOnBackend(*gpu, KernelKind::Einsum, a, {x, y},
                              {{dtype, {2, 33, 19}}})[0];
    double d = relativeDifference(got, want);
    EXPECT_LE(d, dtype == DType::BF16 ? 0x1p-7 : 0x1p-10) << toString(dtype);
    // Not all zeros or NaN: the comparison compares something.
    EXPECT_GT(std::fabs(elementAt(want, 5)), 0) << toString(dtype);
    // With a bias: cuBLASLt accumulates onto it (beta = 1, one rounding);
    // the cpu rounds the product, then the sum.
    KernelAttrs biased = a;
    biased.dims = {2};
    Tensor bias = narrow(random<float>({19}, 43));
    want = runOnBackend(*cpu, KernelKind::Einsum, biased, {x, y, bias},
                        {{dtype, {2, 33, 19}}})[0];
    got = runOnBackend(*gpu, KernelKind::Einsum, biased, {x, y, bias},
                       {{dtype, {2, 33, 19}}})[0];
    EXPECT_LE(relativeDifference(got, want),
              dtype == DType::BF16 ? 0x1p-6 : 0x1p-9)
        << toString(dtype) << " with a bias";
  }
}

// Tests TF32 (CudaBackendOptions::tf32, `partita-run --tf32`): an f32 GEMM
// whose operands are not TF32 values differs from the exact fp32 one, and
// every element stays within TF32's error bound of the exact product
// computed here in double: |c - ref| <= (2u + u^2 + k 2^-23) sum |a||b|,
// u = 2^-10 (one TF32 rounding of each operand, by truncation or to
// nearest, whichever the device does; fp32 accumulation of k terms). The
// fp32 GEMM stays within the accumulation term alone.
TEST(CudaGemmPrecisionTest, Tf32DiffersFromFp32WithinItsBound) {
  const int64_t m = 37, k = 300, n = 29;
  Tensor x = random<float>({m, k}, 51), y = random<float>({k, n}, 52);
  KernelAttrs a;
  a.spec = "ij,jk->ik";
  std::unique_ptr<Backend> fp32 = cudaTestBackend(64, false);
  std::unique_ptr<Backend> tf32 = cudaTestBackend(64, true);
  Tensor exact = runOnBackend(*fp32, KernelKind::Einsum, a, {x, y},
                              {{DType::F32, {m, n}}})[0];
  Tensor rough = runOnBackend(*tf32, KernelKind::Einsum, a, {x, y},
                              {{DType::F32, {m, n}}})[0];
  const double u = 0x1p-10, acc = double(k) * 0x1p-23;
  double largestTf32 = 0, largestFp32 = 0, differs = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0, mag = 0;
      for (int64_t l = 0; l < k; ++l) {
        double p = double(x.data<float>()[i * k + l]) *
                   double(y.data<float>()[l * n + j]);
        ref += p;
        mag += std::fabs(p);
      }
      double e32 = std::fabs(exact.data<float>()[i * n + j] - ref) / mag;
      double etf = std::fabs(rough.data<float>()[i * n + j] - ref) / mag;
      largestFp32 = std::max(largestFp32, e32);
      largestTf32 = std::max(largestTf32, etf);
      differs =
          std::max(differs, double(std::fabs(rough.data<float>()[i * n + j] -
                                             exact.data<float>()[i * n + j])));
      EXPECT_LE(e32, acc) << i << "," << j;
      EXPECT_LE(etf, 2 * u + u * u + acc) << i << "," << j;
    }
  EXPECT_GT(differs, 0) << "TF32 gave the fp32 result";
  // TF32's error is an operand rounding, far above fp32's.
  EXPECT_GT(largestTf32, 8 * largestFp32);
  std::printf("tf32: largest error / sum|ab| %.3g (fp32 %.3g), largest "
              "|tf32 - fp32| %.3g\n",
              largestTf32, largestFp32, differs);
}

// Tests ranks as threads sharing one device (partita-run --backend cuda
// over local): each thread makes its own backend, whose compute stream is
// its own, and their GEMMs and kernels, run at the same time, each give the
// cpu backend's results (on a GPU each thread makes the device current
// itself; the emulated device runs them on separate stream threads).
TEST(CudaSharedDeviceTest, RanksAsThreadsHaveTheirOwnStreams) {
  const int kRanks = 4;
  std::unique_ptr<Backend> cpu = createCpuBackend(1);
  KernelAttrs mm;
  mm.spec = "bik,bkj->bij";
  std::vector<std::vector<Tensor>> inputs, want;
  for (int r = 0; r < kRanks; ++r) {
    inputs.push_back({random<float>({3, 17, 40}, 60 + r),
                      random<float>({3, 40, 9}, 70 + r)});
    want.push_back(runOnBackend(*cpu, KernelKind::Einsum, mm, inputs[r],
                                {{DType::F32, {3, 17, 9}}}));
    std::vector<Tensor> act = runOnBackend(*cpu, KernelKind::Gelu, {},
                                           {want[r][0]},
                                           {{DType::F32, {3, 17, 9}}});
    want[r].push_back(act[0]);
  }
  std::vector<double> diff(kRanks, INFINITY);
  // Kept until every thread is done, so no two share an address by reuse.
  std::vector<std::unique_ptr<Backend>> backends(kRanks);
  std::vector<std::string> errors(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      try {
        backends[r] = cudaTestBackend(64);
        Backend *gpu = backends[r].get();
        double worst = 0;
        for (int repeat = 0; repeat < 5; ++repeat) {
          Tensor c = runOnBackend(*gpu, KernelKind::Einsum, mm, inputs[r],
                                  {{DType::F32, {3, 17, 9}}})[0];
          Tensor g = runOnBackend(*gpu, KernelKind::Gelu, {}, {c},
                                  {{DType::F32, {3, 17, 9}}})[0];
          worst = std::max({worst, relativeDifference(c, want[r][0]),
                            relativeDifference(g, want[r][1])});
        }
        diff[r] = worst;
      } catch (const std::exception &e) {
        errors[r] = e.what();
      }
    });
  for (std::thread &t : threads)
    t.join();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_LE(diff[r], 1e-5) << "rank " << r;
    for (int q = 0; q < r && backends[r] && backends[q]; ++q)
      EXPECT_NE(&backends[r]->device().computeStream(),
                &backends[q]->device().computeStream())
          << "ranks " << q << " and " << r;
  }
}

// Tests a collective enqueued on the compute stream through the nccl
// communicator of one rank (real NCCL on a GPU, its emulated layer here),
// with no host wait around it: the all_gather reads what the fill queued
// before it wrote and not what the fill queued after it writes, and the
// copy after it reads its result. One rank is what the lent GPU machine
// can run; several are the emulated executor tests'.
TEST(CudaNcclTest, EnqueuedCallIsOrderedOnTheComputeStream) {
  std::vector<float> out;
  std::string error;
  runLocalRanks(1, [&](Communicator &local) {
    try {
      NcclOptions nccl;
      nccl.emulate = cudaTestEmulated();
      std::unique_ptr<Communicator> comm = createNcclCommunicator(local, nccl);
      std::shared_ptr<CommGroup> group = comm->createGroup({0});
      CudaBackendOptions options;
      options.emulateAsync = true; // the emulated stream runs ahead
      std::unique_ptr<Backend> backend = cudaTestBackend(options);
      Device &dev = backend->device();
      Stream &stream = dev.computeStream();
      const size_t n = size_t(1) << 20;
      DeviceBuffer a = dev.allocateBuffer(n * 4), b = dev.allocateBuffer(n * 4),
                   c = dev.allocateBuffer(n * 4);
      float seven = 7, nine = 9;
      dev.fill(a.get(), &seven, 4, n, stream);
      comm->enqueue({CollectiveKind::AllGather, a.get(), b.get(), n}, *group,
                    stream);
      dev.fill(a.get(), &nine, 4, n, stream);
      dev.copy(c.get(), b.get(), n * 4, stream);
      comm->waitEnqueued();
      out.resize(n);
      dev.copyToHost(out.data(), c.get(), n * 4, stream);
    } catch (const std::exception &e) {
      error = e.what();
    }
  });
  ASSERT_EQ(error, "");
  ASSERT_EQ(out.size(), size_t(1) << 20);
  size_t sevens = 0;
  for (float v : out)
    sevens += v == 7;
  EXPECT_EQ(sevens, out.size());
}

// Tests the NCCL layer itself on one rank (on a GPU: NCCL 2.28's
// non-blocking communicators): a split of the world gives a communicator
// of one rank (NCCL fills the child in only once the parent has settled);
// two calls posted back to back with no stream, and two ordered on the
// compute stream, all complete with the right bytes (each post settles
// its call before the next, or NCCL refuses the second); after abortAll
// of both communicators, polls report Failed.
TEST(CudaNcclTest, LayerSettlesSplitsAndPostsAndAbortsTogether) {
  std::string error;
  std::vector<float> out;
  std::vector<nccl::OpState> afterAbort;
  runLocalRanks(1, [&](Communicator &local) {
    try {
      std::unique_ptr<nccl::NcclApi> api =
          cudaTestEmulated() ? nccl::createEmulatedNccl(local)
                             : nccl::createRealNccl(0);
      auto deadline = [] {
        return nccl::Clock::now() + std::chrono::seconds(20);
      };
      std::unique_ptr<nccl::Comm> world =
          api->initRank(1, api->uniqueId(), 0, deadline());
      std::unique_ptr<nccl::Comm> child = api->split(*world, 0, 0, deadline());
      if (!child)
        throw Error("the split gave no communicator");
      if (api->size(*child) != 1)
        throw Error("the split gave " + std::to_string(api->size(*child)) +
                    " ranks");
      CudaBackendOptions options;
      options.emulateAsync = true;
      std::unique_ptr<Backend> backend = cudaTestBackend(options);
      Device &dev = backend->device();
      Stream &stream = dev.computeStream();
      const size_t n = 1 << 16;
      DeviceBuffer a = dev.allocateBuffer(n * 4), b = dev.allocateBuffer(n * 4);
      float three = 3;
      dev.fill(a.get(), &three, 4, n, stream);
      stream.synchronize();
      nccl::Call gather{nccl::Call::AllGather};
      gather.send = a.get();
      gather.recv = b.get();
      gather.count = n;
      nccl::Call reduce{nccl::Call::AllReduce};
      reduce.send = reduce.recv = b.get();
      reduce.count = n;
      std::vector<std::unique_ptr<nccl::Op>> ops;
      ops.push_back(api->post(*child, gather, nullptr, deadline()));
      ops.push_back(api->post(*child, reduce, nullptr, deadline()));
      ops.push_back(api->post(*world, reduce, &stream, deadline()));
      ops.push_back(api->post(*child, gather, &stream, deadline()));
      nccl::Comm *of[] = {child.get(), child.get(), world.get(), child.get()};
      for (size_t i = 0; i < ops.size(); ++i) {
        std::string why;
        nccl::OpState state;
        auto until = deadline();
        while (((state = api->poll(*of[i], *ops[i], why)) ==
                    nccl::OpState::Pending ||
                state == nccl::OpState::Queued) &&
               nccl::Clock::now() < until)
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        if (state != nccl::OpState::Done)
          throw Error("call " + std::to_string(i) + " did not complete: " +
                      why);
      }
      out.resize(n);
      dev.copyToHost(out.data(), b.get(), n * 4, stream);
      api->abortAll({child.get(), world.get()});
      api->abortAll({world.get()}); // twice is nothing
      for (size_t i = 0; i < 2; ++i) {
        std::string why;
        afterAbort.push_back(api->poll(*of[i], *ops[i], why));
      }
    } catch (const std::exception &e) {
      error = e.what();
    }
  });
  ASSERT_EQ(error, "");
  ASSERT_EQ(out.size(), size_t(1) << 16);
  size_t threes = 0;
  for (float v : out)
    threes += v == 3;
  EXPECT_EQ(threes, out.size());
  EXPECT_EQ(afterAbort, (std::vector<nccl::OpState>{nccl::OpState::Failed,
                                                    nccl::OpState::Failed}));
}

// Tests that an einsum that is not one GEMM, and a kind with no port, fail
// with an error that names them.

// Tests that a kind with no port fails naming it, and that the cpu
// backend's checks run first (a shape mismatch, an einsum letter with two
// sizes).
TEST(CudaKernelsErrorTest, UnportedWorkIsNamed) {
  std::unique_ptr<Backend> gpu = cudaTestBackend(64);
  std::string error =
      runError(*gpu, KernelKind::Custom, {}, {random<float>({2, 8}, 3)},
               {{DType::F32, {2, 8}}});
  EXPECT_NE(error.find("kernel kind 'custom' is not ported to the cuda "
                       "backend"),
            std::string::npos)
      << error;
  error = runError(*gpu, KernelKind::Add, {},
                   {random<float>({2, 3}, 5), random<float>({3, 2}, 6)},
                   {{DType::F32, {2, 3}}});
  EXPECT_NE(error.find("add: input 1 is tensor<3x2xf32>"), std::string::npos)
      << error;
  KernelAttrs a;
  a.spec = "ij,jk->ik";
  error = runError(*gpu, KernelKind::Einsum, a,
                   {random<float>({2, 3}, 1), random<float>({4, 5}, 2)},
                   {{DType::F32, {2, 5}}});
  EXPECT_NE(error.find("letter 'j' is 4 in input 1 but 3 in input 0"),
            std::string::npos)
      << error;
}

//===----------------------------------------------------------------------===//
// Issue 17 (h17ops): every einsum as GEMM descriptors, integer binary ops,
// convert, rotary, the sorted embedding_grad
//===----------------------------------------------------------------------===//

/// Runs `call` on both backends for every block size and expects the same
/// bytes (integers, 16-bit floats, conversions: one right answer).
void expectSameBits(KernelKind kind, const KernelAttrs &attrs,
                    const std::vector<Tensor> &inputs,
                    const std::vector<OutputSpec> &outputs) {
  std::unique_ptr<Backend> cpu = createCpuBackend(1);
  std::vector<Tensor> want = runOnBackend(*cpu, kind, attrs, inputs, outputs);
  for (int block : kBlockSizes) {
    std::unique_ptr<Backend> gpu = cudaTestBackend(block);
    std::vector<Tensor> got = runOnBackend(*gpu, kind, attrs, inputs, outputs);
    for (size_t o = 0; o < want.size(); ++o) {
      size_t bytes = size_t(want[o].numElements()) * sizeOf(want[o].getDType());
      ASSERT_EQ(got[o].getShape(), want[o].getShape());
      const unsigned char *x = got[o].data<unsigned char>(),
                          *y = want[o].data<unsigned char>();
      size_t diff = 0;
      while (diff < bytes && x[diff] == y[diff])
        ++diff;
      EXPECT_EQ(diff, bytes) << toString(kind) << " output " << o
                             << ", block size " << block
                             << ": first differing byte " << diff;
    }
  }
}

// Tests the einsums of gpt and llama forward and backward (projections into
// heads and back, the tied head, and the gradients that contract over
// batch and sequence), shapes no block size divides.
TYPED_TEST(CudaKernelsTest, EinsumModelSpecs) {
  using T = TypeParam;
  const int64_t b = 2, s = 5, h = 12, n = 3, d = 4, v = 17, f = 7;
  struct Case {
    const char *spec;
    std::vector<int64_t> a, b, c;
  } cases[] = {
      {"bsh,hnd->bsnd", {b, s, h}, {h, n, d}, {b, s, n, d}},
      {"bsnd,ndh->bsh", {b, s, n, d}, {n, d, h}, {b, s, h}},
      {"bsh,vh->bsv", {b, s, h}, {v, h}, {b, s, v}},
      {"bsh,hf->bsf", {b, s, h}, {h, f}, {b, s, f}},
      // Gradients.
      {"bsnd,hnd->bsh", {b, s, n, d}, {h, n, d}, {b, s, h}},
      {"bsh,bsnd->hnd", {b, s, h}, {b, s, n, d}, {h, n, d}},
      {"bsnd,bsh->ndh", {b, s, n, d}, {b, s, h}, {n, d, h}},
      {"bsh,ndh->bsnd", {b, s, h}, {n, d, h}, {b, s, n, d}},
      {"bsv,vh->bsh", {b, s, v}, {v, h}, {b, s, h}},
      {"bsv,bsh->vh", {b, s, v}, {b, s, h}, {v, h}},
      {"bsh,bsv->vh", {b, s, h}, {b, s, v}, {v, h}},
      {"bsf,hf->bsh", {b, s, f}, {h, f}, {b, s, h}},
      {"bsh,bsf->hf", {b, s, h}, {b, s, f}, {h, f}},
  };
  for (const Case &c : cases) {
    KernelAttrs a;
    a.spec = c.spec;
    expectSame(KernelKind::Einsum, a, {random<T>(c.a, 41), random<T>(c.b, 42)},
               {{dt<T>(), c.c}});
  }
}

// Tests einsums that need more than grouping: a batch letter between the
// free and contracted ones (interleaved batch strides in an operand and in
// the result), a result in neither GEMM order (scratch and a copy), an
// operand whose letters do not group (a transpose copy), contracted letters
// in two orders, a letter summed in one operand only, size-1 letters, and
// one-operand sums and permutations.
TYPED_TEST(CudaKernelsTest, EinsumLayouts) {
  using T = TypeParam;
  struct Case {
    const char *spec;
    std::vector<int64_t> a, b, c;
  } cases[] = {
      {"ibk,bkj->bij", {5, 3, 7}, {3, 7, 4}, {3, 5, 4}},
      {"bik,bkj->ibj", {3, 5, 7}, {3, 7, 4}, {5, 3, 4}},
      {"ijk,jl->ilk", {2, 3, 5}, {3, 4}, {2, 4, 5}},
      {"ikj,kl->lij", {2, 3, 5}, {3, 4}, {4, 2, 5}},
      {"ikpj,kql->ilq", {2, 3, 6, 5}, {3, 4, 7}, {2, 7, 4}},
      {"inkd,kdj->ij", {3, 4, 5, 2}, {5, 2, 6}, {3, 6}},
      {"ndb,bdn->b", {3, 4, 5}, {5, 4, 3}, {5}},
      {"ixj,jk->ik", {4, 3, 5}, {5, 6}, {4, 6}},
      {"iuj,jk->kui", {4, 1, 5}, {5, 6}, {6, 1, 4}},
      {"bh,hf->bf", {1, 17}, {17, 13}, {1, 13}},
      {"ij,j->i", {9, 17}, {17}, {9}},
      {"i,j->ij", {9}, {6}, {9, 6}},
  };
  for (const Case &c : cases) {
    KernelAttrs a;
    a.spec = c.spec;
    expectSame(KernelKind::Einsum, a, {random<T>(c.a, 43), random<T>(c.b, 44)},
               {{dt<T>(), c.c}});
  }
  KernelAttrs sum;
  sum.spec = "ijk->ki";
  expectSame(KernelKind::Einsum, sum, {random<T>({3, 4, 5}, 45)},
             {{dt<T>(), {5, 3}}});
  KernelAttrs perm;
  perm.spec = "ijk->kij";
  expectSame(KernelKind::Einsum, perm, {random<T>({3, 4, 5}, 46)},
             {{dt<T>(), {5, 3, 4}}});
}

// Tests add, sub, mul, div and max on i32 and i64, with wrap-around
// (values near the type's limits) and negative divisors; exact.
TEST(CudaKernelsIntTest, IntegerBinary) {
  for (DType type : {DType::I32, DType::I64}) {
    std::vector<int64_t> shape{3, 37};
    Tensor a(type, shape), b(type, shape);
    std::mt19937_64 rng(50);
    for (int64_t i = 0; i < a.numElements(); ++i) {
      int64_t x = int64_t(rng() % 2001) - 1000, y = int64_t(rng() % 61) - 30;
      if (y == 0)
        y = 7;
      if (i % 10 == 3) // near the limits: add and mul wrap
        x = type == DType::I32 ? int64_t(INT32_MAX) - 2 : INT64_MAX - 2;
      if (type == DType::I32) {
        a.data<int32_t>()[i] = int32_t(x);
        b.data<int32_t>()[i] = int32_t(y);
      } else {
        a.data<int64_t>()[i] = x;
        b.data<int64_t>()[i] = y;
      }
    }
    for (KernelKind kind : {KernelKind::Add, KernelKind::Sub, KernelKind::Mul,
                            KernelKind::Div, KernelKind::Max})
      expectSameBits(kind, {}, {a, b}, {{type, shape}});
  }
}

// Tests that an integer division by zero and MIN / -1, which the host
// cannot see before the launch, are found on the device and reported after
// the step in the cpu backend's words (the first element of each; a zero
// divisor before an overflow), and that a clean division reports nothing.
TEST(CudaKernelsIntTest, IntegerDivisionFaultsAreFoundOnTheDevice) {
  std::unique_ptr<Backend> cpu = createCpuBackend(1);
  const char *zeroTail =
      " (found on the device after the step; the result there is 0)";
  const char *overflowTail = " (found on the device after the step; the "
                             "result there wraps to the minimum)";
  for (DType type : {DType::I32, DType::I64}) {
    std::vector<int64_t> shape{2, 150};
    auto filled = [&](auto set) {
      Tensor t(type, shape);
      for (int64_t i = 0; i < t.numElements(); ++i) {
        int64_t v = set(i);
        if (type == DType::I32)
          t.data<int32_t>()[i] = int32_t(v);
        else
          t.data<int64_t>()[i] = v;
      }
      return t;
    };
    int64_t min = type == DType::I32 ? int64_t(INT32_MIN) : INT64_MIN;
    Tensor a = filled([&](int64_t i) { return i == 230 ? min : 1000 - i; });
    Tensor clean = filled([](int64_t i) { return i % 5 + 1; });
    Tensor zero = filled([](int64_t i) {
      return i == 170 || i == 260 ? 0 : i == 230 ? -1 : i % 5 + 1;
    });
    Tensor overflow = filled([](int64_t i) { return i == 230 ? -1 : 3; });
    for (int block : {32, 256}) {
      std::unique_ptr<Backend> gpu = cudaTestBackend(block);
      runOnBackend(*gpu, KernelKind::Div, {}, {a, clean}, {{type, shape}});
      EXPECT_EQ(deviceError(*gpu), "") << "block " << block;
      std::string want =
          runError(*cpu, KernelKind::Div, {}, {a, zero}, {{type, shape}});
      EXPECT_EQ(want, "div: integer division by zero at element 170");
      runOnBackend(*gpu, KernelKind::Div, {}, {a, zero}, {{type, shape}});
      EXPECT_EQ(deviceError(*gpu), want + zeroTail) << "block " << block;
      EXPECT_EQ(deviceError(*gpu), "") << "block " << block << ": not cleared";
      want = runError(*cpu, KernelKind::Div, {}, {a, overflow}, {{type, shape}});
      EXPECT_EQ(want, "div: integer division overflows at element 230 (" +
                          std::to_string(min) + " / -1)");
      runOnBackend(*gpu, KernelKind::Div, {}, {a, overflow}, {{type, shape}});
      EXPECT_EQ(deviceError(*gpu), want + overflowTail) << "block " << block;
    }
  }
}

// Tests convert between f32 and f64, f16 and bf16 (every pair the cpu
// backend has) on random values and the hard ones: ties to even, values
// that round into the next binade or to inf, f16 subnormals, zeros, inf
// and NaN; the same bits as the cpu backend.
TEST(CudaKernelsConvertTest, Convert) {
  std::vector<float> special = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65520.0f,
                                65519.0f, 1e-8f, 6.0e-8f, 5.96e-8f, 3e-5f,
                                -6.1e-5f, 1.00048828125f, 1.000732421875f,
                                3.3895314e38f, 1.0039062f, 1.0117188f,
                                INFINITY, -INFINITY, NAN, -NAN, 1e38f};
  Tensor f32(DType::F32, {333});
  std::mt19937_64 rng(51);
  std::uniform_real_distribution<double> dist(-70000, 70000);
  for (int64_t i = 0; i < 333; ++i)
    f32.data<float>()[i] =
        i < int64_t(special.size()) ? special[i]
                                    : float(dist(rng) / double(1 << (i % 24)));
  Tensor f64(DType::F64, {333});
  for (int64_t i = 0; i < 333; ++i)
    f64.data<double>()[i] = double(f32.data<float>()[i]) * (1 + 1e-12);
  expectSameBits(KernelKind::Convert, {}, {f32}, {{DType::F64, {333}}});
  expectSameBits(KernelKind::Convert, {}, {f64}, {{DType::F32, {333}}});
  expectSameBits(KernelKind::Convert, {}, {f32}, {{DType::F32, {333}}});
  for (DType half : {DType::F16, DType::BF16}) {
    expectSameBits(KernelKind::Convert, {}, {f32}, {{half, {333}}});
    // Every 16-bit pattern back to f32 and f64.
    Tensor bits(half, {65536});
    for (int64_t i = 0; i < 65536; ++i)
      bits.data<uint16_t>()[i] = uint16_t(i);
    expectSameBits(KernelKind::Convert, {}, {bits}, {{DType::F32, {65536}}});
    expectSameBits(KernelKind::Convert, {}, {bits}, {{DType::F64, {65536}}});
  }
  // What the cpu backend refuses, refused the same way.
  std::unique_ptr<Backend> gpu = cudaTestBackend(64);
  std::string error = runError(*gpu, KernelKind::Convert, {}, {f64},
                               {{DType::BF16, {333}}});
  EXPECT_NE(error.find("converting f64 to bf16 is not supported"),
            std::string::npos)
      << error;
}

// Tests rotary and rotary_grad (the inverse rotation) on [2, 5, 3, 6]
// (pairs that no block divides) at position offsets 0 and 1000, theta
// 10000 and 500.
TYPED_TEST(CudaKernelsTest, Rotary) {
  using T = TypeParam;
  for (KernelKind kind : {KernelKind::Rotary, KernelKind::RotaryGrad})
    for (int64_t offset : {0, 1000}) {
      KernelAttrs a;
      a.positionOffset = offset;
      a.theta = offset ? 500.0 : 10000.0;
      expectSame(kind, a, {random<T>({2, 5, 3, 6}, 47)},
                 {{dt<T>(), {2, 5, 3, 6}}});
    }
  std::unique_ptr<Backend> gpu = cudaTestBackend(64);
  std::string error = runError(*gpu, KernelKind::Rotary, {},
                               {random<T>({2, 5, 3, 5}, 48)},
                               {{dt<T>(), {2, 5, 3, 5}}});
  EXPECT_NE(error.find("head_dim must be even, got 5"), std::string::npos)
      << error;
}

// Tests embedding_grad with many tokens per id (300 tokens over a shard of
// 23 rows of a 40-id vocabulary, so sums of a dozen rows in token order)
// and rows wider than a block (hidden 300): the sorted version adds in the
// cpu backend's order, so the results are the same bits.
TYPED_TEST(CudaKernelsTest, EmbeddingGradManyTokens) {
  using T = TypeParam;
  KernelAttrs a;
  a.vocabOffset = 11;
  Tensor ids = labels<int64_t>({3, 100}, 40, 52);
  expectSameBits(KernelKind::EmbeddingGrad, a,
                 {random<T>({3, 100, 300}, 53), ids}, {{dt<T>(), {23, 300}}});
  Tensor ids32 = labels<int32_t>({300}, 40, 54);
  expectSameBits(KernelKind::EmbeddingGrad, {},
                 {random<T>({300, 5}, 55), ids32}, {{dt<T>(), {40, 5}}});
}

} // namespace
} // namespace partita::runtime::test
