//===- Kernels.h - the cuda backend's kernels, written once ----*- C++ -*-===//
//
// Each kernel is a template over an execution context (KernelContext.h)
// and its element type, compiled by nvcc into a __global__ kernel
// (CudaKernels.cu) and by the host compiler into the block emulator
// (EmulatedKernels.cpp). Launches are 1-D; every kernel loops over its
// work with a grid stride, so any grid size is correct.
//
// Numerics follow the cpu backend (runtime/lib/cpu) so the two agree within
// rounding: sums (softmax denominators, norm statistics, losses) accumulate
// in double; exponentials subtract the row maximum first. Reductions are
// deterministic: each thread sums a fixed strided subset in order, a warp
// combines by an xor butterfly of shuffles, and the warps' partial results
// are added in warp order by every thread; no atomics, so a result depends
// only on the launch's block size, never on timing.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_LIB_CUDA_KERNELS_H
#define PARTITA_RUNTIME_LIB_CUDA_KERNELS_H

#include "runtime/lib/core/HalfFloat.h"
#include "runtime/lib/cuda/KernelContext.h"

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace partita::runtime::gpu {

/// The kernels (one __global__ per kernel and element type).
enum class GpuKernel : uint8_t {
  Binary,           // c = op(a, b)
  Unary,            // y = op(x)
  ElementwiseGrad,  // dx = op'(x) * dy, and greater_equal
  Fill,             // out = bits (element type: an unsigned of 1-8 bytes)
  Strided,          // out[i...] = in[sum i_k * inStride_k] (broadcast, transpose)
  Softmax,          // rows of `cols` elements `inner` apart
  LayerNorm,        // rows of `cols`; gamma, beta (op 1: each row's mean, rstd)
  CrossEntropyRows, // per-token losses (double) into a workspace
  SumToScalar,      // one block: out = sum(workspace) / a[0]
  AdamW,            // p, g, m, v, step -> p', m', v'
  Reduce,           // sum or max over some dimensions, times a scale
  CrossEntropyGrad, // (softmax - onehot) * dloss / count per token
  Embedding,        // rows of a table by id (zeros outside the shard)
  RMSNorm,          // rows of `cols`; gamma
  Sgd,              // p, g, buf -> p', buf'
  EmbeddingGrad,    // dtable rows from the sorted (row, token) pairs
  NormGrad,         // dx of layer_norm (op 0) or rms_norm (op 1), rows of `cols`
  // Issue 17 (h17ops): the kinds gpt and llama need besides attention.
  Rotary,           // rotary (op 0) or its gradient (op 1), pairs of x
  Convert,          // between f32, f64, f16 and bf16 (op: ConvertOp)
  EmbeddingKeys,    // (shard row or sentinel, token) pairs to sort
  AttentionForward, // attention, or its row statistics (AttentionKernels.h)
  AttentionGradQ,   // dq of attention
  AttentionGradKV,  // dk (op 0) or dv (op 1) of attention
  AttentionRows,    // attention by GEMMs: masked softmax (op 0) or dS (op 1);
                    // op 2 (op 3 for simt): gradient statistics from the
                    // saved O and lse
  ColumnPartials,   // reduce: partial sums (or maxima) of [rows, columns] by row chunk
  ColumnCombine,    // reduce: the chunks' partials of each column, in order
  AttentionMmaForward, // attention on tensor cores (AttentionMmaKernels.h)
  AttentionMmaGradQ,   // its dq
  AttentionMmaGradKV,  // its dk and dv
};

/// The kernel's name in messages and reports, e.g. "attention_mma_grad_kv".
inline const char *kernelName(GpuKernel k) {
  switch (k) {
  case GpuKernel::Binary: return "binary";
  case GpuKernel::Unary: return "unary";
  case GpuKernel::ElementwiseGrad: return "elementwise_grad";
  case GpuKernel::Fill: return "fill";
  case GpuKernel::Strided: return "strided";
  case GpuKernel::Softmax: return "softmax";
  case GpuKernel::LayerNorm: return "layer_norm";
  case GpuKernel::CrossEntropyRows: return "cross_entropy_rows";
  case GpuKernel::SumToScalar: return "sum_to_scalar";
  case GpuKernel::AdamW: return "adamw";
  case GpuKernel::Reduce: return "reduce";
  case GpuKernel::CrossEntropyGrad: return "cross_entropy_grad";
  case GpuKernel::Embedding: return "embedding";
  case GpuKernel::RMSNorm: return "rms_norm";
  case GpuKernel::Sgd: return "sgd";
  case GpuKernel::EmbeddingGrad: return "embedding_grad";
  case GpuKernel::NormGrad: return "norm_grad";
  case GpuKernel::Rotary: return "rotary";
  case GpuKernel::Convert: return "convert";
  case GpuKernel::EmbeddingKeys: return "embedding_keys";
  case GpuKernel::AttentionForward: return "attention_forward";
  case GpuKernel::AttentionGradQ: return "attention_grad_q";
  case GpuKernel::AttentionGradKV: return "attention_grad_kv";
  case GpuKernel::AttentionRows: return "attention_rows";
  case GpuKernel::ColumnPartials: return "column_partials";
  case GpuKernel::ColumnCombine: return "column_combine";
  case GpuKernel::AttentionMmaForward: return "attention_mma_forward";
  case GpuKernel::AttentionMmaGradQ: return "attention_mma_grad_q";
  case GpuKernel::AttentionMmaGradKV: return "attention_mma_grad_kv";
  }
  return "?";
}

enum class BinaryOp : int { Add, Sub, Mul, Div, Max };
enum class UnaryOp : int {
  Neg, Exp, Log, Tanh, Relu, Silu, Rsqrt, Sqrt, GeluErf, GeluTanh
};
enum class GradOp : int { Relu, Silu, GeluErf, GeluTanh, GreaterEqual };

/// Element types of a launch: the floats, and unsigned storage of 1, 2, 4
/// or 8 bytes for kernels that only move bits.
/// I32 and I64: the integer binary ops (add, sub, mul, div, max).
enum class ElemType : uint8_t { F32, F64, U8, U16, U32, U64, I32, I64 };

/// convert's pairs (the cpu backend's set): widening is exact, narrowing
/// rounds once to nearest even (HalfFloat.h, shared with the cpu backend).
enum class ConvertOp : int {
  F32ToF64, F64ToF32, F32ToF16, F32ToBF16, F16ToF32, BF16ToF32, F16ToF64,
  BF16ToF64
};

constexpr int kMaxRank = 8;

/// Everything a kernel reads, passed by value to the __global__ function.
/// Each kernel documents the fields it uses. Device addresses go in `in`
/// and `out` only: the emulated layer translates those (its device memory
/// sits behind PROT_NONE addresses, EmulatedApi.cpp), so a pointer kept
/// elsewhere faults under --emulate.
struct KernelParams {
  GpuKernel kernel = GpuKernel::Binary;
  ElemType type = ElemType::F32;
  int op = 0;
  bool wideLabels = false; // cross entropy: labels are i64 (else i32)
  bool index32 = false;    // strided: every index and offset fits 31 bits
  bool vec16 = false;      // 16-byte accesses (vecLoad16): elementwise kinds
                           // (n whole groups, every pointer aligned), cross
                           // entropy (every row aligned and whole groups)
  const void *in[6] = {};
  void *out[4] = {};
  int64_t n = 0;     // elements, or rows
  int64_t cols = 0;  // row length
  int64_t inner = 1; // distance between a row's elements
  int rank = 0;      // strided; reduce: the kept dimensions
  int64_t shape[kMaxRank] = {};
  int64_t inStride[kMaxRank] = {};
  int redRank = 0;   // reduce: the reduced dimensions
  int64_t redShape[kMaxRank] = {};
  int64_t redStride[kMaxRank] = {};
  uint64_t bits = 0; // fill value
  double a[6] = {};  // scalar attributes
};

/// A launch: geometry and parameters.
struct KernelLaunch {
  int grid = 1, block = 256;
  size_t sharedBytes = 0;
  KernelParams params;
};

/// The dynamic shared memory a launch may ask for without raising
/// cudaFuncAttributeMaxDynamicSharedMemorySize, which the backend never
/// does.
constexpr size_t kMaxDynamicSharedBytes = 48 * 1024;

/// Shared memory a block reduction needs (one double per warp).
constexpr size_t kReduceSharedBytes = 32 * sizeof(double);

//===----------------------------------------------------------------------===//
// Math that compiles for host and device
//===----------------------------------------------------------------------===//

PARTITA_HD inline float kexp(float x) { return expf(x); }
PARTITA_HD inline double kexp(double x) { return exp(x); }
PARTITA_HD inline float klog(float x) { return logf(x); }
PARTITA_HD inline double klog(double x) { return log(x); }
PARTITA_HD inline float ktanh(float x) { return tanhf(x); }
PARTITA_HD inline double ktanh(double x) { return tanh(x); }
PARTITA_HD inline float ksqrt(float x) { return sqrtf(x); }
PARTITA_HD inline double ksqrt(double x) { return sqrt(x); }
PARTITA_HD inline float kerf(float x) { return erff(x); }
PARTITA_HD inline double kerf(double x) { return erf(x); }
PARTITA_HD inline float kabs(float x) { return fabsf(x); }
PARTITA_HD inline double kabs(double x) { return fabs(x); }
/// a * b rounded, never fused into a neighbouring add (nvcc contracts
/// a * b + c into one fma by default; the host compiler here does not). Where
/// a kernel forms the same product twice and subtracts the two, contraction
/// leaves the product's rounding error instead of 0: layer_norm_grad of a
/// one-element row gave 1e-17 on an H100 where the cpu backend gives 0.
PARTITA_HD inline double kmulRounded(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

template <typename T> PARTITA_HD T infinity() {
  return static_cast<T>(HUGE_VAL);
}
template <typename T> PARTITA_HD T quietNaN() {
  return static_cast<T>(NAN);
}

/// Records in `slot` that `value` at `position` is out of range, keeping the
/// smallest (position, value) of all such calls until the host reads and
/// clears it (CudaBackend::checkDeviceErrors): one 64-bit word holding the
/// complement of position << 32 | value (each clamped to 32 bits), so a
/// zeroed slot means none and the largest word wins (atomicMax on the
/// device: which thread records first does not change what is kept).
PARTITA_HD inline void recordBadIndex(uint64_t *slot, int64_t position,
                                      int64_t value) {
  constexpr uint64_t kMax32 = 0xFFFFFFFFull;
  uint64_t pos = position < 0                  ? 0
                 : uint64_t(position) > kMax32 ? kMax32
                                               : uint64_t(position);
  uint64_t val = value < 0                  ? 0
                 : uint64_t(value) > kMax32 ? kMax32
                                            : uint64_t(value);
  uint64_t word = ~((pos << 32) | val);
#ifdef __CUDA_ARCH__
  atomicMax(reinterpret_cast<unsigned long long *>(slot),
            static_cast<unsigned long long>(word));
#else
  uint64_t seen = __atomic_load_n(slot, __ATOMIC_RELAXED);
  while (seen < word &&
         !__atomic_compare_exchange_n(slot, &seen, word, /*weak=*/true,
                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
#endif
}

/// NaN in either operand gives NaN (the cpu backend's max).
template <typename T> PARTITA_HD T maxOf(T x, T y) {
  return (x > y || x != x) ? x : y;
}

struct SumOp {
  template <typename T> PARTITA_HD T operator()(T x, T y) const {
    return x + y;
  }
};
struct MaxOp {
  template <typename T> PARTITA_HD T operator()(T x, T y) const {
    return maxOf(x, y);
  }
};

/// Combines `v` over the block in a fixed order; every thread gets the
/// result. Every thread of the block must call it (it has barriers).
template <typename A, typename Ctx, typename Op>
PARTITA_HD A blockReduce(const Ctx &c, A v, Op op) {
  for (int m = kWarpSize / 2; m > 0; m >>= 1)
    v = op(v, c.shuffleXor(v, m));
  auto s = c.template shared<A>();
  int t = c.threadIndex();
  if (t % kWarpSize == 0)
    s.store(t / kWarpSize, v);
  c.barrier();
  A total = s.load(0);
  for (int w = 1; w < c.blockSize() / kWarpSize; ++w)
    total = op(total, s.load(w));
  // The next reduction stores into the same slots.
  c.barrier();
  return total;
}

/// 1 + tanh(u) and 1 - tanh(u)^2 from t = exp(-2|u|), which keep their
/// relative accuracy where 1 + tanh(u) cancels (u very negative).
template <typename T>
PARTITA_HD void tanhParts(T u, T &onePlusTanh, T &sech2) {
  T a = kabs(u);
  a = a < T(43) ? a : T(43); // maps NaN to 43; the products keep NaN
  T t = kexp(T(-2) * a);
  T inv = T(1) / (T(1) + t);
  onePlusTanh = (u >= T(0) ? T(2) : T(2) * t) * inv;
  sech2 = T(4) * t * inv * inv;
}

//===----------------------------------------------------------------------===//
// The kernels
//===----------------------------------------------------------------------===//

template <typename Ctx>
PARTITA_HD int64_t globalThread(const Ctx &c) {
  return int64_t(c.blockIndex()) * c.blockSize() + c.threadIndex();
}
template <typename Ctx> PARTITA_HD int64_t gridThreads(const Ctx &c) {
  return int64_t(c.gridSize()) * c.blockSize();
}

/// Elements of T in 16 bytes.
template <typename T> constexpr int kVec16 = 16 / int(sizeof(T));

/// out = x[0 .. kVec16<T>), x 16-byte aligned: one 16-byte load on the
/// device (float4, double2), element loads in the emulator.
template <typename T>
PARTITA_HD void vecLoad16(const T *x, T (&out)[kVec16<T>]) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) {
    float4 v = *reinterpret_cast<const float4 *>(x);
    out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
  } else {
    double2 v = *reinterpret_cast<const double2 *>(x);
    out[0] = v.x, out[1] = v.y;
  }
#else
  for (int i = 0; i < kVec16<T>; ++i)
    out[i] = x[i];
#endif
}

/// y[0 .. kVec16<T>) = v, y 16-byte aligned: one 16-byte store on the device.
template <typename T>
PARTITA_HD void vecStore16(T *y, const T (&v)[kVec16<T>]) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>)
    *reinterpret_cast<float4 *>(y) = make_float4(v[0], v[1], v[2], v[3]);
  else
    *reinterpret_cast<double2 *>(y) = make_double2(v[0], v[1]);
#else
  for (int i = 0; i < kVec16<T>; ++i)
    y[i] = v[i];
#endif
}

