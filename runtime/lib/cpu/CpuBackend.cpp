//===- CpuBackend.cpp - the cpu backend: dispatch and shared helpers ------===//
//
// Kernels are single-threaded loops, except contractions, which go to
// OpenBLAS (whose thread count the backend sets when asked: ranks run as
// threads of one process, so the executor decides how many BLAS threads each
// gets), or, with bf16 operands, to oneDNN on as many threads. Every kernel
// checks its call first and throws Error naming itself and the mismatch, so a
// bad plan never reaches undefined behavior.
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"
#include "LowPrecision.h"
#include "OneDnnGemm.h"
#include "ThreadPool.h"
#include "partita/runtime/KernelRegistry.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <sstream>

namespace partita::runtime {

namespace cpu {

//===----------------------------------------------------------------------===//
// Diagnostics and validation
//===----------------------------------------------------------------------===//

void fail(KernelKind kind, const std::string &message) {
  throw Error(std::string(toString(kind)) + ": " + message);
}

std::string shapeToString(const std::vector<int64_t> &shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i)
    os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

std::string typeToString(const TensorView &view) {
  std::ostringstream os;
  os << "tensor<";
  for (int64_t d : view.shape)
    os << d << "x";
  os << toString(view.dtype) << ">";
  return os.str();
}

namespace {
void checkView(KernelKind kind, const TensorView &view,
               const std::string &what) {
  switch (view.dtype) {
  case DType::F32:
  case DType::F64:
  case DType::F16:
  case DType::BF16:
  case DType::I32:
  case DType::I64:
    break;
  default:
    fail(kind, what + " has an invalid dtype (" +
                   std::to_string(static_cast<int>(view.dtype)) + ")");
  }
  int64_t count = 1;
  for (int64_t d : view.shape) {
    if (d < 0)
      fail(kind, what + " has a negative dimension in its shape " +
                     shapeToString(view.shape));
    if (__builtin_mul_overflow(count, d, &count))
      fail(kind, what + " has too many elements: " + shapeToString(view.shape));
  }
  int64_t bytes;
  if (__builtin_mul_overflow(count, static_cast<int64_t>(sizeOf(view.dtype)),
                             &bytes))
    fail(kind, what + " has too many bytes: " + typeToString(view));
  if (count > 0 && !view.data)
    fail(kind, what + " (" + typeToString(view) + ") has no data pointer");
}
} // namespace

void checkCall(const KernelCall &call, size_t numInputs, size_t numOutputs) {
  if (call.inputs.size() != numInputs || call.outputs.size() != numOutputs)
    fail(call.kind, "expects " + std::to_string(numInputs) + " input(s) and " +
                        std::to_string(numOutputs) + " output(s), got " +
                        std::to_string(call.inputs.size()) + " and " +
                        std::to_string(call.outputs.size()));
  for (size_t i = 0; i < call.inputs.size(); ++i)
    checkView(call.kind, call.inputs[i], "input " + std::to_string(i));
  for (size_t i = 0; i < call.outputs.size(); ++i)
    checkView(call.kind, call.outputs[i], "output " + std::to_string(i));
}

void checkShape(KernelKind kind, const TensorView &view, const char *what,
                const std::vector<int64_t> &shape) {
  if (view.shape != shape)
    fail(kind, std::string(what) + " has shape " + shapeToString(view.shape) +
                   ", expected " + shapeToString(shape));
}

void checkDType(KernelKind kind, const TensorView &view, const char *what,
                DType dtype) {
  if (view.dtype != dtype)
    fail(kind, std::string(what) + " has dtype " + toString(view.dtype) +
                   ", expected " + toString(dtype));
}

void checkFloat(KernelKind kind, const TensorView &view, const char *what) {
  if (view.dtype != DType::F32 && view.dtype != DType::F64)
    fail(kind, std::string("dtype ") + toString(view.dtype) + " of " + what +
                   " is not supported (the cpu backend has f32 and f64 "
                   "kernels)");
}

void checkIndex(KernelKind kind, const TensorView &view, const char *what) {
  if (view.dtype != DType::I32 && view.dtype != DType::I64)
    fail(kind, std::string(what) + " has dtype " + toString(view.dtype) +
                   ", expected i32 or i64");
}

namespace {
/// Whether two non-empty views share a byte.
bool overlaps(const TensorView &a, const TensorView &b) {
  if (a.numElements() == 0 || b.numElements() == 0)
    return false;
  auto a0 = reinterpret_cast<uintptr_t>(a.data);
  auto b0 = reinterpret_cast<uintptr_t>(b.data);
  return a0 < b0 + b.numBytes() && b0 < a0 + a.numBytes();
}

/// Whether two views are the same bytes (an exact alias).
bool sameBytes(const TensorView &a, const TensorView &b) {
  return a.data == b.data && a.numBytes() == b.numBytes();
}
} // namespace

void checkNoOverlap(const KernelCall &call, bool allowExactAlias) {
  for (size_t o = 0; o < call.outputs.size(); ++o) {
    const TensorView &out = call.outputs[o];
    for (size_t i = 0; i < call.inputs.size(); ++i) {
      const TensorView &in = call.inputs[i];
      if (!overlaps(out, in))
        continue;
      if (allowExactAlias && sameBytes(out, in))
        continue;
      fail(call.kind,
           "output " + std::to_string(o) + " overlaps input " +
               std::to_string(i) +
               (allowExactAlias ? " (only an exact alias is allowed)"
                                : " (this kernel does not run in place)"));
    }
    for (size_t p = 0; p < o; ++p)
      if (overlaps(out, call.outputs[p]))
        fail(call.kind, "output " + std::to_string(o) + " overlaps output " +
                            std::to_string(p));
  }
}

void checkAliasOrApart(const KernelCall &call, size_t input) {
  const TensorView &out = call.outputs[0], &in = call.inputs[input];
  if (overlaps(out, in) && !sameBytes(out, in))
    fail(call.kind, "output 0 overlaps input " + std::to_string(input) +
                        " without being it (only an exact alias is "
                        "allowed)");
}

int64_t product(const std::vector<int64_t> &shape, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end; ++i)
    n *= shape[i];
  return n;
}

//===----------------------------------------------------------------------===//
// BLAS
//===----------------------------------------------------------------------===//

namespace {
blasint toBlasInt(KernelKind kind, int64_t v, const char *what) {
  if (v < 0 || v > std::numeric_limits<blasint>::max())
    fail(kind, std::string("GEMM ") + what + " = " + std::to_string(v) +
                   " does not fit BLAS's integer type");
  return static_cast<blasint>(v);
}

/// GEMMs of at least this many multiply-adds are split over the intra-op
/// pool (a 64-row slice of a smaller one is not worth waking a thread for),
/// in slices of kGemmSlice rows or columns of C.
constexpr int64_t kSplitGemmMacs = int64_t(1) << 22;
constexpr int64_t kGemmSlice = 64;

template <typename T, typename Fn>
void gemmUntimed(Fn &&blas, KernelKind kind, bool transA, bool transB,
                 int64_t m, int64_t n, int64_t k, T alpha, const T *a,
                 int64_t lda, const T *b, int64_t ldb, T beta, T *c,
                 int64_t ldc) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    // BLAS handles K = 0, but not every build accepts null A/B pointers.
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  auto call = [&](int64_t rows, int64_t cols, const T *sa, const T *sb,
                  T *sc) {
    blas(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
         transB ? CblasTrans : CblasNoTrans, toBlasInt(kind, rows, "M"),
         toBlasInt(kind, cols, "N"), toBlasInt(kind, k, "K"), alpha, sa,
         toBlasInt(kind, std::max<int64_t>(lda, 1), "lda"), sb,
         toBlasInt(kind, std::max<int64_t>(ldb, 1), "ldb"), beta, sc,
         toBlasInt(kind, std::max<int64_t>(ldc, 1), "ldc"));
  };
  // On the pool: C's rows (or columns, when it has more of them) in
  // contiguous slices, one cblas call on one OpenBLAS thread each. Every
  // element still sums its K products in OpenBLAS's order, so the result
  // does not depend on the thread count.
  ThreadPool *pool = currentPool();
  bool byRows = m >= n;
  int64_t extent = byRows ? m : n;
  int64_t slices = (extent + kGemmSlice - 1) / kGemmSlice;
  if (!pool || pool->size() == 1 || slices == 1 || m * n * k < kSplitGemmMacs)
    return call(m, n, a, b, c);
  pool->parallelFor(slices, 1, [&](int64_t begin, int64_t end) {
    int64_t lo = begin * kGemmSlice, hi = std::min(extent, end * kGemmSlice);
    if (byRows)
      call(hi - lo, n, a + (transA ? lo : lo * lda), b, c + lo * ldc);
    else
      call(m, hi - lo, a, b + (transB ? lo * ldb : lo), c + lo);
  });
}

/// gemmUntimed; a product inside another kernel (attention's) adds its
/// time to kernelPartCounters() when a profile wants it.
template <typename T, typename Fn>
void gemmImpl(Fn &&blas, KernelKind kind, bool transA, bool transB, int64_t m,
              int64_t n, int64_t k, T alpha, const T *a, int64_t lda,
              const T *b, int64_t ldb, T beta, T *c, int64_t ldc) {
  KernelPartCounters *counters = kernelPartCounters();
  if (!counters || kind == KernelKind::Einsum)
    return gemmUntimed<T>(blas, kind, transA, transB, m, n, k, alpha, a, lda,
                          b, ldb, beta, c, ldc);
  auto start = std::chrono::steady_clock::now();
  gemmUntimed<T>(blas, kind, transA, transB, m, n, k, alpha, a, lda, b, ldb,
                 beta, c, ldc);
  addNanosSince(counters->innerGemmNanos, start);
}
} // namespace

