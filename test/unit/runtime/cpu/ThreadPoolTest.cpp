//===- ThreadPoolTest.cpp - the intra-op pool gives the same bits ---------===//
//
// The non-GEMM kernels split their loops over the backend's intra-op pool
// (runtime/lib/cpu/ThreadPool.h). Tests that a backend with 2 or 3 threads
// writes bit-identical outputs to a 1-thread backend, on sizes large enough
// to be split into several chunks, and that the same call twice gives the
// same bits (determinism run to run). Large GEMMs are split over the same
// pool by rows or columns of C, and attention by (batch, head) pairs; a loop
// nested in a chunk runs serially.
//
//===----------------------------------------------------------------------===//

#include "CpuTestUtil.h"
#include "runtime/lib/cpu/ThreadPool.h"

#include <atomic>

namespace partita::runtime::test {
namespace {

/// Runs `kind` on a fresh copy of `inputs` with a backend of `threads`
/// threads; returns the outputs (shapes of `outShapes`, dtype f32).
std::vector<Tensor> runWith(int threads, KernelKind kind,
                            const KernelAttrs &attrs,
                            std::vector<Tensor> inputs,
                            const std::vector<std::vector<int64_t>> &outShapes) {
  std::unique_ptr<Backend> b = createCpuBackend(threads);
  std::vector<Tensor> in, out;
  for (const Tensor &t : inputs) {
    in.emplace_back(t.getDType(), t.getShape());
    std::memcpy(in.back().view().data, t.data<unsigned char>(),
                in.back().view().numBytes());
  }
  for (const std::vector<int64_t> &s : outShapes)
    out.emplace_back(DType::F32, s);
  KernelCall call{kind, attrs, {}, {}};
  for (Tensor &t : in)
    call.inputs.push_back(t.view());
  for (Tensor &t : out)
    call.outputs.push_back(t.view());
  b->run(call);
  return out;
}

void expectSameBits(std::vector<Tensor> a, std::vector<Tensor> b,
                    const char *what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(0, std::memcmp(a[i].view().data, b[i].view().data,
                             a[i].view().numBytes()))
        << what << ": output " << i << " differs";
}

void expectThreadIndependent(KernelKind kind, const KernelAttrs &attrs,
                             const std::vector<Tensor> &inputs,
                             const std::vector<std::vector<int64_t>> &outs,
                             const char *what) {
  std::vector<Tensor> one = runWith(1, kind, attrs, inputs, outs);
  expectSameBits(one, runWith(1, kind, attrs, inputs, outs), what);
  expectSameBits(one, runWith(2, kind, attrs, inputs, outs), what);
  expectSameBits(one, runWith(3, kind, attrs, inputs, outs), what);
}

TEST(ThreadPoolTest, AdamWIsThreadIndependent) {
  int64_t n = 200003; // several chunks of 2^15, an odd tail
  KernelAttrs attrs;
  attrs.lr = 1e-3;
  attrs.weightDecay = 0.01;
  Tensor step = makeTensor<float>({}, {3});
  expectThreadIndependent(KernelKind::AdamW, attrs,
                          {randomTensor<float>({n}, 1), randomTensor<float>({n}, 2),
                           randomTensor<float>({n}, 3),
                           randomTensor<float>({n}, 4, 0, 1), step},
                          {{n}, {n}, {n}}, "adamw");
}

TEST(ThreadPoolTest, RowKernelsAreThreadIndependent) {
  KernelAttrs attrs;
  attrs.epsilon = 1e-5;
  Tensor x = randomTensor<float>({300, 256}, 5);
  Tensor gamma = randomTensor<float>({256}, 6), beta = randomTensor<float>({256}, 7);
  expectThreadIndependent(KernelKind::LayerNorm, attrs, {x, gamma, beta},
                          {{300, 256}}, "layer_norm");
  expectThreadIndependent(KernelKind::LayerNormGrad, attrs,
                          {x, gamma, randomTensor<float>({300, 256}, 8)},
                          {{300, 256}}, "layer_norm_grad");
  // Row statistics split by rows, then column sums split by columns.
  Tensor wide = randomTensor<float>({300, 4500}, 10);
  expectThreadIndependent(KernelKind::LayerNormGammaGrad, attrs,
                          {wide, randomTensor<float>({300, 4500}, 11)},
                          {{4500}}, "layer_norm_gamma_grad");
  KernelAttrs none;
  Tensor logits = randomTensor<float>({257, 1024}, 9, -5, 5);
  Tensor labels(DType::I32, {257});
  for (int64_t t = 0; t < 257; ++t)
    labels.data<int32_t>()[t] = t % 7 == 0 ? -1 : int32_t((t * 131) % 1024);
  expectThreadIndependent(KernelKind::CrossEntropy, none, {logits, labels},
                          {{}}, "cross_entropy");
  Tensor dloss = makeTensor<float>({}, {1.5});
  expectThreadIndependent(KernelKind::CrossEntropyGrad, none,
                          {logits, labels, dloss}, {{257, 1024}},
                          "cross_entropy_grad");
  KernelAttrs last;
  last.dim = 1;
  expectThreadIndependent(KernelKind::Softmax, last, {logits}, {{257, 1024}},
                          "softmax");
}

TEST(ThreadPoolTest, ElementwiseIsThreadIndependent) {
  KernelAttrs attrs;
  Tensor a = randomTensor<float>({100001}, 10, -4, 4);
  Tensor b = randomTensor<float>({100001}, 11, -4, 4);
  attrs.tanh = true; // the f32 polynomial path
  expectThreadIndependent(KernelKind::Gelu, attrs, {a}, {{100001}}, "gelu");
  expectThreadIndependent(KernelKind::GeluGrad, attrs, {a, b}, {{100001}},
                          "gelu_grad");
  expectThreadIndependent(KernelKind::Add, attrs, {a, b}, {{100001}}, "add");
}

// m * n * k at least 2^22 multiply-adds, extents not multiples of the 64-row
// slice: rows split when M >= N, columns otherwise; operands stored
// transposed ("km" / "nk") and as they are.
TEST(ThreadPoolTest, SplitGemmsAreThreadIndependent) {
  struct Case {
    const char *spec;
    std::vector<int64_t> a, b, out;
  };
  for (const Case &c : std::vector<Case>{
           {"mk,kn->mn", {1000, 130}, {130, 200}, {1000, 200}},
           {"km,kn->mn", {130, 1000}, {130, 200}, {1000, 200}},
           {"mk,nk->mn", {200, 130}, {1000, 130}, {200, 1000}},
           {"km,nk->mn", {130, 200}, {1000, 130}, {200, 1000}},
           {"bmk,bkn->bmn", {2, 300, 100}, {2, 100, 700}, {2, 300, 700}}}) {
    KernelAttrs attrs;
    attrs.spec = c.spec;
    expectThreadIndependent(KernelKind::Einsum, attrs,
                            {randomTensor<float>(c.a, 12),
                             randomTensor<float>(c.b, 13)},
                            {c.out}, c.spec);
  }
}

TEST(ThreadPoolTest, AttentionIsThreadIndependent) {
  // 2 x 6 (batch, head) pairs of 2^17 multiply-adds: 8 pairs a chunk at
  // least, so 2 chunks at 2 and 3 threads. Grouped kv heads, causal.
  KernelAttrs attrs;
  attrs.causal = true;
  Tensor q = randomTensor<float>({2, 128, 6, 8}, 14);
  Tensor k = randomTensor<float>({2, 128, 3, 8}, 15);
  Tensor v = randomTensor<float>({2, 128, 3, 8}, 16);
  expectThreadIndependent(KernelKind::Attention, attrs, {q, k, v},
                          {{2, 128, 6, 8}}, "attention");
}

// Column sums (bias gradients) run in column blocks of 2048 split over the
// pool: every thread count gives the row-order double sum, rounded once.
TEST(ThreadPoolTest, ColumnSumsAreThreadIndependent) {
  Tensor x = randomTensor<float>({3, 100, 4500}, 17);
  KernelAttrs attrs;
  attrs.dims = {0, 1};
  std::vector<Tensor> one =
      runWith(1, KernelKind::ReduceSum, attrs, {x}, {{4500}});
  for (int64_t c = 0; c < 4500; ++c) {
    double sum = 0;
    for (int64_t r = 0; r < 300; ++r)
      sum += x.data<float>()[r * 4500 + c];
    ASSERT_EQ(static_cast<float>(sum), one[0].data<float>()[c]) << "column " << c;
  }
  expectThreadIndependent(KernelKind::ReduceSum, attrs, {x}, {{4500}},
                          "reduce_sum");
}

// Strided copies split the output's rows over the pool, each chunk starting
// its odometer mid-shape: a transpose that leaves a strided innermost
// dimension and a broadcast of a row, both against an element-by-element
// reference.
TEST(ThreadPoolTest, StridedCopiesAreThreadIndependent) {
  Tensor x = randomTensor<float>({37, 50, 64}, 18);
  KernelAttrs perm;
  perm.dims = {2, 0, 1};
  std::vector<Tensor> t =
      runWith(1, KernelKind::Transpose, perm, {x}, {{64, 37, 50}});
  for (int64_t i = 0; i < 37; ++i)
    for (int64_t j = 0; j < 50; ++j)
      for (int64_t k = 0; k < 64; ++k)
        ASSERT_EQ(x.data<float>()[(i * 50 + j) * 64 + k],
                  t[0].data<float>()[(k * 37 + i) * 50 + j]);
  expectThreadIndependent(KernelKind::Transpose, perm, {x}, {{64, 37, 50}},
                          "transpose");
  Tensor row = randomTensor<float>({300}, 19);
  KernelAttrs dims;
  dims.dims = {2};
  std::vector<Tensor> b =
      runWith(3, KernelKind::Broadcast, dims, {row}, {{7, 90, 300}});
  for (int64_t i = 0; i < 7 * 90 * 300; ++i)
    ASSERT_EQ(row.data<float>()[i % 300], b[0].data<float>()[i]);
  expectThreadIndependent(KernelKind::Broadcast, dims, {row}, {{7, 90, 300}},
                          "broadcast");
}

// A kernel loop inside a chunk (a GEMM inside attention's pairs) must not
// re-enter the pool: on chunk 0's thread it runs serially, like on the
// workers, instead of deadlocking.
TEST(ThreadPoolTest, NestedLoopsRunSerially) {
  cpu::ThreadPool pool(2);
  cpu::PoolScope scope(&pool);
  std::atomic<int64_t> inner{0};
  cpu::parallelFor(4, 1, [&](int64_t begin, int64_t end) {
    EXPECT_EQ(nullptr, cpu::currentPool());
    for (int64_t i = begin; i < end; ++i)
      cpu::parallelFor(100, 1, [&](int64_t b, int64_t e) { inner += e - b; });
  });
  EXPECT_EQ(400, inner.load());
  EXPECT_EQ(&pool, cpu::currentPool());
}

} // namespace
} // namespace partita::runtime::test
