//===- Elementwise.cpp - cpu kernels: elementwise ops, fill, convert ------===//
//
// Plain loops over contiguous buffers that the compiler vectorizes. An
// output may be exactly one of the inputs (in place). Binary ops also take
// i32/i64 (nn's binary ops accept integer tensors): add, sub and mul wrap
// around like two's complement, div truncates toward zero and throws on a
// zero divisor or on MIN / -1. The activations' gradients (x, dy -> dx) and
// greater_equal are binary float loops too. convert rounds to nearest even
// by bit manipulation (f16, bf16 are storage formats without arithmetic).
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"
#include "ThreadPool.h"
#include "runtime/lib/core/HalfFloat.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace partita::runtime::cpu {

namespace {

/// Elements per chunk of the intra-op pool (ThreadPool.h) below which a
/// loop is not worth splitting: a wake-up costs microseconds.
constexpr int64_t kElementwiseChunk = 1 << 15;

template <typename T, typename Op>
void binaryLoop(const T *a, const T *b, T *c, int64_t n, Op op) {
  parallelFor(n, kElementwiseChunk, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      c[i] = op(a[i], b[i]);
  });
}

template <typename T, typename Op>
void unaryLoop(const T *x, T *y, int64_t n, Op op) {
  parallelFor(n, kElementwiseChunk, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      y[i] = op(x[i]);
  });
}

// NaN in either operand gives NaN (as in numpy's maximum).
template <typename T> T floatMax(T x, T y) { return (x > y || x != x) ? x : y; }

//===----------------------------------------------------------------------===//
// The tanh GELU in f32, without libm calls so that the loops vectorize
//===----------------------------------------------------------------------===//
//
// tanhf was 27% of a GPT train step (glibc's scalar tanhf / expm1f). With
// z = 2u = 2 sqrt(2/pi) (x + 0.044715 x^3), gelu(x) = 0.5 x (1 + tanh(u))
// = x sigmoid(z), and both kernels need only t = exp(-|z|) in (0, 1]:
//   sigmoid(z) = 1 / (1 + t) (z >= 0),  t / (1 + t) (z < 0)
//   sigmoid(z) (1 - sigmoid(z)) = t / (1 + t)^2
//   gelu'(x) = sigmoid(z) + x sigmoid(z) (1 - sigmoid(z)) dz/dx
// which keep their relative accuracy for negative z (unlike 1 + tanhf(u)).
// exp(-|z|) by expNonPositive (CpuKernels.h), with |z| clamped to 86:
// t >= e^-86 stays a normal float, and beyond it sigmoid(-|z|) < 1e-37.
// Fewer operations than the earlier tanh form (0.5 x (1 + tanh u) through
// 2 / (1 + t) and 4 t / (1 + t)^2): on 1M elements, 1 thread, 664 -> 525 us
// for gelu and 931 -> 701 us for its gradient.
// Compiled for AVX-512, AVX2 and baseline x86-64, chosen at load time.

/// t = exp(-|z|) of the tanh GELU's z at x, and z.
inline float geluSigmoidT(float x, float &z) {
  const float c = 2.0f * 0.7978845608028654f; // 2 sqrt(2 / pi)
  z = x * std::fma(c * 0.044715f, x * x, c);
  float a = -std::fabs(z);
  a = a > -86.0f ? a : -86.0f; // also maps NaN to -86; x keeps the NaN
  return expNonPositive(a);
}

PARTITA_VECTOR_CLONES
void geluTanhF32(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i], z;
    float t = geluSigmoidT(v, z);
    y[i] = (z >= 0.0f ? v : v * t) / (1.0f + t);
  }
}

PARTITA_VECTOR_CLONES
void geluTanhGradF32(const float *x, const float *dy, float *dx, int64_t n) {
  const float c = 2.0f * 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i], z;
    float t = geluSigmoidT(v, z);
    float inv = 1.0f / (1.0f + t);
    float sigmoid = z >= 0.0f ? inv : t * inv;
    float dz = std::fma(3.0f * c * 0.044715f, v * v, c); // dz/dx
    dx[i] = dy[i] * (sigmoid + v * t * inv * inv * dz);
  }
}

