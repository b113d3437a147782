//===- CudaBackend.cpp - the cuda backend: kernel calls to launches -------===//
//
// Checks each call on the host (the cpu backend's validation helpers, so
// both backends reject the same calls with the same words), then queues
// work on the device layer's compute stream: a GEMM descriptor for an
// einsum, a launch of a kernel template (Kernels.h) for the ported kinds.
// A kind without a port throws an Error naming it. What the host cannot
// check without reading device memory (labels, the AdamW step) is
// documented at the kernel.
//
// Launch geometry: elementwise kernels take blocks of the configured size
// and at most 4096 blocks (they loop with a grid stride); row kernels
// (softmax, layer_norm, cross_entropy) one block per row, at most 4096; a
// reduction over the rows of [rows, columns] (a bias's gradient) two
// passes over row chunks and 32-column tiles.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/CudaBackend.h"

#include "runtime/lib/cpu/CpuKernels.h"
#include "runtime/lib/cuda/GpuApi.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace partita::runtime {

namespace {

using namespace gpu;
using cpu::fail;

constexpr int64_t kMaxGrid = 4096;

ElemType floatType(const KernelCall &call, const TensorView &view,
                   const char *what) {
  if (view.dtype == DType::F32)
    return ElemType::F32;
  if (view.dtype == DType::F64)
    return ElemType::F64;
  fail(call.kind, std::string("dtype ") + toString(view.dtype) + " of " +
                      what +
                      " is not supported (the cuda backend has f32 and f64 "
                      "kernels)");
}

ElemType bitsType(size_t bytes) {
  switch (bytes) {
  case 1: return ElemType::U8;
  case 2: return ElemType::U16;
  case 4: return ElemType::U32;
  default: return ElemType::U64;
  }
}

/// A two-operand einsum as one strided-batched GEMM, when the operands and
/// the result are already laid out as [batch, free, contracted] or [batch,
/// contracted, free] (a transpose flag) and [batch, freeA, freeB] (or the
/// operands swapped). Size-1 letters are dropped first.
struct EinsumGemm {
  bool ok = false;
  std::string why;
  GemmDesc desc;
};

EinsumGemm planEinsum(const KernelCall &call) {
  EinsumGemm out;
  const std::string &spec = call.attrs.spec;
  size_t arrow = spec.find("->"), comma = spec.find(',');
  if (call.inputs.size() != 2 || arrow == std::string::npos ||
      comma == std::string::npos || comma > arrow) {
    out.why = "only two-operand einsums are ported";
    return out;
  }
  std::string terms[3] = {spec.substr(0, comma),
                          spec.substr(comma + 1, arrow - comma - 1),
                          spec.substr(arrow + 2)};
  const TensorView *views[3] = {&call.inputs[0], &call.inputs[1],
                                &call.outputs[0]};
  int64_t size[128];
  std::fill(std::begin(size), std::end(size), -1);
  for (int t = 0; t < 3; ++t) {
    if (int64_t(terms[t].size()) != views[t]->rank())
      fail(call.kind, "spec \"" + spec + "\": term '" + terms[t] + "' has " +
                          std::to_string(terms[t].size()) +
                          " letters but its tensor " +
                          cpu::typeToString(*views[t]) + " has rank " +
                          std::to_string(views[t]->rank()));
    for (size_t i = 0; i < terms[t].size(); ++i) {
      unsigned char c = terms[t][i];
      if (c >= 128 || !std::isalpha(c))
        fail(call.kind, "spec \"" + spec + "\" has a character that is not "
                        "an ASCII letter");
      int64_t d = views[t]->shape[i];
      if (size[c] >= 0 && size[c] != d)
        fail(call.kind, "spec \"" + spec + "\": letter '" +
                            std::string(1, c) + "' has sizes " +
                            std::to_string(size[c]) + " and " +
                            std::to_string(d));
      size[c] = d;
    }
  }
  for (char c : terms[2])
    if (terms[0].find(c) == std::string::npos &&
        terms[1].find(c) == std::string::npos)
      fail(call.kind, "spec \"" + spec + "\": result letter '" +
                          std::string(1, c) + "' is in no operand");
  auto drop = [&](const std::string &term) {
    std::string kept;
    for (char c : term)
      if (size[(unsigned char)c] != 1)
        kept += c;
    return kept;
  };
  std::string a = drop(terms[0]), b = drop(terms[1]), r = drop(terms[2]);
  auto in = [](const std::string &s, char c) {
    return s.find(c) != std::string::npos;
  };
  for (int side = 0; side < 2; ++side)
    for (char c : side ? b : a)
      if (!in(r, c) && !in(side ? a : b, c)) {
        out.why = "letter '" + std::string(1, c) +
                  "' is summed in one operand only";
        return out;
      }
  std::string batch, freeA, freeB, contracted;
  for (char c : r) {
    if (in(a, c) && in(b, c))
      batch += c;
    else if (in(a, c))
      freeA += c;
    else
      freeB += c;
  }
  for (char c : a)
    if (in(b, c) && !in(r, c))
      contracted += c;
  auto count = [&](const std::string &s) {
    int64_t n = 1;
    for (char c : s)
      n *= size[(unsigned char)c];
    return n;
  };
  // op(X) [batch, rows, contracted]: X stored so, or with the two swapped.
  auto layout = [&](const std::string &x, const std::string &free,
                    bool contractedFirst, bool &trans) {
    if (x == batch + (contractedFirst ? contracted + free : free + contracted)) {
      trans = false;
      return true;
    }
    if (x == batch + (contractedFirst ? free + contracted : contracted + free)) {
      trans = true;
      return true;
    }
    return false;
  };
  GemmDesc &g = out.desc;
  const void *first = call.inputs[0].data, *second = call.inputs[1].data;
  std::string firstTerm = a, secondTerm = b, firstFree = freeA,
              secondFree = freeB;
  if (r != batch + freeA + freeB) {
    if (r != batch + freeB + freeA) {
      out.why = "the result \"" + terms[2] +
                "\" is not [batch, free of the first, free of the second]";
      return out;
    }
    // C = op(B) op(A): the operands change roles.
    std::swap(first, second);
    std::swap(firstTerm, secondTerm);
    std::swap(firstFree, secondFree);
  }
  if (!layout(firstTerm, firstFree, false, g.transA) ||
      !layout(secondTerm, secondFree, true, g.transB)) {
    out.why = "an operand needs a transpose that is not a GEMM flag";
    return out;
  }
  g.type = floatType(call, call.outputs[0], "output 0");
  g.m = count(firstFree);
  g.n = count(secondFree);
  g.k = count(contracted);
  g.batch = count(batch);
  g.a = first;
  g.b = second;
  g.c = call.outputs[0].data;
  g.lda = g.transA ? g.m : g.k;
  g.ldb = g.transB ? g.k : g.n;
  g.ldc = g.n;
  g.strideA = g.m * g.k;
  g.strideB = g.k * g.n;
  g.strideC = g.m * g.n;
  out.ok = true;
  return out;
}

class CudaBackend final : public Backend {
public:
  CudaBackend(std::unique_ptr<GpuApi> api, const CudaBackendOptions &options)
      : api(std::move(api)), dev(createGpuDevice(*this->api)),
        blockSize(options.blockSize) {}
  ~CudaBackend() override {
    // Nothing queued may outlive the workspace it writes.
    try {
      api->computeStream().synchronize();
    } catch (const std::exception &) {
    }
  }

