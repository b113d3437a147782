//===- SharedBanksTest.cpp - kernels' shared memory in bank wavefronts ---===//
//
// The block emulator counts what each kernel's shared-memory accesses cost
// in bank wavefronts (CudaBackendOptions::bankReport); these tests hold
// kernels whose layouts were chosen to be free of bank conflicts to it, so
// a change of layout that brings conflicts back fails here, without a GPU.
//
//===----------------------------------------------------------------------===//

#include "CudaTestUtil.h"

#include <gtest/gtest.h>

#include <random>

namespace partita::runtime::test {
namespace {

Tensor randomF32(std::vector<int64_t> shape, uint64_t seed) {
  Tensor t(DType::F32, std::move(shape));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.5f, 1.5f);
  for (int64_t i = 0; i < t.numElements(); ++i)
    t.data<float>()[i] = dist(rng);
  return t;
}

/// Runs attention and its "qkv" gradient on the emulated tensor-core
/// kernels and returns the bank report.
std::shared_ptr<SharedBankReport> attentionBanks(std::vector<int64_t> shape,
                                                 bool causal, bool tf32) {
  auto report = std::make_shared<SharedBankReport>();
  CudaBackendOptions options;
  options.emulate = true;
  options.attention = CudaAttention::Tensor;
  options.tf32 = tf32;
  options.bankReport = report;
  std::unique_ptr<Backend> backend = createCudaBackend(options);
  std::vector<Tensor> in;
  for (uint64_t seed = 1; seed <= 4; ++seed)
    in.push_back(randomF32(shape, seed));
  KernelAttrs a;
  a.causal = causal;
  runOnBackend(*backend, KernelKind::Attention, a, {in[0], in[1], in[2]},
               {{DType::F32, shape}});
  a.wrt = "qkv";
  runOnBackend(*backend, KernelKind::AttentionGrad, a, in,
               {{DType::F32, shape}, {DType::F32, shape}, {DType::F32, shape}});
  return report;
}

// Tests that the tensor-core attention kernels (forward, dq, dk and dv)
// load their fragments and stage their tiles without a bank conflict: each
// request in as few wavefronts as its words allow. Shapes with head_dim 64
// (16-byte staging) and 30 (element staging, zero padded), causal or not,
// three TF32 products or one. Without mmaTileAt's shift (rows 72 floats
// apart, conflict free read as is) the fragments read transposed cost 2
// wavefronts a load and this test fails.
TEST(SharedBanksTest, TensorCoreAttentionHasNoBankConflicts) {
  for (std::vector<int64_t> shape :
       {std::vector<int64_t>{1, 72, 2, 64}, std::vector<int64_t>{2, 40, 1, 30}})
    for (bool causal : {false, true})
      for (bool tf32 : {false, true}) {
        SCOPED_TRACE("head_dim " + std::to_string(shape[3]) +
                     (causal ? ", causal" : "") + (tf32 ? ", --tf32" : ""));
        std::shared_ptr<SharedBankReport> report =
            attentionBanks(shape, causal, tf32);
        for (const char *kernel :
             {"attention_mma_forward", "attention_mma_grad_q",
              "attention_mma_grad_kv"}) {
          auto it = report->kernels.find(kernel);
          ASSERT_NE(it, report->kernels.end()) << kernel << " did not run";
          const SharedBankTraffic &t = it->second;
          EXPECT_GT(t.loads.requests, 0u) << kernel;
          EXPECT_GT(t.stores.requests, 0u) << kernel;
          EXPECT_EQ(t.loads.wavefronts, t.loads.ideal)
              << kernel << ": loads in " << t.loads.wavefronts
              << " wavefronts where " << t.loads.ideal << " would do";
          EXPECT_EQ(t.stores.wavefronts, t.stores.ideal)
              << kernel << ": stores in " << t.stores.wavefronts
              << " wavefronts where " << t.stores.ideal << " would do";
        }
      }
}

} // namespace
} // namespace partita::runtime::test