template <typename T>
void runBinaryFloat(KernelKind kind, const T *a, const T *b, T *c, int64_t n) {
  switch (kind) {
  case KernelKind::Add:
    return binaryLoop(a, b, c, n, [](T x, T y) { return x + y; });
  case KernelKind::Sub:
    return binaryLoop(a, b, c, n, [](T x, T y) { return x - y; });
  case KernelKind::Mul:
    return binaryLoop(a, b, c, n, [](T x, T y) { return x * y; });
  case KernelKind::Div:
    return binaryLoop(a, b, c, n, [](T x, T y) { return x / y; });
  case KernelKind::Max:
    return binaryLoop(a, b, c, n, floatMax<T>);
  default:
    fail(kind, "not a binary kernel");
  }
}

template <typename T>
void runBinaryInt(KernelKind kind, const T *a, const T *b, T *c, int64_t n) {
  using U = std::make_unsigned_t<T>;
  switch (kind) {
  case KernelKind::Add:
    return binaryLoop(a, b, c, n, [](T x, T y) {
      return static_cast<T>(static_cast<U>(x) + static_cast<U>(y));
    });
  case KernelKind::Sub:
    return binaryLoop(a, b, c, n, [](T x, T y) {
      return static_cast<T>(static_cast<U>(x) - static_cast<U>(y));
    });
  case KernelKind::Mul:
    return binaryLoop(a, b, c, n, [](T x, T y) {
      return static_cast<T>(static_cast<U>(x) * static_cast<U>(y));
    });
  case KernelKind::Div:
    // Check everything before writing, so a failed call leaves c untouched
    // even when it aliases an input.
    for (int64_t i = 0; i < n; ++i) {
      if (b[i] == 0)
        fail(kind, "integer division by zero at element " + std::to_string(i));
      if (b[i] == -1 && a[i] == std::numeric_limits<T>::min())
        fail(kind, "integer division overflows at element " +
                       std::to_string(i) + " (" + std::to_string(a[i]) +
                       " / -1)");
    }
    return binaryLoop(a, b, c, n, [](T x, T y) { return x / y; });
  case KernelKind::Max:
    return binaryLoop(a, b, c, n, [](T x, T y) { return x > y ? x : y; });
  default:
    fail(kind, "not a binary kernel");
  }
}

template <typename T>
void runUnaryFloat(const KernelCall &call, const T *x, T *y, int64_t n) {
  switch (call.kind) {
  case KernelKind::Neg:
    return unaryLoop(x, y, n, [](T v) { return -v; });
  case KernelKind::Exp:
    return unaryLoop(x, y, n, [](T v) { return std::exp(v); });
  case KernelKind::Log:
    return unaryLoop(x, y, n, [](T v) { return std::log(v); });
  case KernelKind::Tanh:
    return unaryLoop(x, y, n, [](T v) { return std::tanh(v); });
  case KernelKind::Relu:
    // NaN stays NaN (v < 0 is false for it).
    return unaryLoop(x, y, n, [](T v) { return v < T(0) ? T(0) : v; });
  case KernelKind::Silu:
    // For very negative v, exp(-v) overflows to inf and v / inf is -0: the
    // limit, so no special case.
    return unaryLoop(x, y, n, [](T v) { return v / (T(1) + std::exp(-v)); });
  case KernelKind::Rsqrt:
    return unaryLoop(x, y, n, [](T v) { return T(1) / std::sqrt(v); });
  case KernelKind::Sqrt:
    return unaryLoop(x, y, n, [](T v) { return std::sqrt(v); });
  case KernelKind::Gelu:
    if constexpr (std::is_same_v<T, float>)
      if (call.attrs.tanh)
        return parallelFor(n, kElementwiseChunk, [&](int64_t b, int64_t e) {
          geluTanhF32(x + b, y + b, e - b);
        });
    if (call.attrs.tanh) {
      // GPT-2's approximation.
      const T c = static_cast<T>(0.7978845608028654); // sqrt(2 / pi)
      return unaryLoop(x, y, n, [c](T v) {
        return T(0.5) * v *
               (T(1) + std::tanh(c * (v + T(0.044715) * v * v * v)));
      });
    }
    return unaryLoop(x, y, n, [](T v) {
      return T(0.5) * v *
             (T(1) + std::erf(v * static_cast<T>(0.7071067811865476)));
    });
  default:
    fail(call.kind, "not a unary kernel");
  }
}