  const char *name() const override { return "cuda"; }
  Device &device() override { return *dev; }

  void run(const KernelCall &call) override {
    switch (call.kind) {
    case KernelKind::Einsum:
      return runEinsum(call);
    case KernelKind::Add:
    case KernelKind::Sub:
    case KernelKind::Mul:
    case KernelKind::Div:
    case KernelKind::Max:
      return runElementwise(call, 2, GpuKernel::Binary,
                            int(binaryOp(call.kind)));
    case KernelKind::Neg:
    case KernelKind::Exp:
    case KernelKind::Log:
    case KernelKind::Tanh:
    case KernelKind::Relu:
    case KernelKind::Silu:
    case KernelKind::Rsqrt:
    case KernelKind::Sqrt:
    case KernelKind::Gelu:
      return runElementwise(call, 1, GpuKernel::Unary, int(unaryOp(call)));
    case KernelKind::ReluGrad:
    case KernelKind::SiluGrad:
    case KernelKind::GeluGrad:
    case KernelKind::GreaterEqual:
      return runElementwise(call, 2, GpuKernel::ElementwiseGrad,
                            int(gradOp(call)));
    case KernelKind::Broadcast:
      return runBroadcast(call);
    case KernelKind::Transpose:
      return runTranspose(call);
    case KernelKind::Reshape:
      return runReshape(call);
    case KernelKind::Fill:
      return runFill(call);
    case KernelKind::Softmax:
      return runSoftmax(call);
    case KernelKind::LayerNorm:
      return runRowNorm(call);
    case KernelKind::CrossEntropy:
      return runCrossEntropy(call);
    case KernelKind::AdamW:
      return runAdamW(call);
    case KernelKind::ReduceSum:
    case KernelKind::ReduceMax:
    case KernelKind::ReduceMean:
      return runReduce(call);
    case KernelKind::CrossEntropyGrad:
      return runCrossEntropyGrad(call);
    case KernelKind::Embedding:
      return runEmbedding(call);
    case KernelKind::RMSNorm:
      return runRowNorm(call);
    case KernelKind::SGD:
      return runSgd(call);
    case KernelKind::EmbeddingGrad:
      return runEmbeddingGrad(call);
    case KernelKind::LayerNormGrad:
    case KernelKind::RMSNormGrad:
      return runNormGrad(call);
    default:
      throw Error(std::string("cuda backend: kernel kind '") +
                  toString(call.kind) +
                  "' is not ported to the cuda backend yet (ported: einsum, "
                  "add, sub, mul, div, max, the unary ops, relu/silu/gelu "
                  "grads, greater_equal, broadcast, transpose, reshape, fill, "
                  "reduce_sum/max/mean, softmax, layer_norm, rms_norm and their "
                  "grads, embedding "
                  "and its grad, "
                  "cross_entropy and its grad, sgd, adamw)");
    }
  }

private:
  static BinaryOp binaryOp(KernelKind kind) {
    switch (kind) {
    case KernelKind::Add: return BinaryOp::Add;
    case KernelKind::Sub: return BinaryOp::Sub;
    case KernelKind::Mul: return BinaryOp::Mul;
    case KernelKind::Div: return BinaryOp::Div;
    default: return BinaryOp::Max;
    }
  }
  static UnaryOp unaryOp(const KernelCall &call) {
    switch (call.kind) {
    case KernelKind::Neg: return UnaryOp::Neg;
    case KernelKind::Exp: return UnaryOp::Exp;
    case KernelKind::Log: return UnaryOp::Log;
    case KernelKind::Tanh: return UnaryOp::Tanh;
    case KernelKind::Relu: return UnaryOp::Relu;
    case KernelKind::Silu: return UnaryOp::Silu;
    case KernelKind::Rsqrt: return UnaryOp::Rsqrt;
    case KernelKind::Sqrt: return UnaryOp::Sqrt;
    default: return call.attrs.tanh ? UnaryOp::GeluTanh : UnaryOp::GeluErf;
    }
  }
  static GradOp gradOp(const KernelCall &call) {
    switch (call.kind) {
    case KernelKind::ReluGrad: return GradOp::Relu;
    case KernelKind::SiluGrad: return GradOp::Silu;
    case KernelKind::GeluGrad:
      return call.attrs.tanh ? GradOp::GeluTanh : GradOp::GeluErf;
    default: return GradOp::GreaterEqual;
    }
  }

