//===- CudaApi.cpp - the device layer on a real GPU (cudart, cuBLASLt) ----===//
//
// Every CUDA runtime and cuBLASLt call of the cuda backend. Links the CUDA
// runtime (never the driver library libcuda directly, so a binary starts on
// a machine without a driver and reports the runtime's error instead) and
// cuBLASLt. Built only with PARTITA_CUDA; CI compiles it, and only a GPU
// machine runs it (scripts/gpu-check.sh).
//
// Streams: a Stream is a cudaStream_t (non-blocking); enqueue() of host work
// is cudaLaunchHostFunc, whose exceptions fail the stream as the runtime's
// failure model says (later host work is skipped, synchronize rethrows).
//
//===----------------------------------------------------------------------===//

#include "runtime/lib/cuda/CudaKernels.h"
#include "runtime/lib/cuda/GpuApi.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>

namespace partita::runtime::gpu {

namespace {

std::string cudaText(cudaError_t e) {
  return std::string(cudaGetErrorString(e)) + " (" + cudaGetErrorName(e) + ")";
}

void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    throw Error(std::string("cuda: ") + what + ": " + cudaText(e));
}

void checkLt(cublasStatus_t s, const char *what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string("cuda: ") + what + ": cuBLASLt status " +
                std::to_string(int(s)));
}

struct HostWork {
  std::function<void()> work;
  std::shared_ptr<struct CudaStreamState> state;
};

struct CudaStreamState {
  std::mutex mutex;
  std::exception_ptr error;
};

void CUDART_CB runHostWork(void *data) {
  std::unique_ptr<HostWork> item(static_cast<HostWork *>(data));
  {
    std::lock_guard<std::mutex> lock(item->state->mutex);
    if (item->state->error)
      return;
  }
  try {
    item->work();
  } catch (...) {
    std::lock_guard<std::mutex> lock(item->state->mutex);
    if (!item->state->error)
      item->state->error = std::current_exception();
  }
}

class CudaEvent final : public Event {
public:
  explicit CudaEvent(std::shared_ptr<CudaStreamState> state)
      : state(std::move(state)) {
    check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
          "cudaEventCreateWithFlags");
  }
  ~CudaEvent() override { cudaEventDestroy(event); }
  void synchronize() override {
    if (!recorded)
      return;
    check(cudaEventSynchronize(event), "cudaEventSynchronize");
    std::lock_guard<std::mutex> lock(state->mutex);
    if (state->error)
      std::rethrow_exception(state->error);
  }
  cudaEvent_t event = nullptr;
  bool recorded = false;
  std::shared_ptr<CudaStreamState> state;
};

class CudaStream final : public Stream {
public:
  CudaStream() : state(std::make_shared<CudaStreamState>()) {
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
          "cudaStreamCreateWithFlags");
  }
  ~CudaStream() override {
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
  }
  void enqueue(std::function<void()> work) override {
    auto *item = new HostWork{std::move(work), state};
    cudaError_t e = cudaLaunchHostFunc(stream, runHostWork, item);
    if (e != cudaSuccess) {
      delete item;
      check(e, "cudaLaunchHostFunc");
    }
  }
  std::unique_ptr<Event> createEvent() override {
    return std::make_unique<CudaEvent>(state);
  }
  void record(Event &event) override {
    auto &e = static_cast<CudaEvent &>(event);
    check(cudaEventRecord(e.event, stream), "cudaEventRecord");
    e.recorded = true;
  }
  void wait(Event &event) override {
    auto &e = static_cast<CudaEvent &>(event);
    if (e.recorded)
      check(cudaStreamWaitEvent(stream, e.event, 0), "cudaStreamWaitEvent");
  }
  void synchronize() override {
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    std::lock_guard<std::mutex> lock(state->mutex);
    if (state->error)
      std::rethrow_exception(state->error);
  }
  cudaStream_t stream = nullptr;
  std::shared_ptr<CudaStreamState> state;
};

cudaStream_t native(Stream &s) { return static_cast<CudaStream &>(s).stream; }

class CudaApi final : public GpuApi {
public:
  explicit CudaApi(int ordinal) {
    std::string error;
    int count = cudaDeviceCount(error);
    if (count < 0)
      throw Error("cuda: no usable CUDA device: " + error);
    if (ordinal < 0 || ordinal >= count)
      throw Error("cuda: device " + std::to_string(ordinal) +
                  " does not exist (" + std::to_string(count) +
                  " CUDA device" + (count == 1 ? "" : "s") + ")");
    check(cudaSetDevice(ordinal), "cudaSetDevice");
    deviceName = "cuda:" + std::to_string(ordinal);
    compute = std::make_unique<CudaStream>();
    checkLt(cublasLtCreate(&lt), "cublasLtCreate");
  }
  ~CudaApi() override {
    compute.reset();
    if (sortTemp)
      cudaFree(sortTemp);
    if (lt)
      cublasLtDestroy(lt);
  }

  const char *name() const override { return deviceName.c_str(); }
  bool hostAccessible() const override { return false; }