/// out[0][i] = f(in[0][i]) (Arity 1) or f(in[0][i], in[1][i]) (Arity 2)
/// for the n elements, a grid-stride loop. With vec16 (floats only; the
/// host sets it when n is whole 16-byte groups and every pointer is
/// 16-byte aligned) each thread loads and stores 16 bytes of each at a
/// time: a quarter of the memory instructions and index steps in f32.
/// Writing over an input is safe: each group is read before it is
/// written, by the same thread.
template <int Arity, typename T, typename Ctx, typename F>
PARTITA_HD void elementwise(const Ctx &c, const KernelParams &p, F f) {
  const T *a = static_cast<const T *>(p.in[0]);
  const T *b = static_cast<const T *>(p.in[Arity - 1]);
  T *out = static_cast<T *>(p.out[0]);
  if constexpr (std::is_floating_point_v<T>) {
    if (p.vec16) {
      constexpr int V = kVec16<T>;
      for (int64_t g = globalThread(c), groups = p.n / V; g < groups;
           g += gridThreads(c)) {
        T x[V], y[V];
        vecLoad16(a + g * V, x);
        if constexpr (Arity == 2)
          vecLoad16(b + g * V, y);
        for (int i = 0; i < V; ++i) {
          if constexpr (Arity == 2)
            x[i] = f(x[i], y[i]);
          else
            x[i] = f(x[i]);
        }
        vecStore16(out + g * V, x);
      }
      return;
    }
  }
  for (int64_t i = globalThread(c); i < p.n; i += gridThreads(c)) {
    if constexpr (Arity == 2)
      out[i] = f(a[i], b[i]);
    else
      out[i] = f(a[i]);
  }
}

/// The offset of element `index` of a row-major `shape` of `rank`
/// dimensions in a tensor with `strides`.
PARTITA_HD inline int64_t stridedOffset(int64_t index, int rank,
                                        const int64_t *shape,
                                        const int64_t *strides) {
  int64_t offset = 0;
  for (int d = rank - 1; d >= 0; --d) {
    offset += (index % shape[d]) * strides[d];
    index /= shape[d];
  }
  return offset;
}