void gemm(KernelKind kind, bool transA, bool transB, int64_t m, int64_t n,
          int64_t k, float alpha, const float *a, int64_t lda, const float *b,
          int64_t ldb, float beta, float *c, int64_t ldc) {
  gemmImpl<float>(cblas_sgemm, kind, transA, transB, m, n, k, alpha, a, lda, b,
                  ldb, beta, c, ldc);
}

void gemm(KernelKind kind, bool transA, bool transB, int64_t m, int64_t n,
          int64_t k, double alpha, const double *a, int64_t lda,
          const double *b, int64_t ldb, double beta, double *c, int64_t ldc) {
  gemmImpl<double>(cblas_dgemm, kind, transA, transB, m, n, k, alpha, a, lda, b,
                   ldb, beta, c, ldc);
}

namespace {
// SerialBlasScope's state: scopes alive, and the count to restore.
std::mutex serialBlasMutex;
int serialBlasDepth = 0;
int savedBlasThreads = 0;
} // namespace

void setBlasThreads(int numThreads) {
  std::lock_guard<std::mutex> lock(serialBlasMutex);
  if (serialBlasDepth > 0)
    savedBlasThreads = numThreads;
  else
    openblas_set_num_threads(numThreads);
}

SerialBlasScope::SerialBlasScope() {
  std::lock_guard<std::mutex> lock(serialBlasMutex);
  if (serialBlasDepth++ > 0)
    return;
  savedBlasThreads = openblas_get_num_threads();
  if (savedBlasThreads > 1)
    openblas_set_num_threads(1);
}

