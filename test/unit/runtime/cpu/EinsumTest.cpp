//===- EinsumTest.cpp - the cpu einsum kernel against a naive loop --------===//
//
// The reference iterates over every assignment of every letter and adds the
// product of the operands' elements into the result element: the definition
// of einsum, with no GEMM, permutation or grouping in it.
//
//===----------------------------------------------------------------------===//

#include "CpuTestUtil.h"

#include <map>
#include <thread>

using namespace partita::runtime;
using namespace partita::runtime::test;

namespace {

struct Reference {
  std::vector<double> value;  // the einsum
  std::vector<double> absSum; // sum of |products| per element (error scale)
};

std::vector<std::string> splitTerms(const std::string &spec,
                                    std::string &result) {
  size_t arrow = spec.find("->");
  result = spec.substr(arrow + 2);
  std::vector<std::string> terms;
  std::string lhs = spec.substr(0, arrow), term;
  for (char c : lhs) {
    if (c == ',') {
      terms.push_back(term);
      term.clear();
    } else {
      term += c;
    }
  }
  terms.push_back(term);
  return terms;
}

template <typename T>
Reference naiveEinsum(const std::string &spec,
                      const std::vector<const Tensor *> &inputs,
                      std::vector<int64_t> &outShape) {
  std::string result;
  std::vector<std::string> terms = splitTerms(spec, result);
  std::map<char, int64_t> size;
  std::string letters;
  for (size_t i = 0; i < terms.size(); ++i)
    for (size_t d = 0; d < terms[i].size(); ++d) {
      char c = terms[i][d];
      if (!size.count(c)) {
        letters += c;
        size[c] = inputs[i]->getShape()[d];
      }
    }
  outShape.clear();
  for (char c : result)
    outShape.push_back(size[c]);
  int64_t outCount = 1;
  for (int64_t d : outShape)
    outCount *= d;
  Reference ref{std::vector<double>(outCount, 0.0),
                std::vector<double>(outCount, 0.0)};
  std::vector<int64_t> letterSizes;
  for (char c : letters)
    letterSizes.push_back(size[c]);
  auto offsetOf = [&](const std::string &term,
                      const std::vector<int64_t> &shape,
                      const std::vector<int64_t> &index) {
    std::vector<int64_t> strides = stridesOf(shape);
    int64_t offset = 0;
    for (size_t d = 0; d < term.size(); ++d)
      offset += index[letters.find(term[d])] * strides[d];
    return offset;
  };
  forEachIndex(letterSizes, [&](const std::vector<int64_t> &index) {
    double product = 1;
    for (size_t i = 0; i < terms.size(); ++i)
      product *=
          inputs[i]
              ->data<T>()[offsetOf(terms[i], inputs[i]->getShape(), index)];
    int64_t o = offsetOf(result, outShape, index);
    ref.value[o] += product;
    ref.absSum[o] += std::fabs(product);
  });
  return ref;
}

struct Case {
  std::string spec;
  std::vector<std::vector<int64_t>> shapes;
};

// Every letter class and layout the kernel distinguishes: plain and
// transposed operands, a transposed result (operands swap roles), results
// that need a permutation, batch letters in and out of leading position,
// letters summed in one operand only, outer products, full contractions,
// size-1 letters, and single-operand transposes and sums.
const Case kCases[] = {
    {"ij,jk->ik", {{5, 7}, {7, 3}}},
    {"ji,jk->ik", {{6, 4}, {6, 5}}},
    {"ij,kj->ik", {{4, 6}, {5, 6}}},
    {"ji,kj->ik", {{6, 4}, {5, 6}}},
    {"ik,kj->ji", {{4, 6}, {6, 5}}},
    {"bsh,hf->bsf", {{2, 3, 8}, {8, 5}}},
    {"bsh,vh->bsv", {{2, 3, 8}, {11, 8}}},
    {"bsh,hnd->bsnd", {{2, 3, 8}, {8, 2, 4}}},
    {"bsnd,ndh->bsh", {{2, 3, 2, 4}, {2, 4, 8}}},
    {"bsnd,dnh->bsh", {{2, 3, 2, 4}, {4, 2, 8}}},
    {"bqhd,bkhd->bhqk", {{2, 3, 2, 4}, {2, 5, 2, 4}}},
    {"bhqk,bkhd->bqhd", {{2, 2, 3, 5}, {2, 5, 2, 4}}},
    {"bij,bjk->bik", {{3, 4, 5}, {3, 5, 2}}},
    {"bij,bkj->bki", {{3, 4, 5}, {3, 2, 5}}},
    {"ibj,jbk->bik", {{4, 3, 5}, {5, 3, 2}}},
    {"ibj,jbk->kib", {{4, 3, 5}, {5, 3, 2}}},
    {"ij,kl->ijkl", {{2, 3}, {4, 5}}},
    {"ij,kl->kilj", {{2, 3}, {4, 5}}},
    {"i,j->ij", {{4}, {5}}},
    {"i,i->", {{7}, {7}}},
    {"ij,ij->", {{3, 4}, {3, 4}}},
    {"ij,ij->ij", {{3, 4}, {3, 4}}},
    {"ij,ji->i", {{3, 4}, {4, 3}}},
    {"ij,j->i", {{4, 6}, {6}}},
    {"j,jk->k", {{6}, {6, 3}}},
    {"ij,jk->k", {{4, 6}, {6, 3}}},
    {"ij,kl->il", {{4, 6}, {3, 5}}},
    {"ijk,kl->li", {{3, 4, 5}, {5, 2}}},
    {"abc,cd->dba", {{2, 3, 4}, {4, 5}}},
    {"bxc,cy->bxy", {{2, 1, 3}, {3, 1}}},
    {"xbc,cy->ybx", {{1, 2, 3}, {3, 4}}},
    {"ab,bc->ac", {{1, 1}, {1, 1}}},
    {"ij,jk->ik", {{33, 70}, {70, 45}}},
    {"bsh,hf->bsf", {{2, 16, 64}, {64, 96}}},
    {"ij->ji", {{3, 4}}},
    {"ijk->kji", {{2, 3, 4}}},
    {"ijk->i", {{2, 3, 4}}},
    {"ijk->j", {{2, 3, 4}}},
    {"ijk->ki", {{2, 3, 4}}},
    {"ij->", {{3, 4}}},
    {"i->i", {{5}}},
    {"->", {{}}},
};

template <typename T> class EinsumTest : public ::testing::Test {};
TYPED_TEST_SUITE(EinsumTest, FloatTypes);

TYPED_TEST(EinsumTest, MatchesNaiveLoopOnRandomInputs) {
  using T = TypeParam;
  uint64_t seed = 1;
  for (const Case &c : kCases) {
    SCOPED_TRACE(c.spec);
    std::vector<Tensor> inputs;
    for (const auto &shape : c.shapes)
      inputs.push_back(randomTensor<T>(shape, seed++));
    std::vector<const Tensor *> inputPtrs;
    for (Tensor &t : inputs)
      inputPtrs.push_back(&t);
    std::vector<int64_t> outShape;
    Reference ref = naiveEinsum<T>(c.spec, inputPtrs, outShape);
    // Poison the output so that an element the kernel skips shows.
    Tensor out(dtypeOf<T>(), outShape);
    for (int64_t i = 0; i < out.numElements(); ++i)
      out.data<T>()[i] = static_cast<T>(12345.0);
    KernelAttrs attrs;
    attrs.spec = c.spec;
    std::vector<Tensor *> in;
    for (Tensor &t : inputs)
      in.push_back(&t);
    runKernel(KernelKind::Einsum, attrs, in, {&out});
    expectNear<T>(out, ref.value, ref.absSum);
  }
}

TYPED_TEST(EinsumTest, MatmulOfSmallMatricesIsExact) {
  using T = TypeParam;
  Tensor a = makeTensor<T>({2, 2}, {1, 2, 3, 4});
  Tensor b = makeTensor<T>({2, 2}, {5, 6, 7, 8});
  Tensor c(dtypeOf<T>(), {2, 2});
  KernelAttrs attrs;
  attrs.spec = "ij,jk->ik";
  runKernel(KernelKind::Einsum, attrs, {&a, &b}, {&c});
  EXPECT_EQ(values<T>(c), (std::vector<double>{19, 22, 43, 50}));
  // The transposed product (b^T a^T)^T = ab, written as its transpose.
  attrs.spec = "ij,jk->ki";
  runKernel(KernelKind::Einsum, attrs, {&a, &b}, {&c});
  EXPECT_EQ(values<T>(c), (std::vector<double>{19, 43, 22, 50}));
}

TYPED_TEST(EinsumTest, ZeroSizedContractionGivesZeros) {
  using T = TypeParam;
  Tensor a(dtypeOf<T>(), {3, 0}), b(dtypeOf<T>(), {0, 2});
  Tensor c = makeTensor<T>({3, 2}, {1, 1, 1, 1, 1, 1});
  KernelAttrs attrs;
  attrs.spec = "ij,jk->ik";
  runKernel(KernelKind::Einsum, attrs, {&a, &b}, {&c});
  EXPECT_EQ(values<T>(c), std::vector<double>(6, 0.0));
  Tensor s = makeTensor<T>({3}, {1, 1, 1});
  attrs.spec = "ij->i";
  runKernel(KernelKind::Einsum, attrs, {&a}, {&s});
  EXPECT_EQ(values<T>(s), std::vector<double>(3, 0.0));
}

TYPED_TEST(EinsumTest, EmptyResultIsANoOp) {
  using T = TypeParam;
  Tensor a(dtypeOf<T>(), {0, 4}), b = randomTensor<T>({4, 2}, 7);
  Tensor c(dtypeOf<T>(), {0, 2});
  KernelAttrs attrs;
  attrs.spec = "ij,jk->ik";
  runKernel(KernelKind::Einsum, attrs, {&a, &b}, {&c});
  EXPECT_EQ(c.numElements(), 0);
}

// Ranks run as threads of one process, each with its own backend: kernels
// and BLAS calls must not share state between them.
TEST(EinsumThreadTest, ConcurrentBackendsGiveTheSerialResult) {
  Tensor a = randomTensor<float>({64, 96}, 31),
         b = randomTensor<float>({96, 80}, 32);
  Tensor serial(DType::F32, {64, 80});
  KernelAttrs attrs;
  attrs.spec = "ij,jk->ik";
  runKernel(KernelKind::Einsum, attrs, {&a, &b}, {&serial});
  std::vector<Tensor> outs;
  for (int t = 0; t < 4; ++t)
    outs.emplace_back(DType::F32, std::vector<int64_t>{64, 80});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::unique_ptr<Backend> own = createCpuBackend();
      KernelCall call{
          KernelKind::Einsum, attrs, {a.view(), b.view()}, {outs[t].view()}};
      for (int rep = 0; rep < 20; ++rep)
        own->run(call);
    });
  for (std::thread &t : threads)
    t.join();
  for (int t = 0; t < 4; ++t) {
    SCOPED_TRACE("thread " + std::to_string(t));
    expectNear<float>(outs[t], values<float>(serial), 1.0);
  }
}

