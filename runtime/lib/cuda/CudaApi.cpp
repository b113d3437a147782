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
#include "runtime/lib/cuda/CudaNative.h"
#include "runtime/lib/cuda/GemmTuning.h"
#include "runtime/lib/cuda/GpuApi.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

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
    throw Error(std::string("cuda: ") + what + ": " +
                cublasLtGetStatusString(s) + " (" + cublasLtGetStatusName(s) +
                ")");
}

struct HostWork {
  std::function<void()> work;
  std::shared_ptr<struct CudaStreamState> state;
};

struct CudaStreamState {
  std::mutex mutex;
  std::exception_ptr error;
};

/// Runs a host work item unless its stream has failed; a throw fails it.
void runHostWorkItem(HostWork &item) {
  {
    std::lock_guard<std::mutex> lock(item.state->mutex);
    if (item.state->error)
      return;
  }
  try {
    item.work();
  } catch (...) {
    std::lock_guard<std::mutex> lock(item.state->mutex);
    if (!item.state->error)
      item.state->error = std::current_exception();
  }
}

/// A queued item: runs once, then frees itself.
void CUDART_CB runHostWork(void *data) {
  std::unique_ptr<HostWork> item(static_cast<HostWork *>(data));
  runHostWorkItem(*item);
}

/// A captured item: runs at every launch of its graph, which owns it.
void CUDART_CB runCapturedHostWork(void *data) {
  runHostWorkItem(*static_cast<HostWork *>(data));
}

/// A captured step: the instantiated graph, and the host work items its
/// host nodes run.
class CudaGraph final : public Graph {
public:
  CudaGraph(cudaGraphExec_t exec, std::vector<std::unique_ptr<HostWork>> items)
      : exec(exec), items(std::move(items)) {}
  /// A graph destroyed while a launch still runs goes on running (CUDA
  /// frees it on completion), and its host nodes read `items`: the last
  /// launch's stream is drained first.
  ~CudaGraph() override {
    if (launchedOn)
      cudaStreamSynchronize(launchedOn);
    cudaGraphExecDestroy(exec);
  }
  void launch(Stream &stream) override;

private:
  cudaGraphExec_t exec;
  cudaStream_t launchedOn = nullptr;
  std::vector<std::unique_ptr<HostWork>> items;
};

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
    if (capturing) {
      // The graph runs the host node at every launch: the item lives as
      // long as the graph.
      captured.push_back(
          std::make_unique<HostWork>(HostWork{std::move(work), state}));
      check(cudaLaunchHostFunc(stream, runCapturedHostWork,
                               captured.back().get()),
            "cudaLaunchHostFunc (captured)");
      return;
    }
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
  bool canCapture() const override { return true; }
  /// Thread-local capture mode: calls that are unsafe during a capture
  /// fail only on this thread (another rank's thread sharing the device
  /// may allocate meanwhile).
  void beginCapture() override {
    if (capturing)
      throw Error("beginCapture while a capture is under way");
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
          "cudaStreamBeginCapture");
    capturing = true;
    captured.clear();
  }
  std::unique_ptr<Graph> endCapture() override {
    if (!capturing)
      return Stream::endCapture();
    capturing = false;
    std::vector<std::unique_ptr<HostWork>> items = std::move(captured);
    captured.clear();
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(stream, &graph);
    if (e != cudaSuccess) {
      // The call that invalidated the capture left its error too; neither
      // is the next launch's.
      cudaGetLastError();
      if (graph)
        cudaGraphDestroy(graph);
      check(e, "cudaStreamEndCapture");
    }
    cudaGraphExec_t exec = nullptr;
    e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess)
      cudaGetLastError();
    check(e, "cudaGraphInstantiate");
    return std::make_unique<CudaGraph>(exec, std::move(items));
  }
  cudaStream_t stream = nullptr;
  bool capturing = false;
  std::vector<std::unique_ptr<HostWork>> captured;
  std::shared_ptr<CudaStreamState> state;
};

cudaStream_t native(Stream &s) { return static_cast<CudaStream &>(s).stream; }