SerialBlasScope::~SerialBlasScope() {
  std::lock_guard<std::mutex> lock(serialBlasMutex);
  if (--serialBlasDepth == 0 && savedBlasThreads > 1)
    openblas_set_num_threads(savedBlasThreads);
}

//===----------------------------------------------------------------------===//
// Strided copy (transpose, broadcast)
//===----------------------------------------------------------------------===//

std::vector<int64_t> rowMajorStrides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;)
    strides[i - 1] = strides[i] * shape[i];
  return strides;
}

namespace {
template <typename E>
void stridedCopyImpl(const E *in, E *out, const std::vector<int64_t> &shape,
                     const std::vector<int64_t> &strides) {
  size_t rank = shape.size();
  if (rank == 0) {
    *out = *in;
    return;
  }
  int64_t inner = shape[rank - 1], innerStride = strides[rank - 1];
  int64_t outer = product(shape, 0, rank - 1);
  // Rows of the output on the intra-op pool, about 2^14 elements a chunk at
  // least; each chunk starts its odometer at its first row.
  parallelFor(outer, itemsForWork(inner, 1 << 14),
              [&](int64_t begin, int64_t end) {
                std::vector<int64_t> index(rank - 1, 0);
                int64_t offset = 0, rest = begin;
                for (size_t d = rank - 1; d-- > 0;) {
                  index[d] = rest % shape[d];
                  rest /= shape[d];
                  offset += index[d] * strides[d];
                }
                for (int64_t o = begin; o < end; ++o) {
                  const E *src = in + offset;
                  E *dst = out + o * inner;
                  if (innerStride == 1)
                    std::memcpy(dst, src, inner * sizeof(E));
                  else if (innerStride == 0)
                    std::fill(dst, dst + inner, *src);
                  else
                    for (int64_t i = 0; i < inner; ++i)
                      dst[i] = src[i * innerStride];
                  // Odometer over the outer dimensions.
                  for (size_t d = rank - 1; d-- > 0;) {
                    if (++index[d] < shape[d]) {
                      offset += strides[d];
                      break;
                    }
                    offset -= (shape[d] - 1) * strides[d];
                    index[d] = 0;
                  }
                }
              });
}
} // namespace

