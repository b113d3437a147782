//===- ElementwiseTest.cpp - cpu elementwise and fill kernels -------------===//
//
// References are the formulas of dialects/nn/README.md evaluated in double
// (for gelu through erfc rather than the kernel's erf, for silu through an
// explicit sigmoid), element by element.
//
//===----------------------------------------------------------------------===//

#include "CpuTestUtil.h"

#include <cstdio>
#include <functional>
#include <limits>

using namespace partita::runtime;
using namespace partita::runtime::test;

namespace {

template <typename T> class ElementwiseTest : public ::testing::Test {};
TYPED_TEST_SUITE(ElementwiseTest, FloatTypes);

const std::vector<int64_t> kShape = {3, 5, 7};

TYPED_TEST(ElementwiseTest, BinaryKernelsMatchReference) {
  using T = TypeParam;
  struct BinaryCase {
    KernelKind kind;
    std::function<double(double, double)> ref;
  } cases[] = {
      {KernelKind::Add, [](double a, double b) { return a + b; }},
      {KernelKind::Sub, [](double a, double b) { return a - b; }},
      {KernelKind::Mul, [](double a, double b) { return a * b; }},
      {KernelKind::Div, [](double a, double b) { return a / b; }},
      {KernelKind::Max, [](double a, double b) { return a > b ? a : b; }},
  };
  for (const BinaryCase &c : cases) {
    SCOPED_TRACE(toString(c.kind));
    Tensor a = randomTensor<T>(kShape, 11);
    // Divisors away from 0, of both signs.
    Tensor b = randomTensor<T>(kShape, 12, 0.5, 1.5);
    for (int64_t i = 0; i < b.numElements(); i += 2)
      b.data<T>()[i] = -b.data<T>()[i];
    Tensor out(dtypeOf<T>(), kShape);
    runKernel(c.kind, {}, {&a, &b}, {&out});
    std::vector<double> want;
    for (int64_t i = 0; i < a.numElements(); ++i)
      want.push_back(c.ref(a.data<T>()[i], b.data<T>()[i]));
    // One rounding of the exact result; cancellation in add/sub is exact
    // relative to the operands, hence the floor of 1.
    expectNear<T>(out, want, 1.0);
  }
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double normalCdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

TYPED_TEST(ElementwiseTest, UnaryKernelsMatchReference) {
  using T = TypeParam;
  struct UnaryCase {
    KernelKind kind;
    bool tanh;
    bool positive; // domain (0, 2] for log, sqrt, rsqrt
    std::function<double(double)> ref;
  } cases[] = {
      {KernelKind::Neg, false, false, [](double x) { return -x; }},
      {KernelKind::Exp, false, false, [](double x) { return std::exp(x); }},
      {KernelKind::Log, false, true, [](double x) { return std::log(x); }},
      {KernelKind::Tanh, false, false, [](double x) { return std::tanh(x); }},
      {KernelKind::Relu, false, false,
       [](double x) { return x > 0 ? x : 0.0; }},
      {KernelKind::Silu, false, false, [](double x) { return x * sigmoid(x); }},
      {KernelKind::Rsqrt, false, true,
       [](double x) { return 1.0 / std::sqrt(x); }},
      {KernelKind::Sqrt, false, true, [](double x) { return std::sqrt(x); }},
      {KernelKind::Gelu, false, false,
       [](double x) { return x * normalCdf(x); }},
      {KernelKind::Gelu, true, false,
       [](double x) {
         const double pi = 3.14159265358979323846;
         return 0.5 * x *
                (1 + std::tanh(std::sqrt(2 / pi) * (x + 0.044715 * x * x * x)));
       }},
  };
  for (const UnaryCase &c : cases) {
    SCOPED_TRACE(std::string(toString(c.kind)) + (c.tanh ? " tanh" : ""));
    Tensor x = c.positive ? randomTensor<T>(kShape, 21, 0.05, 2)
                          : randomTensor<T>(kShape, 21, -2, 2);
    Tensor y(dtypeOf<T>(), kShape);
    KernelAttrs attrs;
    attrs.tanh = c.tanh;
    runKernel(c.kind, attrs, {&x}, {&y});
    std::vector<double> want;
    for (int64_t i = 0; i < x.numElements(); ++i)
      want.push_back(c.ref(x.data<T>()[i]));
    expectNear<T>(y, want, 0.0);
  }
}

TYPED_TEST(ElementwiseTest, AnalyticValues) {
  using T = TypeParam;
  Tensor x = makeTensor<T>({4}, {-1, 0, 2, 4});
  Tensor y(dtypeOf<T>(), {4});
  runKernel(KernelKind::Relu, {}, {&x}, {&y});
  EXPECT_EQ(values<T>(y), (std::vector<double>{0, 0, 2, 4}));
  runKernel(KernelKind::Neg, {}, {&x}, {&y});
  EXPECT_EQ(values<T>(y), (std::vector<double>{1, 0, -2, -4}));
  Tensor sq = makeTensor<T>({3}, {1, 4, 16});
  Tensor r(dtypeOf<T>(), {3});
  runKernel(KernelKind::Sqrt, {}, {&sq}, {&r});
  EXPECT_EQ(values<T>(r), (std::vector<double>{1, 2, 4}));
  runKernel(KernelKind::Rsqrt, {}, {&sq}, {&r});
  EXPECT_EQ(values<T>(r), (std::vector<double>{1, 0.5, 0.25}));
  Tensor zero = makeTensor<T>({1}, {0});
  Tensor z(dtypeOf<T>(), {1});
  runKernel(KernelKind::Exp, {}, {&zero}, {&z});
  EXPECT_EQ(z.data<T>()[0], T(1));
  for (KernelKind kind :
       {KernelKind::Silu, KernelKind::Gelu, KernelKind::Tanh}) {
    runKernel(kind, {}, {&zero}, {&z});
    EXPECT_EQ(z.data<T>()[0], T(0)) << toString(kind);
  }
  // max propagates NaN from either side, like numpy.maximum.
  Tensor a = makeTensor<T>({2}, {1, std::nan("")});
  Tensor b = makeTensor<T>({2}, {std::nan(""), 1});
  Tensor m(dtypeOf<T>(), {2});
  runKernel(KernelKind::Max, {}, {&a, &b}, {&m});
  EXPECT_TRUE(std::isnan(m.data<T>()[0]));
  EXPECT_TRUE(std::isnan(m.data<T>()[1]));
}

TYPED_TEST(ElementwiseTest, RunsInPlaceWhenTheOutputIsAnInput) {
  using T = TypeParam;
  Tensor a = makeTensor<T>({3}, {1, 2, 3});
  Tensor b = makeTensor<T>({3}, {10, 20, 30});
  runKernel(KernelKind::Add, {}, {&a, &b}, {&a});
  EXPECT_EQ(values<T>(a), (std::vector<double>{11, 22, 33}));
  runKernel(KernelKind::Neg, {}, {&b}, {&b});
  EXPECT_EQ(values<T>(b), (std::vector<double>{-10, -20, -30}));
}

TEST(ElementwiseIntTest, BinaryOpsOnIntegers) {
  Tensor a = makeTensor<int32_t>(
      {4}, {std::numeric_limits<int32_t>::max(), -7, 7, -8});
  Tensor b = makeTensor<int32_t>({4}, {1, 2, -2, 3});
  Tensor c(DType::I32, {4});
  runKernel(KernelKind::Add, {}, {&a, &b}, {&c});
  // Two's complement wrap-around, not undefined behavior.
  EXPECT_EQ(c.data<int32_t>()[0], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(c.data<int32_t>()[1], -5);
  runKernel(KernelKind::Div, {}, {&a, &b}, {&c});
  // Truncation toward zero.
  EXPECT_EQ(
      values<int32_t>(c),
      (std::vector<double>{std::numeric_limits<int32_t>::max(), -3, -3, -2}));
  runKernel(KernelKind::Max, {}, {&a, &b}, {&c});
  EXPECT_EQ(
      values<int32_t>(c),
      (std::vector<double>{std::numeric_limits<int32_t>::max(), 2, 7, 3}));
  Tensor x = makeTensor<int64_t>({2}, {6, -4});
  Tensor y = makeTensor<int64_t>({2}, {-3, 5});
  Tensor z(DType::I64, {2});
  runKernel(KernelKind::Mul, {}, {&x, &y}, {&z});
  EXPECT_EQ(values<int64_t>(z), (std::vector<double>{-18, -20}));
  runKernel(KernelKind::Sub, {}, {&x, &y}, {&z});
  EXPECT_EQ(values<int64_t>(z), (std::vector<double>{9, -9}));
}

TEST(ElementwiseIntTest, IntegerDivisionErrorsLeaveTheOutputAlone) {
  Tensor a = makeTensor<int32_t>({3}, {4, 5, 6});
  Tensor b = makeTensor<int32_t>({3}, {2, 0, 3});
  expectError(
      [&] {
        runKernel(KernelKind::Div, {}, {&a, &b}, {&a});
      },
      {"div", "integer division by zero at element 1"});
  EXPECT_EQ(values<int32_t>(a), (std::vector<double>{4, 5, 6}));
  Tensor m = makeTensor<int64_t>({1}, {0});
  m.data<int64_t>()[0] = std::numeric_limits<int64_t>::min();
  Tensor n = makeTensor<int64_t>({1}, {-1});
  Tensor o(DType::I64, {1});
  expectError(
      [&] {
        runKernel(KernelKind::Div, {}, {&m, &n}, {&o});
      },
      {"integer division overflows at element 0"});
}

TEST(ElementwiseErrorTest, RejectsMismatchedOperands) {
  Tensor a(DType::F32, {2, 3}), b(DType::F32, {3, 2}), c(DType::F32, {2, 3});
  expectError(
      [&] {
        runKernel(KernelKind::Add, {}, {&a, &b}, {&c});
      },
      {"add", "input 1 is tensor<3x2xf32> but output 0 is "
              "tensor<2x3xf32>"});
  Tensor d(DType::F64, {2, 3});
  expectError(
      [&] {
        runKernel(KernelKind::Mul, {}, {&a, &d}, {&c});
      },
      {"mul", "input 1 is tensor<2x3xf64>"});
  expectError(
      [&] {
        runKernel(KernelKind::Exp, {}, {&a, &a}, {&c});
      },
      {"exp", "expects 1 input(s) and 1 output(s), got 2 and 1"});
}

TEST(ElementwiseErrorTest, RejectsUnsupportedDTypes) {
  Tensor i(DType::I32, {4}), o(DType::I32, {4});
  expectError([&] { runKernel(KernelKind::Exp, {}, {&i}, {&o}); },
              {"exp", "dtype i32 is not supported"});
  // bf16 and f16 run on widened copies (LowPrecisionTest checks values).
  Tensor h(DType::BF16, {4}), g(DType::BF16, {4});
  EXPECT_NO_THROW(runKernel(KernelKind::Add, {}, {&h, &h}, {&g}));
}

TEST(ElementwiseErrorTest, RejectsPartialOverlap) {
  Tensor buffer(DType::F32, {8});
  TensorView in{buffer.data<float>(), DType::F32, {4}};
  TensorView out{buffer.data<float>() + 2, DType::F32, {4}};
  KernelCall call{KernelKind::Relu, {}, {in}, {out}};
  expectError(
      [&] { backend().run(call); },
      {"relu", "output 0 overlaps input 0", "only an exact alias is allowed"});
}

TEST(FillTest, FillsEveryDType) {
  KernelAttrs attrs;
  attrs.fillValue = -2.5;
  Tensor f(DType::F32, {2, 2}), d(DType::F64, {3});
  runKernel(KernelKind::Fill, attrs, {}, {&f});
  runKernel(KernelKind::Fill, attrs, {}, {&d});
  EXPECT_EQ(values<float>(f), std::vector<double>(4, -2.5));
  EXPECT_EQ(values<double>(d), std::vector<double>(3, -2.5));
  attrs.fillValue = -7;
  Tensor i(DType::I32, {2}), l(DType::I64, {});
  runKernel(KernelKind::Fill, attrs, {}, {&i});
  runKernel(KernelKind::Fill, attrs, {}, {&l});
  EXPECT_EQ(values<int32_t>(i), std::vector<double>(2, -7));
  EXPECT_EQ(values<int64_t>(l), std::vector<double>(1, -7));
  attrs.fillValue = std::numeric_limits<double>::infinity();
  runKernel(KernelKind::Fill, attrs, {}, {&f});
  EXPECT_TRUE(std::isinf(f.data<float>()[3]));
}

TEST(FillTest, RejectsValuesTheDTypeCannotHold) {
  KernelAttrs attrs;
  Tensor i(DType::I32, {2}), f(DType::F32, {2}), h(DType::F16, {2});
  attrs.fillValue = 1.5;
  expectError([&] { runKernel(KernelKind::Fill, attrs, {}, {&i}); },
              {"fill", "not an integer in the range of i32"});
  attrs.fillValue = 3e9;
  expectError([&] { runKernel(KernelKind::Fill, attrs, {}, {&i}); },
              {"not an integer in the range of i32"});
  attrs.fillValue = 1e300;
  expectError([&] { runKernel(KernelKind::Fill, attrs, {}, {&f}); },
              {"overflows f32"});
  // f16 fills through an f32 scratch: what f32 cannot hold is rejected.
  expectError([&] { runKernel(KernelKind::Fill, attrs, {}, {&h}); },
              {"overflows f32"});
  attrs.fillValue = 0;
  EXPECT_NO_THROW(runKernel(KernelKind::Fill, attrs, {}, {&h}));
  expectError([&] { runKernel(KernelKind::Fill, attrs, {&f}, {&i}); },
              {"expects 0 input(s) and 1 output(s)"});
}

TEST(BackendTest, NamesAndKinds) {
  EXPECT_STREQ(backend().name(), "cpu");
  for (int k = 0; k <= static_cast<int>(KernelKind::Fill); ++k) {
    auto kind = static_cast<KernelKind>(k);
    std::optional<KernelKind> back = kernelKindFromString(toString(kind));
    ASSERT_TRUE(back.has_value()) << toString(kind);
    EXPECT_EQ(*back, kind);
  }
  EXPECT_STREQ(toString(KernelKind::LayerNorm), "layer_norm");
  EXPECT_STREQ(toString(KernelKind::ReduceMean), "reduce_mean");
  EXPECT_FALSE(kernelKindFromString("matmul").has_value());
}

TEST(BackendTest, ThreadCount) {
  expectError([] { createCpuBackend(-1); }, {"numThreads must be >= 0"});
  // An explicit BLAS thread count still computes the same product.
  std::unique_ptr<Backend> single = createCpuBackend(1);
  Tensor a = makeTensor<float>({1, 2}, {1, 2});
  Tensor b = makeTensor<float>({2, 1}, {3, 4});
  Tensor c(DType::F32, {1, 1});
  KernelCall call{KernelKind::Einsum, {}, {a.view(), b.view()}, {c.view()}};
  call.attrs.spec = "ij,jk->ik";
  single->run(call);
  EXPECT_EQ(c.data<float>()[0], 11.0f);
}

} // namespace

/// The f32 tanh GELU and its gradient (a vectorized exp, no libm calls)
/// against the formulas in f64, over [-60, 60] in steps of 1/64. GELU is
/// O(|x|) and its gradient O(1), so errors are measured against those
/// scales: |y - exact| / max(1, |x|) and |dx - exact|.
TEST(GeluTanhF32, MatchesF64AcrossTheRange) {
  const double c = std::sqrt(2.0 / 3.14159265358979323846);
  std::vector<double> xs;
  for (int i = -60 * 64; i <= 60 * 64; ++i)
    xs.push_back(i / 64.0);
  int64_t n = xs.size();
  Tensor x(DType::F32, {n}), dy(DType::F32, {n});
  for (int64_t i = 0; i < n; ++i) {
    x.data<float>()[i] = float(xs[i]);
    dy.data<float>()[i] = 1.0f;
  }
  Tensor y(DType::F32, {n}), dx(DType::F32, {n});
  KernelAttrs attrs;
  attrs.tanh = true;
  runKernel(KernelKind::Gelu, attrs, {&x}, {&y});
  runKernel(KernelKind::GeluGrad, attrs, {&x, &dy}, {&dx});
  double worstY = 0, worstDx = 0;
  for (int64_t i = 0; i < n; ++i) {
    double v = double(x.data<float>()[i]);
    double u = c * (v + 0.044715 * v * v * v);
    // 1 + tanh(u) and 1 - tanh(u)^2 without cancellation.
    double t = std::exp(-2 * std::fabs(u));
    double onePlus = (u >= 0 ? 2 : 2 * t) / (1 + t);
    double sech2 = 4 * t / ((1 + t) * (1 + t));
    double wantY = 0.5 * v * onePlus;
    double wantDx =
        0.5 * onePlus + 0.5 * v * sech2 * c * (1 + 3 * 0.044715 * v * v);
    worstY = std::max(worstY, std::fabs(y.data<float>()[i] - wantY) /
                                  std::max(1.0, std::fabs(v)));
    worstDx = std::max(worstDx, std::fabs(dx.data<float>()[i] - wantDx));
  }
  // Measured: 1.14e-7 and 1.49e-7 (about one f32 rounding of the scale).
  EXPECT_LT(worstY, 4e-7);
  EXPECT_LT(worstDx, 6e-7);
  std::printf("gelu tanh f32: worst scaled error %.3g, gradient %.3g\n",
              worstY, worstDx);
  // Special values: 0 -> 0; NaN stays NaN; +inf -> +inf.
  Tensor s = makeTensor<float>({3}, {0.0f, std::nanf(""), INFINITY});
  Tensor sy(DType::F32, {3});
  runKernel(KernelKind::Gelu, attrs, {&s}, {&sy});
  EXPECT_EQ(sy.data<float>()[0], 0.0f);
  EXPECT_TRUE(std::isnan(sy.data<float>()[1]));
  EXPECT_EQ(sy.data<float>()[2], INFINITY);
}