/// in[0], in[1] -> out[0]; n elements; op: BinaryOp (elementwise: 16-byte
/// accesses with vec16). Integer division records the first zero divisor
/// in out[1] and the first MIN / -1 in out[2] (uint64_t words, when not
/// null: recordBadIndex), for the host to report after the step.
template <typename T, typename Ctx>
PARTITA_HD void binaryKernel(const Ctx &c, const KernelParams &p) {
  auto op = static_cast<BinaryOp>(p.op);
  if constexpr (std::is_integral_v<T>) {
    // Each thread checks the elements it writes below, before writing them
    // (the output may be an input).
    if (op == BinaryOp::Div && (p.out[1] || p.out[2])) {
      const T *a = static_cast<const T *>(p.in[0]);
      const T *b = static_cast<const T *>(p.in[1]);
      // The smallest T (std::numeric_limits is not for device code here).
      const T min = T(std::make_unsigned_t<T>(1) << (sizeof(T) * 8 - 1));
      for (int64_t i = globalThread(c); i < p.n; i += gridThreads(c)) {
        if (b[i] == 0 && p.out[1])
          recordBadIndex(static_cast<uint64_t *>(p.out[1]), i, 0);
        else if (b[i] == T(-1) && a[i] == min && p.out[2])
          recordBadIndex(static_cast<uint64_t *>(p.out[2]), i, 0);
      }
    }
  }
  elementwise<2, T>(c, p, [op](T x, T y) {
    T r;
    if constexpr (std::is_integral_v<T>) {
      // The cpu backend's integer ops: add, sub and mul wrap (unsigned
      // arithmetic); max. Division truncates; the cpu backend throws for
      // a zero divisor and for MIN / -1, which the host cannot see before
      // the launch: here x / 0 gives 0 and MIN / -1 wraps to MIN (no trap),
      // and the first of each is recorded (above).
      using U = std::make_unsigned_t<T>;
      switch (op) {
      case BinaryOp::Add: r = T(U(x) + U(y)); break;
      case BinaryOp::Sub: r = T(U(x) - U(y)); break;
      case BinaryOp::Mul: r = T(U(x) * U(y)); break;
      case BinaryOp::Div:
        r = y == 0 ? T(0) : y == T(-1) ? T(U(0) - U(x)) : T(x / y);
        break;
      default: r = x > y ? x : y; break;
      }
    } else {
      switch (op) {
      case BinaryOp::Add: r = x + y; break;
      case BinaryOp::Sub: r = x - y; break;
      case BinaryOp::Mul: r = x * y; break;
      case BinaryOp::Div: r = x / y; break;
      default: r = maxOf(x, y); break;
      }
    }
    return r;
  });
}

/// in[0] -> out[0]; n elements; op: UnaryOp (elementwise: 16-byte
/// accesses with vec16).
template <typename T, typename Ctx>
PARTITA_HD void unaryKernel(const Ctx &c, const KernelParams &p) {
  auto op = static_cast<UnaryOp>(p.op);
  elementwise<1, T>(c, p, [op](T v) {
    const T sqrtHalf = T(0.7071067811865476), c0 = T(0.7978845608028654);
    T r;
    switch (op) {
    case UnaryOp::Neg: r = -v; break;
    case UnaryOp::Exp: r = kexp(v); break;
    case UnaryOp::Log: r = klog(v); break;
    case UnaryOp::Tanh: r = ktanh(v); break;
    case UnaryOp::Relu: r = v < T(0) ? T(0) : v; break;
    case UnaryOp::Silu: r = v / (T(1) + kexp(-v)); break;
    case UnaryOp::Rsqrt: r = T(1) / ksqrt(v); break;
    case UnaryOp::Sqrt: r = ksqrt(v); break;
    case UnaryOp::GeluErf: r = T(0.5) * v * (T(1) + kerf(v * sqrtHalf)); break;
    default: {
      T onePlusTanh, sech2;
      tanhParts(c0 * (v + T(0.044715) * v * v * v), onePlusTanh, sech2);
      r = T(0.5) * v * onePlusTanh;
      break;
    }
    }
    return r;
  });
}

/// in[0] (x), in[1] (dy) -> out[0] (dx); n elements; op: GradOp
/// (elementwise: 16-byte accesses with vec16).
template <typename T, typename Ctx>
PARTITA_HD void gradKernel(const Ctx &c, const KernelParams &p) {
  auto op = static_cast<GradOp>(p.op);
  elementwise<2, T>(c, p, [op](T v, T g) {
    const T c0 = T(0.7978845608028654);
    T r;
    switch (op) {
    case GradOp::Relu: r = v > T(0) ? g : T(0); break;
    case GradOp::Silu: {
      T s = T(1) / (T(1) + kexp(-v));
      r = g * s * (T(1) + v * (T(1) - s));
      break;
    }
    case GradOp::GeluErf: {
      T cdf = T(0.5) * (T(1) + kerf(v * T(0.7071067811865476)));
      T pdf = T(0.3989422804014327) * kexp(T(-0.5) * v * v);
      r = g * (cdf + v * pdf);
      break;
    }
    case GradOp::GeluTanh: {
      T onePlusTanh, sech2;
      tanhParts(c0 * (v + T(0.044715) * v * v * v), onePlusTanh, sech2);
      T du = c0 * (T(1) + T(3 * 0.044715) * v * v);
      r = g * (T(0.5) * onePlusTanh + T(0.5) * v * sech2 * du);
      break;
    }
    default: r = v >= g ? T(1) : T(0); break;
    }
    return r;
  });
}

/// out[0] = bits (T: the unsigned of the element's size); n elements.
template <typename T, typename Ctx>
PARTITA_HD void fillKernel(const Ctx &c, const KernelParams &p) {
  T *out = static_cast<T *>(p.out[0]);
  T v = static_cast<T>(p.bits);
  for (int64_t i = globalThread(c); i < p.n; i += gridThreads(c))
    out[i] = v;
}

/// out[0][i] = in[0][offset(i)] for the n elements of shape[0..rank): the
/// offset sums each index times inStride (0 repeats an element). With
/// index32 (n and every offset below 2^31) the index arithmetic is 32-bit:
/// a 64-bit division is a long instruction sequence on a GPU, and this is
/// the broadcast of every bias.
template <typename T, typename Ctx>
PARTITA_HD void stridedKernel(const Ctx &c, const KernelParams &p) {
  const T *in = static_cast<const T *>(p.in[0]);
  T *out = static_cast<T *>(p.out[0]);
  if (p.index32) {
    for (int64_t i = globalThread(c); i < p.n; i += gridThreads(c)) {
      uint32_t index = uint32_t(i), offset = 0;
      for (int d = p.rank - 1; d >= 0; --d) {
        uint32_t size = uint32_t(p.shape[d]);
        offset += (index % size) * uint32_t(p.inStride[d]);
        index /= size;
      }
      out[i] = in[offset];
    }
    return;
  }
  for (int64_t i = globalThread(c); i < p.n; i += gridThreads(c))
    out[i] = in[stridedOffset(i, p.rank, p.shape, p.inStride)];
}

/// Softmax of n rows (one block per row at a time) of `cols` elements
/// `inner` apart: row r starts at (r / inner) * cols * inner + r % inner.
template <typename T, typename Ctx>
PARTITA_HD void softmaxKernel(const Ctx &c, const KernelParams &p) {
  const T *x = static_cast<const T *>(p.in[0]);
  T *y = static_cast<T *>(p.out[0]);
  int t = c.threadIndex(), bs = c.blockSize();
  for (int64_t row = c.blockIndex(); row < p.n; row += c.gridSize()) {
    int64_t base = (row / p.inner) * p.cols * p.inner + row % p.inner;
    T m = -infinity<T>();
    for (int64_t j = t; j < p.cols; j += bs)
      m = maxOf(m, x[base + j * p.inner]);
    m = blockReduce(c, m, MaxOp());
    double sum = 0;
    for (int64_t j = t; j < p.cols; j += bs)
      sum += double(kexp(T(x[base + j * p.inner] - m)));
    sum = blockReduce(c, sum, SumOp());
    T r = static_cast<T>(1.0 / sum);
    for (int64_t j = t; j < p.cols; j += bs)
      y[base + j * p.inner] = kexp(T(x[base + j * p.inner] - m)) * r;
  }
}