void stridedCopy(const void *in, void *out, size_t elementSize,
                 const std::vector<int64_t> &outShape,
                 const std::vector<int64_t> &inStrides) {
  // Drop size-1 dimensions and merge neighbors that are contiguous in the
  // input too, so the innermost loop is as long as possible.
  std::vector<int64_t> shape, strides;
  for (size_t i = 0; i < outShape.size(); ++i) {
    if (outShape[i] == 0)
      return;
    if (outShape[i] == 1)
      continue;
    if (!shape.empty() && strides.back() == inStrides[i] * outShape[i]) {
      shape.back() *= outShape[i];
      strides.back() = inStrides[i];
      continue;
    }
    shape.push_back(outShape[i]);
    strides.push_back(inStrides[i]);
  }
  // A row repeated (a bias broadcast over the leading dimensions): the row,
  // then copies of what is written so far, doubling, so that most bytes
  // move in long copies (which the C library does with string moves that
  // need not read the destination's cache lines first).
  if (shape.size() == 2 && strides[0] == 0 && strides[1] == 1) {
    size_t row = size_t(shape[1]) * elementSize;
    size_t total = row * size_t(shape[0]);
    auto *o = static_cast<unsigned char *>(out);
    std::memcpy(o, in, row);
    for (size_t done = row; done < total;) {
      size_t n = std::min(done, total - done);
      std::memcpy(o + done, o, n);
      done += n;
    }
    return;
  }
  switch (elementSize) {
  case 1:
    return stridedCopyImpl(static_cast<const uint8_t *>(in),
                           static_cast<uint8_t *>(out), shape, strides);
  case 2:
    return stridedCopyImpl(static_cast<const uint16_t *>(in),
                           static_cast<uint16_t *>(out), shape, strides);
  case 4:
    return stridedCopyImpl(static_cast<const uint32_t *>(in),
                           static_cast<uint32_t *>(out), shape, strides);
  case 8:
    return stridedCopyImpl(static_cast<const uint64_t *>(in),
                           static_cast<uint64_t *>(out), shape, strides);
  default:
    throw Error("stridedCopy: unsupported element size " +
                std::to_string(elementSize));
  }
}

void permute(const void *in, void *out, size_t elementSize,
             const std::vector<int64_t> &inShape,
             const std::vector<int64_t> &perm) {
  std::vector<int64_t> inStrides = rowMajorStrides(inShape);
  std::vector<int64_t> outShape(perm.size()), strides(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    outShape[i] = inShape[perm[i]];
    strides[i] = inStrides[perm[i]];
  }
  stridedCopy(in, out, elementSize, outShape, strides);
}

