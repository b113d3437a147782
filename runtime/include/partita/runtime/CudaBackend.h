//===- CudaBackend.h - the cuda backend and its emulation ------*- C++ -*-===//
//
// The cuda backend runs kernels on an NVIDIA GPU: contractions as cuBLASLt
// GEMMs, every other ported kernel as a CUDA kernel written once as a
// template over an execution context (runtime/lib/cuda/Kernels.h). With
// `emulate` the same backend runs on the host instead: the device layer's
// emulated implementation (host memory, a thread per stream, the block
// emulator running the same kernel templates, the CPU's BLAS for GEMMs),
// so CI without a GPU runs the backend's code. See docs/gpu.md.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_CUDABACKEND_H
#define PARTITA_RUNTIME_CUDABACKEND_H

#include "partita/runtime/Backend.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace partita::runtime {

/// The cuda backend's attention kernels (`partita run --attention`).
enum class CudaAttention {
  /// The default: per batch, strided-batched GEMMs over the heads into a
  /// [heads, seq_q, seq_kv] scratch and a row kernel for the masked softmax
  /// (and its gradient), as the cpu backend computes it.
  Gemm,
  /// Flash-style kernels on CUDA cores (AttentionKernels.h): no [seq, seq]
  /// buffer; f32 and f64, head_dim up to 512.
  Simt,
  /// Flash-style kernels on tensor cores (AttentionMmaKernels.h): f32 as
  /// three TF32 mmas a product (about fp32's accuracy), one with `tf32`;
  /// head_dim up to 64. Other calls (f64, wider heads) run by Gemm.
  Tensor,
};
/// "gemm", "simt", "tensor".
const char *toString(CudaAttention attention);
/// The kind a name gives; nullopt for another name.
std::optional<CudaAttention> parseCudaAttention(const std::string &name);

/// Warp-wide shared-memory requests of emulated kernels and the bank
/// wavefronts they take (the block emulator's model: docs/gpu.md).
struct SharedBankCounts {
  uint64_t requests = 0;
  uint64_t wavefronts = 0; // as the 32 banks serve them
  uint64_t ideal = 0;      // the fewest the same words could take
  SharedBankCounts &operator+=(const SharedBankCounts &o) {
    requests += o.requests;
    wavefronts += o.wavefronts;
    ideal += o.ideal;
    return *this;
  }
};
struct SharedBankTraffic {
  SharedBankCounts loads, stores;
  SharedBankTraffic &operator+=(const SharedBankTraffic &o) {
    loads += o.loads;
    stores += o.stores;
    return *this;
  }
};
/// What an emulated backend's launches added up to, by kernel name (e.g.
/// "attention_mma_grad_kv"); read it once the backend's work is done.
struct SharedBankReport {
  std::mutex mutex;
  std::map<std::string, SharedBankTraffic> kernels;
};

struct CudaBackendOptions {
  /// Run on the emulated device layer instead of a GPU.
  bool emulate = false;
  /// The CUDA device of this backend.
  int device = 0;
  /// Threads per block of every kernel launch (a multiple of 32, 32-1024).
  int blockSize = 256;
  /// Emulation: fail a launch whose threads race on shared memory.
  bool checkRaces = false;
  /// Emulation: count every launch's shared-memory requests and bank
  /// wavefronts into this report (slow: each access is recorded).
  std::shared_ptr<SharedBankReport> bankReport;
  /// Emulation: the compute stream runs ahead of the host on a thread of
  /// its own, as a GPU's does (default: each item runs before enqueue
  /// returns), so host code that reads results without ordering itself
  /// after the stream gets stale bytes here too.
  bool emulateAsync = false;
  /// Emulation, testing: the compute stream waits this long before each of
  /// its items (kernels, copies, GEMMs, its waits for other streams'
  /// events: a slow device; with emulateAsync the host runs far ahead).
  std::chrono::microseconds emulatedComputeDelay{0};
  /// f32 GEMMs take TF32 operands (CUBLAS_COMPUTE_32F_FAST_TF32: 10-bit
  /// mantissas, fp32 accumulation); emulated, the operands are rounded to
  /// TF32 before the CPU's GEMM. bf16 and f16 GEMMs always accumulate in
  /// fp32; f64 ones are exact.
  bool tf32 = false;
  /// How attention and attention_grad run.
  CudaAttention attention = CudaAttention::Gemm;
  /// On a GPU, the first run of each GEMM shape times several of
  /// cuBLASLt's algorithms and keeps the fastest instead of its heuristic's
  /// first (`partita run --gemm-autotune`; docs/gpu.md). Off by default:
  /// the choice depends on timing, so runs may differ in rounding. The
  /// emulated device has one GEMM path (the CPU's BLAS) and only says so.
  bool gemmAutotune = false;
  /// Where the backend reports what it chose (the tuning's lines); null:
  /// nowhere.
  std::function<void(const std::string &line)> log;
};

/// The cuda backend. Without `emulate`, throws Error at once when no CUDA
/// device is usable, with CUDA's error text (see cudaDeviceError), or when
/// the runtime was built without CUDA. A kernel kind it has not ported
/// throws Error naming the kind when run.
std::unique_ptr<Backend> createCudaBackend(const CudaBackendOptions &options = {});

/// Empty when a CUDA device is usable; otherwise why not, e.g.
/// "cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime
/// version (cudaErrorInsufficientDriver)".
std::string cudaDeviceError();

/// Whether this runtime was built with CUDA (cmake -DPARTITA_CUDA=ON/AUTO).
bool cudaBuiltIn();

/// The number of CUDA devices; 0 without a usable one.
int cudaDevices();

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_CUDABACKEND_H