/// The rows of the GEMM attention path's [heads, seq_q, seq_kv] score
/// scratch, one block per row; row r is query i = r % shape[0] of its head.
/// op 0, in place on out[0]: the scores S become P = softmax over the row's
/// first `valid` scores, zeros after (valid = cols, or when causal
/// (shape[2] != 0) min(cols, queryOffset (shape[1]) + i + 1), the cpu
/// backend's causalSoftmaxRows). op 1: with in[0] P, out[0] dP becomes
/// dS = P * (dP - sum(P * dP)) (the sum in double). Each thread touches its
/// own columns only, so in place is safe. op 0 with out[1]: also each row's
/// log-sum-exp m + log(sum) to out[1][row] (attention's lse). With in[1]
/// (rows from the forward's saved statistics, op 2's planes): op 0 takes
/// P = exp(S - in[1][row]) and op 1 dS = P * (dP - in[1][row]), one pass.
/// op 2, the tensor-core gradients' statistics from the forward's saved
/// output and lse (AttentionMmaKernels.h's workspace [2, n]): rows r =
/// (b heads + h) seqQ + i, shape[0] seqQ, shape[1] heads, cols head_dim;
/// out[0][r] = in[2][r] (lse) and out[0][n + r] = D = dO . O of query i,
/// head h (in[0] dO, in[1] O, [batch, seqQ, heads, head_dim]), the sum in
/// double. op 3: the same for the simt kernels' workspace [3, n] of (max,
/// 1/sum, D): (lse, 1, D), since exp(s - lse) = exp(s - max) / sum.
template <typename T, typename Ctx>
PARTITA_HD void attentionRowsKernel(const Ctx &c, const KernelParams &p) {
  int t = c.threadIndex(), bs = c.blockSize();
  for (int64_t row = c.blockIndex(); row < p.n; row += c.gridSize()) {
    if (p.op == 2 || p.op == 3) {
      int64_t seqQ = p.shape[0], heads = p.shape[1];
      int64_t i = row % seqQ, pair = row / seqQ;
      int64_t b = pair / heads, h = pair % heads;
      int64_t at = ((b * seqQ + i) * heads + h) * p.cols;
      const T *dy = static_cast<const T *>(p.in[0]) + at;
      const T *o = static_cast<const T *>(p.in[1]) + at;
      double dot = 0;
      for (int64_t j = t; j < p.cols; j += bs)
        dot += double(dy[j]) * o[j];
      dot = blockReduce(c, dot, SumOp());
      if (t == 0) {
        T *stats = static_cast<T *>(p.out[0]);
        stats[row] = static_cast<const T *>(p.in[2])[row];
        if (p.op == 3)
          stats[p.n + row] = T(1);
        stats[(p.op == 3 ? 2 : 1) * p.n + row] = static_cast<T>(dot);
      }
      continue;
    }
    T *x = static_cast<T *>(p.out[0]) + row * p.cols;
    const T *saved = static_cast<const T *>(p.in[1]);
    if (p.op == 1) {
      const T *prob = static_cast<const T *>(p.in[0]) + row * p.cols;
      T s;
      if (saved) {
        s = saved[row];
      } else {
        double dot = 0;
        for (int64_t j = t; j < p.cols; j += bs)
          dot += double(prob[j]) * x[j];
        s = static_cast<T>(blockReduce(c, dot, SumOp()));
      }
      for (int64_t j = t; j < p.cols; j += bs)
        x[j] = prob[j] * (x[j] - s);
      continue;
    }
    int64_t i = row % p.shape[0];
    int64_t valid = p.cols;
    if (p.shape[2] != 0 && p.shape[1] + i + 1 < valid)
      valid = p.shape[1] + i + 1;
    if (saved) {
      T shift = saved[row];
      for (int64_t j = t; j < p.cols; j += bs)
        x[j] = j < valid ? kexp(T(x[j] - shift)) : T(0);
      continue;
    }
    T m = -infinity<T>();
    for (int64_t j = t; j < valid; j += bs)
      m = maxOf(m, x[j]);
    m = blockReduce(c, m, MaxOp());
    double sum = 0;
    for (int64_t j = t; j < valid; j += bs)
      sum += double(kexp(T(x[j] - m)));
    sum = blockReduce(c, sum, SumOp());
    T r = static_cast<T>(1.0 / sum);
    for (int64_t j = t; j < p.cols; j += bs)
      x[j] = j < valid ? kexp(T(x[j] - m)) * r : T(0);
    if (p.out[1] && t == 0)
      static_cast<T *>(p.out[1])[row] = m + static_cast<T>(klog(sum));
  }
}

/// Layer norm of n rows of `cols`: in[0] x, in[1] gamma, in[2] beta;
/// a[0] epsilon. op 1: only the statistics, out[0][2 row] = mean and
/// out[0][2 row + 1] = rstd (T, as the normalization uses them; no gamma
/// or beta read), for layer_norm_gamma_grad.
template <typename T, typename Ctx>
PARTITA_HD void layerNormKernel(const Ctx &c, const KernelParams &p) {
  const T *x = static_cast<const T *>(p.in[0]);
  const T *gamma = static_cast<const T *>(p.in[1]);
  const T *beta = static_cast<const T *>(p.in[2]);
  T *y = static_cast<T *>(p.out[0]);
  int t = c.threadIndex(), bs = c.blockSize();
  for (int64_t row = c.blockIndex(); row < p.n; row += c.gridSize()) {
    const T *src = x + row * p.cols;
    T *dst = y + row * p.cols;
    double sum = 0;
    for (int64_t j = t; j < p.cols; j += bs)
      sum += double(src[j]);
    double mean = blockReduce(c, sum, SumOp()) / double(p.cols);
    double sq = 0;
    for (int64_t j = t; j < p.cols; j += bs) {
      double d = double(src[j]) - mean;
      sq += d * d;
    }
    double var = blockReduce(c, sq, SumOp()) / double(p.cols);
    T m = static_cast<T>(mean);
    T rstd = static_cast<T>(1.0 / ksqrt(var + p.a[0]));
    if (p.op == 1) {
      if (t == 0) {
        y[2 * row] = m;
        y[2 * row + 1] = rstd;
      }
      continue;
    }
    for (int64_t j = t; j < p.cols; j += bs)
      dst[j] = (src[j] - m) * rstd * gamma[j] + beta[j];
  }
}

/// A row's maximum m and sum of exp(x - m) (double).
template <typename T> struct RowMaxSum {
  T max;
  double sum;
};

/// The maximum and exponential sum of row x[0 .. cols), reading it once
/// (cross_entropy and its gradient: a [tokens, vocab] f32 row is 200 KB at
/// GPT's vocabulary, so each pass over the logits is gigabytes). Each
/// thread keeps the running maximum of its elements and the sum of their
/// exp(x - that maximum), rescaling the sum when the maximum grows; the
/// block then takes the largest maximum and adds the rescaled sums in
/// order. Exponentials in T (f32: one expf per element, as the cpu
/// backend's expShiftedSumF32), sums in double. An element equal to the
/// running maximum adds exactly 1, so -inf before any finite element (or
/// +inf) gives no NaN; a NaN element makes the sum NaN. vec: 16-byte loads
/// (cols whole groups of kVec16<T>, x aligned).
template <typename T, typename Ctx>
PARTITA_HD RowMaxSum<T> rowMaxSum(const Ctx &c, const T *x, int64_t cols,
                                  bool vec) {
  int t = c.threadIndex(), bs = c.blockSize();
  T m = -infinity<T>();
  double s = 0;
  auto take = [&](const T *v, int k) {
    T top = v[0];
    for (int i = 1; i < k; ++i)
      top = maxOf(top, v[i]);
    if (top > m) {
      s *= double(kexp(T(m - top)));
      m = top;
    }
    for (int i = 0; i < k; ++i)
      s += v[i] == m ? 1.0 : double(kexp(T(v[i] - m)));
  };
  constexpr int V = kVec16<T>;
  if (vec) {
    for (int64_t g = t, groups = cols / V; g < groups; g += bs) {
      T v[V];
      vecLoad16(x + g * V, v);
      take(v, V);
    }
  } else {
    for (int64_t j = t; j < cols; j += bs)
      take(x + j, 1);
  }
  T rowMax = blockReduce(c, m, MaxOp());
  if (m != rowMax)
    s *= double(kexp(T(m - rowMax)));
  return {rowMax, blockReduce(c, s, SumOp())};
}