//===----------------------------------------------------------------------===//
// Reduction
//===----------------------------------------------------------------------===//

namespace {
struct ReduceGroups {
  std::vector<int64_t> size, inStride, outStride; // outStride 0 when reduced
  std::vector<bool> reduced;
};

template <typename T, typename A, typename Op>
void reduceRec(const T *in, A *acc, size_t level, const ReduceGroups &g,
               Op op) {
  int64_t size = g.size[level];
  if (level + 1 == g.size.size()) {
    // The innermost group is contiguous in the input.
    if (g.reduced[level]) {
      A s = acc[0];
      for (int64_t i = 0; i < size; ++i)
        s = op(s, in[i]);
      acc[0] = s;
    } else {
      for (int64_t i = 0; i < size; ++i)
        acc[i] = op(acc[i], in[i]);
    }
    return;
  }
  for (int64_t i = 0; i < size; ++i)
    reduceRec(in + i * g.inStride[level], acc + i * g.outStride[level],
              level + 1, g, op);
}

/// acc[i] += in[r * ld + i] for r in [0, rows), in that order for every i;
/// four rows a pass, so acc is loaded and stored a quarter as often.
template <typename T>
PARTITA_VECTOR_CLONES void accumulateRows(const T *in, int64_t ld,
                                          int64_t rows, double *acc,
                                          int64_t n) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const T *r0 = in + r * ld, *r1 = r0 + ld, *r2 = r1 + ld, *r3 = r2 + ld;
    for (int64_t i = 0; i < n; ++i)
      acc[i] = acc[i] + static_cast<double>(r0[i]) + static_cast<double>(r1[i]) +
               static_cast<double>(r2[i]) + static_cast<double>(r3[i]);
  }
  for (; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i)
      acc[i] += static_cast<double>(in[r * ld + i]);
}
} // namespace

template <typename T>
void reduce(const T *in, T *out, const std::vector<int64_t> &shape,
            const std::vector<bool> &reduced, ReduceKind kind, double scale) {
  int64_t outCount = 1, inCount = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    inCount *= shape[d];
    if (!reduced[d])
      outCount *= shape[d];
  }
  if (outCount == 0)
    return;
  if (inCount == 0) {
    // Every output element reduces an empty set.
    T init =
        kind == ReduceKind::Sum ? T(0) : -std::numeric_limits<T>::infinity();
    std::fill(out, out + outCount, init);
    return;
  }
  // Merge neighboring dimensions of one kind; size-1 dimensions vanish.
  ReduceGroups g;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1)
      continue;
    if (!g.size.empty() && g.reduced.back() == reduced[d]) {
      g.size.back() *= shape[d];
      continue;
    }
    g.size.push_back(shape[d]);
    g.reduced.push_back(reduced[d]);
  }
  if (g.size.empty()) {
    g.size.push_back(1);
    g.reduced.push_back(false);
  }
  size_t n = g.size.size();
  g.inStride.assign(n, 1);
  g.outStride.assign(n, 0);
  for (size_t i = n - 1; i-- > 0;)
    g.inStride[i] = g.inStride[i + 1] * g.size[i + 1];
  int64_t outStride = 1;
  for (size_t i = n; i-- > 0;) {
    if (g.reduced[i])
      continue;
    g.outStride[i] = outStride;
    outStride *= g.size[i];
  }

  if (kind == ReduceKind::Sum && n == 2 && g.reduced[0] && !g.reduced[1]) {
    // Column sums of a [rows, cols] matrix (bias gradients): the same sums
    // in the same row order as below, in column blocks whose accumulators
    // stay in L1, vectorized and split over the intra-op pool by columns.
    int64_t rows = g.size[0], cols = g.size[1];
    constexpr int64_t kBlock = 2048;
    parallelFor(cols, std::max<int64_t>(16, itemsForWork(rows, 1 << 16)),
                [&](int64_t begin, int64_t end) {
                  std::vector<double> acc(std::min(kBlock, end - begin));
                  for (int64_t c0 = begin; c0 < end; c0 += kBlock) {
                    int64_t w = std::min(kBlock, end - c0);
                    std::fill(acc.begin(), acc.begin() + w, 0.0);
                    accumulateRows(in + c0, cols, rows, acc.data(), w);
                    for (int64_t j = 0; j < w; ++j)
                      out[c0 + j] = static_cast<T>(acc[j] * scale);
                  }
                });
    return;
  }
  if (kind == ReduceKind::Sum) {
    std::vector<double> acc(outCount, 0.0);
    reduceRec(in, acc.data(), 0, g,
              [](double s, T x) { return s + static_cast<double>(x); });
    for (int64_t i = 0; i < outCount; ++i)
      out[i] = static_cast<T>(acc[i] * scale);
    return;
  }
  std::fill(out, out + outCount, -std::numeric_limits<T>::infinity());
  // NaN propagates: once the accumulator is NaN it stays NaN.
  reduceRec(in, out, 0, g, [](T m, T x) { return (x > m || x != x) ? x : m; });
}

