//===- CpuKernels.h - internals shared by the cpu kernels -------*- C++ -*-===//
//
// Validation helpers (every check throws Error naming the kernel and the
// mismatch), dtype dispatch, the BLAS wrapper and the data-movement helpers
// (strided copy, reduction) that several kernels share. Not installed.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_LIB_CPU_CPUKERNELS_H
#define PARTITA_RUNTIME_LIB_CPU_CPUKERNELS_H

#include "partita/runtime/Backend.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

/// On a hot elementwise loop: compiled for AVX-512, AVX2 and baseline
/// x86-64, the best chosen at load time (GCC's function multiversioning),
/// so it vectorizes wide on the CPUs that allow it and still runs anywhere.
/// Not under ThreadSanitizer: the clones' IFUNC resolvers run while the
/// dynamic loader relocates the library, before TSan's runtime is set up,
/// and instrumented, they crash the process before main.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&         \
    !defined(__SANITIZE_THREAD__)
#define PARTITA_VECTOR_CLONES                                                  \
  __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PARTITA_VECTOR_CLONES
#endif

namespace partita::runtime::cpu {

/// exp(x) for f32 x in [-87, 0] without a libm call, so loops of it
/// vectorize: x = n ln2 + r with |r| <= ln2 / 2, exp(r) by its Taylor
/// series to r^7 (relative error below 1e-8, under one f32 rounding), 2^n
/// from the exponent bits (n >= -126: no subnormals). NaN gives NaN.
/// The reduction and the Horner steps are fused multiply-adds (std::fma:
/// one instruction in the AVX2 and AVX-512 clones, which the build's
/// -ffp-contract=off would not form; exactly rounded everywhere, so every
/// clone gives the same bits): 30% less time in the tanh GELU's loops.
inline float expNonPositive(float x) {
  const float log2e = 1.44269504088896341f;
  const float ln2hi = 0.693145751953125f, ln2lo = 1.428606765330187e-06f;
  int n = static_cast<int>(x * log2e - 0.5f); // round to nearest (x <= 0)
  float r = std::fma(-float(n), ln2lo, std::fma(-float(n), ln2hi, x));
  float p = 1.0f / 5040.0f;
  p = std::fma(p, r, 1.0f / 720.0f);
  p = std::fma(p, r, 1.0f / 120.0f);
  p = std::fma(p, r, 1.0f / 24.0f);
  p = std::fma(p, r, 1.0f / 6.0f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  uint32_t bits = uint32_t(n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

/// The sum over i in [0, n) of term(i), accumulated in double in 8 lanes
/// (i mod 8) that are then added in a fixed tree, and a sequential tail: the
/// order depends only on n, so results are the same run to run, and the
/// lanes let a loop that inlines this vectorize (a single running sum would
/// have to be added in order).
/// Always inlined: called out of line from a PARTITA_VECTOR_CLONES clone,
/// it runs as baseline x86-64 code (layer_norm's statistics did).
template <typename Term>
__attribute__((always_inline)) inline double laneSum(int64_t n, Term term) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l)
      acc[l] += term(i + l);
  double tail = 0;
  for (; i < n; ++i)
    tail += term(i);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
         ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

/// Sixteen floats and eight doubles as GCC vector types: in a
/// PARTITA_VECTOR_CLONES function they compile to one AVX-512 register (two
/// AVX2 ones, four SSE2 ones in the baseline clone), so a loop written with
/// them vectorizes whatever the auto-vectorizer makes of it. Functions
/// taking or returning them are always inlined: their ABI differs between
/// the clones (GCC's -Wpsabi note about that never applies, so it is off
/// in every file that includes this header: the notes come from the
/// callers' baseline clones).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
using Lane16f = float __attribute__((vector_size(64)));
using Lane8d = double __attribute__((vector_size(64)));

__attribute__((always_inline)) inline Lane16f load16f(const float *src) {
  Lane16f v;
  std::memcpy(&v, src, sizeof v);
  return v;
}
__attribute__((always_inline)) inline void store16f(float *dst, Lane16f v) {
  std::memcpy(dst, &v, sizeof v);
}
/// Lanes 0..7 and 8..15 of `v`, widened to double.
__attribute__((always_inline)) inline Lane8d low8d(Lane16f v) {
  return __builtin_convertvector(
      __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7), Lane8d);
}
__attribute__((always_inline)) inline Lane8d high8d(Lane16f v) {
  return __builtin_convertvector(
      __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15), Lane8d);
}

/// K sums over i in [0, n) of f32 terms, 16 at a time: vterm(i, t) sets
/// t[k] to terms i..i+15 of sum k, sterm(i, t) to term i of each (the
/// tail). While 32 terms remain they are added in f32 in 32 lanes (i mod
/// 32) for at most 256 terms (8 adds a lane), then those lanes are added
/// to 32 lanes in double; the rest is a sequential tail in double, and the
/// double lanes are added in a fixed tree. The order depends only on n
/// (the same results run to run); the f32 partial sums of 8 terms cost
/// about one f32 rounding, and widening once per 8 adds instead of once a
/// term made layer_norm_grad's row statistics 3x faster than laneSum's.
template <int K, typename VTerm, typename STerm>
__attribute__((always_inline)) inline void
blockSums(int64_t n, VTerm vterm, STerm sterm, double out[K]) {
  Lane8d wide[K][4] = {};
  int64_t i = 0, vectorEnd = n - n % 32;
  while (i < vectorEnd) {
    Lane16f part[K][2] = {};
    for (int64_t end = std::min(vectorEnd, i + 256); i < end; i += 32)
      for (int h = 0; h < 2; ++h) {
        Lane16f t[K];
        vterm(i + 16 * h, t);
        for (int k = 0; k < K; ++k)
          part[k][h] += t[k];
      }
    for (int k = 0; k < K; ++k) {
      wide[k][0] += low8d(part[k][0]);
      wide[k][1] += high8d(part[k][0]);
      wide[k][2] += low8d(part[k][1]);
      wide[k][3] += high8d(part[k][1]);
    }
  }
  double tail[K] = {};
  for (; i < n; ++i) {
    float t[K];
    sterm(i, t);
    for (int k = 0; k < K; ++k)
      tail[k] += t[k];
  }
  for (int k = 0; k < K; ++k) {
    Lane8d acc = (wide[k][0] + wide[k][1]) + (wide[k][2] + wide[k][3]);
    out[k] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
             ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail[k];
  }
}

/// The mean of src[0, n) (blockSums), rounded to f32: a layer norm row's
/// mean, the same in layer_norm and its gradient.
__attribute__((always_inline)) inline float rowMeanF32(const float *src,
                                                       int64_t n) {
  double sum[1];
  blockSums<1>(
      n, [&](int64_t i, Lane16f t[1]) { t[0] = load16f(src + i); },
      [&](int64_t i, float t[1]) { t[0] = src[i]; }, sum);
  return static_cast<float>(sum[0] / n);
}

/// A layer norm row's rstd, 1 / sqrt(mean(c^2) + epsilon), from the sum of
/// its n squared deviations c^2.
inline float layerNormRstd(double squares, int64_t n, double epsilon) {
  return static_cast<float>(1.0 / std::sqrt(squares / n + epsilon));
}

/// rowMeanF32 and, with c = x - mean in f32, layerNormRstd of the sum of
/// c^2 (blockSums): a layer norm row's statistics, the same in layer_norm
/// and its gradient.
__attribute__((always_inline)) inline std::pair<float, float>
layerNormStatsF32(const float *src, int64_t n, double epsilon) {
  double squares[1];
  float m = rowMeanF32(src, n);
  blockSums<1>(
      n,
      [&](int64_t i, Lane16f t[1]) {
        Lane16f c = load16f(src + i) - m;
        t[0] = c * c;
      },
      [&](int64_t i, float t[1]) {
        float c = src[i] - m;
        t[0] = c * c;
      },
      squares);
  return {m, layerNormRstd(squares[0], n, epsilon)};
}

/// A row's mean and rstd in double, the kernels' path for dtypes other
/// than f32: the mean, then the mean of squared deviations.
template <typename T>
std::pair<double, double> layerNormStatsDouble(const T *src, int64_t n,
                                               double epsilon) {
  double mean = 0, var = 0;
  for (int64_t i = 0; i < n; ++i)
    mean += src[i];
  mean /= n;
  for (int64_t i = 0; i < n; ++i) {
    double d = src[i] - mean;
    var += d * d;
  }
  var /= n;
  return {mean, 1.0 / std::sqrt(var + epsilon)};
}

/// The maximum of src[0, n) for f32, NaN if any element is NaN, -inf when
/// n is 0: a max is exact in any order, so it is taken in 16 lanes and
/// vectorizes (a single running max with the NaN test does not).
float rowMaxF32(const float *src, int64_t n);

/// dst[j] = exp(src[j] - m) for f32 without libm calls (vectorized; values
/// below e^-87, such as masked scores and -inf, give exactly 0); returns
/// the sum of dst in double (laneSum's order). `dst` may be `src`.
double expShiftedSumF32(const float *src, float *dst, int64_t n, float m);

//===----------------------------------------------------------------------===//
// Diagnostics and validation
//===----------------------------------------------------------------------===//

/// Throws Error("<kernel>: <message>").
[[noreturn]] void fail(KernelKind kind, const std::string &message);

/// "[2, 8, 16]".
std::string shapeToString(const std::vector<int64_t> &shape);
/// "tensor<2x8x16xf32>" (the MLIR spelling, as in the plan's IR).
std::string typeToString(const TensorView &view);

/// Checks the number of inputs and outputs, then every view: no negative
/// dimension, an element count that fits in int64, a non-null data pointer
/// when there is at least one element. Names views "input i"/"output i".
void checkCall(const KernelCall &call, size_t numInputs, size_t numOutputs);

/// Throws unless `view` has exactly `shape`.
void checkShape(KernelKind kind, const TensorView &view, const char *what,
                const std::vector<int64_t> &shape);
/// Throws unless `view` has `dtype`.
void checkDType(KernelKind kind, const TensorView &view, const char *what,
                DType dtype);
/// Throws unless `view` is f32 or f64: the float kernels' dtypes.
void checkFloat(KernelKind kind, const TensorView &view, const char *what);
/// Throws unless `view` is i32 or i64 (ids, labels).
void checkIndex(KernelKind kind, const TensorView &view, const char *what);

/// Throws when the bytes of an output overlap those of an input, or of
/// another output. `allowExactAlias` permits an output that is exactly an
/// input (same pointer, same size): elementwise kernels run in place.
void checkNoOverlap(const KernelCall &call, bool allowExactAlias);
/// Throws unless output 0 and input `input` are exactly the same bytes or
/// share none (an einsum's addend may be its output).
void checkAliasOrApart(const KernelCall &call, size_t input);

/// Product of `shape[begin, end)`.
int64_t product(const std::vector<int64_t> &shape, size_t begin, size_t end);

/// Calls `fn(T{})` with T = float or double for `dtype`, and throws naming
/// `kind` and the dtype otherwise.
template <typename Fn>
void dispatchFloat(KernelKind kind, DType dtype, Fn &&fn) {
  switch (dtype) {
  case DType::F32:
    fn(float{});
    return;
  case DType::F64:
    fn(double{});
    return;
  default:
    fail(kind, std::string("dtype ") + toString(dtype) +
                   " is not supported (the cpu backend has f32 and f64 "
                   "kernels)");
  }
}

//===----------------------------------------------------------------------===//
// BLAS
//===----------------------------------------------------------------------===//

/// Row-major C[M,N] = alpha * op(A) op(B) + beta * C through cblas_?gemm.
/// op(A) is [M,K] (A stored [K,M] when transA); op(B) is [K,N].
/// Throws when a dimension does not fit BLAS's int.
void gemm(KernelKind kind, bool transA, bool transB, int64_t m, int64_t n,
          int64_t k, float alpha, const float *a, int64_t lda, const float *b,
          int64_t ldb, float beta, float *c, int64_t ldc);
void gemm(KernelKind kind, bool transA, bool transB, int64_t m, int64_t n,
          int64_t k, double alpha, const double *a, int64_t lda,
          const double *b, int64_t ldb, double beta, double *c, int64_t ldc);

/// Sets OpenBLAS's thread count (process-wide; inside a SerialBlasScope,
/// the count it restores).
void setBlasThreads(int numThreads);

/// While one lives, OpenBLAS runs each GEMM on its calling thread alone
/// (process-wide: the first scope in sets its thread count to 1, the last
/// one out restores it). The intra-op pool holds one while a loop runs on
/// several threads, whose chunks may call GEMMs at once (the backend keeps
/// OpenBLAS at one thread anyway; ThreadPool.h): OpenBLAS's pthreads server hands a
/// multi-threaded GEMM to its one set of workers, and a second caller
/// spins until they are free (attention_grad at 2 threads took 20 to 30
/// times as long so, on a loaded 2-core machine).
class SerialBlasScope {
public:
  SerialBlasScope();
  ~SerialBlasScope();
  SerialBlasScope(const SerialBlasScope &) = delete;
  SerialBlasScope &operator=(const SerialBlasScope &) = delete;
};

//===----------------------------------------------------------------------===//
// Data movement shared by several kernels
//===----------------------------------------------------------------------===//

/// out[i0, ..., in-1] = in[sum_k i_k * inStrides[k]] for every index of
/// `outShape` (strides in elements; 0 repeats). Transpose and broadcast are
/// both this. Works on any dtype of `elementSize` 1, 2, 4 or 8 bytes.
void stridedCopy(const void *in, void *out, size_t elementSize,
                 const std::vector<int64_t> &outShape,
                 const std::vector<int64_t> &inStrides);

/// Row-major strides of `shape`, in elements.
std::vector<int64_t> rowMajorStrides(const std::vector<int64_t> &shape);

/// The input strides (in elements, 0 where it repeats) that broadcast `in`
/// to `out`'s shape by `dims` (KernelAttrs.dims: input dimension i is
/// output dimension dims[i], strictly increasing; a size-1 input dimension
/// repeats). `what` names the input in errors ("input 0"). Throws naming
/// `kind` when dims do not fit the two shapes.
std::vector<int64_t> broadcastStrides(KernelKind kind, const TensorView &in,
                                      const char *what, const TensorView &out,
                                      const std::vector<int64_t> &dims);

/// Writes into `out` the transpose of `in` (shape `inShape`) by `perm`:
/// out dimension i is input dimension perm[i]. No validation.
void permute(const void *in, void *out, size_t elementSize,
             const std::vector<int64_t> &inShape,
             const std::vector<int64_t> &perm);

enum class ReduceKind { Sum, Max };

/// Reduces `in` (shape `shape`) over the dimensions with reduced[d] set,
/// writing the kept dimensions in their order to `out`; sums accumulate in
/// double and are multiplied by `scale` (1/count for a mean). No validation.
template <typename T>
void reduce(const T *in, T *out, const std::vector<int64_t> &shape,
            const std::vector<bool> &reduced, ReduceKind kind, double scale);

//===----------------------------------------------------------------------===//
// Pieces shared by the forward and backward model-level kernels
//===----------------------------------------------------------------------===//

/// Throws unless `a` and `b` have one dtype and one shape.
void checkSameType(KernelKind kind, const TensorView &a, const char *aName,
                   const TensorView &b, const char *bName);
/// Epsilon, theta, scale: a zero, negative, infinite or NaN value makes the
/// kernel's math meaningless.
void checkPositiveFinite(KernelKind kind, const char *name, double value);
/// The size of x's last dimension, which a norm kernel normalizes over (x is
/// input 0); a rank-0 x is an error.
int64_t normHidden(KernelKind kind, const TensorView &x);
/// Checks a [size] scale/shift vector of `x`'s dtype.
void checkVector(KernelKind kind, const TensorView &v, const char *name,
                 const TensorView &x, int64_t size);

/// dst[0, n) = softmax(src[0, n)) (max subtracted, sum in double); `dst` may
/// be `src`. Returns the row's log-sum-exp, max + log(sum).
template <typename T> double softmaxRow(const T *src, T *dst, int64_t n);
/// Causal attention on the cpu takes its query rows in blocks of this many,
/// each block's products over only the keys its last row sees (and at most
/// seq_kv): for 128 queries, 62.5% of the full QK^T and PV work, and the
/// block's scores stay in L1. Without causality, one block of every row.
constexpr int64_t kCausalRowBlock = 32;

/// The query rows of an attention block: kCausalRowBlock (or all seq_q,
/// when fewer) when causal, all seq_q otherwise.
inline int64_t attentionBlockRows(bool causal, int64_t seqQ) {
  return causal ? std::min(kCausalRowBlock, seqQ) : seqQ;
}

/// The keys a causal block of `rows` queries starting at `first` sees:
/// min(seqKV, queryOffset + first + rows) (every key when not causal).
inline int64_t attentionBlockKeys(bool causal, int64_t queryOffset,
                                  int64_t first, int64_t rows, int64_t seqKV) {
  return causal ? std::min(seqKV, queryOffset + first + rows) : seqKV;
}

/// The columns of scores row i that a (causal) attention row sees:
/// min(cols, queryOffset + i + 1) when causal, else cols.
inline int64_t attentionRowKeys(bool causal, int64_t queryOffset, int64_t i,
                                int64_t cols) {
  return causal ? std::min(cols, queryOffset + i + 1) : cols;
}

/// Row-wise softmax of scores[rows, cols] in place; when causal, row i sees
/// only its first attentionRowKeys columns (the rest become 0). With `lse`,
/// row i's log-sum-exp goes to lse[i].
template <typename T>
void causalSoftmaxRows(T *scores, int64_t rows, int64_t cols, bool causal,
                       int64_t queryOffset, T *lse = nullptr);

/// The sizes of an attention call's q[B,Sq,heads,D], k[B,Skv,kvHeads,D] and
/// v (as k), with the scale it uses.
struct AttentionDims {
  int64_t batch = 0, seqQ = 0, seqKV = 0, heads = 0, kvHeads = 0, headDim = 0;
  double scale = 1.0;
};
/// Checks inputs 0..2 (q, k, v) and the attributes (scale, causal offset)
/// of attention and attention_grad; the caller checks the rest.
AttentionDims checkAttentionInputs(const KernelCall &call);
/// Checks an attention lse ([batch, heads, seq_q] of `dtype`).
void checkAttentionLse(KernelKind kind, const TensorView &lse,
                       const char *what, const AttentionDims &a, DType dtype);

/// An attention call, checked: its sizes and its lse output (null when it
/// has none).
struct AttentionCall {
  AttentionDims dims;
  const TensorView *lse = nullptr;
};
/// Checks an attention call (q, k, v -> o [, lse]), for the cpu and cuda
/// backends alike: the inputs as checkAttentionInputs, o as q, the lse
/// output as checkAttentionLse, no overlaps.
AttentionCall checkAttention(const KernelCall &call);

/// An attention_grad call, checked: its sizes and the outputs it asks for
/// (null for a gradient it does not).
struct AttentionGradCall {
  AttentionDims dims;
  const TensorView *dq = nullptr, *dk = nullptr, *dv = nullptr;
  /// The forward's output and lse (inputs 4 and 5), or null when the call
  /// recomputes them.
  const TensorView *out = nullptr, *lse = nullptr;
};
/// Checks an attention_grad call (q, k, v, dy [, o, lse] -> one output per
/// letter of attrs.wrt, which names distinct letters of q, k, v in that
/// order: "q", "kv", "qkv", ...), for the cpu and cuda backends alike: the
/// inputs as checkAttentionInputs, dy and o as q, lse [batch, heads, seq_q],
/// dq as q, dk and dv as k, no overlaps.
AttentionGradCall checkAttentionGrad(const KernelCall &call);

/// rotary (inverse false) and rotary_grad (inverse true: rotation by minus
/// the angle), x -> y.
/// convert's checks: one input and output of the same shape, both floats
/// (f32, f64, f16, bf16), not overlapping unless the same type.
void checkConvert(const KernelCall &call);

void rotate(const KernelCall &call, bool inverse);

//===----------------------------------------------------------------------===//
// Kernels (one per KernelKind family; each validates its call)
//===----------------------------------------------------------------------===//

/// An einsum spec's operand terms and result term (parsed by checkEinsum).
struct EinsumSpec {
  std::vector<std::string> terms;
  std::string result;
};

/// A size per ASCII letter, -1 for letters the spec does not use.
using LetterSizes = std::array<int64_t, 128>;

/// An einsum call as checkEinsum found it: its spec, each letter's size, and
/// an addend's strides into the output (empty without one).
struct EinsumCheck {
  EinsumSpec spec;
  LetterSizes size;
  std::vector<int64_t> addendStrides;
};

/// Validates an einsum call, for the cpu and the cuda backend alike: one or
/// two operands, then an optional addend, all of the output's dtype; the
/// output overlaps no operand, and the addend only by being it exactly; the
/// spec has one term per operand and a result of ASCII letters, none
/// repeated within a term, every result letter in an operand, and each
/// letter one size in every tensor that has it; the addend broadcasts to
/// the output by `dims`. Throws a kernel error naming what is wrong.
EinsumCheck checkEinsum(const KernelCall &call);

void runEinsum(const KernelCall &call);
/// A two-operand einsum of bf16 operands into bf16 through oneDNN
/// (OneDnnGemm.h), operands never widened; returns false, having written
/// nothing, when it cannot (no oneDNN or AMX, other dtypes, a spec with
/// summed letters, a shape oneDNN runs without AMX): the caller widens.
bool runEinsumBF16(const KernelCall &call);
void runBinary(const KernelCall &call);
void runUnary(const KernelCall &call);
void runFill(const KernelCall &call);
void runBroadcast(const KernelCall &call);
void runReduce(const KernelCall &call);
void runTranspose(const KernelCall &call);
void runReshape(const KernelCall &call);
void runSoftmax(const KernelCall &call);
void runLayerNorm(const KernelCall &call);
void runRMSNorm(const KernelCall &call);
void runRotary(const KernelCall &call);
void runAttention(const KernelCall &call);
void runEmbedding(const KernelCall &call);
void runCrossEntropy(const KernelCall &call);
// Backward and optimizer kernels.
void runElementwiseGrad(const KernelCall &call); // relu/silu/gelu_grad, >=
void runConvert(const KernelCall &call);
/// Checks a layer_norm (x, gamma, beta) or rms_norm (x, gamma) call,
/// normalized over x's last dimension, whose size it returns (the cuda
/// backend's checks too).
int64_t checkNorm(const KernelCall &call, bool hasBeta);
void runLayerNormGrad(const KernelCall &call);
void runLayerNormGammaGrad(const KernelCall &call);
/// Checks a layer_norm_grad / rms_norm_grad call (x, gamma, dy -> dx), all
/// over x's last dimension, whose size it returns (the cuda backend's
/// checks too).
int64_t checkNormGrad(const KernelCall &call);
/// Checks a layer_norm_gamma_grad call (x, dy -> dgamma[H]); returns H.
int64_t checkLayerNormGammaGrad(const KernelCall &call);
void runRMSNormGrad(const KernelCall &call);
void runAttentionGrad(const KernelCall &call);
void runEmbeddingGrad(const KernelCall &call);
void runCrossEntropyGrad(const KernelCall &call);
void runSGD(const KernelCall &call);
void runAdamW(const KernelCall &call);

} // namespace partita::runtime::cpu

#endif // PARTITA_RUNTIME_LIB_CPU_CPUKERNELS_H