/// Cross-entropy terms of n tokens of `cols` logits: in[0] logits, in[1]
/// labels (i64 when wideLabels, else i32) -> out[0] (double per token):
/// max + log(sum exp(x - max)) - x[label] (rowMaxSum: one read of the
/// row); 0 for a negative label (a padded token), NaN for a label >= cols,
/// which is also recorded in out[1] (a uint64_t, when not null:
/// recordBadIndex) for the host to report after the step (it cannot check
/// labels that live on the device before the launch). vec16: rowMaxSum's
/// 16-byte loads.
template <typename T, typename Ctx>
PARTITA_HD void crossEntropyRowsKernel(const Ctx &c, const KernelParams &p) {
  const T *logits = static_cast<const T *>(p.in[0]);
  double *terms = static_cast<double *>(p.out[0]);
  int t = c.threadIndex();
  for (int64_t row = c.blockIndex(); row < p.n; row += c.gridSize()) {
    int64_t label =
        p.wideLabels ? static_cast<const int64_t *>(p.in[1])[row]
                     : int64_t(static_cast<const int32_t *>(p.in[1])[row]);
    // Uniform over the block: every thread takes the same branch.
    if (label < 0 || label >= p.cols) {
      if (t == 0) {
        terms[row] = label < 0 ? 0.0 : quietNaN<double>();
        if (label >= 0 && p.out[1])
          recordBadIndex(static_cast<uint64_t *>(p.out[1]), row, label);
      }
      continue;
    }
    const T *x = logits + row * p.cols;
    RowMaxSum<T> r = rowMaxSum(c, x, p.cols, p.vec16);
    if (t == 0)
      terms[row] = double(r.max) + klog(r.sum) - double(x[label]);
  }
}

/// One block: out[0] (T, 0-d) = sum of in[0][0..n) (double) / a[0]; a
/// count of 0 gives NaN (0/0, as the cpu backend).
template <typename T, typename Ctx>
PARTITA_HD void sumToScalarKernel(const Ctx &c, const KernelParams &p) {
  const double *terms = static_cast<const double *>(p.in[0]);
  double sum = 0;
  for (int64_t i = c.threadIndex(); i < p.n; i += c.blockSize())
    sum += terms[i];
  sum = blockReduce(c, sum, SumOp());
  if (c.blockIndex() == 0 && c.threadIndex() == 0)
    *static_cast<T *>(p.out[0]) =
        static_cast<T>(p.a[0] > 0 ? sum / p.a[0] : quietNaN<double>());
}

/// PyTorch's AdamW, as the cpu backend computes it: in p, g, m, v, step
/// (0-d) -> out p', m', v'; a: lr, beta1, beta2, eps, weightDecay. A NaN
/// step (fp16-mixed's skipped step) leaves each output its input's value;
/// any other step below 1 or infinite is recorded in out[3] (a uint64_t,
/// when not null: recordBadIndex of the step's f32 bits) for the host to
/// report after the step, the cpu backend's error.
template <typename T, typename Ctx>
PARTITA_HD void adamwKernel(const Ctx &c, const KernelParams &p) {
  const T *param = static_cast<const T *>(p.in[0]);
  const T *g = static_cast<const T *>(p.in[1]);
  const T *m = static_cast<const T *>(p.in[2]);
  const T *v = static_cast<const T *>(p.in[3]);
  double step = double(*static_cast<const T *>(p.in[4]));
  T *pOut = static_cast<T *>(p.out[0]);
  T *mOut = static_cast<T *>(p.out[1]);
  T *vOut = static_cast<T *>(p.out[2]);
  if (step != step) {
    for (int64_t i = globalThread(c); i < p.n; i += gridThreads(c)) {
      pOut[i] = param[i];
      mOut[i] = m[i];
      vOut[i] = v[i];
    }
    return;
  }
  // (step - step is 0 for a finite step, NaN for an infinite one.)
  if (!(step >= 1 && step - step == 0) && p.out[3] && globalThread(c) == 0) {
    recordBadIndex(static_cast<uint64_t *>(p.out[3]), 0,
                   int64_t(half::bitsOf(float(step))));
  }
  // in[5]: the learning rate in device memory (KernelAttrs::lrOnDevice).
  double lr = p.in[5] ? *static_cast<const double *>(p.in[5]) : p.a[0];
  double beta1 = p.a[1], beta2 = p.a[2], eps = p.a[3];
  double decay = 1 - lr * p.a[4];
  double c1 = 1 - pow(beta1, step), c2 = 1 - pow(beta2, step);
  for (int64_t i = globalThread(c); i < p.n; i += gridThreads(c)) {
    double gi = g[i];
    double m2 = beta1 * double(m[i]) + (1 - beta1) * gi;
    double v2 = beta2 * double(v[i]) + (1 - beta2) * gi * gi;
    double next = double(param[i]) * decay - lr * (m2 / c1) / (sqrt(v2 / c2) + eps);
    mOut[i] = static_cast<T>(m2);
    vOut[i] = static_cast<T>(v2);
    pOut[i] = static_cast<T>(next);
  }
}

/// PyTorch's SGD (dampening 0, no Nesterov), as the cpu backend computes
/// it: in p, g, buf -> out p', buf'; a: lr, momentum, weightDecay.
template <typename T, typename Ctx>
PARTITA_HD void sgdKernel(const Ctx &c, const KernelParams &p) {
  const T *param = static_cast<const T *>(p.in[0]);
  const T *g = static_cast<const T *>(p.in[1]);
  const T *buf = static_cast<const T *>(p.in[2]);
  T *pOut = static_cast<T *>(p.out[0]);
  T *bufOut = static_cast<T *>(p.out[1]);
  // in[3]: the learning rate in device memory (KernelAttrs::lrOnDevice).
  double lr = p.in[3] ? *static_cast<const double *>(p.in[3]) : p.a[0];
  double momentum = p.a[1], decay = p.a[2];
  for (int64_t i = globalThread(c); i < p.n; i += gridThreads(c)) {
    double pi = double(param[i]);
    double g2 = double(g[i]) + decay * pi;
    double b = momentum * double(buf[i]) + g2;
    bufOut[i] = static_cast<T>(b);
    pOut[i] = static_cast<T>(pi - lr * b);
  }
}

/// n outputs (one block each at a time): output o reduces the `cols`
/// elements of in[0] at offset(o over the kept dimensions) + offset(j over
/// the reduced ones); op 0 sums in double and multiplies by a[0], op 1
/// takes the maximum (NaN wins). One reduced dimension (a row; the host
/// merges adjacent ones) is addressed without division.
template <typename T, typename Ctx>
PARTITA_HD void reduceKernel(const Ctx &c, const KernelParams &p) {
  const T *x = static_cast<const T *>(p.in[0]);
  T *y = static_cast<T *>(p.out[0]);
  int t = c.threadIndex(), bs = c.blockSize();
  if (p.redRank == 1) {
    int64_t stride = p.redStride[0];
    for (int64_t o = c.blockIndex(); o < p.n; o += c.gridSize()) {
      const T *row = x + stridedOffset(o, p.rank, p.shape, p.inStride);
      if (p.op == 1) {
        T m = -infinity<T>();
        for (int64_t j = t; j < p.cols; j += bs)
          m = maxOf(m, row[j * stride]);
        m = blockReduce(c, m, MaxOp());
        if (t == 0)
          y[o] = m;
      } else {
        double sum = 0;
        for (int64_t j = t; j < p.cols; j += bs)
          sum += double(row[j * stride]);
        sum = blockReduce(c, sum, SumOp());
        if (t == 0)
          y[o] = static_cast<T>(sum * p.a[0]);
      }
    }
    return;
  }
  for (int64_t o = c.blockIndex(); o < p.n; o += c.gridSize()) {
    int64_t base = stridedOffset(o, p.rank, p.shape, p.inStride);
    if (p.op == 1) {
      T m = -infinity<T>();
      for (int64_t j = t; j < p.cols; j += bs)
        m = maxOf(m, x[base + stridedOffset(j, p.redRank, p.redShape,
                                               p.redStride)]);
      m = blockReduce(c, m, MaxOp());
      if (t == 0)
        y[o] = m;
    } else {
      double sum = 0;
      for (int64_t j = t; j < p.cols; j += bs)
        sum += double(x[base + stridedOffset(j, p.redRank, p.redShape,
                                                p.redStride)]);
      sum = blockReduce(c, sum, SumOp());
      if (t == 0)
        y[o] = static_cast<T>(sum * p.a[0]);
    }
  }
}