  KernelLaunch elementwiseLaunch(int64_t n) const {
    KernelLaunch l;
    l.block = blockSize;
    l.grid = int(std::clamp<int64_t>((n + blockSize - 1) / blockSize, 1,
                                     kMaxGrid));
    l.params.n = n;
    return l;
  }
  KernelLaunch rowLaunch(int64_t rows) const {
    KernelLaunch l;
    l.block = blockSize;
    l.grid = int(std::clamp<int64_t>(rows, 1, kMaxGrid));
    l.sharedBytes = kReduceSharedBytes;
    l.params.n = rows;
    return l;
  }
  void launch(const KernelLaunch &l) {
    if (l.params.n > 0)
      api->launch(l, api->computeStream());
  }

  void runElementwise(const KernelCall &call, size_t inputs, GpuKernel kernel,
                      int op) {
    cpu::checkCall(call, inputs, 1);
    const TensorView &out = call.outputs[0];
    for (size_t i = 0; i < inputs; ++i)
      cpu::checkSameType(call.kind, call.inputs[i],
                         i ? "input 1" : "input 0", out, "output 0");
    cpu::checkNoOverlap(call, /*allowExactAlias=*/true);
    KernelLaunch l = elementwiseLaunch(out.numElements());
    l.params.kernel = kernel;
    l.params.type = floatType(call, out, "output 0");
    l.params.op = op;
    for (size_t i = 0; i < inputs; ++i)
      l.params.in[i] = call.inputs[i].data;
    l.params.out[0] = out.data;
    launch(l);
  }