void CudaGraph::launch(Stream &stream) {
  launchedOn = native(stream);
  check(cudaGraphLaunch(exec, launchedOn), "cudaGraphLaunch");
}

class CudaApi final : public GpuApi {
public:
  CudaApi(int ordinal, const CudaApiOptions &options) : options(options) {
    std::string error;
    int count = cudaDeviceCount(error);
    if (count < 0)
      throw Error("cuda: no usable CUDA device: " + error);
    if (ordinal < 0 || ordinal >= count)
      throw Error("cuda: device " + std::to_string(ordinal) +
                  " does not exist (" + std::to_string(count) +
                  " CUDA device" + (count == 1 ? "" : "s") + ")");
    this->ordinal = ordinal;
    check(cudaSetDevice(ordinal), "cudaSetDevice");
    deviceName = "cuda:" + std::to_string(ordinal);
    compute = std::make_unique<CudaStream>();
    checkLt(cublasLtCreate(&lt), "cublasLtCreate");
  }
  ~CudaApi() override {
    // Not bind(): a destructor must not throw (after a device fault
    // cudaSetDevice may fail; the frees below then fail quietly too).
    cudaSetDevice(ordinal);
    compute.reset();
    gemmPlans.clear();
    if (workspace)
      cudaFree(workspace);
    if (sortTemp)
      cudaFree(sortTemp);
    if (lt)
      cublasLtDestroy(lt);
  }

  const char *name() const override { return deviceName.c_str(); }
  bool hostAccessible() const override { return false; }