/// The first pass of a reduction over the rows of a row-major [cols, n]
/// in[0] (a bias's gradient: [tokens, hidden] summed over the tokens), which
/// one block per output would read a column at a time, `n` elements apart:
/// out[0][k * n + o] (double) reduces column o over rows [k * inner,
/// (k + 1) * inner) (op 0 sums, op 1 takes the maximum). A block takes
/// (row chunk, 32-column tile) items a grid stride apart; lane l of every
/// warp takes column tile + l, warp w rows w, w + warps, ... of the chunk,
/// so each warp reads whole 128-byte rows of its tile; the warps' results
/// are combined in warp order. Shared memory: a double per thread.
/// op 2 sums layer_norm_gamma_grad's terms instead: with in[1] dy (as x)
/// and in[2] the rows' (mean, rstd) pairs (LayerNorm op 1), the element
/// (r, o) is dy * xhat, xhat = (x - mean) * rstd, each rounded to T.
template <typename T, typename Ctx>
PARTITA_HD void columnPartialsKernel(const Ctx &c, const KernelParams &p) {
  const T *x = static_cast<const T *>(p.in[0]);
  const T *dy = static_cast<const T *>(p.in[1]);
  const T *stats = static_cast<const T *>(p.in[2]);
  double *part = static_cast<double *>(p.out[0]);
  int t = c.threadIndex(), lane = t % kWarpSize, warp = t / kWarpSize;
  int warps = c.blockSize() / kWarpSize;
  bool isMax = p.op == 1;
  int64_t tiles = (p.n + kWarpSize - 1) / kWarpSize;
  int64_t chunks = (p.cols + p.inner - 1) / p.inner;
  auto s = c.template shared<double>();
  for (int64_t item = c.blockIndex(); item < tiles * chunks;
       item += c.gridSize()) {
    int64_t chunk = item / tiles, o = (item % tiles) * kWarpSize + lane;
    int64_t end = (chunk + 1) * p.inner < p.cols ? (chunk + 1) * p.inner
                                                 : p.cols;
    double acc = isMax ? -infinity<double>() : 0.0;
    if (o < p.n)
      for (int64_t r = chunk * p.inner + warp; r < end; r += warps) {
        double v;
        if (p.op == 2) {
          T xhat = (x[r * p.n + o] - stats[2 * r]) * stats[2 * r + 1];
          v = double(T(dy[r * p.n + o] * xhat));
        } else {
          v = double(x[r * p.n + o]);
        }
        acc = isMax ? maxOf(acc, v) : acc + v;
      }
    s.store(t, acc);
    c.barrier();
    if (warp == 0 && o < p.n) {
      double total = s.load(lane);
      for (int w = 1; w < warps; ++w) {
        double v = s.load(w * kWarpSize + lane);
        total = isMax ? maxOf(total, v) : total + v;
      }
      part[chunk * p.n + o] = total;
    }
    // The next item stores into the same slots.
    c.barrier();
  }
}

/// The second pass: out[0][o] (T) combines column o's `cols` partials of
/// in[0] (double, [cols, n]) in chunk order; op 0 sums and multiplies by
/// a[0], op 1 takes the maximum.
template <typename T, typename Ctx>
PARTITA_HD void columnCombineKernel(const Ctx &c, const KernelParams &p) {
  const double *part = static_cast<const double *>(p.in[0]);
  T *y = static_cast<T *>(p.out[0]);
  bool isMax = p.op == 1;
  for (int64_t o = globalThread(c); o < p.n; o += gridThreads(c)) {
    double acc = part[o];
    for (int64_t k = 1; k < p.cols; ++k)
      acc = isMax ? maxOf(acc, part[k * p.n + o]) : acc + part[k * p.n + o];
    y[o] = static_cast<T>(isMax ? acc : acc * p.a[0]);
  }
}

/// The gradient of cross_entropy for n tokens of `cols` logits: in[0]
/// logits, in[1] labels (as crossEntropyRowsKernel), in[2] dloss (0-d) ->
/// out[0] = (softmax(row) - onehot(label)) * dloss / a[0]; a zero row for a
/// negative label, a NaN row for a label >= cols (recorded in out[1], as
/// crossEntropyRowsKernel does). Two reads of the row
/// (rowMaxSum, then the write) and one write; as the cpu backend, each
/// element is exp(x - max) * (scale / sum) in T, and the label's less
/// scale. vec16: 16-byte loads and stores.
template <typename T, typename Ctx>
PARTITA_HD void crossEntropyGradKernel(const Ctx &c, const KernelParams &p) {
  const T *logits = static_cast<const T *>(p.in[0]);
  double scale = double(*static_cast<const T *>(p.in[2])) / p.a[0];
  T *out = static_cast<T *>(p.out[0]);
  int t = c.threadIndex(), bs = c.blockSize();
  constexpr int V = kVec16<T>;
  for (int64_t row = c.blockIndex(); row < p.n; row += c.gridSize()) {
    int64_t label =
        p.wideLabels ? static_cast<const int64_t *>(p.in[1])[row]
                     : int64_t(static_cast<const int32_t *>(p.in[1])[row]);
    const T *x = logits + row * p.cols;
    T *dst = out + row * p.cols;
    if (label < 0 || label >= p.cols) {
      T fill = label < 0 ? T(0) : quietNaN<T>();
      if (label >= 0 && t == 0 && p.out[1])
        recordBadIndex(static_cast<uint64_t *>(p.out[1]), row, label);
      for (int64_t j = t; j < p.cols; j += bs)
        dst[j] = fill;
      continue;
    }
    RowMaxSum<T> r = rowMaxSum(c, x, p.cols, p.vec16);
    T factor = static_cast<T>(scale / r.sum), s = static_cast<T>(scale);
    auto grad = [&](T v, int64_t j) {
      return kexp(T(v - r.max)) * factor - (j == label ? s : T(0));
    };
    if (p.vec16) {
      for (int64_t g = t, groups = p.cols / V; g < groups; g += bs) {
        T v[V];
        vecLoad16(x + g * V, v);
        for (int i = 0; i < V; ++i)
          v[i] = grad(v[i], g * V + i);
        vecStore16(dst + g * V, v);
      }
    } else {
      for (int64_t j = t; j < p.cols; j += bs)
        dst[j] = grad(x[j], j);
    }
  }
}

/// out[0][t, h] = row ids[t] - offset of in[0], a table of `inner` rows of
/// `cols`; in[1] ids (i64 when wideLabels, else i32); offset a[0]; n output
/// elements. An id outside [offset, offset + inner) gives zeros (the shard
/// does not hold it; the all-reduce over the vocab axis sums the shards).
template <typename T, typename Ctx>
PARTITA_HD void embeddingKernel(const Ctx &c, const KernelParams &p) {
  const T *table = static_cast<const T *>(p.in[0]);
  T *out = static_cast<T *>(p.out[0]);
  int64_t offset = int64_t(p.a[0]);
  for (int64_t i = globalThread(c); i < p.n; i += gridThreads(c)) {
    int64_t t = i / p.cols, h = i % p.cols;
    int64_t id = p.wideLabels
                     ? static_cast<const int64_t *>(p.in[1])[t]
                     : int64_t(static_cast<const int32_t *>(p.in[1])[t]);
    out[i] = (id >= offset && id - offset < p.inner)
                 ? table[(id - offset) * p.cols + h]
                 : T(0);
  }
}

/// RMS norm of n rows of `cols`: in[0] x, in[1] gamma; a[0] epsilon.
template <typename T, typename Ctx>
PARTITA_HD void rmsNormKernel(const Ctx &c, const KernelParams &p) {
  const T *x = static_cast<const T *>(p.in[0]);
  const T *gamma = static_cast<const T *>(p.in[1]);
  T *y = static_cast<T *>(p.out[0]);
  int t = c.threadIndex(), bs = c.blockSize();
  for (int64_t row = c.blockIndex(); row < p.n; row += c.gridSize()) {
    const T *src = x + row * p.cols;
    T *dst = y + row * p.cols;
    double sq = 0;
    for (int64_t j = t; j < p.cols; j += bs)
      sq += double(src[j]) * src[j];
    sq = blockReduce(c, sq, SumOp());
    T rms = static_cast<T>(1.0 / ksqrt(sq / double(p.cols) + p.a[0]));
    for (int64_t j = t; j < p.cols; j += bs)
      dst[j] = src[j] * rms * gamma[j];
  }
}