// An addend (a third input) broadcast into the result by `dims`: the plan's
// fused bias add (LowerToPlanOptions::fuseAdds) or gradient sum. Results
// written by the GEMM directly (beta = 1), transposed (operands swapped)
// and through a temporary; a whole addend, a bias, a size-1 dimension that
// repeats, and a scalar.
struct AddendCase {
  std::string spec;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<int64_t> addend, dims;
};

const AddendCase kAddendCases[] = {
    {"bsh,hf->bsf", {{2, 3, 8}, {8, 5}}, {5}, {2}},
    {"bsh,hnd->bsnd", {{2, 3, 8}, {8, 2, 4}}, {2, 4}, {2, 3}},
    {"ij,jk->ik", {{5, 7}, {7, 3}}, {5, 3}, {0, 1}},
    {"ik,kj->ji", {{4, 6}, {6, 5}}, {5, 4}, {0, 1}},
    {"ibj,jbk->kib", {{4, 3, 5}, {5, 3, 2}}, {2, 1, 3}, {0, 1, 2}},
    {"ibj,jbk->kib", {{4, 3, 5}, {5, 3, 2}}, {2, 4, 3}, {0, 1, 2}},
    {"bij,bjk->bik", {{3, 4, 5}, {3, 5, 2}}, {}, {}},
    {"ij,jk->ik", {{33, 70}, {70, 45}}, {33, 1}, {0, 1}},
};