  void runStrided(const KernelCall &call, const std::vector<int64_t> &shape,
                  const std::vector<int64_t> &strides) {
    // Size-1 dimensions move nothing, and a dimension whose stride is its
    // inner neighbour's extent continues it (the leading [batch, seq] of a
    // bias broadcast, both stride 0, is one dimension): the kernel divides
    // once per dimension left, which must fit its rank.
    std::vector<int64_t> merged, mergedStrides;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == 1)
        continue;
      if (!merged.empty() &&
          mergedStrides.back() == strides[d] * shape[d]) {
        merged.back() *= shape[d];
        mergedStrides.back() = strides[d];
        continue;
      }
      merged.push_back(shape[d]);
      mergedStrides.push_back(strides[d]);
    }
    if (merged.size() > size_t(kMaxRank))
      fail(call.kind, "more than " + std::to_string(kMaxRank) +
                          " dimensions of size > 1 that do not merge (the "
                          "cuda kernel's limit)");
    KernelLaunch l = elementwiseLaunch(call.outputs[0].numElements());
    KernelParams &p = l.params;
    p.kernel = GpuKernel::Strided;
    p.type = bitsType(sizeOf(call.inputs[0].dtype));
    p.rank = int(merged.size());
    std::copy(merged.begin(), merged.end(), p.shape);
    std::copy(mergedStrides.begin(), mergedStrides.end(), p.inStride);
    // 32-bit index arithmetic when every index and input offset fits.
    int64_t lastOffset = 0;
    for (size_t d = 0; d < merged.size(); ++d)
      lastOffset += (merged[d] - 1) * mergedStrides[d];
    p.index32 = l.params.n < (int64_t(1) << 31) &&
                lastOffset < (int64_t(1) << 31);
    p.in[0] = call.inputs[0].data;
    p.out[0] = call.outputs[0].data;
    launch(l);
  }

  void checkSameDType(const KernelCall &call) {
    if (call.inputs[0].dtype != call.outputs[0].dtype)
      fail(call.kind, std::string("input 0 has dtype ") +
                          toString(call.inputs[0].dtype) +
                          " but output 0 has " +
                          toString(call.outputs[0].dtype));
  }

  void runBroadcast(const KernelCall &call) {
    cpu::checkCall(call, 1, 1);
    checkSameDType(call);
    cpu::checkNoOverlap(call, /*allowExactAlias=*/false);
    const TensorView &in = call.inputs[0], &out = call.outputs[0];
    const std::vector<int64_t> &dims = call.attrs.dims;
    if (int64_t(dims.size()) != in.rank())
      fail(call.kind, "dims has " + std::to_string(dims.size()) +
                          " entries but input 0 has rank " +
                          std::to_string(in.rank()));
    std::vector<int64_t> inStrides = cpu::rowMajorStrides(in.shape);
    std::vector<int64_t> strides(out.rank(), 0);
    for (size_t i = 0; i < dims.size(); ++i) {
      int64_t d = dims[i];
      if (d < 0 || d >= out.rank() || (i > 0 && d <= dims[i - 1]))
        fail(call.kind, "dims[" + std::to_string(i) + "] = " +
                            std::to_string(d) +
                            " is out of range or not increasing");
      if (in.shape[i] != out.shape[d] && in.shape[i] != 1)
        fail(call.kind, "input dimension " + std::to_string(i) +
                            " has size " + std::to_string(in.shape[i]) +
                            " but output dimension " + std::to_string(d) +
                            " has size " + std::to_string(out.shape[d]));
      if (in.shape[i] != 1)
        strides[d] = inStrides[i];
    }
    runStrided(call, out.shape, strides);
  }

  void runTranspose(const KernelCall &call) {
    cpu::checkCall(call, 1, 1);
    checkSameDType(call);
    cpu::checkNoOverlap(call, /*allowExactAlias=*/false);
    const TensorView &in = call.inputs[0], &out = call.outputs[0];
    const std::vector<int64_t> &perm = call.attrs.dims;
    if (int64_t(perm.size()) != in.rank())
      fail(call.kind, "the permutation has " + std::to_string(perm.size()) +
                          " entries but input 0 has rank " +
                          std::to_string(in.rank()));
    std::vector<int64_t> inStrides = cpu::rowMajorStrides(in.shape);
    std::vector<bool> seen(perm.size(), false);
    std::vector<int64_t> shape(perm.size()), strides(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) {
      int64_t p = perm[i];
      if (p < 0 || p >= in.rank() || seen[p])
        fail(call.kind, "attrs.dims is not a permutation of [0, " +
                            std::to_string(in.rank()) + ")");
      seen[p] = true;
      shape[i] = in.shape[p];
      strides[i] = inStrides[p];
    }
    cpu::checkShape(call.kind, out, "output 0", shape);
    runStrided(call, shape, strides);
  }

  void runReshape(const KernelCall &call) {
    cpu::checkCall(call, 1, 1);
    checkSameDType(call);
    cpu::checkNoOverlap(call, /*allowExactAlias=*/true);
    const TensorView &in = call.inputs[0], &out = call.outputs[0];
    if (in.numElements() != out.numElements())
      fail(call.kind, "input 0 (" + cpu::typeToString(in) + ") and output 0 (" +
                          cpu::typeToString(out) +
                          ") have different element counts");
    if (in.data != out.data)
      api->copy(out.data, in.data, in.numBytes(), api->computeStream());
  }

  void runFill(const KernelCall &call) {
    cpu::checkCall(call, 0, 1);
    const TensorView &out = call.outputs[0];
    double v = call.attrs.fillValue;
    uint64_t bits = 0;
    switch (out.dtype) {
    case DType::F32: {
      if (std::isfinite(v) && std::fabs(v) > 3.4028234663852886e38)
        fail(call.kind, "value " + std::to_string(v) + " overflows f32");
      float f = float(v);
      std::memcpy(&bits, &f, 4);
      break;
    }
    case DType::F64:
      std::memcpy(&bits, &v, 8);
      break;
    case DType::I32:
    case DType::I64: {
      bool wide = out.dtype == DType::I64;
      double lo = wide ? -9223372036854775808.0 : -2147483648.0;
      if (!(std::isfinite(v) && v == std::trunc(v) && v >= lo && v < -lo))
        fail(call.kind, "value " + std::to_string(v) +
                            " is not an integer in the range of " +
                            toString(out.dtype));
      if (wide) {
        int64_t i = int64_t(v);
        std::memcpy(&bits, &i, 8);
      } else {
        int32_t i = int32_t(v);
        std::memcpy(&bits, &i, 4);
      }
      break;
    }
    default:
      fail(call.kind, std::string("dtype ") + toString(out.dtype) +
                          " is not supported (the cuda backend fills f32, "
                          "f64, i32 and i64)");
    }
    dev->fill(out.data, &bits, sizeOf(out.dtype), out.numElements(),
              api->computeStream());
  }

  void runSoftmax(const KernelCall &call) {
    cpu::checkCall(call, 1, 1);
    const TensorView &x = call.inputs[0], &y = call.outputs[0];
    cpu::checkSameType(call.kind, x, "input 0", y, "output 0");
    cpu::checkNoOverlap(call, /*allowExactAlias=*/false);
    int64_t dim = call.attrs.dim;
    if (dim < 0 || dim >= x.rank())
      fail(call.kind, "dim " + std::to_string(dim) +
                          " is out of range for input 0 of rank " +
                          std::to_string(x.rank()));
    int64_t outer = cpu::product(x.shape, 0, dim), n = x.shape[dim];
    int64_t inner = cpu::product(x.shape, dim + 1, x.shape.size());
    KernelLaunch l = rowLaunch(outer * inner);
    l.params.kernel = GpuKernel::Softmax;
    l.params.type = floatType(call, x, "input 0");
    l.params.cols = n;
    l.params.inner = inner;
    l.params.in[0] = x.data;
    l.params.out[0] = y.data;
    if (n > 0)
      launch(l);
  }

  /// layer_norm (x, gamma, beta) and rms_norm (x, gamma): one block per
  /// row of the last dimension.
  /// layer_norm_grad and rms_norm_grad (x, gamma, dy -> dx): one block per
  /// row, the cpu backend's checks.
  void runNormGrad(const KernelCall &call) {
    cpu::checkCall(call, 3, 1);
    const TensorView &x = call.inputs[0], &dy = call.inputs[2],
                     &dx = call.outputs[0];
    cpu::checkSameType(call.kind, dy, "input 2 (dy)", x, "input 0 (x)");
    cpu::checkSameType(call.kind, dx, "output 0", x, "input 0 (x)");
    if (x.rank() < 1)
      fail(call.kind, "input 0 must have rank >= 1, got a rank-0 tensor");
    int64_t hidden = x.shape.back();
    cpu::checkVector(call.kind, call.inputs[1], "input 1 (gamma)", x, hidden);
    cpu::checkPositiveFinite(call.kind, "epsilon", call.attrs.epsilon);
    cpu::checkNoOverlap(call, /*allowExactAlias=*/false);
    KernelLaunch l = rowLaunch(hidden ? x.numElements() / hidden : 0);
    KernelParams &p = l.params;
    p.kernel = GpuKernel::NormGrad;
    p.type = floatType(call, x, "input 0");
    p.op = call.kind == KernelKind::RMSNormGrad ? 1 : 0;
    p.cols = hidden;
    p.a[0] = call.attrs.epsilon;
    for (int i = 0; i < 3; ++i)
      p.in[i] = call.inputs[i].data;
    p.out[0] = dx.data;
    if (hidden > 0)
      launch(l);
  }

  /// embedding and embedding_grad: `table` is [vocab, hidden] and `rows`
  /// [ids..., hidden]; whichever of the two is the input sets the float
  /// type the other must have. Returns that type.
  ElemType checkEmbedding(const KernelCall &call, const TensorView &table,
                          const char *tableName, const TensorView &rows,
                          const char *rowsName, bool tableIsInput) {
    KernelKind kind = call.kind;
    const TensorView &ids = call.inputs[1];
    if (table.rank() != 2)
      fail(kind, std::string(tableName) + " must be [vocab, hidden], got " +
                     cpu::typeToString(table));
    const TensorView &in = tableIsInput ? table : rows;
    const TensorView &out = tableIsInput ? rows : table;
    ElemType type =
        floatType(call, in, tableIsInput ? tableName : rowsName);
    cpu::checkIndex(kind, ids, "input 1 (ids)");
    cpu::checkDType(kind, out, tableIsInput ? rowsName : tableName, in.dtype);
    std::vector<int64_t> shape = ids.shape;
    shape.push_back(table.shape[1]);
    cpu::checkShape(kind, rows, rowsName, shape);
    if (call.attrs.vocabOffset < 0)
      fail(kind, "vocabOffset must be >= 0, got " +
                     std::to_string(call.attrs.vocabOffset));
    cpu::checkNoOverlap(call, /*allowExactAlias=*/false);
    return type;
  }

  void runEmbeddingGrad(const KernelCall &call) {
    cpu::checkCall(call, 2, 1);
    const TensorView &dy = call.inputs[0], &ids = call.inputs[1],
                     &out = call.outputs[0];
    ElemType type = checkEmbedding(call, out, "output 0 (dtable)", dy,
                                   "input 0 (dy)", /*tableIsInput=*/false);
    KernelLaunch l = elementwiseLaunch(out.numElements());
    KernelParams &p = l.params;
    p.kernel = GpuKernel::EmbeddingGrad;
    p.type = type;
    p.cols = out.shape[1];
    p.inner = ids.numElements();
    p.wideLabels = ids.dtype == DType::I64;
    p.a[0] = double(call.attrs.vocabOffset);
    p.in[0] = dy.data;
    p.in[1] = ids.data;
    p.out[0] = out.data;
    if (out.numElements() > 0)
      launch(l);
  }

  void runRowNorm(const KernelCall &call) {
    bool layer = call.kind == KernelKind::LayerNorm;
    int inputs = layer ? 3 : 2;
    cpu::checkCall(call, inputs, 1);
    const TensorView &x = call.inputs[0], &y = call.outputs[0];
    cpu::checkSameType(call.kind, x, "input 0", y, "output 0");
    if (x.rank() < 1)
      fail(call.kind, "input 0 must have rank >= 1, got a rank-0 tensor");
    int64_t hidden = x.shape.back();
    cpu::checkVector(call.kind, call.inputs[1], "input 1 (gamma)", x, hidden);
    if (layer)
      cpu::checkVector(call.kind, call.inputs[2], "input 2 (beta)", x, hidden);
    cpu::checkPositiveFinite(call.kind, "epsilon", call.attrs.epsilon);
    cpu::checkNoOverlap(call, /*allowExactAlias=*/false);
    KernelLaunch l = rowLaunch(hidden ? x.numElements() / hidden : 0);
    KernelParams &p = l.params;
    p.kernel = layer ? GpuKernel::LayerNorm : GpuKernel::RMSNorm;
    p.type = floatType(call, x, "input 0");
    p.cols = hidden;
    p.a[0] = call.attrs.epsilon;
    for (int i = 0; i < inputs; ++i)
      p.in[i] = call.inputs[i].data;
    p.out[0] = y.data;
    launch(l);
  }

  void runCrossEntropy(const KernelCall &call) {
    cpu::checkCall(call, 2, 1);
    const TensorView &logits = call.inputs[0], &labels = call.inputs[1],
                     &out = call.outputs[0];
    KernelKind kind = call.kind;
    if (logits.rank() < 1)
      fail(kind, "input 0 (logits) must be [..., vocab], got a rank-0 tensor");
    ElemType type = floatType(call, logits, "input 0 (logits)");
    cpu::checkIndex(kind, labels, "input 1 (labels)");
    cpu::checkShape(
        kind, labels, "input 1 (labels)",
        std::vector<int64_t>(logits.shape.begin(), logits.shape.end() - 1));
    cpu::checkShape(kind, out, "output 0", {});
    cpu::checkDType(kind, out, "output 0", logits.dtype);
    if (call.attrs.vocabOffset != 0)
      fail(kind, "vocab-parallel cross_entropy (vocabOffset " +
                     std::to_string(call.attrs.vocabOffset) +
                     ") is not supported yet");
    if (call.attrs.meanCount < 0)
      fail(kind, "meanCount must be >= 0, got " +
                     std::to_string(call.attrs.meanCount));
    cpu::checkNoOverlap(call, /*allowExactAlias=*/false);
    int64_t tokens = labels.numElements();
    double *terms = workspace<double>(std::max<int64_t>(tokens, 1));
    KernelLaunch rows = rowLaunch(tokens);
    rows.params.kernel = GpuKernel::CrossEntropyRows;
    rows.params.type = type;
    rows.params.cols = logits.shape.back();
    rows.params.wideLabels = labels.dtype == DType::I64;
    rows.params.in[0] = logits.data;
    rows.params.in[1] = labels.data;
    rows.params.out[0] = terms;
    launch(rows);
    KernelLaunch sum = rowLaunch(1);
    sum.params.kernel = GpuKernel::SumToScalar;
    sum.params.type = type;
    sum.params.n = tokens;
    sum.params.a[0] =
        double(call.attrs.meanCount > 0 ? call.attrs.meanCount : tokens);
    sum.params.in[0] = terms;
    sum.params.out[0] = out.data;
    api->launch(sum, api->computeStream());
  }

  void runReduce(const KernelCall &call) {
    cpu::checkCall(call, 1, 1);
    checkSameDType(call);
    cpu::checkNoOverlap(call, /*allowExactAlias=*/false);
    const TensorView &in = call.inputs[0], &out = call.outputs[0];
    ElemType type = floatType(call, in, "input 0");
    std::vector<bool> reduced(in.rank(), false);
    for (int64_t d : call.attrs.dims) {
      if (d < 0 || d >= in.rank() || reduced[d])
        fail(call.kind, "dims names " + std::to_string(d) +
                            ", out of range for input 0 of rank " +
                            std::to_string(in.rank()) + " or twice");
      reduced[d] = true;
    }
    std::vector<int64_t> kept;
    for (int64_t d = 0; d < in.rank(); ++d)
      if (!reduced[d])
        kept.push_back(in.shape[d]);
    cpu::checkShape(call.kind, out, "output 0", kept);
    if (call.attrs.meanCount < 0)
      fail(call.kind, "meanCount must be >= 0, got " +
                          std::to_string(call.attrs.meanCount));
    KernelLaunch l = rowLaunch(out.numElements());
    KernelParams &p = l.params;
    p.kernel = GpuKernel::Reduce;
    p.type = type;
    p.op = call.kind == KernelKind::ReduceMax ? 1 : 0;
    std::vector<int64_t> strides = cpu::rowMajorStrides(in.shape);
    int64_t count = 1;
    // Kept and reduced dimensions apart, size-1 ones dropped, and each
    // merged into its predecessor of the same kind when they are adjacent
    // in memory (its stride is this one's extent), so the kernel divides
    // less: [batch, seq, hidden] summed over batch and seq is [tokens]
    // reduced, [hidden] kept.
    int lastKind = -1; // the previous kept (0) or reduced (1) dimension
    for (int64_t d = 0; d < in.rank(); ++d) {
      if (in.shape[d] == 1)
        continue;
      bool r = reduced[d];
      int &rank = r ? p.redRank : p.rank;
      int64_t *shape = r ? p.redShape : p.shape;
      int64_t *stride = r ? p.redStride : p.inStride;
      if (r)
        count *= in.shape[d];
      if (lastKind == int(r) &&
          stride[rank - 1] == strides[d] * in.shape[d]) {
        shape[rank - 1] *= in.shape[d];
        stride[rank - 1] = strides[d];
        continue;
      }
      lastKind = int(r);
      if (rank == kMaxRank)
        fail(call.kind, "more than " + std::to_string(kMaxRank) +
                            " kept or reduced dimensions of size > 1 (the "
                            "cuda kernel's limit)");
      shape[rank] = in.shape[d];
      stride[rank] = strides[d];
      ++rank;
    }
    for (int64_t d = 0; d < in.rank(); ++d)
      if (reduced[d] && in.shape[d] == 0)
        count = 0;
    p.cols = count;
    // A mean divides by the global count when sharded (meanCount); the
    // mean of nothing is 0 * inf = NaN, as the cpu backend's.
    p.a[0] = 1.0;
    if (call.kind == KernelKind::ReduceMean)
      p.a[0] = 1.0 / double(call.attrs.meanCount > 0 ? call.attrs.meanCount
                                                     : count);
    p.in[0] = in.data;
    p.out[0] = out.data;
    // [rows, columns] reduced over the rows (a bias's gradient): coalesced
    // reads in two passes (Kernels.h, columnPartialsKernel) instead of one
    // block per column reading `columns` elements apart.
    if (p.rank == 1 && p.inStride[0] == 1 && p.redRank == 1 &&
        p.redStride[0] == p.shape[0] && count > 0)
      return runColumnReduce(p, p.shape[0], count);
    launch(l);
  }

  /// Reduces the rows of a row-major [rows, columns] input (params of a
  /// Reduce launch) in row chunks: enough (chunk, 32-column tile) items for
  /// about kColumnItems blocks, at least kMinChunkRows rows a chunk. The
  /// chunking depends on the shape alone, so results are deterministic.
  void runColumnReduce(const KernelParams &reduce, int64_t columns,
                       int64_t rows) {
    constexpr int64_t kColumnItems = 1024, kMinChunkRows = 32;
    int64_t tiles = (columns + kWarpSize - 1) / kWarpSize;
    int64_t wanted = (kColumnItems + tiles - 1) / tiles;
    int64_t chunkRows = std::max((rows + wanted - 1) / wanted, kMinChunkRows);
    int64_t chunks = (rows + chunkRows - 1) / chunkRows;
    double *partials = workspace<double>(chunks * columns);
    KernelLaunch first;
    first.block = blockSize;
    first.grid = int(std::min(tiles * chunks, kMaxGrid));
    first.sharedBytes = size_t(blockSize) * sizeof(double);
    KernelParams &p = first.params;
    p.kernel = GpuKernel::ColumnPartials;
    p.type = reduce.type;
    p.op = reduce.op;
    p.n = columns;
    p.cols = rows;
    p.inner = chunkRows;
    p.in[0] = reduce.in[0];
    p.out[0] = partials;
    launch(first);
    KernelLaunch second = elementwiseLaunch(columns);
    KernelParams &q = second.params;
    q.kernel = GpuKernel::ColumnCombine;
    q.type = reduce.type;
    q.op = reduce.op;
    q.cols = chunks;
    q.a[0] = reduce.a[0];
    q.in[0] = partials;
    q.out[0] = reduce.out[0];
    launch(second);
  }

  void runEmbedding(const KernelCall &call) {
    cpu::checkCall(call, 2, 1);
    const TensorView &table = call.inputs[0], &ids = call.inputs[1],
                     &out = call.outputs[0];
    ElemType type = checkEmbedding(call, table, "input 0 (table)", out,
                                   "output 0", /*tableIsInput=*/true);
    KernelLaunch l = elementwiseLaunch(out.numElements());
    KernelParams &p = l.params;
    p.kernel = GpuKernel::Embedding;
    p.type = type;
    p.inner = table.shape[0];
    p.cols = table.shape[1];
    p.wideLabels = ids.dtype == DType::I64;
    p.a[0] = double(call.attrs.vocabOffset);
    p.in[0] = table.data;
    p.in[1] = ids.data;
    p.out[0] = out.data;
    launch(l);
  }

  void runCrossEntropyGrad(const KernelCall &call) {
    cpu::checkCall(call, 3, 1);
    const TensorView &logits = call.inputs[0], &labels = call.inputs[1],
                     &dloss = call.inputs[2], &out = call.outputs[0];
    KernelKind kind = call.kind;
    if (logits.rank() < 1)
      fail(kind, "input 0 (logits) must be [..., vocab], got a rank-0 tensor");
    ElemType type = floatType(call, logits, "input 0 (logits)");
    cpu::checkIndex(kind, labels, "input 1 (labels)");
    cpu::checkShape(
        kind, labels, "input 1 (labels)",
        std::vector<int64_t>(logits.shape.begin(), logits.shape.end() - 1));
    cpu::checkShape(kind, dloss, "input 2 (dloss)", {});
    cpu::checkDType(kind, dloss, "input 2 (dloss)", logits.dtype);
    cpu::checkSameType(kind, out, "output 0", logits, "input 0 (logits)");
    if (call.attrs.vocabOffset != 0)
      fail(kind, "vocab-parallel cross_entropy_grad (vocabOffset " +
                     std::to_string(call.attrs.vocabOffset) +
                     ") is not supported yet");
    if (call.attrs.meanCount < 0)
      fail(kind, "meanCount must be >= 0, got " +
                     std::to_string(call.attrs.meanCount));
    cpu::checkNoOverlap(call, /*allowExactAlias=*/false);
    int64_t tokens = labels.numElements();
    KernelLaunch l = rowLaunch(tokens);
    KernelParams &p = l.params;
    p.kernel = GpuKernel::CrossEntropyGrad;
    p.type = type;
    p.cols = logits.shape.back();
    p.wideLabels = labels.dtype == DType::I64;
    p.a[0] = double(call.attrs.meanCount > 0 ? call.attrs.meanCount : tokens);
    for (int i = 0; i < 3; ++i)
      p.in[i] = call.inputs[i].data;
    p.out[0] = out.data;
    if (p.cols > 0)
      launch(l);
  }

  void runAdamW(const KernelCall &call) {
    cpu::checkCall(call, 5, 3);
    const TensorView &p = call.inputs[0];
    ElemType type = floatType(call, p, "input 0 (p)");
    static const char *const names[] = {"input 0", "input 1", "input 2",
                                        "input 3", "input 4"};
    for (int i = 1; i < 4; ++i)
      cpu::checkSameType(call.kind, call.inputs[i], names[i], p,
                         "input 0 (p)");
    cpu::checkShape(call.kind, call.inputs[4], "input 4", {});
    cpu::checkDType(call.kind, call.inputs[4], "input 4", p.dtype);
    static const char *const outs[] = {"output 0", "output 1", "output 2"};
    for (int o = 0; o < 3; ++o)
      cpu::checkSameType(call.kind, call.outputs[o], outs[o], p,
                         "input 0 (p)");
    cpu::checkNoOverlap(call, /*allowExactAlias=*/true);
    const KernelAttrs &a = call.attrs;
    auto check = [&](const char *name, double v, bool ok, const char *range) {
      if (!ok || !std::isfinite(v))
        fail(call.kind, std::string(name) + " must be finite and " + range +
                            ", got " + std::to_string(v));
    };
    check("lr", a.lr, a.lr >= 0, ">= 0");
    check("beta1", a.beta1, a.beta1 >= 0 && a.beta1 < 1, "in [0, 1)");
    check("beta2", a.beta2, a.beta2 >= 0 && a.beta2 < 1, "in [0, 1)");
    check("eps", a.eps, a.eps > 0, "> 0");
    check("weightDecay", a.weightDecay, a.weightDecay >= 0, ">= 0");
    KernelLaunch l = elementwiseLaunch(p.numElements());
    KernelParams &k = l.params;
    k.kernel = GpuKernel::AdamW;
    k.type = type;
    double attrs[] = {a.lr, a.beta1, a.beta2, a.eps, a.weightDecay};
    std::copy(std::begin(attrs), std::end(attrs), k.a);
    for (int i = 0; i < 5; ++i)
      k.in[i] = call.inputs[i].data;
    for (int o = 0; o < 3; ++o)
      k.out[o] = call.outputs[o].data;
    launch(l);
  }

  /// The pointers the kernel reads may be exactly the ones it writes (p'
  /// over p, buf' over buf): each element reads every input first.
  void runSgd(const KernelCall &call) {
    cpu::checkCall(call, 3, 2);
    const TensorView &p = call.inputs[0];
    ElemType type = floatType(call, p, "input 0 (p)");
    cpu::checkSameType(call.kind, call.inputs[1], "input 1", p, "input 0 (p)");
    cpu::checkSameType(call.kind, call.inputs[2], "input 2", p, "input 0 (p)");
    cpu::checkSameType(call.kind, call.outputs[0], "output 0", p,
                       "input 0 (p)");
    cpu::checkSameType(call.kind, call.outputs[1], "output 1", p,
                       "input 0 (p)");
    cpu::checkNoOverlap(call, /*allowExactAlias=*/true);
    const KernelAttrs &a = call.attrs;
    auto check = [&](const char *name, double v) {
      if (!(v >= 0) || !std::isfinite(v))
        fail(call.kind, std::string(name) + " must be finite and >= 0, got " +
                            std::to_string(v));
    };
    check("lr", a.lr);
    check("momentum", a.momentum);
    check("weightDecay", a.weightDecay);
    KernelLaunch l = elementwiseLaunch(p.numElements());
    KernelParams &k = l.params;
    k.kernel = GpuKernel::Sgd;
    k.type = type;
    k.a[0] = a.lr;
    k.a[1] = a.momentum;
    k.a[2] = a.weightDecay;
    for (int i = 0; i < 3; ++i)
      k.in[i] = call.inputs[i].data;
    k.out[0] = call.outputs[0].data;
    k.out[1] = call.outputs[1].data;
    launch(l);
  }

  void runEinsum(const KernelCall &call) {
    cpu::checkCall(call, call.inputs.size(), 1);
    if (call.inputs.empty())
      fail(call.kind, "needs at least one input");
    for (size_t i = 0; i < call.inputs.size(); ++i)
      if (call.inputs[i].dtype != call.outputs[0].dtype)
        fail(call.kind, "input " + std::to_string(i) + " has dtype " +
                            toString(call.inputs[i].dtype) +
                            " but output 0 has " +
                            toString(call.outputs[0].dtype));
    cpu::checkNoOverlap(call, /*allowExactAlias=*/false);
    EinsumGemm plan = planEinsum(call);
    if (!plan.ok)
      fail(call.kind, "spec \"" + call.attrs.spec +
                          "\" is not one GEMM, which is all the cuda backend "
                          "has ported (" +
                          plan.why + ")");
    const GemmDesc &g = plan.desc;
    if (g.m == 0 || g.n == 0 || g.batch == 0)
      return;
    if (g.k == 0) {
      // An empty contraction: zeros (cuBLASLt rejects k = 0).
      dev->zero(g.c, call.outputs[0].numBytes(), api->computeStream());
      return;
    }
    api->gemm(g, api->computeStream());
  }

  /// Device scratch of at least `count` elements, kept for later calls
  /// (work on the one compute stream is ordered, so reuse is safe).
  template <typename T> T *workspace(int64_t count) {
    size_t bytes = size_t(count) * sizeof(T);
    if (bytes > workspaceBytes) {
      api->computeStream().synchronize();
      scratch.reset();
      scratch = dev->allocateBuffer(bytes);
      workspaceBytes = bytes;
    }
    return reinterpret_cast<T *>(scratch.get());
  }

  std::unique_ptr<GpuApi> api;
  std::unique_ptr<Device> dev;
  int blockSize;
  DeviceBuffer scratch;
  size_t workspaceBytes = 0;
};

} // namespace

std::unique_ptr<Backend> createCudaBackend(const CudaBackendOptions &options) {
  if (options.blockSize < 32 || options.blockSize > 1024 ||
      options.blockSize % 32 != 0)
    throw Error("cuda backend: block size " +
                std::to_string(options.blockSize) +
                " is not a multiple of 32 in [32, 1024]");
  std::unique_ptr<GpuApi> api;
  if (options.emulate) {
    EmulatedApiOptions emu;
    emu.emulator.checkRaces = options.checkRaces;
    api = createEmulatedApi(emu);
  } else {
    api = createCudaApi(options.device);
  }
  return std::make_unique<CudaBackend>(std::move(api), options);
}

std::string cudaDeviceError() {
  std::string error;
  int count = gpu::cudaDeviceCount(error);
  if (count < 0)
    return error;
  if (count == 0)
    return "no CUDA device is present";
  return "";
}

bool cudaBuiltIn() { return gpu::builtWithCuda(); }

} // namespace partita::runtime