/// The input gradient of layer_norm (op 0) or rms_norm (op 1), as the cpu
/// backend computes it, one block per row of `cols`: in x, gamma, dy -> out
/// dx; a[0] epsilon. With g = dy * gamma:
///   layer: dx = rstd * (g - mean(g) - xhat * mean(g * xhat));
///   rms:   dx = r * g - x * r^3 * mean(g * x).
/// Each row sum is a block reduction (deterministic, double).
template <typename T, typename Ctx>
PARTITA_HD void normGradKernel(const Ctx &c, const KernelParams &p) {
  const T *x = static_cast<const T *>(p.in[0]);
  const T *gamma = static_cast<const T *>(p.in[1]);
  const T *dyAll = static_cast<const T *>(p.in[2]);
  T *dxAll = static_cast<T *>(p.out[0]);
  int t = c.threadIndex(), bs = c.blockSize();
  double n = double(p.cols);
  for (int64_t row = c.blockIndex(); row < p.n; row += c.gridSize()) {
    const T *src = x + row * p.cols, *dy = dyAll + row * p.cols;
    T *dst = dxAll + row * p.cols;
    if (p.op == 1) {
      double sq = 0, gx = 0;
      for (int64_t j = t; j < p.cols; j += bs) {
        sq += double(src[j]) * src[j];
        gx += double(dy[j]) * gamma[j] * src[j];
      }
      sq = blockReduce(c, sq, SumOp());
      gx = blockReduce(c, gx, SumOp());
      double rms = 1.0 / ksqrt(sq / n + p.a[0]);
      double k = rms * rms * rms * gx / n;
      for (int64_t j = t; j < p.cols; j += bs)
        dst[j] = static_cast<T>(rms * double(dy[j]) * gamma[j] - k * src[j]);
      continue;
    }
    double sum = 0;
    for (int64_t j = t; j < p.cols; j += bs)
      sum += src[j];
    double mean = blockReduce(c, sum, SumOp()) / n;
    double var = 0;
    for (int64_t j = t; j < p.cols; j += bs) {
      double d = src[j] - mean;
      var += d * d;
    }
    var = blockReduce(c, var, SumOp()) / n;
    double rstd = 1.0 / ksqrt(var + p.a[0]);
    double g = 0, gx = 0;
    for (int64_t j = t; j < p.cols; j += bs) {
      double gj = kmulRounded(dy[j], gamma[j]);
      g += gj;
      gx += gj * (src[j] - mean) * rstd;
    }
    double meanG = blockReduce(c, g, SumOp()) / n;
    double meanGX = blockReduce(c, gx, SumOp()) / n;
    for (int64_t j = t; j < p.cols; j += bs) {
      double gj = kmulRounded(dy[j], gamma[j]);
      double xhat = (src[j] - mean) * rstd;
      dst[j] = static_cast<T>(rstd * (gj - meanG - xhat * meanGX));
    }
  }
}

//===----------------------------------------------------------------------===//
// Issue 17 (h17ops): rotary, convert, the sorted embedding gradient
//===----------------------------------------------------------------------===//

/// Rotary position embedding of x [batch, seq, heads, headDim] as the cpu
/// backend computes it: each pair (x[2i], x[2i+1]) of a head at position s
/// turns by the angle whose cosine and sine (double, from the host: the
/// cpu backend's std::pow, std::cos and std::sin, so the same values; a
/// device sin/cos of large arguments would also need local memory) are
/// in[1][s * half + i] and in[1][seq * half + s * half + i], rounded to T;
/// op 1 (rotary_grad) turns by minus the angle. n pairs; shape = {seq,
/// heads, headDim / 2}; cols headDim. in[0] x -> out[0] y.
template <typename T, typename Ctx>
PARTITA_HD void rotaryKernel(const Ctx &c, const KernelParams &p) {
  const T *x = static_cast<const T *>(p.in[0]);
  const double *table = static_cast<const double *>(p.in[1]);
  T *y = static_cast<T *>(p.out[0]);
  int64_t seq = p.shape[0], heads = p.shape[1], half = p.shape[2];
  for (int64_t i = globalThread(c); i < p.n; i += gridThreads(c)) {
    int64_t pair = i % half, row = i / half; // row: (b * seq + s) * heads + h
    int64_t at = ((row / heads) % seq) * half + pair;
    T cs = static_cast<T>(table[at]);
    double sine = table[seq * half + at];
    T sn = static_cast<T>(p.op == 1 ? -sine : sine);
    int64_t base = row * p.cols + 2 * pair;
    T x0 = x[base], x1 = x[base + 1];
    y[base] = x0 * cs - x1 * sn;
    y[base + 1] = x0 * sn + x1 * cs;
  }
}

/// out[0][i] = in[0][i] converted (op: ConvertOp); n elements; f16 and
/// bf16 are uint16_t bits. T is unused (the launch names F32).
template <typename T, typename Ctx>
PARTITA_HD void convertKernel(const Ctx &c, const KernelParams &p) {
  auto op = static_cast<ConvertOp>(p.op);
  const void *in = p.in[0];
  void *out = p.out[0];
  for (int64_t i = globalThread(c); i < p.n; i += gridThreads(c)) {
    switch (op) {
    case ConvertOp::F32ToF64:
      static_cast<double *>(out)[i] = double(static_cast<const float *>(in)[i]);
      break;
    case ConvertOp::F64ToF32:
      static_cast<float *>(out)[i] =
          static_cast<float>(static_cast<const double *>(in)[i]);
      break;
    case ConvertOp::F32ToF16:
      static_cast<uint16_t *>(out)[i] =
          half::toF16(static_cast<const float *>(in)[i]);
      break;
    case ConvertOp::F32ToBF16:
      static_cast<uint16_t *>(out)[i] =
          half::toBF16(static_cast<const float *>(in)[i]);
      break;
    case ConvertOp::F16ToF32:
      static_cast<float *>(out)[i] =
          half::fromF16(static_cast<const uint16_t *>(in)[i]);
      break;
    case ConvertOp::BF16ToF32:
      static_cast<float *>(out)[i] =
          half::fromBF16(static_cast<const uint16_t *>(in)[i]);
      break;
    case ConvertOp::F16ToF64:
      static_cast<double *>(out)[i] =
          double(half::fromF16(static_cast<const uint16_t *>(in)[i]));
      break;
    default:
      static_cast<double *>(out)[i] =
          double(half::fromBF16(static_cast<const uint16_t *>(in)[i]));
      break;
    }
  }
}

/// The first pass of embedding_grad: for each of n tokens, out[0] key =
/// id - offset (a[0]) when the shard holds the id (in [0, inner)), else
/// inner (sorts after every row, so no row sees it); out[1] value = the
/// token. in[1] ids (i64 when wideLabels, else i32). Keys and values are
/// uint32 (the host checks that rows and tokens fit).
template <typename T, typename Ctx>
PARTITA_HD void embeddingKeysKernel(const Ctx &c, const KernelParams &p) {
  uint32_t *keys = static_cast<uint32_t *>(p.out[0]);
  uint32_t *tokens = static_cast<uint32_t *>(p.out[1]);
  int64_t offset = int64_t(p.a[0]);
  for (int64_t t = globalThread(c); t < p.n; t += gridThreads(c)) {
    int64_t id = p.wideLabels
                     ? static_cast<const int64_t *>(p.in[1])[t]
                     : int64_t(static_cast<const int32_t *>(p.in[1])[t]);
    int64_t row = id - offset;
    keys[t] = uint32_t(row >= 0 && row < p.inner ? row : p.inner);
    tokens[t] = uint32_t(t);
  }
}

/// The second pass of embedding_grad, after a stable sort of the pairs by
/// key (so each row's tokens are in token order): out[0] dtable [n rows,
/// cols], row v the sum of dy (in[0], [tokens, cols]) over its tokens, in
/// token order from 0, as the cpu backend adds them (the same bits). One
/// block per row at a time, threads over the hidden dimension; each thread
/// finds the row's run of keys by binary search. in[1] sorted keys, in[2]
/// tokens in that order; `inner` tokens. No atomics.
template <typename T, typename Ctx>
PARTITA_HD void embeddingGradKernel(const Ctx &c, const KernelParams &p) {
  const T *dy = static_cast<const T *>(p.in[0]);
  const uint32_t *keys = static_cast<const uint32_t *>(p.in[1]);
  const uint32_t *tokens = static_cast<const uint32_t *>(p.in[2]);
  T *out = static_cast<T *>(p.out[0]);
  int64_t count = p.inner;
  for (int64_t v = c.blockIndex(); v < p.n; v += c.gridSize()) {
    // The first position whose key is >= v.
    int64_t lo = 0, hi = count;
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2;
      if (int64_t(keys[mid]) < v)
        lo = mid + 1;
      else
        hi = mid;
    }
    for (int64_t h = c.threadIndex(); h < p.cols; h += c.blockSize()) {
      T sum = T(0);
      for (int64_t j = lo; j < count && int64_t(keys[j]) == v; ++j)
        sum += dy[int64_t(tokens[j]) * p.cols + h];
      out[v * p.cols + h] = sum;
    }
  }
}
} // namespace partita::runtime::gpu

