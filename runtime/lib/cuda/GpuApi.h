//===- GpuApi.h - the thin device layer under the cuda backend --*- C++ -*-===//
//
// Every CUDA runtime and cuBLASLt call of the cuda backend sits behind this
// interface, which has two implementations:
//   - CudaApi (CudaApi.cpp, built with PARTITA_CUDA): cudaMalloc,
//     cudaMemcpyAsync, streams and events, the __global__ kernels of
//     CudaKernels.cu, cublasLtMatmul;
//   - the emulated one (EmulatedApi.cpp, always built): host memory, a
//     thread per stream, events as real dependencies between those threads,
//     the block emulator running the same kernel templates, and the CPU's
//     BLAS given the GEMM arguments cuBLASLt would get.
// The Device / Stream / Event of the runtime (GpuDevice.cpp) and the
// backend (CudaBackend.cpp) are written once over it, so CI runs them
// without a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_LIB_CUDA_GPUAPI_H
#define PARTITA_RUNTIME_LIB_CUDA_GPUAPI_H

#include "partita/runtime/Device.h"
#include "partita/runtime/Tensor.h"
#include "runtime/lib/cuda/BlockEmulator.h"
#include "runtime/lib/cuda/Kernels.h"

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace partita::runtime::gpu {

/// A strided-batched GEMM in row-major terms: for each of `batch` items,
/// C[m,n] = alpha * op(A) op(B) + beta * C, op(A) [m,k] (A stored [k,m]
/// when transA), op(B) [k,n]; leading dimensions and batch strides in
/// elements. The real implementation hands cuBLASLt the column-major
/// transpose of this (C^T = op(B)^T op(A)^T: operands swapped, flags kept).
/// Precision: f64 exact; f32 exact (CUBLAS_COMPUTE_32F) or, with `tf32`,
/// TF32 operands and fp32 accumulation (CUBLAS_COMPUTE_32F_FAST_TF32); bf16
/// and f16 operands and result with fp32 accumulation and scaling
/// (CUBLAS_COMPUTE_32F), the result rounded once.
struct GemmDesc {
  DType type = DType::F32; // F32, F64, BF16 or F16
  bool tf32 = false;       // F32 only
  bool transA = false, transB = false;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  double alpha = 1, beta = 0;
  const void *a = nullptr, *b = nullptr;
  void *c = nullptr;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t strideA = 0, strideB = 0, strideC = 0;
};

class GpuApi {
public:
  virtual ~GpuApi() = default;
  /// "cuda:0", "cuda (emulated)".
  virtual const char *name() const = 0;
  /// Whether the host may read device memory directly.
  virtual bool hostAccessible() const = 0;
  /// Zeroed memory of `bytes` in `space`; throws Error naming the size.
  virtual void *allocate(size_t bytes, MemorySpace space) = 0;
  virtual void deallocate(void *p, MemorySpace space) = 0;
  virtual Stream &computeStream() = 0;
  virtual std::unique_ptr<Stream> createStream() = 0;
  /// Any direction (device, pinned host or pageable host memory), ordered
  /// on `stream`.
  virtual void copy(void *dst, const void *src, size_t bytes,
                    Stream &stream) = 0;
  /// Queues a kernel of Kernels.h.
  virtual void launch(const KernelLaunch &launch, Stream &stream) = 0;
  /// On the compute stream only (the real layer's cuBLASLt workspace is
  /// the compute stream's).
  virtual void gemm(const GemmDesc &gemm, Stream &stream) = 0;
  /// Sorts `count` (key, value) pairs of uint32 in device memory by the
  /// low `keyBits` bits of the key, stably (pairs with equal keys keep
  /// their order): keysIn, valuesIn -> keysOut, valuesOut (four distinct
  /// buffers), ordered on `stream`. cub::DeviceRadixSort on a GPU,
  /// std::stable_sort emulated. count < 2^31.
  virtual void sortPairs(const uint32_t *keysIn, uint32_t *keysOut,
                         const uint32_t *valuesIn, uint32_t *valuesOut,
                         int64_t count, int keyBits, Stream &stream) = 0;
};

struct EmulatedApiOptions {
  EmulatorOptions emulator;
  /// Each launch's shared-memory bank counts are added here under its
  /// kernel's name (emulator.bankStats is per launch); null: not counted.
  std::shared_ptr<SharedBankReport> bankReport;
  /// The compute stream's thread runs each item before enqueue returns
  /// (and an item's error is thrown to the caller), as the cpu device's
  /// inline stream does: the executor issues collectives from the host
  /// thread and expects the compute stream's work done by then. False gives
  /// a stream that runs ahead as a CUDA stream does (tests of streams and
  /// events).
  bool synchronousCompute = true;
  /// Testing: the compute stream waits this long before each item
  /// (HostStreamOptions::itemDelay), a slow device.
  std::chrono::microseconds computeDelay{0};
  /// Device-space memory is handed out at PROT_NONE addresses (its bytes
  /// live elsewhere, reached only through this layer), so a host access to
  /// device memory faults as on a GPU instead of working by accident.
  bool guardDeviceMemory = true;
};

/// The host address of the bytes behind emulated device address `p` (inside
/// a guarded allocation, or at its end); `p` itself for any other address
/// (host memory, or an unguarded emulated allocation). Throws Error naming
/// `what` when [p, p + bytes) reaches past the allocation. For the emulated
/// layers only (EmulatedApi.cpp, EmulatedNccl.cpp): what on a GPU the device
/// or NCCL reads.
void *emulatedHostAddress(const void *p, size_t bytes, const char *what);

/// The emulated device layer.
std::unique_ptr<GpuApi> createEmulatedApi(const EmulatedApiOptions &options);

struct CudaApiOptions {
  /// The first time a GEMM shape runs, time up to kGemmTuneCandidates of
  /// cuBLASLt's algorithms for it on the device and keep the fastest
  /// (chooseGemmAlgorithm, GemmTuning.h) instead of the heuristic's first.
  /// The trial runs read the real operands and write the real output when
  /// beta is 0 (the real run overwrites it), else a scratch output of at
  /// most kGemmTuneScratchBytes, allocated for the trials only; a larger
  /// output with beta 1 keeps the heuristic's first. The choice depends on
  /// timing, so two runs may choose differently and differ in rounding.
  bool gemmAutotune = false;
  /// Where the tuning says what it chose: one line per shape
  /// (describeGemmTuning); null: nowhere.
  std::function<void(const std::string &line)> log;
};

/// The largest scratch output the tuning allocates.
constexpr size_t kGemmTuneScratchBytes = size_t(512) << 20;

/// The real one on device `ordinal`; throws Error with CUDA's error text
/// when there is no usable device, or when the runtime was built without
/// CUDA.
std::unique_ptr<GpuApi> createCudaApi(int ordinal,
                                      const CudaApiOptions &options = {});

/// Whether this runtime was built with CUDA (PARTITA_CUDA).
bool builtWithCuda();

/// The number of CUDA devices, or -1 with `error` set to CUDA's text
/// ("cudaGetDeviceCount: CUDA driver version is insufficient for CUDA
/// runtime version (cudaErrorInsufficientDriver)") or to "built without
/// CUDA".
int cudaDeviceCount(std::string &error);

/// The device layer's Device (GpuDevice.cpp).
std::unique_ptr<Device> createGpuDevice(GpuApi &api);

} // namespace partita::runtime::gpu

#endif // PARTITA_RUNTIME_LIB_CUDA_GPUAPI_H