/// ref + the addend broadcast by `dims` into `outShape`.
template <typename T>
std::vector<double> plusAddend(std::vector<double> ref, const Tensor &addend,
                               const std::vector<int64_t> &dims,
                               const std::vector<int64_t> &outShape) {
  std::vector<int64_t> strides = stridesOf(addend.getShape());
  int64_t o = 0;
  forEachIndex(outShape, [&](const std::vector<int64_t> &index) {
    int64_t offset = 0;
    for (size_t i = 0; i < dims.size(); ++i)
      if (addend.getShape()[i] != 1)
        offset += index[dims[i]] * strides[i];
    ref[o++] += addend.data<T>()[offset];
  });
  return ref;
}

TYPED_TEST(EinsumTest, AddsItsAddend) {
  using T = TypeParam;
  uint64_t seed = 100;
  for (const AddendCase &c : kAddendCases) {
    SCOPED_TRACE(c.spec + " + an addend of rank " +
                 std::to_string(c.addend.size()));
    Tensor a = randomTensor<T>(c.shapes[0], seed++);
    Tensor b = randomTensor<T>(c.shapes[1], seed++);
    Tensor addend = randomTensor<T>(c.addend, seed++);
    std::vector<int64_t> outShape;
    Reference ref = naiveEinsum<T>(c.spec, {&a, &b}, outShape);
    std::vector<double> want = plusAddend<T>(ref.value, addend, c.dims, outShape);
    std::vector<double> scale = ref.absSum;
    for (size_t i = 0; i < scale.size(); ++i)
      scale[i] += std::fabs(want[i] - ref.value[i]);
    KernelAttrs attrs;
    attrs.spec = c.spec;
    attrs.dims = c.dims;
    // Into a poisoned output.
    Tensor out(dtypeOf<T>(), outShape);
    for (int64_t i = 0; i < out.numElements(); ++i)
      out.data<T>()[i] = static_cast<T>(12345.0);
    runKernel(KernelKind::Einsum, attrs, {&a, &b, &addend}, {&out});
    expectNear<T>(out, want, scale);
    // In place: the output is the addend (Buffer.reuses).
    if (c.addend == outShape) {
      Tensor acc(dtypeOf<T>(), c.addend);
      std::memcpy(acc.data<T>(), addend.data<T>(), addend.view().numBytes());
      KernelCall call{KernelKind::Einsum, attrs,
                      {a.view(), b.view(), acc.view()}, {acc.view()}};
      backend().run(call);
      expectNear<T>(acc, want, scale);
    }
  }
}

