//===- Elementwise.cpp - cpu kernels: elementwise ops and fill ------------===//
//
// Plain loops over contiguous buffers that the compiler vectorizes. An
// output may be exactly one of the inputs (in place). Binary ops also take
// i32/i64 (nn's binary ops accept integer tensors): add, sub and mul wrap
// around like two's complement, div truncates toward zero and throws on a
// zero divisor or on MIN / -1.
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"

#include <cmath>
#include <limits>
#include <type_traits>

namespace partita::runtime::cpu {

namespace {

template <typename T, typename Op>
void binaryLoop(const T *a, const T *b, T *c, int64_t n, Op op) {
  for (int64_t i = 0; i < n; ++i)
    c[i] = op(a[i], b[i]);
}

template <typename T, typename Op>
void unaryLoop(const T *x, T *y, int64_t n, Op op) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = op(x[i]);
}

// NaN in either operand gives NaN (as in numpy's maximum).
template <typename T> T floatMax(T x, T y) { return (x > y || x != x) ? x : y; }

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