template void reduce<float>(const float *, float *,
                            const std::vector<int64_t> &,
                            const std::vector<bool> &, ReduceKind, double);
template void reduce<double>(const double *, double *,
                             const std::vector<int64_t> &,
                             const std::vector<bool> &, ReduceKind, double);

//===----------------------------------------------------------------------===//
// The backend
//===----------------------------------------------------------------------===//

namespace {
/// A custom kernel: the one registered as call.customName for "cpu" (the
/// executor checked it is there when it loaded the plan), after the views
/// are checked as every kernel's are (valid dtypes, sizes, data, no
/// overlap), so a kernel library gets well-formed buffers.
void runCustom(const KernelCall &call) {
  const CustomKernel *kernel = findKernel("cpu", call.customName);
  if (!kernel)
    throw Error("custom kernel '" + call.customName +
                "' is not registered for the cpu backend");
  checkCall(call, call.inputs.size(), call.outputs.size());
  checkNoOverlap(call, /*allowExactAlias=*/false);
  try {
    (*kernel)(call);
  } catch (const Error &e) {
    throw Error(call.customName + ": " + e.what());
  }
}

class CpuBackend final : public Backend {
public:
  explicit CpuBackend(const CpuBackendOptions &options)
      : nativeBF16Gemm(options.nativeBF16Gemm) {
    int numThreads = options.numThreads;
    if (numThreads < 0)
      throw Error("cpu backend: numThreads must be >= 0 (0 = OpenBLAS's "
                  "default), got " +
                  std::to_string(numThreads));
    // The rank's compute threads: numThreads, or OpenBLAS's count (its
    // OPENBLAS_NUM_THREADS, or the cores). They all belong to the intra-op
    // pool, which also splits the large GEMMs; OpenBLAS itself runs on the
    // calling thread alone (ThreadPool.h says why).
    // OpenBLAS's count is read once, before any backend set it to 1.
    static const int blasThreads = openblas_get_num_threads();
    int threads = numThreads > 0 ? numThreads : blasThreads;
    setBlasThreads(1);
    pool = std::make_unique<ThreadPool>(std::max(threads, 1));
  }

  const char *name() const override { return "cpu"; }
  Device &device() override { return *dev; }

  void run(const KernelCall &call) override {
    PoolScope scope(pool.get());
    KernelPartCountersScope timing(timeParts ? &partNanos : nullptr);
    // bf16 and f16: the f32 kernel on widened copies (LowPrecision.h),
    // except bf16 contractions that oneDNN runs natively (OneDnnGemm.h).
    if (needsWidening(call)) {
      if (nativeBF16Gemm && call.kind == KernelKind::Einsum &&
          runEinsumBF16(call))
        return;
      return runWidened(call,
                        [this](const KernelCall &wide) { dispatch(wide); });
    }
    dispatch(call);
  }

  void setTimeKernelParts(bool on) override { timeParts = on; }