TYPED_TEST(EinsumTest, ZeroSizedContractionGivesTheAddend) {
  using T = TypeParam;
  Tensor a(dtypeOf<T>(), {3, 0}), b(dtypeOf<T>(), {0, 2});
  Tensor bias = makeTensor<T>({2}, {1.5, -2});
  Tensor c = makeTensor<T>({3, 2}, {9, 9, 9, 9, 9, 9});
  KernelAttrs attrs;
  attrs.spec = "ij,jk->ik";
  attrs.dims = {1};
  runKernel(KernelKind::Einsum, attrs, {&a, &b, &bias}, {&c});
  EXPECT_EQ(values<T>(c), (std::vector<double>{1.5, -2, 1.5, -2, 1.5, -2}));
}

void runSpec(const std::string &spec, std::vector<Tensor *> in, Tensor *out) {
  KernelAttrs attrs;
  attrs.spec = spec;
  runKernel(KernelKind::Einsum, attrs, in, {out});
}

TEST(EinsumErrorTest, RejectsMalformedSpecs) {
  Tensor a(DType::F32, {2, 3}), b(DType::F32, {3, 4}), c(DType::F32, {2, 4});
  expectError(
      [&] {
        runSpec("ij,jk", {&a, &b}, &c);
      },
      {"einsum", "exactly one '->'"});
  expectError(
      [&] {
        runSpec("ij,jk->ik->ik", {&a, &b}, &c);
      },
      {"exactly one '->'"});
  expectError(
      [&] {
        runSpec("ij->ik", {&a, &b}, &c);
      },
      {"1 operand term(s) but 2 input(s)"});
  expectError(
      [&] {
        runSpec("i j,jk->ik", {&a, &b}, &c);
      },
      {"operand term 0", "not an ASCII letter"});
  expectError([&] { runSpec("ii,jk->ik", {&a, &b}, &c); }, {"repeats 'i'"});
  expectError(
      [&] {
        runSpec("ij,jk->iz", {&a, &b}, &c);
      },
      {"result letter 'z' is in no operand"});
  expectError(
      [&] {
        runSpec("ij,jk->ii", {&a, &b}, &c);
      },
      {"the result term repeats 'i'"});
  expectError(
      [&] {
        runSpec("...,jk->ik", {&a, &b}, &c);
      },
      {"not an ASCII letter"});
}