// attention and attention_grad (flash-attention style kernels).
#include "runtime/lib/cuda/AttentionKernels.h"
#include "runtime/lib/cuda/AttentionMmaKernels.h"

namespace partita::runtime::gpu {

/// Runs kernel K on element type T in context `c`.
template <GpuKernel K, typename T, typename Ctx>
PARTITA_HD void runKernel(const Ctx &c, const KernelParams &p) {
  if constexpr (K == GpuKernel::Binary)
    binaryKernel<T>(c, p);
  else if constexpr (K == GpuKernel::Unary)
    unaryKernel<T>(c, p);
  else if constexpr (K == GpuKernel::ElementwiseGrad)
    gradKernel<T>(c, p);
  else if constexpr (K == GpuKernel::Fill)
    fillKernel<T>(c, p);
  else if constexpr (K == GpuKernel::Strided)
    stridedKernel<T>(c, p);
  else if constexpr (K == GpuKernel::Softmax)
    softmaxKernel<T>(c, p);
  else if constexpr (K == GpuKernel::LayerNorm)
    layerNormKernel<T>(c, p);
  else if constexpr (K == GpuKernel::CrossEntropyRows)
    crossEntropyRowsKernel<T>(c, p);
  else if constexpr (K == GpuKernel::SumToScalar)
    sumToScalarKernel<T>(c, p);
  else if constexpr (K == GpuKernel::AdamW)
    adamwKernel<T>(c, p);
  else if constexpr (K == GpuKernel::Reduce)
    reduceKernel<T>(c, p);
  else if constexpr (K == GpuKernel::CrossEntropyGrad)
    crossEntropyGradKernel<T>(c, p);
  else if constexpr (K == GpuKernel::Embedding)
    embeddingKernel<T>(c, p);
  else if constexpr (K == GpuKernel::Sgd)
    sgdKernel<T>(c, p);
  else if constexpr (K == GpuKernel::EmbeddingGrad)
    embeddingGradKernel<T>(c, p);
  else if constexpr (K == GpuKernel::NormGrad)
    normGradKernel<T>(c, p);
  else if constexpr (K == GpuKernel::Rotary)
    rotaryKernel<T>(c, p);
  else if constexpr (K == GpuKernel::Convert)
    convertKernel<T>(c, p);
  else if constexpr (K == GpuKernel::EmbeddingKeys)
    embeddingKeysKernel<T>(c, p);
  else if constexpr (K == GpuKernel::AttentionForward)
    attentionForwardKernel<T>(c, p);
  else if constexpr (K == GpuKernel::AttentionGradQ)
    attentionGradQKernel<T>(c, p);
  else if constexpr (K == GpuKernel::AttentionGradKV)
    attentionGradKVKernel<T>(c, p);
  else if constexpr (K == GpuKernel::AttentionRows)
    attentionRowsKernel<T>(c, p);
  else if constexpr (K == GpuKernel::ColumnPartials)
    columnPartialsKernel<T>(c, p);
  else if constexpr (K == GpuKernel::ColumnCombine)
    columnCombineKernel<T>(c, p);
  else if constexpr (K == GpuKernel::AttentionMmaForward)
    attentionMmaForwardKernel(c, p);
  else if constexpr (K == GpuKernel::AttentionMmaGradQ)
    attentionMmaGradQKernel(c, p);
  else if constexpr (K == GpuKernel::AttentionMmaGradKV)
    attentionMmaGradKVKernel(c, p);
  else
    rmsNormKernel<T>(c, p);
}

template <GpuKernel K> using KernelTag = std::integral_constant<GpuKernel, K>;

/// Calls fn(KernelTag<K>{}, T{}) for the launch's kernel and element type
/// (host code: picks the instantiation to run); false when the pair has no
/// kernel.
template <typename Fn> bool dispatchKernel(const KernelParams &p, Fn &&fn) {
  auto floats = [&](auto tag) {
    if (p.type == ElemType::F32)
      return fn(tag, float{}), true;
    if (p.type == ElemType::F64)
      return fn(tag, double{}), true;
    return false;
  };
  // Binary also has the integer ops; Convert, EmbeddingKeys: one variant
  // (they read the types from the params), launched as F32.
  auto withInts = [&](auto tag) {
    if (p.type == ElemType::I32)
      return fn(tag, int32_t{}), true;
    if (p.type == ElemType::I64)
      return fn(tag, int64_t{}), true;
    return floats(tag);
  };
  auto one = [&](auto tag) {
    if (p.type == ElemType::F32)
      return fn(tag, float{}), true;
    return false;
  };
  auto bits = [&](auto tag) {
    switch (p.type) {
    case ElemType::U8: return fn(tag, uint8_t{}), true;
    case ElemType::U16: return fn(tag, uint16_t{}), true;
    case ElemType::U32: return fn(tag, uint32_t{}), true;
    case ElemType::U64: return fn(tag, uint64_t{}), true;
    default: return false;
    }
  };
  switch (p.kernel) {
  case GpuKernel::Binary: return withInts(KernelTag<GpuKernel::Binary>{});
  case GpuKernel::Unary: return floats(KernelTag<GpuKernel::Unary>{});
  case GpuKernel::ElementwiseGrad:
    return floats(KernelTag<GpuKernel::ElementwiseGrad>{});
  case GpuKernel::Fill: return bits(KernelTag<GpuKernel::Fill>{});
  case GpuKernel::Strided: return bits(KernelTag<GpuKernel::Strided>{});
  case GpuKernel::Softmax: return floats(KernelTag<GpuKernel::Softmax>{});
  case GpuKernel::LayerNorm: return floats(KernelTag<GpuKernel::LayerNorm>{});
  case GpuKernel::CrossEntropyRows:
    return floats(KernelTag<GpuKernel::CrossEntropyRows>{});
  case GpuKernel::SumToScalar:
    return floats(KernelTag<GpuKernel::SumToScalar>{});
  case GpuKernel::AdamW: return floats(KernelTag<GpuKernel::AdamW>{});
  case GpuKernel::Reduce: return floats(KernelTag<GpuKernel::Reduce>{});
  case GpuKernel::CrossEntropyGrad:
    return floats(KernelTag<GpuKernel::CrossEntropyGrad>{});
  case GpuKernel::Embedding: return floats(KernelTag<GpuKernel::Embedding>{});
  case GpuKernel::RMSNorm: return floats(KernelTag<GpuKernel::RMSNorm>{});
  case GpuKernel::Sgd: return floats(KernelTag<GpuKernel::Sgd>{});
  case GpuKernel::EmbeddingGrad:
    return floats(KernelTag<GpuKernel::EmbeddingGrad>{});
  case GpuKernel::NormGrad: return floats(KernelTag<GpuKernel::NormGrad>{});
  case GpuKernel::Rotary: return floats(KernelTag<GpuKernel::Rotary>{});
  case GpuKernel::Convert: return one(KernelTag<GpuKernel::Convert>{});
  case GpuKernel::EmbeddingKeys:
    return one(KernelTag<GpuKernel::EmbeddingKeys>{});
  case GpuKernel::AttentionForward:
    return floats(KernelTag<GpuKernel::AttentionForward>{});
  case GpuKernel::AttentionGradQ:
    return floats(KernelTag<GpuKernel::AttentionGradQ>{});
  case GpuKernel::AttentionGradKV:
    return floats(KernelTag<GpuKernel::AttentionGradKV>{});
  case GpuKernel::AttentionRows:
    return floats(KernelTag<GpuKernel::AttentionRows>{});
  case GpuKernel::ColumnPartials:
    return floats(KernelTag<GpuKernel::ColumnPartials>{});
  case GpuKernel::ColumnCombine:
    return floats(KernelTag<GpuKernel::ColumnCombine>{});
  case GpuKernel::AttentionMmaForward:
    return one(KernelTag<GpuKernel::AttentionMmaForward>{});
  case GpuKernel::AttentionMmaGradQ:
    return one(KernelTag<GpuKernel::AttentionMmaGradQ>{});
  case GpuKernel::AttentionMmaGradKV:
    return one(KernelTag<GpuKernel::AttentionMmaGradKV>{});
  }
  return false;
}

} // namespace partita::runtime::gpu

#endif // PARTITA_RUNTIME_LIB_CUDA_KERNELS_H