  void *allocate(size_t bytes, MemorySpace space) override {
    void *p = nullptr;
    size_t size = bytes ? bytes : 1;
    cudaError_t e = space == MemorySpace::Host ? cudaMallocHost(&p, size)
                                               : cudaMalloc(&p, size);
    if (e != cudaSuccess)
      throw Error("cuda: cannot allocate " + std::to_string(bytes) +
                  " bytes of " + toString(space) + " memory: " + cudaText(e));
    if (space == MemorySpace::Host)
      std::memset(p, 0, size);
    else
      check(cudaMemset(p, 0, size), "cudaMemset");
    return p;
  }
  void deallocate(void *p, MemorySpace space) override {
    if (space == MemorySpace::Host)
      cudaFreeHost(p);
    else
      cudaFree(p);
  }
  Stream &computeStream() override { return *compute; }
  std::unique_ptr<Stream> createStream() override {
    return std::make_unique<CudaStream>();
  }
  void copy(void *dst, const void *src, size_t bytes, Stream &stream) override {
    if (bytes)
      check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, native(stream)),
            "cudaMemcpyAsync");
  }
  void launch(const KernelLaunch &launch, Stream &stream) override {
    check(launchOnDevice(launch, native(stream)), "kernel launch");
  }

  /// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the
  /// operands swap, their flags stay, and each row-major [r, c] matrix is a
  /// column-major [c, r] one with the same leading dimension.
  void gemm(const GemmDesc &g, Stream &stream) override {
    bool f64 = g.type == ElemType::F64;
    cudaDataType_t type = f64 ? CUDA_R_64F : CUDA_R_32F;
    cublasComputeType_t computeType =
        f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    auto cleanup = [&] {
      if (la) cublasLtMatrixLayoutDestroy(la);
      if (lb) cublasLtMatrixLayoutDestroy(lb);
      if (lc) cublasLtMatrixLayoutDestroy(lc);
      if (op) cublasLtMatmulDescDestroy(op);
    };
    try {
      checkLt(cublasLtMatmulDescCreate(&op, computeType, type),
              "cublasLtMatmulDescCreate");
      cublasOperation_t ta = g.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
      cublasOperation_t tb = g.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
      checkLt(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA,
                                             &ta, sizeof ta),
              "TRANSA");
      checkLt(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB,
                                             &tb, sizeof tb),
              "TRANSB");
      // First operand: the row-major B ([k, n], or [n, k] when transB).
      checkLt(cublasLtMatrixLayoutCreate(&la, type, g.transB ? g.k : g.n,
                                         g.transB ? g.n : g.k, g.ldb),
              "layout B");
      checkLt(cublasLtMatrixLayoutCreate(&lb, type, g.transA ? g.m : g.k,
                                         g.transA ? g.k : g.m, g.lda),
              "layout A");
      checkLt(cublasLtMatrixLayoutCreate(&lc, type, g.n, g.m, g.ldc),
              "layout C");
      if (g.batch > 1) {
        int32_t batch = int32_t(g.batch);
        struct {
          cublasLtMatrixLayout_t layout;
          int64_t stride;
        } items[] = {{la, g.strideB}, {lb, g.strideA}, {lc, g.strideC}};
        for (auto &item : items) {
          checkLt(cublasLtMatrixLayoutSetAttribute(
                      item.layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                      sizeof batch),
                  "batch count");
          checkLt(cublasLtMatrixLayoutSetAttribute(
                      item.layout,
                      CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                      &item.stride, sizeof item.stride),
                  "batch stride");
        }
      }
      float alpha32 = float(g.alpha), beta32 = float(g.beta);
      const void *alpha = f64 ? static_cast<const void *>(&g.alpha) : &alpha32;
      const void *beta = f64 ? static_cast<const void *>(&g.beta) : &beta32;
      checkLt(cublasLtMatmul(lt, op, alpha, g.b, la, g.a, lb, beta, g.c, lc,
                             g.c, lc, nullptr, nullptr, 0, native(stream)),
              "cublasLtMatmul");
    } catch (...) {
      cleanup();
      throw;
    }
    cleanup();
  }

  /// cub's scratch is kept between sorts; growing it waits for the
  /// device (the old scratch may still be in use by a queued sort).
  void sortPairs(const uint32_t *keysIn, uint32_t *keysOut,
                 const uint32_t *valuesIn, uint32_t *valuesOut, int64_t count,
                 int keyBits, Stream &stream) override {
    if (count <= 0)
      return;
    if (count > INT32_MAX)
      throw Error("cuda: sortPairs of " + std::to_string(count) +
                  " pairs (at most 2^31 - 1)");
    size_t need = 0;
    check(sortPairsOnDevice(nullptr, need, keysIn, keysOut, valuesIn,
                            valuesOut, int(count), keyBits, native(stream)),
          "cub::DeviceRadixSort::SortPairs (scratch size)");
    if (need > sortTempBytes) {
      check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      if (sortTemp)
        cudaFree(sortTemp);
      sortTemp = nullptr;
      sortTempBytes = 0;
      check(cudaMalloc(&sortTemp, need), "cudaMalloc (sort scratch)");
      sortTempBytes = need;
    }
    size_t bytes = sortTempBytes;
    check(sortPairsOnDevice(sortTemp, bytes, keysIn, keysOut, valuesIn,
                            valuesOut, int(count), keyBits, native(stream)),
          "cub::DeviceRadixSort::SortPairs");
  }

private:
  void *sortTemp = nullptr;
  size_t sortTempBytes = 0;
  std::string deviceName;
  std::unique_ptr<CudaStream> compute;
  cublasLtHandle_t lt = nullptr;
};

} // namespace

bool builtWithCuda() { return true; }

int cudaDeviceCount(std::string &error) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    error = "cudaGetDeviceCount: " + cudaText(e);
    return -1;
  }
  return count;
}

std::unique_ptr<GpuApi> createCudaApi(int ordinal) {
  return std::make_unique<CudaApi>(ordinal);
}

} // namespace partita::runtime::gpu
