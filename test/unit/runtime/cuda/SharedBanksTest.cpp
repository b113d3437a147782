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

#include <initializer_list>
#include <string>

namespace partita::runtime::test {
namespace {

/// random<T> (CudaTestUtil.h) in [-1.5, 1.5) of `dtype`, f32 or f64.
Tensor randomTensor(DType dtype, std::vector<int64_t> shape, uint64_t seed) {
  return dtype == DType::F32 ? random<float>(std::move(shape), seed, -1.5, 1.5)
                             : random<double>(std::move(shape), seed, -1.5, 1.5);
}

/// Runs attention and its "qkv" gradient on the emulated backend with
/// `options` and returns the bank report.
std::shared_ptr<SharedBankReport> attentionBanks(CudaBackendOptions options,
                                                 DType dtype,
                                                 std::vector<int64_t> shape,
                                                 bool causal) {
  auto report = std::make_shared<SharedBankReport>();
  options.emulate = true;
  options.bankReport = report;
  std::unique_ptr<Backend> backend = createCudaBackend(options);
  std::vector<Tensor> in;
  for (uint64_t seed = 1; seed <= 4; ++seed)
    in.push_back(randomTensor(dtype, shape, seed));
  KernelAttrs a;
  a.causal = causal;
  runOnBackend(*backend, KernelKind::Attention, a, {in[0], in[1], in[2]},
               {{dtype, shape}});
  a.wrt = "qkv";
  runOnBackend(*backend, KernelKind::AttentionGrad, a, in,
               {{dtype, shape}, {dtype, shape}, {dtype, shape}});
  return report;
}

/// Expects `kernels` in the report, each with loads and stores, at the
/// ideal wavefronts.
void expectConflictFree(const SharedBankReport &report,
                        std::initializer_list<const char *> kernels) {
  for (const char *kernel : kernels) {
    auto it = report.kernels.find(kernel);
    ASSERT_NE(it, report.kernels.end()) << kernel << " did not run";
    const SharedBankTraffic &t = it->second;
    EXPECT_GT(t.loads.requests, 0u) << kernel;
    EXPECT_GT(t.stores.requests, 0u) << kernel;
    EXPECT_EQ(t.loads.wavefronts, t.loads.ideal)
        << kernel << ": loads in " << t.loads.wavefronts << " wavefronts where "
        << t.loads.ideal << " would do";
    EXPECT_EQ(t.stores.wavefronts, t.stores.ideal)
        << kernel << ": stores in " << t.stores.wavefronts
        << " wavefronts where " << t.stores.ideal << " would do";
  }
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
        CudaBackendOptions options;
        options.attention = CudaAttention::Tensor;
        options.tf32 = tf32;
        expectConflictFree(*attentionBanks(options, DType::F32, shape, causal),
                           {"attention_mma_forward", "attention_mma_grad_q",
                            "attention_mma_grad_kv"});
      }
}

// Tests that the flash-style kernels on CUDA cores (--attention simt) read
// their staged rows without a bank conflict: each lane's head dimensions
// are 16-byte chunks dealt round its group (attnDim), so a group reads
// consecutive chunks. f32 and f64 at head_dim 64 (4 lanes a row), 128 (8)
// and 16 (1), blocks of 64 and 256. With each lane's dimensions contiguous
// in a staged row (lanes kDims apart, the layout before 2026-11-30) the
// loads take 2x to 8x the ideal (head_dim 64 to 128) and this test fails.
TEST(SharedBanksTest, SimtAttentionHasNoBankConflicts) {
  for (DType dtype : {DType::F32, DType::F64})
    for (int64_t dim : {64, 128, 16})
      for (int block : {64, 256}) {
        SCOPED_TRACE(std::string(toString(dtype)) + ", head_dim " +
                     std::to_string(dim) + ", block " + std::to_string(block));
        CudaBackendOptions options;
        options.attention = CudaAttention::Simt;
        options.blockSize = block;
        expectConflictFree(
            *attentionBanks(options, dtype, {1, 40, 2, dim}, /*causal=*/true),
            {"attention_forward", "attention_grad_q", "attention_grad_kv"});
      }
}

// Tests that the row and reduction kernels (a block per row, or a
// column's partial sums by row chunks) reach shared memory without a bank
// conflict at a GPU's block size: softmax, layer_norm and its two
// gradients, rms_norm, cross_entropy and its gradient, and sums and maxima
// over rows and over columns, in f32 and f64 where the kernel has both.
// With column_partials' warp partials stored lane-major instead of
// warp-major (planted), its loads and stores take 7.9x the ideal and this
// test fails.
TEST(SharedBanksTest, RowAndReductionKernelsHaveNoBankConflicts) {
  auto report = std::make_shared<SharedBankReport>();
  CudaBackendOptions options;
  options.emulate = true;
  options.blockSize = 256;
  options.bankReport = report;
  std::unique_ptr<Backend> b = createCudaBackend(options);
  std::vector<int64_t> rows{16, 300}, row{300};
  KernelAttrs none;
  for (DType dt : {DType::F32, DType::F64}) {
    Tensor x = randomTensor(dt, rows, 1), dy = randomTensor(dt, rows, 2),
           gamma = randomTensor(dt, row, 3), beta = randomTensor(dt, row, 4);
    runOnBackend(*b, KernelKind::LayerNorm, none, {x, gamma, beta},
                 {{dt, rows}});
    runOnBackend(*b, KernelKind::LayerNormGrad, none, {x, gamma, dy},
                 {{dt, rows}});
    runOnBackend(*b, KernelKind::LayerNormGammaGrad, none, {x, dy},
                 {{dt, row}});
    runOnBackend(*b, KernelKind::RMSNorm, none, {x, gamma}, {{dt, rows}});
    KernelAttrs softmax;
    softmax.dim = 1;
    runOnBackend(*b, KernelKind::Softmax, softmax, {x}, {{dt, rows}});
    for (int64_t dim : {0, 1}) {
      KernelAttrs reduce;
      reduce.dims = {dim};
      std::vector<int64_t> kept{dim == 0 ? rows[1] : rows[0]};
      runOnBackend(*b, KernelKind::ReduceSum, reduce, {x}, {{dt, kept}});
      runOnBackend(*b, KernelKind::ReduceMax, reduce, {x}, {{dt, kept}});
    }
    Tensor labels(DType::I32, {rows[0]});
    for (int64_t i = 0; i < rows[0]; ++i)
      labels.data<int32_t>()[i] = int32_t((i * 37) % rows[1]);
    Tensor dloss(dt, {});
    if (dt == DType::F32)
      dloss.data<float>()[0] = 1.0f;
    else
      dloss.data<double>()[0] = 1.0;
    runOnBackend(*b, KernelKind::CrossEntropy, none, {x, labels}, {{dt, {}}});
    runOnBackend(*b, KernelKind::CrossEntropyGrad, none, {x, labels, dloss},
                 {{dt, rows}});
  }
  expectConflictFree(*report,
                     {"layer_norm", "norm_grad", "column_partials", "rms_norm",
                      "softmax", "reduce", "cross_entropy_rows",
                      "cross_entropy_grad"});
}

} // namespace
} // namespace partita::runtime::test