template <typename T>
void runGradFloat(const KernelCall &call, const T *x, const T *dy, T *dx,
                  int64_t n) {
  switch (call.kind) {
  case KernelKind::ReluGrad:
    // The subgradient 0 at x = 0 (PyTorch's choice); NaN x gives 0 too.
    return binaryLoop(x, dy, dx, n,
                      [](T v, T g) { return v > T(0) ? g : T(0); });
  case KernelKind::SiluGrad:
    return binaryLoop(x, dy, dx, n, [](T v, T g) {
      T s = T(1) / (T(1) + std::exp(-v));
      return g * s * (T(1) + v * (T(1) - s));
    });
  case KernelKind::GeluGrad:
    if constexpr (std::is_same_v<T, float>)
      if (call.attrs.tanh)
        return parallelFor(n, kElementwiseChunk, [&](int64_t b, int64_t e) {
          geluTanhGradF32(x + b, dy + b, dx + b, e - b);
        });
    if (call.attrs.tanh) {
      // d/dx 0.5 x (1 + tanh(u)), u = c (x + 0.044715 x^3).
      const T c = static_cast<T>(0.7978845608028654); // sqrt(2 / pi)
      return binaryLoop(x, dy, dx, n, [c](T v, T g) {
        T t = std::tanh(c * (v + T(0.044715) * v * v * v));
        T du = c * (T(1) + T(3 * 0.044715) * v * v);
        return g * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du);
      });
    }
    // d/dx 0.5 x (1 + erf(x / sqrt 2)) = Phi(x) + x phi(x).
    return binaryLoop(x, dy, dx, n, [](T v, T g) {
      T cdf =
          T(0.5) * (T(1) + std::erf(v * static_cast<T>(0.7071067811865476)));
      T pdf = static_cast<T>(0.3989422804014327) * std::exp(T(-0.5) * v * v);
      return g * (cdf + v * pdf);
    });
  case KernelKind::GreaterEqual:
    return binaryLoop(x, dy, dx, n,
                      [](T a, T b) { return a >= b ? T(1) : T(0); });
  default:
    fail(call.kind, "not an elementwise gradient kernel");
  }
}

//===----------------------------------------------------------------------===//
// convert: rounding to nearest even between f32 and f16 / bf16 (HalfFloat.h)
//===----------------------------------------------------------------------===//

using half::fromBF16;
using half::fromF16;
using half::toBF16;
using half::toF16;

void checkSameType(const KernelCall &call) {
  const TensorView &out = call.outputs[0];
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const TensorView &in = call.inputs[i];
    std::string what = "input " + std::to_string(i);
    if (in.dtype != out.dtype || in.shape != out.shape)
      fail(call.kind, what + " is " + typeToString(in) + " but output 0 is " +
                          typeToString(out) +
                          " (elementwise operands and result share one type; "
                          "broadcast explicitly first)");
  }
}

} // namespace

void runBinary(const KernelCall &call) {
  checkCall(call, 2, 1);
  checkSameType(call);
  checkNoOverlap(call, /*allowExactAlias=*/true);
  const TensorView &a = call.inputs[0], &b = call.inputs[1],
                   &c = call.outputs[0];
  int64_t n = c.numElements();
  switch (c.dtype) {
  case DType::F32:
    return runBinaryFloat(call.kind, a.as<float>(), b.as<float>(),
                          c.as<float>(), n);
  case DType::F64:
    return runBinaryFloat(call.kind, a.as<double>(), b.as<double>(),
                          c.as<double>(), n);
  case DType::I32:
    return runBinaryInt(call.kind, a.as<int32_t>(), b.as<int32_t>(),
                        c.as<int32_t>(), n);
  case DType::I64:
    return runBinaryInt(call.kind, a.as<int64_t>(), b.as<int64_t>(),
                        c.as<int64_t>(), n);
  default:
    fail(call.kind, std::string("dtype ") + toString(c.dtype) +
                        " is not supported (the cpu backend has f32, f64, "
                        "i32 and i64 binary kernels)");
  }
}

void runUnary(const KernelCall &call) {
  checkCall(call, 1, 1);
  checkSameType(call);
  checkNoOverlap(call, /*allowExactAlias=*/true);
  const TensorView &x = call.inputs[0], &y = call.outputs[0];
  dispatchFloat(call.kind, y.dtype, [&](auto tag) {
    using T = decltype(tag);
    runUnaryFloat(call, x.as<T>(), y.as<T>(), y.numElements());
  });
}

void runElementwiseGrad(const KernelCall &call) {
  checkCall(call, 2, 1);
  checkSameType(call);
  checkNoOverlap(call, /*allowExactAlias=*/true);
  const TensorView &x = call.inputs[0], &dy = call.inputs[1],
                   &dx = call.outputs[0];
  dispatchFloat(call.kind, dx.dtype, [&](auto tag) {
    using T = decltype(tag);
    runGradFloat(call, x.as<T>(), dy.as<T>(), dx.as<T>(), dx.numElements());
  });
}