  void *allocate(size_t bytes, MemorySpace space) override {
    bind();
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
      // On the compute stream: cudaMemset runs on the legacy default
      // stream, which the non-blocking streams here do not wait for, so a
      // copy or kernel queued next could run before the zeroing.
      check(cudaMemsetAsync(p, 0, size, compute->stream), "cudaMemsetAsync");
    return p;
  }
  void deallocate(void *p, MemorySpace space) override {
    bind();
    if (space == MemorySpace::Host)
      cudaFreeHost(p);
    else
      cudaFree(p);
  }
  Stream &computeStream() override { return *compute; }
  std::unique_ptr<Stream> createStream() override {
    bind();
    return std::make_unique<CudaStream>();
  }
  void copy(void *dst, const void *src, size_t bytes, Stream &stream) override {
    bind();
    if (bytes)
      check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, native(stream)),
            "cudaMemcpyAsync");
  }
  void launch(const KernelLaunch &launch, Stream &stream) override {
    bind();
    check(launchOnDevice(launch, native(stream)), "kernel launch");
  }

  /// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the
  /// operands swap, their flags stay, and each row-major [r, c] matrix is a
  /// column-major [c, r] one with the same leading dimension. The
  /// descriptor, layouts and heuristic's algorithm are made once per shape,
  /// precision and operand alignment (gemmPlans), so a step queries the
  /// heuristic only for shapes it has not seen.
  void gemm(const GemmDesc &g, Stream &stream) override {
    bind();
    if (&stream != compute.get())
      throw Error("cuda: a GEMM on a stream other than the compute stream "
                  "(the cuBLASLt workspace is the compute stream's)");
    GemmPlan &plan = gemmPlan(g);
    checkLt(matmul(g, plan, plan.algo, plan.workspaceBytes, g.c),
            "cublasLtMatmul");
  }

  /// cub's scratch is kept between sorts; growing it waits for the
  /// device (the old scratch may still be in use by a queued sort).
  void sortPairs(const uint32_t *keysIn, uint32_t *keysOut,
                 const uint32_t *valuesIn, uint32_t *valuesOut, int64_t count,
                 int keyBits, Stream &stream) override {
    if (count <= 0)
      return;
    bind();
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
  /// Each rank thread of a process may drive its own device layer (ranks
  /// sharing a GPU over local): the CUDA runtime's current device is per
  /// host thread, so every entry point makes it this layer's.
  void bind() {
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != ordinal)
      check(cudaSetDevice(ordinal), "cudaSetDevice");
  }

  /// A GEMM shape's cuBLASLt objects and chosen algorithm.
  struct GemmPlan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulAlgo_t algo{};
    size_t workspaceBytes = 0;
    ~GemmPlan() {
      if (la) cublasLtMatrixLayoutDestroy(la);
      if (lb) cublasLtMatrixLayoutDestroy(lb);
      if (lc) cublasLtMatrixLayoutDestroy(lc);
      if (op) cublasLtMatmulDescDestroy(op);
    }
  };
  using GemmKey = std::tuple<int, bool, bool, bool, int64_t, int64_t, int64_t,
                             int64_t, int64_t, int64_t, int64_t, int64_t,
                             int64_t, int64_t, uint32_t, uint32_t, uint32_t>;

  /// The largest power of two up to 256 that divides `p`'s address (what
  /// cuBLASLt's alignment preferences ask).
  static uint32_t alignmentOf(const void *p) {
    auto a = reinterpret_cast<uintptr_t>(p);
    uint32_t align = 256;
    while (align > 1 && a % align)
      align /= 2;
    return align;
  }

  /// One cublasLtMatmul of `g` with `algo`, its output written to `d`
  /// (g.c, or the tuning's scratch of the same layout), on the compute
  /// stream.
  cublasStatus_t matmul(const GemmDesc &g, const GemmPlan &plan,
                        const cublasLtMatmulAlgo_t &algo, size_t workspaceBytes,
                        void *d) {
    bool f64 = g.type == DType::F64;
    float alpha32 = float(g.alpha), beta32 = float(g.beta);
    const void *alpha = f64 ? static_cast<const void *>(&g.alpha) : &alpha32;
    const void *beta = f64 ? static_cast<const void *>(&g.beta) : &beta32;
    return cublasLtMatmul(lt, plan.op, alpha, g.b, plan.la, g.a, plan.lb, beta,
                          g.c, plan.lc, d, plan.lc, &algo, workspace,
                          workspaceBytes, compute->stream);
  }

  /// "f32 GEMM m 16384 n 768 k 768 B^T + C": the shape for the tuning's
  /// lines (+ C: beta is not 0, the output is read).
  static std::string shapeText(const GemmDesc &g) {
    return std::string(toString(g.type)) + (g.tf32 ? " (tf32)" : "") +
           " GEMM m " + std::to_string(g.m) + " n " + std::to_string(g.n) +
           " k " + std::to_string(g.k) +
           (g.batch > 1 ? " batch " + std::to_string(g.batch) : std::string()) +
           (g.transA ? " A^T" : "") + (g.transB ? " B^T" : "") +
           (g.beta != 0 ? " + C" : "");
  }

  /// One line of --gemm-autotune's, to CudaApiOptions::log.
  void logTuning(const std::string &line) const {
    if (options.log)
      options.log(deviceName + ": gemm autotune: " + line);
  }

  /// --gemm-autotune (CudaApiOptions::gemmAutotune): times each of the
  /// heuristic's `found` candidates (one untimed run, then kGemmTuneRuns
  /// between two events) and sets plan's algorithm to the one
  /// chooseGemmAlgorithm keeps. Waits for the device.
  void tune(const GemmDesc &g, GemmPlan &plan,
            const cublasLtMatmulHeuristicResult_t *results, int found) {
    std::string shape = shapeText(g);
    size_t extent = size_t((g.batch - 1) * g.strideC + (g.m - 1) * g.ldc + g.n) *
                    sizeOf(g.type);
    void *d = g.c; // beta 0: the real run overwrites what the trials write
    void *scratch = nullptr;
    if (g.beta != 0) {
      if (extent > kGemmTuneScratchBytes) {
        logTuning(shape + ": not tuned (its output of " + std::to_string(extent) +
            " bytes is read, and a scratch copy would exceed " +
            std::to_string(kGemmTuneScratchBytes) + " bytes)");
        return;
      }
      if (cudaMalloc(&scratch, extent) != cudaSuccess) {
        cudaGetLastError(); // not the next launch's error
        logTuning(shape + ": not tuned (no device memory for a scratch output of " +
            std::to_string(extent) + " bytes)");
        return;
      }
      d = scratch;
    }
    std::vector<double> ms(found, -1.0);
    {
      // The trials' events and scratch, released however the trials end
      // (cudaFree waits for the device).
      struct Trials {
        cudaEvent_t start = nullptr, stop = nullptr;
        void *scratch = nullptr;
        ~Trials() {
          if (start)
            cudaEventDestroy(start);
          if (stop)
            cudaEventDestroy(stop);
          if (scratch)
            cudaFree(scratch);
        }
      } t{nullptr, nullptr, scratch};
      check(cudaEventCreate(&t.start), "cudaEventCreate");
      check(cudaEventCreate(&t.stop), "cudaEventCreate");
      for (int i = 0; i < found; ++i) {
        const cublasLtMatmulHeuristicResult_t &r = results[i];
        if (r.state != CUBLAS_STATUS_SUCCESS ||
            r.workspaceSize > kWorkspaceBytes ||
            matmul(g, plan, r.algo, r.workspaceSize, d) != CUBLAS_STATUS_SUCCESS)
          continue;
        check(cudaEventRecord(t.start, compute->stream), "cudaEventRecord");
        bool ran = true;
        for (int run = 0; run < kGemmTuneRuns && ran; ++run)
          ran = matmul(g, plan, r.algo, r.workspaceSize, d) ==
                CUBLAS_STATUS_SUCCESS;
        check(cudaEventRecord(t.stop, compute->stream), "cudaEventRecord");
        check(cudaEventSynchronize(t.stop), "cudaEventSynchronize");
        float elapsed = 0;
        check(cudaEventElapsedTime(&elapsed, t.start, t.stop),
              "cudaEventElapsedTime");
        if (ran)
          ms[i] = double(elapsed) / kGemmTuneRuns;
      }
    }
    // A candidate that failed to launch leaves its error behind, which the
    // next kernel launch (launchOnDevice reads cudaGetLastError) would take
    // for its own.
    cudaGetLastError();
    int kept = chooseGemmAlgorithm(ms);
    logTuning(describeGemmTuning(shape, ms, kept));
    if (kept >= 0) {
      plan.algo = results[kept].algo;
      plan.workspaceBytes = results[kept].workspaceSize;
    }
  }

  GemmPlan &gemmPlan(const GemmDesc &g) {
    uint32_t alignA = alignmentOf(g.a), alignB = alignmentOf(g.b),
             alignC = alignmentOf(g.c);
    GemmKey key{int(g.type), g.tf32,    g.transA, g.transB, g.m,   g.n,
                g.k,         g.batch,   g.lda,    g.ldb,    g.ldc, g.strideA,
                g.strideB,   g.strideC, alignA,   alignB,   alignC};
    auto found = gemmPlans.find(key);
    if (found != gemmPlans.end())
      return *found->second;
    cudaDataType_t type, scale = CUDA_R_32F;
    cublasComputeType_t computeType = CUBLAS_COMPUTE_32F;
    switch (g.type) {
    case DType::F64:
      type = scale = CUDA_R_64F;
      computeType = CUBLAS_COMPUTE_64F;
      break;
    case DType::F32:
      type = CUDA_R_32F;
      if (g.tf32)
        computeType = CUBLAS_COMPUTE_32F_FAST_TF32;
      break;
    case DType::BF16:
      type = CUDA_R_16BF;
      break;
    case DType::F16:
      type = CUDA_R_16F;
      break;
    default:
      throw Error(std::string("cuda: GEMM of element type ") +
                  toString(g.type) + " (f32, f64, bf16 or f16)");
    }
    auto plan = std::make_unique<GemmPlan>();
    checkLt(cublasLtMatmulDescCreate(&plan->op, computeType, scale),
            "cublasLtMatmulDescCreate");
    cublasOperation_t ta = g.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = g.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    checkLt(cublasLtMatmulDescSetAttribute(
                plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
            "TRANSA");
    checkLt(cublasLtMatmulDescSetAttribute(
                plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
            "TRANSB");
    // First operand: the row-major B ([k, n], or [n, k] when transB).
    checkLt(cublasLtMatrixLayoutCreate(&plan->la, type, g.transB ? g.k : g.n,
                                       g.transB ? g.n : g.k, g.ldb),
            "layout B");
    checkLt(cublasLtMatrixLayoutCreate(&plan->lb, type, g.transA ? g.m : g.k,
                                       g.transA ? g.k : g.m, g.lda),
            "layout A");
    checkLt(cublasLtMatrixLayoutCreate(&plan->lc, type, g.n, g.m, g.ldc),
            "layout C");
    if (g.batch > 1) {
      int32_t batch = int32_t(g.batch);
      struct {
        cublasLtMatrixLayout_t layout;
        int64_t stride;
      } items[] = {
          {plan->la, g.strideB}, {plan->lb, g.strideA}, {plan->lc, g.strideC}};
      for (auto &item : items) {
        checkLt(cublasLtMatrixLayoutSetAttribute(
                    item.layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                    sizeof batch),
                "batch count");
        checkLt(cublasLtMatrixLayoutSetAttribute(
                    item.layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                    &item.stride, sizeof item.stride),
                "batch stride");
      }
    }
    if (!workspace)
      check(cudaMalloc(&workspace, kWorkspaceBytes),
            "cudaMalloc (cuBLASLt workspace)");
    cublasLtMatmulPreference_t pref = nullptr;
    checkLt(cublasLtMatmulPreferenceCreate(&pref),
            "cublasLtMatmulPreferenceCreate");
    uint64_t maxWorkspace = kWorkspaceBytes;
    // cuBLASLt's A is the row-major B, its B the row-major A.
    struct {
      cublasLtMatmulPreferenceAttributes_t attr;
      uint32_t bytes;
    } aligns[] = {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignB},
                  {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignA},
                  {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignC},
                  {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignC}};
    cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &maxWorkspace,
        sizeof maxWorkspace);
    for (auto &a : aligns)
      if (status == CUBLAS_STATUS_SUCCESS)
        status = cublasLtMatmulPreferenceSetAttribute(pref, a.attr, &a.bytes,
                                                      sizeof a.bytes);
    cublasLtMatmulHeuristicResult_t results[kGemmTuneCandidates] = {};
    int offered = 0;
    if (status == CUBLAS_STATUS_SUCCESS)
      status = cublasLtMatmulAlgoGetHeuristic(
          lt, plan->op, plan->la, plan->lb, plan->lc, plan->lc, pref,
          options.gemmAutotune ? kGemmTuneCandidates : 1, results, &offered);
    cublasLtMatmulPreferenceDestroy(pref);
    checkLt(status, "cublasLtMatmulAlgoGetHeuristic");
    if (offered < 1)
      throw Error("cuda: cuBLASLt has no algorithm for a " +
                  std::string(toString(g.type)) + (g.tf32 ? " (tf32)" : "") +
                  " GEMM of m " + std::to_string(g.m) + ", n " +
                  std::to_string(g.n) + ", k " + std::to_string(g.k) +
                  ", batch " + std::to_string(g.batch));
    plan->algo = results[0].algo;
    plan->workspaceBytes = results[0].workspaceSize;
    if (options.gemmAutotune && offered > 1)
      tune(g, *plan, results, offered);
    else if (options.gemmAutotune)
      logTuning(shapeText(g) + ": the heuristic offers one algorithm");
    GemmPlan &made = *plan;
    gemmPlans.emplace(key, std::move(plan));
    return made;
  }

  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;
  CudaApiOptions options;
  int ordinal = 0;
  void *sortTemp = nullptr;
  size_t sortTempBytes = 0;
  std::string deviceName;
  std::unique_ptr<CudaStream> compute;
  cublasLtHandle_t lt = nullptr;
  std::map<GemmKey, std::unique_ptr<GemmPlan>> gemmPlans;
  void *workspace = nullptr;
};

} // namespace

cudaStream_t nativeCudaStream(Stream &stream) {
  auto *s = dynamic_cast<CudaStream *>(&stream);
  if (!s)
    throw Error("cuda: a stream that is not the CUDA device layer's");
  return s->stream;
}

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

std::unique_ptr<GpuApi> createCudaApi(int ordinal,
                                      const CudaApiOptions &options) {
  return std::make_unique<CudaApi>(ordinal, options);
}

} // namespace partita::runtime::gpu
