//===- ThreadPoolTest.cpp - the intra-op pool gives the same bits ---------===//
//
// The non-GEMM kernels split their loops over the backend's intra-op pool
// (runtime/lib/cpu/ThreadPool.h). Tests that a backend with 2 or 3 threads
// writes bit-identical outputs to a 1-thread backend, on sizes large enough
// to be split into several chunks, and that the same call twice gives the
// same bits (determinism run to run).
//
//===----------------------------------------------------------------------===//

#include "CpuTestUtil.h"

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

} // namespace
} // namespace partita::runtime::test
