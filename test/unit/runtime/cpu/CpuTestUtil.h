//===- CpuTestUtil.h - helpers of the cpu backend's unit tests --*- C++ -*-===//
//
// Random tensors, a kernel runner, comparison against reference values
// computed in double, and an error matcher. The references themselves are
// naive loops written in each test file, independent of the kernels.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_TEST_UNIT_RUNTIME_CPU_CPUTESTUTIL_H
#define PARTITA_TEST_UNIT_RUNTIME_CPU_CPUTESTUTIL_H

#include "partita/runtime/Backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace partita::runtime::test {

template <typename T> constexpr DType dtypeOf();
template <> constexpr DType dtypeOf<float>() { return DType::F32; }
template <> constexpr DType dtypeOf<double>() { return DType::F64; }
template <> constexpr DType dtypeOf<int32_t>() { return DType::I32; }
template <> constexpr DType dtypeOf<int64_t>() { return DType::I64; }

/// The tolerance the task sets: 1e-5 relative for f32, 1e-12 for f64.
template <typename T> constexpr double relTol() {
  return sizeof(T) == 4 ? 1e-5 : 1e-12;
}

/// Elements uniform in [lo, hi), reproducible from `seed`.
template <typename T>
Tensor randomTensor(std::vector<int64_t> shape, uint64_t seed, double lo = -1,
                    double hi = 1) {
  Tensor t(dtypeOf<T>(), std::move(shape));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < t.numElements(); ++i)
    t.data<T>()[i] = static_cast<T>(dist(rng));
  return t;
}

template <typename T>
Tensor makeTensor(std::vector<int64_t> shape,
                  const std::vector<double> &values) {
  Tensor t(dtypeOf<T>(), std::move(shape));
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.numElements());
  for (int64_t i = 0; i < t.numElements() && i < (int64_t)values.size(); ++i)
    t.data<T>()[i] = static_cast<T>(values[i]);
  return t;
}

/// Elements of `t` as doubles.
template <typename T> std::vector<double> values(const Tensor &t) {
  return std::vector<double>(t.data<T>(), t.data<T>() + t.numElements());
}

/// The cpu backend the tests share.
inline Backend &backend() {
  static std::unique_ptr<Backend> instance = createCpuBackend();
  return *instance;
}

/// Runs one kernel on owning tensors.
inline void runKernel(KernelKind kind, const KernelAttrs &attrs,
                      std::vector<Tensor *> inputs,
                      std::vector<Tensor *> outputs) {
  KernelCall call{kind, attrs, {}, {}};
  for (Tensor *t : inputs)
    call.inputs.push_back(t->view());
  for (Tensor *t : outputs)
    call.outputs.push_back(t->view());
  backend().run(call);
}

/// Expects |got - want| <= tol * max(|want|, scale) elementwise, where
/// `scale` (per element, or one for all) is the magnitude of the terms that
/// were summed: a dot product's error scales with sum |terms|, not with its
/// (possibly cancelled) value.
template <typename T>
void expectNear(const Tensor &got, const std::vector<double> &want,
                const std::vector<double> &scale, double tol = relTol<T>()) {
  ASSERT_EQ(got.numElements(), static_cast<int64_t>(want.size()));
  int failures = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double g = got.data<T>()[i];
    double s = scale.size() == 1 ? scale[0] : scale[i];
    double bound = tol * std::max(std::fabs(want[i]), s);
    bool ok =
        std::isnan(want[i]) ? std::isnan(g) : std::fabs(g - want[i]) <= bound;
    if (!ok && ++failures <= 5)
      ADD_FAILURE() << "element " << i << ": got " << g << ", want " << want[i]
                    << " (bound " << bound << ")";
  }
}

/// Pure relative comparison with a floor of `floor` on the magnitude.
template <typename T>
void expectNear(const Tensor &got, const std::vector<double> &want,
                double floor = 0, double tol = relTol<T>()) {
  expectNear<T>(got, want, std::vector<double>{floor}, tol);
}

/// Runs `fn`, expecting an Error whose message contains every one of
/// `parts`.
template <typename Fn>
void expectError(Fn &&fn, const std::vector<std::string> &parts) {
  try {
    fn();
  } catch (const Error &e) {
    std::string message = e.what();
    for (const std::string &part : parts)
      EXPECT_NE(message.find(part), std::string::npos)
          << "message \"" << message << "\" lacks \"" << part << "\"";
    return;
  } catch (const std::exception &e) {
    ADD_FAILURE() << "threw a non-Error exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "no Error thrown";
}

/// Row-major strides of `shape`.
inline std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;)
    s[i - 1] = s[i] * shape[i];
  return s;
}

/// Calls fn(index) for every multi-index of `shape` in row-major order.
template <typename Fn>
void forEachIndex(const std::vector<int64_t> &shape, Fn &&fn) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    fn(index);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < shape[d])
        break;
      index[d] = 0;
    }
  }
}

using FloatTypes = ::testing::Types<float, double>;

} // namespace partita::runtime::test

#endif // PARTITA_TEST_UNIT_RUNTIME_CPU_CPUTESTUTIL_H