  KernelPartSeconds takeKernelPartSeconds() override {
    KernelPartSeconds s;
    // Summed over the pool's threads; the pairs of an attention kernel run
    // on all of them at once.
    s.innerGemms =
        double(partNanos.innerGemmNanos.exchange(0)) * 1e-9 / pool->size();
    s.einsumAddends = double(partNanos.einsumAddendNanos.exchange(0)) * 1e-9;
    return s;
  }

private:
  /// Runs the kernel of `call` (f32 and f64 operands, or kinds that handle
  /// 16-bit ones themselves) under the caller's PoolScope.
  void dispatch(const KernelCall &call) {
    switch (call.kind) {
    case KernelKind::Einsum:
      return runEinsum(call);
    case KernelKind::Add:
    case KernelKind::Sub:
    case KernelKind::Mul:
    case KernelKind::Div:
    case KernelKind::Max:
      return runBinary(call);
    case KernelKind::Neg:
    case KernelKind::Exp:
    case KernelKind::Log:
    case KernelKind::Tanh:
    case KernelKind::Relu:
    case KernelKind::Silu:
    case KernelKind::Rsqrt:
    case KernelKind::Sqrt:
    case KernelKind::Gelu:
      return runUnary(call);
    case KernelKind::Broadcast:
      return runBroadcast(call);
    case KernelKind::ReduceSum:
    case KernelKind::ReduceMax:
    case KernelKind::ReduceMean:
      return runReduce(call);
    case KernelKind::Transpose:
      return runTranspose(call);
    case KernelKind::Reshape:
      return runReshape(call);
    case KernelKind::Softmax:
      return runSoftmax(call);
    case KernelKind::LayerNorm:
      return runLayerNorm(call);
    case KernelKind::RMSNorm:
      return runRMSNorm(call);
    case KernelKind::Rotary:
      return runRotary(call);
    case KernelKind::Attention:
      return runAttention(call);
    case KernelKind::Embedding:
      return runEmbedding(call);
    case KernelKind::CrossEntropy:
      return runCrossEntropy(call);
    case KernelKind::Fill:
      return runFill(call);
    case KernelKind::ReluGrad:
    case KernelKind::SiluGrad:
    case KernelKind::GeluGrad:
    case KernelKind::GreaterEqual:
      return runElementwiseGrad(call);
    case KernelKind::LayerNormGrad:
      return runLayerNormGrad(call);
    case KernelKind::LayerNormGammaGrad:
      return runLayerNormGammaGrad(call);
    case KernelKind::RMSNormGrad:
      return runRMSNormGrad(call);
    case KernelKind::RotaryGrad:
      return rotate(call, /*inverse=*/true);
    case KernelKind::AttentionGrad:
      return runAttentionGrad(call);
    case KernelKind::EmbeddingGrad:
      return runEmbeddingGrad(call);
    case KernelKind::CrossEntropyGrad:
      return runCrossEntropyGrad(call);
    case KernelKind::Convert:
      return runConvert(call);
    case KernelKind::SGD:
      return runSGD(call);
    case KernelKind::AdamW:
      return runAdamW(call);
    case KernelKind::Custom:
      return runCustom(call);
    }
    throw Error("cpu backend: unknown kernel kind " +
                std::to_string(static_cast<int>(call.kind)));
  }

  bool nativeBF16Gemm;
  std::unique_ptr<Device> dev = createCpuDevice();
  std::unique_ptr<ThreadPool> pool;
  bool timeParts = false;
  KernelPartCounters partNanos;
};
} // namespace

} // namespace cpu

std::unique_ptr<Backend> createCpuBackend(int numThreads) {
  CpuBackendOptions options;
  options.numThreads = numThreads;
  return createCpuBackend(options);
}

std::unique_ptr<Backend> createCpuBackend(const CpuBackendOptions &options) {
  configureBlasKernels();
  return std::make_unique<cpu::CpuBackend>(options);
}

const std::string &describeBF16Gemm() { return cpu::describeNativeBF16Gemm(); }

} // namespace partita::runtime