TEST(EinsumErrorTest, RejectsShapesThatDoNotFitTheSpec) {
  Tensor a(DType::F32, {2, 3}), b(DType::F32, {5, 4}), c(DType::F32, {2, 4});
  expectError(
      [&] {
        runSpec("ij,jk->ik", {&a, &b}, &c);
      },
      {"einsum", "letter 'j' is 5 in input 1 but 3 in input 0"});
  Tensor b3(DType::F32, {3, 4, 1});
  expectError(
      [&] {
        runSpec("ij,jk->ik", {&a, &b3}, &c);
      },
      {"input 1 (tensor<3x4x1xf32>) has rank 3", "\"jk\" has 2"});
  Tensor b2(DType::F32, {3, 4}), wrong(DType::F32, {2, 5});
  expectError(
      [&] {
        runSpec("ij,jk->ik", {&a, &b2}, &wrong);
      },
      {"letter 'k' is 5 in output 0 but 4 in input 1"});
}

TEST(EinsumErrorTest, RejectsDTypesAndArity) {
  Tensor a(DType::F32, {2, 3}), b(DType::F64, {3, 4}), c(DType::F32, {2, 4});
  expectError(
      [&] {
        runSpec("ij,jk->ik", {&a, &b}, &c);
      },
      {"input 1 has dtype f64 but output 0 has f32"});
  Tensor h1(DType::F16, {2, 3}), h2(DType::F16, {3, 4}), h3(DType::F16, {2, 4});
  // f16 and bf16 run on widened copies (LowPrecisionTest checks values).
  EXPECT_NO_THROW(runSpec("ij,jk->ik", {&h1, &h2}, &h3));
  expectError(
      [&] {
        runSpec("ij,jk,kl->il", {&a, &a, &a}, &c);
      },
      {"3 operand term(s) but 2 input(s) were given besides the addend"});
  expectError(
      [&] {
        runSpec("ij,jk->il", {&a, &a, &a, &a}, &c);
      },
      {"one or two operands and, after two, an optional addend; got 4"});
}