void checkConvert(const KernelCall &call) {
  checkCall(call, 1, 1);
  const TensorView &x = call.inputs[0], &y = call.outputs[0];
  if (x.shape != y.shape)
    fail(call.kind, "input 0 is " + typeToString(x) + " but output 0 is " +
                        typeToString(y) + " (convert keeps the shape)");
  auto isFloat = [](DType t) {
    return t == DType::F32 || t == DType::F64 || t == DType::F16 ||
           t == DType::BF16;
  };
  if (!isFloat(x.dtype) || !isFloat(y.dtype))
    fail(call.kind, std::string("converts floats only, got ") +
                        toString(x.dtype) + " to " + toString(y.dtype));
  checkNoOverlap(call, /*allowExactAlias=*/x.dtype == y.dtype);
}

void runConvert(const KernelCall &call) {
  checkConvert(call);
  const TensorView &x = call.inputs[0], &y = call.outputs[0];
  int64_t n = x.numElements();
  DType from = x.dtype, to = y.dtype;
  if (from == to) {
    if (x.data != y.data && n > 0)
      std::memcpy(y.data, x.data, x.numBytes());
    return;
  }
  auto loop = [n](auto *src, auto *dst, auto op) {
    for (int64_t i = 0; i < n; ++i)
      dst[i] = op(src[i]);
  };
  if (from == DType::F32 && to == DType::F64)
    return loop(x.as<float>(), y.as<double>(),
                [](float v) { return double(v); });
  if (from == DType::F64 && to == DType::F32)
    return loop(x.as<double>(), y.as<float>(),
                [](double v) { return static_cast<float>(v); });
  if (from == DType::F32 && to == DType::F16)
    return loop(x.as<float>(), y.as<uint16_t>(), toF16);
  if (from == DType::F32 && to == DType::BF16)
    return loop(x.as<float>(), y.as<uint16_t>(), toBF16);
  if (from == DType::F16 && to == DType::F32)
    return loop(x.as<uint16_t>(), y.as<float>(), fromF16);
  if (from == DType::BF16 && to == DType::F32)
    return loop(x.as<uint16_t>(), y.as<float>(), fromBF16);
  // Widening through f32 is exact.
  if (from == DType::F16 && to == DType::F64)
    return loop(x.as<uint16_t>(), y.as<double>(),
                [](uint16_t v) { return double(fromF16(v)); });
  if (from == DType::BF16 && to == DType::F64)
    return loop(x.as<uint16_t>(), y.as<double>(),
                [](uint16_t v) { return double(fromBF16(v)); });
  // Narrowing f64 through f32 would round twice (which can differ from one
  // rounding), and f16 <-> bf16 has no use yet.
  fail(call.kind, std::string("converting ") + toString(from) + " to " +
                      toString(to) +
                      " is not supported (the cpu backend converts f32 <-> "
                      "f64, f32 <-> f16, f32 <-> bf16, and f16 or bf16 to "
                      "f64)");
}

void runFill(const KernelCall &call) {
  checkCall(call, 0, 1);
  const TensorView &out = call.outputs[0];
  double v = call.attrs.fillValue;
  int64_t n = out.numElements();
  auto fillInt = [&](auto tag) {
    using T = decltype(tag);
    // Converting a double outside T's range is undefined: check first.
    if (!(std::isfinite(v) && v == std::trunc(v) &&
          v >= static_cast<double>(std::numeric_limits<T>::min()) &&
          v < -static_cast<double>(std::numeric_limits<T>::min())))
      fail(call.kind, "value " + std::to_string(v) +
                          " is not an integer in the range of " +
                          toString(out.dtype));
    std::fill(out.as<T>(), out.as<T>() + n, static_cast<T>(v));
  };
  switch (out.dtype) {
  case DType::F32:
    if (std::isfinite(v) && std::fabs(v) > std::numeric_limits<float>::max())
      fail(call.kind, "value " + std::to_string(v) + " overflows f32");
    std::fill(out.as<float>(), out.as<float>() + n, static_cast<float>(v));
    return;
  case DType::F64:
    std::fill(out.as<double>(), out.as<double>() + n, v);
    return;
  case DType::I32:
    return fillInt(int32_t{});
  case DType::I64:
    return fillInt(int64_t{});
  default:
    fail(call.kind, std::string("dtype ") + toString(out.dtype) +
                        " is not supported (the cpu backend fills f32, f64, "
                        "i32 and i64)");
  }
}

} // namespace partita::runtime::cpu