TEST(EinsumErrorTest, RejectsAddendsThatDoNotFit) {
  Tensor a(DType::F32, {2, 3}), b(DType::F32, {3, 4}), c(DType::F32, {2, 4});
  auto run = [&](Tensor &addend, std::vector<int64_t> dims) {
    KernelAttrs attrs;
    attrs.spec = "ij,jk->ik";
    attrs.dims = std::move(dims);
    runKernel(KernelKind::Einsum, attrs, {&a, &b, &addend}, {&c});
  };
  Tensor bias(DType::F32, {4}), wrong(DType::F32, {3});
  expectError([&] { run(bias, {}); },
              {"einsum", "dims [] has 0 entries but input 2 (the addend) has "
                         "rank 1"});
  expectError([&] { run(bias, {2}); },
              {"dims[0] = 2 is out of range for output 0 of rank 2"});
  expectError([&] { run(wrong, {1}); },
              {"input 2 (the addend) dimension 0 has size 3 but output "
               "dimension 1 has size 4"});
  Tensor whole(DType::F32, {2, 4});
  expectError([&] { run(whole, {1, 0}); }, {"is not strictly increasing"});
  Tensor f64(DType::F64, {4});
  expectError([&] { run(f64, {1}); },
              {"input 2 has dtype f64 but output 0 has f32"});
}

TEST(EinsumErrorTest, AddendMayBeTheOutputButNotOverlapIt) {
  Tensor a = randomTensor<float>({2, 2}, 3), b = randomTensor<float>({2, 2}, 4);
  Tensor big(DType::F32, {8});
  KernelCall call{KernelKind::Einsum, {}, {}, {}};
  call.attrs.spec = "ij,jk->ik";
  call.attrs.dims = {0, 1};
  // The addend four floats into the output's bytes.
  TensorView out{big.data<float>(), DType::F32, {2, 2}};
  TensorView shifted{big.data<float>() + 2, DType::F32, {2, 2}};
  call.inputs = {a.view(), b.view(), shifted};
  call.outputs = {out};
  expectError([&] { backend().run(call); },
              {"output 0 overlaps input 2 without being it"});
  // An operand that is the output is no addend.
  call.inputs = {out, b.view(), out};
  expectError([&] { backend().run(call); },
              {"output 0 overlaps input 0 (this kernel does not run in "
               "place)"});
}

TEST(EinsumErrorTest, RejectsOutputOverlappingAnInput) {
  Tensor a(DType::F32, {2, 2}), b(DType::F32, {2, 2});
  KernelCall call{KernelKind::Einsum, {}, {a.view(), b.view()}, {a.view()}};
  call.attrs.spec = "ij,jk->ik";
  expectError([&] { backend().run(call); }, {"output 0 overlaps input 0"});
}

TEST(EinsumErrorTest, RejectsNullDataAndNegativeDimensions) {
  KernelCall call{KernelKind::Einsum, {}, {}, {}};
  call.attrs.spec = "ij->ji";
  Tensor out(DType::F32, {3, 2});
  call.inputs.push_back(TensorView{nullptr, DType::F32, {2, 3}});
  call.outputs.push_back(out.view());
  expectError([&] { backend().run(call); },
              {"input 0 (tensor<2x3xf32>) has no data pointer"});
  call.inputs[0] = TensorView{out.data<float>(), DType::F32, {-2, 3}};
  expectError([&] { backend().run(call); }, {"negative dimension"});
  call.inputs[0] =
      TensorView{out.data<float>(), DType::F32, {int64_t(1) << 40, 1 << 30}};
  expectError([&] { backend().run(call); }, {"too many elements"});
}

} // namespace
