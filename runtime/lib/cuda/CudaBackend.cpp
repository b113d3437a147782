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
// (softmax, layer_norm, cross_entropy) one block per row, at most 4096;
// attention one block per tile of query (or key) rows, at most 256 threads;
// a reduction over the rows of [rows, columns] (a bias's gradient) two
// passes over row chunks and 32-column tiles.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/CudaBackend.h"

#include "runtime/lib/cpu/CpuKernels.h"
#include "runtime/lib/cuda/GpuApi.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <tuple>
#include <vector>

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

class CudaBackend final : public Backend {
public:
  CudaBackend(std::unique_ptr<GpuApi> api, const CudaBackendOptions &options)
      : api(std::move(api)), dev(createGpuDevice(*this->api)),
        blockSize(options.blockSize), tf32(options.tf32),
        attention(options.attention) {}
  ~CudaBackend() override {
    // Nothing queued may outlive the workspace it writes.
    try {
      api->computeStream().synchronize();
    } catch (const std::exception &) {
    }
  }

  const char *name() const override { return "cuda"; }
  Device &device() override { return *dev; }

  /// Faults in data that the kernels found and recorded in their slots
  /// (recordBadIndex): the first slot that holds one, as the cpu backend
  /// words it. Reads the slots once a step (one small copy) when a kernel
  /// that records has ever run, and clears them.
  void checkDeviceErrors() override {
    if (faultSlots.empty())
      return;
    std::vector<uint64_t> words(faultSlots.size());
    size_t bytes = words.size() * sizeof(uint64_t);
    dev->copyToHost(words.data(), faultWords.get(), bytes,
                    api->computeStream());
    for (size_t i = 0; i < words.size(); ++i) {
      if (words[i] == 0)
        continue;
      std::vector<uint64_t> zeros(words.size(), 0);
      dev->copyFromHost(faultWords.get(), zeros.data(), bytes,
                        api->computeStream());
      uint64_t key = ~words[i];
      const FaultSlot &slot = faultSlots[i];
      auto clamped = [](uint64_t v) {
        return v == 0xFFFFFFFFull ? std::to_string(v) + " or more"
                                  : std::to_string(v);
      };
      std::string where = clamped(key >> 32);
      const char *found = " (found on the device after the step; ";
      switch (slot.fault) {
      case Fault::LabelOutOfRange:
        fail(slot.kind, "label " + clamped(key & 0xFFFFFFFFull) +
                            " of token " + where + " is outside [0, " +
                            std::to_string(slot.bound) + ")" + found +
                            "the loss is NaN)");
      case Fault::DivisionByZero:
        fail(slot.kind, "integer division by zero at element " + where +
                            found + "the result there is 0)");
      case Fault::DivisionOverflow:
        fail(slot.kind,
             "integer division overflows at element " + where + " (" +
                 (slot.bound == 32
                      ? std::to_string(std::numeric_limits<int32_t>::min())
                      : std::to_string(std::numeric_limits<int64_t>::min())) +
                 " / -1)" + found + "the result there wraps to the minimum)");
      case Fault::BadStep: {
        float step = half::floatOf(uint32_t(key & 0xFFFFFFFFull));
        fail(slot.kind, "input 4 (step) must hold the step number t >= 1 (the "
                        "step function increments it before the update), got " +
                            std::to_string(double(step)) + found +
                            "the update there is not finite)");
      }
      }
    }
  }

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
                            int(binaryOp(call.kind)), /*ints=*/true);
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
    case KernelKind::LayerNormGammaGrad:
      return runLayerNormGammaGrad(call);
    case KernelKind::Rotary:
    case KernelKind::RotaryGrad:
      return runRotary(call);
    case KernelKind::Convert:
      return runConvert(call);
    case KernelKind::Attention:
      return runAttention(call);
    case KernelKind::AttentionGrad:
      return runAttentionGrad(call);
    default:
      throw Error(std::string("cuda backend: kernel kind '") +
                  toString(call.kind) +
                  "' is not ported to the cuda backend yet (ported: einsum, "
                  "add, sub, mul, div, max (also i32/i64), the unary ops, "
                  "relu/silu/gelu grads, greater_equal, broadcast, transpose, "
                  "reshape, fill, convert, reduce_sum/max/mean, softmax, "
                  "layer_norm, rms_norm and their grads, rotary and its "
                  "grad, embedding and its grad, cross_entropy and its grad, "
                  "attention and its grad, sgd, adamw)");
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
                      int op, bool ints = false) {
    cpu::checkCall(call, inputs, 1);
    const TensorView &out = call.outputs[0];
    for (size_t i = 0; i < inputs; ++i)
      cpu::checkSameType(call.kind, call.inputs[i],
                         i ? "input 1" : "input 0", out, "output 0");
    cpu::checkNoOverlap(call, /*allowExactAlias=*/true);
    KernelLaunch l = elementwiseLaunch(out.numElements());
    l.params.kernel = kernel;
    if (ints && out.dtype == DType::I32)
      l.params.type = ElemType::I32;
    else if (ints && out.dtype == DType::I64)
      l.params.type = ElemType::I64;
    else
      l.params.type = floatType(call, out, "output 0");
    l.params.op = op;
    bool vec = l.params.type == ElemType::F32 || l.params.type == ElemType::F64;
    for (size_t i = 0; i < inputs; ++i) {
      l.params.in[i] = call.inputs[i].data;
      vec = vec && aligned16(l.params.in[i]);
    }
    l.params.out[0] = out.data;
    if (kernel == GpuKernel::Binary && op == int(BinaryOp::Div) &&
        (l.params.type == ElemType::I32 || l.params.type == ElemType::I64)) {
      int64_t bits = l.params.type == ElemType::I32 ? 32 : 64;
      l.params.out[1] = faultSlot(Fault::DivisionByZero, call.kind, bits);
      l.params.out[2] = faultSlot(Fault::DivisionOverflow, call.kind, bits);
    }
    int64_t group = 16 / int64_t(sizeOf(out.dtype));
    if (vec && aligned16(out.data) && l.params.n % group == 0) {
      // Each thread takes 16-byte groups (Kernels.h, elementwise).
      l.params.vec16 = true;
      l.grid = elementwiseLaunch(l.params.n / group).grid;
    }
    launch(l);
  }

  static bool aligned16(const void *data) {
    return reinterpret_cast<uintptr_t>(data) % 16 == 0;
  }

  void runStrided(const KernelCall &call, const std::vector<int64_t> &shape,
                  const std::vector<int64_t> &strides) {
    stridedCopy(call, call.inputs[0].data, call.outputs[0].data,
                sizeOf(call.inputs[0].dtype), shape, strides);
  }

  /// out (contiguous, `shape`) = in at `strides` (elements of `bytes`).
  void stridedCopy(const KernelCall &call, const void *in, void *out,
                   size_t bytes, const std::vector<int64_t> &shape,
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
    KernelLaunch l = elementwiseLaunch(cpu::product(shape, 0, shape.size()));
    KernelParams &p = l.params;
    p.kernel = GpuKernel::Strided;
    p.type = bitsType(bytes);
    p.rank = int(merged.size());
    std::copy(merged.begin(), merged.end(), p.shape);
    std::copy(mergedStrides.begin(), mergedStrides.end(), p.inStride);
    // 32-bit index arithmetic when every index and input offset fits.
    int64_t lastOffset = 0;
    for (size_t d = 0; d < merged.size(); ++d)
      lastOffset += (merged[d] - 1) * mergedStrides[d];
    p.index32 = l.params.n < (int64_t(1) << 31) &&
                lastOffset < (int64_t(1) << 31);
    p.in[0] = in;
    p.out[0] = out;
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
    runStrided(call, out.shape,
               cpu::broadcastStrides(call.kind, in, "input 0", out,
                                     call.attrs.dims));
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
    int64_t hidden = cpu::checkNormGrad(call);
    const TensorView &x = call.inputs[0], &dx = call.outputs[0];
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

  /// layer_norm_gamma_grad (x, dy -> dgamma[H]), the cpu backend's checks:
  /// the rows' statistics (LayerNorm op 1), then the column sums of
  /// dy * xhat (runColumnReduce, op 2); both in the workspace.
  void runLayerNormGammaGrad(const KernelCall &call) {
    int64_t hidden = cpu::checkLayerNormGammaGrad(call);
    const TensorView &x = call.inputs[0], &dy = call.inputs[1],
                     &out = call.outputs[0];
    ElemType type = floatType(call, x, "input 0");
    int64_t rows = hidden ? x.numElements() / hidden : 0;
    if (hidden == 0)
      return;
    if (rows == 0) {
      // A sum over no rows.
      KernelLaunch l = elementwiseLaunch(hidden);
      l.params.kernel = GpuKernel::Fill;
      l.params.type = sizeOf(x.dtype) == 8 ? ElemType::U64 : ElemType::U32;
      l.params.n = hidden;
      l.params.bits = 0;
      l.params.out[0] = out.data;
      launch(l);
      return;
    }
    int64_t chunks = columnChunks(hidden, rows).second;
    // Partials first (8-byte aligned), then the statistics.
    int64_t partialBytes = chunks * hidden * int64_t(sizeof(double));
    char *base = workspace<char>(partialBytes +
                                 2 * rows * int64_t(sizeOf(x.dtype)));
    void *stats = base + partialBytes;
    KernelLaunch l = rowLaunch(rows);
    l.params.kernel = GpuKernel::LayerNorm;
    l.params.type = type;
    l.params.op = 1;
    l.params.cols = hidden;
    l.params.a[0] = call.attrs.epsilon;
    l.params.in[0] = x.data;
    l.params.out[0] = stats;
    launch(l);
    KernelParams p;
    p.type = type;
    p.op = 2;
    p.a[0] = 1.0;
    p.in[0] = x.data;
    p.in[1] = dy.data;
    p.in[2] = stats;
    p.out[0] = out.data;
    runColumnReduce(p, hidden, rows, reinterpret_cast<double *>(base));
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

  /// embedding_grad without atomics, deterministic, tokens + rows x
  /// log(tokens) work: (row, token) pairs (a sentinel row for ids the shard
  /// does not hold), a stable sort by row (the device layer's sortPairs),
  /// then one block per dtable row summing its tokens' dy rows in token
  /// order, the cpu backend's order.
  void runEmbeddingGrad(const KernelCall &call) {
    cpu::checkCall(call, 2, 1);
    const TensorView &dy = call.inputs[0], &ids = call.inputs[1],
                     &out = call.outputs[0];
    ElemType type = checkEmbedding(call, out, "output 0 (dtable)", dy,
                                   "input 0 (dy)", /*tableIsInput=*/false);
    int64_t rows = out.shape[0], tokens = ids.numElements();
    if (out.numElements() == 0)
      return;
    if (rows >= int64_t(UINT32_MAX) || tokens >= int64_t(INT32_MAX))
      fail(call.kind, "the cuda kernel sorts 32-bit (row, token) pairs: " +
                          std::to_string(rows) + " rows and " +
                          std::to_string(tokens) + " tokens do not fit");
    int keyBits = 1;
    while (keyBits < 32 && (uint64_t(1) << keyBits) <= uint64_t(rows))
      ++keyBits; // the sentinel `rows` must fit too
    uint32_t *keys = workspace<uint32_t>(4 * std::max<int64_t>(tokens, 1));
    uint32_t *values = keys + tokens, *sortedKeys = keys + 2 * tokens,
             *sortedValues = keys + 3 * tokens;
    if (tokens > 0) {
      KernelLaunch pairs = elementwiseLaunch(tokens);
      pairs.params.kernel = GpuKernel::EmbeddingKeys;
      pairs.params.type = ElemType::F32;
      pairs.params.inner = rows;
      pairs.params.wideLabels = ids.dtype == DType::I64;
      pairs.params.a[0] = double(call.attrs.vocabOffset);
      pairs.params.in[1] = ids.data;
      pairs.params.out[0] = keys;
      pairs.params.out[1] = values;
      launch(pairs);
      api->sortPairs(keys, sortedKeys, values, sortedValues, tokens, keyBits,
                     api->computeStream());
    }
    KernelLaunch l = rowLaunch(rows);
    KernelParams &p = l.params;
    p.kernel = GpuKernel::EmbeddingGrad;
    p.type = type;
    p.cols = out.shape[1];
    p.inner = tokens;
    p.in[0] = dy.data;
    p.in[1] = sortedKeys;
    p.in[2] = sortedValues;
    p.out[0] = out.data;
    launch(l);
  }

  /// rotary and rotary_grad: x [batch, seq, heads, head_dim], one thread
  /// per pair; the cpu backend's checks.
  void runRotary(const KernelCall &call) {
    cpu::checkCall(call, 1, 1);
    const TensorView &x = call.inputs[0], &y = call.outputs[0];
    cpu::checkSameType(call.kind, x, "input 0", y, "output 0");
    cpu::checkNoOverlap(call, /*allowExactAlias=*/false);
    if (x.rank() != 4)
      fail(call.kind, "input 0 must be [batch, seq, heads, head_dim], got " +
                          cpu::typeToString(x));
    int64_t headDim = x.shape[3];
    if (headDim % 2 != 0)
      fail(call.kind, "head_dim must be even, got " + std::to_string(headDim));
    cpu::checkPositiveFinite(call.kind, "theta", call.attrs.theta);
    if (call.attrs.positionOffset < 0)
      fail(call.kind, "positionOffset must be >= 0, got " +
                          std::to_string(call.attrs.positionOffset));
    if (x.numElements() == 0)
      return;
    KernelLaunch l = elementwiseLaunch(x.numElements() / 2);
    KernelParams &p = l.params;
    p.in[1] = rotaryTable(x.shape[1], headDim, call.attrs.theta,
                          call.attrs.positionOffset);
    p.kernel = GpuKernel::Rotary;
    p.type = floatType(call, x, "input 0");
    p.op = call.kind == KernelKind::RotaryGrad ? 1 : 0;
    p.cols = headDim;
    p.shape[0] = x.shape[1];
    p.shape[1] = x.shape[2];
    p.shape[2] = headDim / 2;
    p.in[0] = x.data;
    p.out[0] = y.data;
    launch(l);
  }

  /// cos and sin of the rotary angles of `seq` positions from `offset`
  /// (the cpu backend's formula and libm calls, in double) on the device,
  /// kept per (seq, headDim, theta, offset): every layer reuses them.
  const double *rotaryTable(int64_t seq, int64_t headDim, double theta,
                            int64_t offset) {
    auto key = std::make_tuple(seq, headDim, theta, offset);
    auto found = rotaryTables.find(key);
    if (found != rotaryTables.end())
      return reinterpret_cast<const double *>(found->second.get());
    int64_t half = headDim / 2;
    std::vector<double> host(size_t(2 * seq * half));
    for (int64_t s = 0; s < seq; ++s) {
      double pos = static_cast<double>(offset + s);
      for (int64_t i = 0; i < half; ++i) {
        double angle = pos * std::pow(theta, -2.0 * i / headDim);
        host[s * half + i] = std::cos(angle);
        host[seq * half + s * half + i] = std::sin(angle);
      }
    }
    DeviceBuffer table =
        dev->allocateBuffer(std::max<size_t>(host.size(), 1) * sizeof(double));
    dev->copyFromHost(table.get(), host.data(), host.size() * sizeof(double),
                      api->computeStream());
    const double *ptr = reinterpret_cast<const double *>(table.get());
    rotaryTables.emplace(key, std::move(table));
    return ptr;
  }

  /// convert: the cpu backend's pairs and checks; the same type is a copy.
  void runConvert(const KernelCall &call) {
    cpu::checkConvert(call);
    const TensorView &x = call.inputs[0], &y = call.outputs[0];
    DType from = x.dtype, to = y.dtype;
    if (from == to) {
      if (x.data != y.data)
        api->copy(y.data, x.data, x.numBytes(), api->computeStream());
      return;
    }
    struct Pair {
      DType from, to;
      ConvertOp op;
    } pairs[] = {{DType::F32, DType::F64, ConvertOp::F32ToF64},
                 {DType::F64, DType::F32, ConvertOp::F64ToF32},
                 {DType::F32, DType::F16, ConvertOp::F32ToF16},
                 {DType::F32, DType::BF16, ConvertOp::F32ToBF16},
                 {DType::F16, DType::F32, ConvertOp::F16ToF32},
                 {DType::BF16, DType::F32, ConvertOp::BF16ToF32},
                 {DType::F16, DType::F64, ConvertOp::F16ToF64},
                 {DType::BF16, DType::F64, ConvertOp::BF16ToF64}};
    for (const Pair &pair : pairs)
      if (pair.from == from && pair.to == to) {
        KernelLaunch l = elementwiseLaunch(x.numElements());
        l.params.kernel = GpuKernel::Convert;
        l.params.type = ElemType::F32;
        l.params.op = int(pair.op);
        l.params.in[0] = x.data;
        l.params.out[0] = y.data;
        launch(l);
        return;
      }
    fail(call.kind, std::string("converting ") + toString(from) + " to " +
                        toString(to) +
                        " is not supported (the cuda backend, as the cpu "
                        "backend, converts f32 <-> f64, f32 <-> f16, f32 <-> "
                        "bf16, and f16 or bf16 to f64)");
  }

  void runRowNorm(const KernelCall &call) {
    bool layer = call.kind == KernelKind::LayerNorm;
    int inputs = layer ? 3 : 2;
    int64_t hidden = cpu::checkNorm(call, /*hasBeta=*/layer);
    const TensorView &x = call.inputs[0], &y = call.outputs[0];
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

  /// Whether rows of `cols` elements of x (and of y, when given) may be read
  /// (written) 16 bytes at a time (KernelParams::vec16): every row starts
  /// 16-byte aligned and is whole groups.
  static bool wholeVec16Rows(const TensorView &x, int64_t cols,
                             const TensorView *y = nullptr) {
    return cols % (16 / int64_t(sizeOf(x.dtype))) == 0 && aligned16(x.data) &&
           (!y || aligned16(y->data));
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
    rows.params.vec16 = wholeVec16Rows(logits, rows.params.cols);
    rows.params.wideLabels = labels.dtype == DType::I64;
    rows.params.out[1] =
        faultSlot(Fault::LabelOutOfRange, kind, rows.params.cols);
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

  /// The row chunks of runColumnReduce: enough (chunk, 32-column tile)
  /// items for about kColumnItems blocks, at least kMinChunkRows rows a
  /// chunk. They depend on the shape alone, so results are deterministic.
  static std::pair<int64_t, int64_t> columnChunks(int64_t columns,
                                                  int64_t rows) {
    constexpr int64_t kColumnItems = 1024, kMinChunkRows = 32;
    int64_t tiles = (columns + kWarpSize - 1) / kWarpSize;
    int64_t wanted = (kColumnItems + tiles - 1) / tiles;
    int64_t chunkRows = std::max((rows + wanted - 1) / wanted, kMinChunkRows);
    return {chunkRows, (rows + chunkRows - 1) / chunkRows};
  }

  /// Reduces the rows of a row-major [rows, columns] input (params of a
  /// Reduce launch, or op 2: layer_norm_gamma_grad's terms) in row chunks
  /// (columnChunks), their partials in `partials` (chunks x columns
  /// doubles; null: the workspace).
  void runColumnReduce(const KernelParams &reduce, int64_t columns,
                       int64_t rows, double *partials = nullptr) {
    int64_t tiles = (columns + kWarpSize - 1) / kWarpSize;
    auto [chunkRows, chunks] = columnChunks(columns, rows);
    if (!partials)
      partials = workspace<double>(chunks * columns);
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
    p.in[1] = reduce.in[1];
    p.in[2] = reduce.in[2];
    p.out[0] = partials;
    launch(first);
    KernelLaunch second = elementwiseLaunch(columns);
    KernelParams &q = second.params;
    q.kernel = GpuKernel::ColumnCombine;
    q.type = reduce.type;
    q.op = reduce.op == 1 ? 1 : 0;
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
    p.vec16 = wholeVec16Rows(logits, p.cols, &out);
    p.wideLabels = labels.dtype == DType::I64;
    p.out[1] = faultSlot(Fault::LabelOutOfRange, kind, p.cols);
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
    k.in[5] = a.lrOnDevice;
    for (int o = 0; o < 3; ++o)
      k.out[o] = call.outputs[o].data;
    k.out[3] = faultSlot(Fault::BadStep, call.kind, 0);
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
    k.in[3] = a.lrOnDevice;
    k.out[0] = call.outputs[0].data;
    k.out[1] = call.outputs[1].data;
    launch(l);
  }

  //===--------------------------------------------------------------===//
  // einsum (issue 17, h17ops): GEMM descriptors over grouped dimensions
  //===--------------------------------------------------------------===//
  //
  // Letters of size 1 are dropped (they change no layout). A letter in one
  // operand only and not in the result is summed away first (the reduce
  // kernel, into scratch). The rest fall into batch (both operands and the
  // result), free-left, free-right (one operand and the result) and
  // contracted (both operands, not the result). Each class is one GEMM
  // dimension when its letters are adjacent and contiguous in memory in
  // every tensor that has them, in one order (bsh,hnd->bsnd: rows "bs",
  // columns "nd", contracted "h"); a stride-1 class gives the transpose
  // flags and the other class the leading dimension, and the batch class
  // one batch stride. An operand that does not group is copied into [batch,
  // free, contracted] order first (the strided copy kernel), a result that
  // does not group is written to [batch, rows, columns] scratch and copied
  // into place. One operand: the reduce kernel (a sum, the kept letters in
  // the result's order) or the strided copy (a permutation). An addend (a
  // third input, broadcast by `dims` as the cpu kernel's) is copied into
  // the output first, unless the output is the addend, and the GEMM
  // accumulates onto it (beta = 1); a result written through scratch is
  // permuted into more scratch and added (the binary kernel).

  /// A tensor of the einsum: its letters (size-1 ones dropped) and their
  /// element strides.
  struct EinsumView {
    const void *data = nullptr;
    std::string term;
    int64_t stride[128] = {};
  };

  /// Scratch of an einsum: a first pass counts the bytes (dry), the second
  /// hands out the same offsets in the workspace and launches.
  struct EinsumScratch {
    bool dry = true;
    char *base = nullptr;
    size_t used = 0;
    void *take(size_t bytes) {
      void *p = base + used;
      used += (bytes + 255) / 256 * 256;
      return p;
    }
  };

  static bool inTerm(const std::string &t, char c) {
    return t.find(c) != std::string::npos;
  }

  EinsumView einsumView(const TensorView &v, const std::string &term,
                        const int64_t *size) {
    EinsumView out;
    out.data = v.data;
    std::vector<int64_t> strides = cpu::rowMajorStrides(v.shape);
    for (size_t i = 0; i < term.size(); ++i)
      if (size[(unsigned char)term[i]] != 1) {
        out.term += term[i];
        out.stride[(unsigned char)term[i]] = strides[i];
      }
    return out;
  }

  /// A contiguous copy of `letters` (a subset of v's, the rest summed) in
  /// that order, on scratch.
  EinsumView einsumCopy(const KernelCall &call, const EinsumView &v,
                        const std::string &letters, const int64_t *size,
                        ElemType type, size_t bytes, EinsumScratch &scratch) {
    int64_t count = 1;
    for (char c : letters)
      count *= size[(unsigned char)c];
    EinsumView out;
    out.term = letters;
    int64_t stride = 1;
    for (size_t i = letters.size(); i-- > 0;) {
      out.stride[(unsigned char)letters[i]] = stride;
      stride *= size[(unsigned char)letters[i]];
    }
    void *dst = scratch.take(size_t(count) * bytes);
    out.data = dst;
    if (!scratch.dry)
      einsumMove(call, v, letters, dst, size, type, bytes);
    return out;
  }

  /// dst (contiguous in `letters` order) = v summed over its letters not in
  /// `letters`, or permuted when it has no others.
  void einsumMove(const KernelCall &call, const EinsumView &v,
                  const std::string &letters, void *dst, const int64_t *size,
                  ElemType type, size_t bytes) {
    std::vector<int64_t> shape, strides;
    for (char c : letters) {
      shape.push_back(size[(unsigned char)c]);
      strides.push_back(v.stride[(unsigned char)c]);
    }
    std::string summed;
    for (char c : v.term)
      if (!inTerm(letters, c))
        summed += c;
    if (summed.empty())
      return stridedCopy(call, v.data, dst, bytes, shape, strides);
    if (letters.size() > size_t(kMaxRank) || summed.size() > size_t(kMaxRank))
      fail(call.kind, "more than " + std::to_string(kMaxRank) +
                          " kept or summed letters (the cuda kernel's limit)");
    int64_t outCount = cpu::product(shape, 0, shape.size());
    KernelLaunch l = rowLaunch(outCount);
    KernelParams &p = l.params;
    p.kernel = GpuKernel::Reduce;
    p.type = type;
    p.op = 0;
    p.a[0] = 1.0;
    p.rank = int(letters.size());
    for (int i = 0; i < p.rank; ++i) {
      p.shape[i] = shape[i];
      p.inStride[i] = strides[i];
    }
    int64_t count = 1;
    p.redRank = int(summed.size());
    for (int i = 0; i < p.redRank; ++i) {
      p.redShape[i] = size[(unsigned char)summed[i]];
      p.redStride[i] = v.stride[(unsigned char)summed[i]];
      count *= p.redShape[i];
    }
    p.cols = count;
    p.in[0] = v.data;
    p.out[0] = dst;
    launch(l);
  }

  /// Whether `group`'s letters are adjacent and contiguous in v, in that
  /// order; sets its element count and the stride of its last letter (0
  /// for an empty group).
  static bool einsumGroup(const EinsumView &v, const std::string &group,
                          const int64_t *size, int64_t &count,
                          int64_t &stride) {
    count = 1;
    stride = 0;
    for (size_t i = 0; i < group.size(); ++i) {
      unsigned char c = group[i];
      count *= size[c];
      if (i + 1 < group.size()) {
        unsigned char next = group[i + 1];
        if (v.stride[c] != v.stride[next] * size[next])
          return false;
      }
    }
    if (!group.empty())
      stride = v.stride[(unsigned char)group.back()];
    return true;
  }

  /// A matrix of `rows` x `cols` with the given strides as a GEMM operand:
  /// columns contiguous (no transpose, ld the row stride) or rows
  /// contiguous (transposed, ld the column stride).
  static bool einsumMatrix(int64_t rows, int64_t cols, int64_t rowStride,
                           int64_t colStride, bool &trans, int64_t &ld) {
    if (cols <= 1)
      colStride = 1;
    if (rows <= 1)
      rowStride = colStride == 1 ? std::max<int64_t>(cols, 1) : 1;
    if (colStride == 1 && rowStride >= std::max<int64_t>(cols, 1)) {
      trans = false;
      ld = rowStride;
      return true;
    }
    if (rowStride == 1 && colStride >= std::max<int64_t>(rows, 1)) {
      trans = true;
      ld = colStride;
      return true;
    }
    return false;
  }

  void runEinsum(const KernelCall &call) {
    // The call, spec and letter sizes checked as the cpu kernel checks them.
    cpu::EinsumCheck checked = cpu::checkEinsum(call);
    const std::string &spec = call.attrs.spec;
    bool accumulate = call.inputs.size() == 3;
    // The operands, without the addend.
    KernelCall operands = call;
    if (accumulate)
      operands.inputs.pop_back();
    std::vector<std::string> terms = checked.spec.terms;
    terms.push_back(checked.spec.result);
    const int64_t *size = checked.size.data();
    const std::vector<int64_t> &addendStrides = checked.addendStrides;
    const TensorView &out = call.outputs[0];
    // bf16 and f16 run as GEMMs with f32 accumulation (cuBLASLt; the
    // emulator widens the operands), but the copy kernels are f32/f64 only:
    // a 16-bit einsum must be one GEMM over its tensors as they are.
    bool half = out.dtype == DType::BF16 || out.dtype == DType::F16;
    ElemType type = half ? ElemType::F32 : floatType(call, out, "output 0");
    if (half && operands.inputs.size() != 2)
      fail(call.kind, std::string("spec \"") + spec + "\": a " +
                          toString(out.dtype) +
                          " einsum of one operand is not supported (f32 and "
                          "f64 are)");
    if (out.numElements() == 0)
      return;
    if (accumulate && call.inputs[2].data != out.data)
      stridedCopy(call, call.inputs[2].data, out.data, sizeOf(out.dtype),
                  out.shape, addendStrides);
    for (const TensorView &in : operands.inputs)
      if (in.numElements() == 0) {
        // A summed or contracted letter of size 0: an empty sum.
        if (!accumulate)
          dev->zero(out.data, out.numBytes(), api->computeStream());
        return;
      }
    // Count the scratch, then run with it.
    EinsumScratch scratch;
    einsumPlan(operands, terms, size, type, accumulate, scratch);
    if (half && scratch.used != 0)
      fail(call.kind, std::string("spec \"") + spec + "\": a " +
                          toString(out.dtype) +
                          " einsum must be one GEMM over its operands as they "
                          "are laid out (f32 and f64 ones are copied into "
                          "place first)");
    if (scratch.used == 0) {
      scratch.dry = false;
      einsumPlan(operands, terms, size, type, accumulate, scratch);
      return;
    }
    size_t bytes = scratch.used;
    scratch = EinsumScratch();
    scratch.dry = false;
    scratch.base = workspace<char>(int64_t(bytes));
    einsumPlan(operands, terms, size, type, accumulate, scratch);
  }

  /// `call` without its addend; `accumulate`: the output holds the addend.
  void einsumPlan(const KernelCall &call,
                  const std::vector<std::string> &terms, const int64_t *size,
                  ElemType type, bool accumulate, EinsumScratch &scratch) {
    size_t bytes = sizeOf(call.outputs[0].dtype);
    const TensorView &out = call.outputs[0];
    EinsumView c = einsumView(out, terms.back(), size);
    const std::string &r = c.term;
    if (call.inputs.size() == 1) {
      EinsumView a = einsumView(call.inputs[0], terms[0], size);
      if (!scratch.dry)
        einsumMove(call, a, r, out.data, size, type, bytes);
      return;
    }
    EinsumView ops[2] = {einsumView(call.inputs[0], terms[0], size),
                         einsumView(call.inputs[1], terms[1], size)};
    // Sum away letters only one operand has.
    for (int i = 0; i < 2; ++i) {
      std::string kept;
      for (char ch : ops[i].term)
        if (inTerm(ops[1 - i].term, ch) || inTerm(r, ch))
          kept += ch;
      if (kept != ops[i].term)
        ops[i] = einsumCopy(call, ops[i], kept, size, type, bytes, scratch);
    }
    const std::string &ta = ops[0].term, &tb = ops[1].term;
    std::string batch, freeA, freeB, kA, kB;
    for (char ch : r) {
      if (inTerm(ta, ch) && inTerm(tb, ch))
        batch += ch;
      else if (inTerm(ta, ch))
        freeA += ch;
      else
        freeB += ch;
    }
    for (char ch : ta)
      if (inTerm(tb, ch) && !inTerm(r, ch))
        kA += ch;
    for (char ch : tb)
      if (inTerm(ta, ch) && !inTerm(r, ch))
        kB += ch;
    int64_t n0, s0;
    std::string k = einsumGroup(ops[0], kA, size, n0, s0) ? kA : kB;
    // The operands as [batch][rows][contracted] and [batch][contracted]
    // [columns]; copies for those that do not group.
    struct Side {
      int64_t batchStride, rows, cols, rowStride, colStride;
    };
    auto side = [&](const EinsumView &v, const std::string &rowsG,
                    const std::string &colsG, Side &sd) {
      int64_t nb;
      return einsumGroup(v, batch, size, nb, sd.batchStride) &&
             einsumGroup(v, rowsG, size, sd.rows, sd.rowStride) &&
             einsumGroup(v, colsG, size, sd.cols, sd.colStride);
    };
    Side sa, sb, sc;
    bool trA = false, trB = false;
    int64_t ldA = 0, ldB = 0;
    if (!side(ops[0], freeA, k, sa) ||
        !einsumMatrix(sa.rows, sa.cols, sa.rowStride, sa.colStride, trA,
                      ldA)) {
      ops[0] = einsumCopy(call, ops[0], batch + freeA + k, size, type, bytes,
                          scratch);
      side(ops[0], freeA, k, sa);
    }
    if (!side(ops[1], k, freeB, sb) ||
        !einsumMatrix(sb.rows, sb.cols, sb.rowStride, sb.colStride, trB,
                      ldB)) {
      ops[1] = einsumCopy(call, ops[1], batch + k + freeB, size, type, bytes,
                          scratch);
      side(ops[1], k, freeB, sb);
    }
    // The result: [batch][rows][columns] directly, or its transpose
    // (C^T = B^T A^T: the operands swap), else scratch and a copy.
    EinsumView target = c;
    bool swap = false;
    bool direct = side(c, freeA, freeB, sc);
    bool trC = false;
    int64_t ldC = 0;
    if (direct && !(einsumMatrix(sc.rows, sc.cols, sc.rowStride,
                                 sc.colStride, trC, ldC) &&
                    !trC)) {
      direct = einsumMatrix(sc.cols, sc.rows, sc.colStride, sc.rowStride,
                            trC, ldC) &&
               !trC;
      swap = direct;
    }
    void *permuted = nullptr; // accumulating through scratch: the result
    if (!direct) {
      std::string order = batch + freeA + freeB;
      int64_t count = 1;
      for (char ch : order)
        count *= size[(unsigned char)ch];
      target = EinsumView();
      target.term = order;
      int64_t stride = 1;
      for (size_t i = order.size(); i-- > 0;) {
        target.stride[(unsigned char)order[i]] = stride;
        stride *= size[(unsigned char)order[i]];
      }
      target.data = scratch.take(size_t(count) * bytes);
      side(target, freeA, freeB, sc);
      if (accumulate)
        permuted = scratch.take(size_t(count) * bytes);
    }
    if (scratch.dry)
      return;
    GemmDesc g;
    g.type = call.outputs[0].dtype;
    g.tf32 = tf32 && g.type == DType::F32;
    int64_t batchCount = 1;
    for (char ch : batch)
      batchCount *= size[(unsigned char)ch];
    g.batch = batchCount;
    g.k = sa.cols;
    const Side &left = swap ? sb : sa, &right = swap ? sa : sb;
    const EinsumView &lv = swap ? ops[1] : ops[0], &rv = swap ? ops[0] : ops[1];
    // As [m, k] and [k, n]: the swapped left is B^T, the right A^T.
    bool okL = swap ? einsumMatrix(left.cols, left.rows, left.colStride,
                                   left.rowStride, g.transA, g.lda)
                    : einsumMatrix(left.rows, left.cols, left.rowStride,
                                   left.colStride, g.transA, g.lda);
    bool okR = swap ? einsumMatrix(right.cols, right.rows, right.colStride,
                                   right.rowStride, g.transB, g.ldb)
                    : einsumMatrix(right.rows, right.cols, right.rowStride,
                                   right.colStride, g.transB, g.ldb);
    bool okC = swap ? einsumMatrix(sc.cols, sc.rows, sc.colStride,
                                   sc.rowStride, trC, g.ldc)
                    : einsumMatrix(sc.rows, sc.cols, sc.rowStride,
                                   sc.colStride, trC, g.ldc);
    if (!okL || !okR || !okC || trC)
      fail(call.kind, "spec \"" + call.attrs.spec +
                          "\": internal error: no GEMM layout after the "
                          "copies");
    g.m = swap ? sc.cols : sc.rows;
    g.n = swap ? sc.rows : sc.cols;
    g.a = lv.data;
    g.b = rv.data;
    g.c = const_cast<void *>(target.data);
    g.strideA = batchCount > 1 ? left.batchStride : 0;
    g.strideB = batchCount > 1 ? right.batchStride : 0;
    g.strideC = batchCount > 1 ? sc.batchStride : 0;
    g.beta = accumulate && direct ? 1 : 0;
    if (g.k == 0) {
      if (g.beta == 0)
        dev->zero(g.c, size_t(batchCount * g.m * g.n) * bytes,
                  api->computeStream());
    } else {
      api->gemm(g, api->computeStream());
    }
    if (direct)
      return;
    if (!accumulate)
      return einsumMove(call, target, r, out.data, size, type, bytes);
    einsumMove(call, target, r, permuted, size, type, bytes);
    KernelLaunch l = elementwiseLaunch(out.numElements());
    l.params.kernel = GpuKernel::Binary;
    l.params.type = type;
    l.params.op = int(BinaryOp::Add);
    l.params.in[0] = out.data;
    l.params.in[1] = permuted;
    l.params.out[0] = out.data;
    launch(l);
  }

  /// A launch of an attention kernel (AttentionKernels.h) over tiles of
  /// query rows, or of key rows (`keyRows`: dk, dv): tpr threads a row, at
  /// most kAttnMaxBlock threads a block, staged tiles within 48 KiB of
  /// shared memory.
  KernelLaunch attentionLaunch(const KernelCall &call,
                               const cpu::AttentionDims &a, ElemType type,
                               GpuKernel kernel, bool keyRows) {
    int64_t elem = type == ElemType::F32 ? 4 : 8;
    int64_t dims = AttnTile<float>::kDims; // the same for double
    static_assert(AttnTile<float>::kDims == AttnTile<double>::kDims);
    if (a.headDim > kWarpSize * dims)
      fail(call.kind, "head_dim " + std::to_string(a.headDim) +
                          " is more than the cuda kernels' limit of " +
                          std::to_string(kWarpSize * dims) +
                          " (16 dimensions a thread, 32 threads a row)");
    int tpr = 1;
    while (tpr * dims < a.headDim)
      tpr *= 2;
    KernelLaunch l;
    l.block = std::min(blockSize, kAttnMaxBlock);
    int64_t rows = l.block / tpr *
                   (type == ElemType::F32 ? AttnTile<float>::kRows
                                          : AttnTile<double>::kRows),
            ldS = tpr * dims;
    int64_t seq = keyRows ? a.seqKV : a.seqQ;
    int64_t items = a.batch * (keyRows ? a.kvHeads : a.heads) *
                    ((seq + rows - 1) / rows);
    // Staged per row: two rows of ldS (k and v, or q and dO), and the three
    // statistics of a query row for dk / dv.
    int64_t perRow = (2 * ldS + (keyRows ? 3 : 0)) * elem;
    int64_t tile = std::min<int64_t>(kAttnMaxKeys, (48 << 10) / perRow);
    tile -= tile % kAttnChunk;
    l.sharedBytes = size_t(tile * perRow);
    l.grid = int(std::clamp<int64_t>(items, 1, kMaxGrid));
    KernelParams &p = l.params;
    setAttentionParams(p, call, a, elem);
    p.kernel = kernel;
    p.type = type;
    p.n = items;
    p.cols = tile;
    p.inner = tpr;
    return l;
  }

  /// What every attention kernel reads (AttnShape and AttnOperands,
  /// AttentionKernels.h): shape, scale, query offset, causal, the inputs q,
  /// k, v and dy (not the saved o and lse: no kernel reads them there),
  /// and bits 1 when head_dim and each of those allow 16-byte global loads
  /// of `elem`-byte elements.
  static void setAttentionParams(KernelParams &p, const KernelCall &call,
                                 const cpu::AttentionDims &a, int64_t elem) {
    int64_t shape[] = {a.batch, a.seqQ, a.seqKV, a.heads, a.kvHeads, a.headDim};
    std::copy(std::begin(shape), std::end(shape), p.shape);
    p.a[0] = a.scale;
    p.a[1] = double(call.attrs.queryOffset);
    p.a[2] = call.attrs.causal ? 1 : 0;
    bool vec = a.headDim % (16 / elem) == 0;
    for (int i = 0; i < int(std::min<size_t>(call.inputs.size(), 4)); ++i) {
      p.in[i] = call.inputs[i].data;
      vec = vec && aligned16(p.in[i]);
    }
    p.bits = vec ? 1 : 0;
  }

  /// attention, and with a second output its lse (each row's log-sum-exp,
  /// [batch, heads, seq_q]) in every path.
  void runAttention(const KernelCall &call) {
    cpu::AttentionCall checked = cpu::checkAttention(call);
    const cpu::AttentionDims &a = checked.dims;
    void *lse = checked.lse ? checked.lse->data : nullptr;
    const TensorView &q = call.inputs[0], &out = call.outputs[0];
    ElemType type = floatType(call, q, "input 0 (query)");
    if (out.numElements() == 0)
      return;
    if (a.seqKV == 0)
      fail(call.kind,
           "there are no keys (seq_kv is 0): the softmax is undefined");
    if (useTensorCores(a, type)) {
      KernelLaunch l =
          tensorAttentionLaunch(call, a, GpuKernel::AttentionMmaForward);
      l.params.op |= int(AttnMode::Output);
      l.params.out[0] = out.data;
      l.params.out[1] = lse;
      return launch(l);
    }
    if (attention != CudaAttention::Simt) {
      AttentionOutputs outs;
      outs.o = out.data;
      outs.lse = lse;
      return attentionByGemm(call, a, type, outs);
    }
    KernelLaunch l = attentionLaunch(call, a, type,
                                     GpuKernel::AttentionForward, false);
    l.params.op = int(AttnMode::Output);
    l.params.out[0] = out.data;
    l.params.out[1] = lse;
    launch(l);
  }

  /// Any of dq, dk and dv (attrs.wrt; cpu::checkAttentionGrad). By GEMMs
  /// (the default), P and dS are computed once for all of them. On CUDA
  /// cores (--attention simt): one launch of the per-row softmax statistics
  /// (a workspace of 3 x batch x heads x seq_q), then one gradient launch
  /// per output. On tensor cores: attentionGradByTensorCores. Every path
  /// reads the forward's saved O and lse when the call has them: its row
  /// statistics then come from one pass over dO and O
  /// (gradientStatsFromSaved) instead of a forward or a softmax.
  void runAttentionGrad(const KernelCall &call) {
    cpu::AttentionGradCall g = cpu::checkAttentionGrad(call);
    const cpu::AttentionDims &a = g.dims;
    const TensorView &q = call.inputs[0];
    KernelKind kind = call.kind;
    ElemType type = floatType(call, q, "input 0 (query)");
    bool anyOutput = false;
    for (const TensorView &out : call.outputs)
      anyOutput = anyOutput || out.numElements() > 0;
    if (!anyOutput)
      return;
    if (q.numElements() == 0) {
      // No query sees a key: dk and dv are zero.
      for (const TensorView &out : call.outputs)
        dev->zero(out.data, out.numBytes(), api->computeStream());
      return;
    }
    if (a.seqKV == 0)
      fail(kind, "there are no keys (seq_kv is 0): the softmax is undefined");
    if (useTensorCores(a, type))
      return attentionGradByTensorCores(call, g);
    if (attention != CudaAttention::Simt)
      return attentionGradByGemm(call, g, type);
    void *stats = workspace<double>(3 * a.batch * a.heads * a.seqQ);
    if (g.out) {
      gradientStatsFromSaved(call, a, type, g.out->data, g.lse->data, stats,
                             /*simt=*/true);
    } else {
      KernelLaunch s = attentionLaunch(call, a, type,
                                       GpuKernel::AttentionForward, false);
      // D = rowsum(P * dP) only for dq and dk (the same m and 1/l either
      // way).
      s.params.op = int(g.dq || g.dk ? AttnMode::Stats : AttnMode::StatsNoD);
      s.params.out[1] = stats;
      launch(s);
    }
    for (const TensorView *out : {g.dq, g.dk, g.dv}) {
      if (!out)
        continue;
      KernelLaunch l =
          out == g.dq
              ? attentionLaunch(call, a, type, GpuKernel::AttentionGradQ, false)
              : attentionLaunch(call, a, type, GpuKernel::AttentionGradKV, true);
      l.params.op = out == g.dv ? 1 : 0;
      l.params.in[4] = stats;
      l.params.out[0] = out->data;
      launch(l);
    }
  }

  /// Whether --attention tensor takes this call: f32, head_dim within the
  /// kernels' register tiles (other calls run by GEMMs).
  bool useTensorCores(const cpu::AttentionDims &a, ElemType type) const {
    return attention == CudaAttention::Tensor && type == ElemType::F32 &&
           a.headDim <= kMmaMaxDim;
  }

  /// A launch of a tensor-core attention kernel (AttentionMmaKernels.h):
  /// blocks of kMmaBlock threads over tiles of kMmaRows queries (keys for
  /// AttentionMmaGradKV) of each batch and head (kv head).
  KernelLaunch tensorAttentionLaunch(const KernelCall &call,
                                     const cpu::AttentionDims &a,
                                     GpuKernel kernel) {
    bool keys = kernel == GpuKernel::AttentionMmaGradKV;
    int64_t seq = keys ? a.seqKV : a.seqQ;
    int64_t items = a.batch * (keys ? a.kvHeads : a.heads) *
                    ((seq + kMmaRows - 1) / kMmaRows);
    KernelLaunch l;
    l.block = kMmaBlock;
    l.grid = int(std::clamp<int64_t>(items, 1, kMaxGrid));
    l.sharedBytes = size_t(mmaSharedFloats(kernel)) * sizeof(float);
    KernelParams &p = l.params;
    setAttentionParams(p, call, a, sizeof(float));
    p.kernel = kernel;
    p.type = ElemType::F32;
    p.n = items;
    p.op = tf32 ? kMmaOneTf32 : 0;
    return l;
  }

  /// Any of dq, dk and dv on tensor cores: each query row's lse and D =
  /// dO . O go to a workspace [2, batch * heads * seq_q], written from the
  /// forward's saved O and lse (g.out, g.lse) by AttentionRows (op 2), a
  /// pass over dO and O, or else by the forward kernel in a statistics
  /// mode (D only for dq and dk), a whole forward; then one launch for dq
  /// and one for dk and dv together (each output with the bits of its
  /// single-letter call).
  void attentionGradByTensorCores(const KernelCall &call,
                                  const cpu::AttentionGradCall &g) {
    const cpu::AttentionDims &a = g.dims;
    float *stats = workspace<float>(2 * a.batch * a.heads * a.seqQ);
    if (g.out) {
      gradientStatsFromSaved(call, a, ElemType::F32, g.out->data,
                             g.lse->data, stats);
    } else {
      KernelLaunch s =
          tensorAttentionLaunch(call, a, GpuKernel::AttentionMmaForward);
      s.params.op |= int(g.dq || g.dk ? AttnMode::Stats : AttnMode::StatsNoD);
      s.params.out[1] = stats;
      launch(s);
    }
    if (g.dq) {
      KernelLaunch l =
          tensorAttentionLaunch(call, a, GpuKernel::AttentionMmaGradQ);
      l.params.in[4] = stats;
      l.params.out[0] = g.dq->data;
      launch(l);
    }
    if (g.dk || g.dv) {
      KernelLaunch l =
          tensorAttentionLaunch(call, a, GpuKernel::AttentionMmaGradKV);
      l.params.in[4] = stats;
      l.params.out[0] = g.dk ? g.dk->data : nullptr;
      l.params.out[1] = g.dv ? g.dv->data : nullptr;
      launch(l);
    }
  }

  /// Where attentionByGemm writes: attention's output o, or any of the
  /// gradients dq, dk, dv (null: not asked for).
  struct AttentionOutputs {
    void *o = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
    void *lse = nullptr; // with o: each row's log-sum-exp, or null
    /// For the gradients: the forward's saved output and lse, or null.
    const void *savedO = nullptr, *savedLse = nullptr;
  };

  void attentionGradByGemm(const KernelCall &call,
                           const cpu::AttentionGradCall &g, ElemType type) {
    AttentionOutputs outs;
    outs.dq = g.dq ? g.dq->data : nullptr;
    outs.dk = g.dk ? g.dk->data : nullptr;
    outs.dv = g.dv ? g.dv->data : nullptr;
    outs.savedO = g.out ? g.out->data : nullptr;
    outs.savedLse = g.lse ? g.lse->data : nullptr;
    attentionByGemm(call, g.dims, type, outs);
  }

  /// The gradients' row statistics from the forward's saved output and lse
  /// (AttentionRows op 2): stats[r] = lse[r], stats[rows + r] = dO . O of
  /// row r = (b heads + h) seq_q + i, the layout of the lse; with `simt`
  /// (op 3) the simt kernels' three planes (lse, 1, dO . O).
  void gradientStatsFromSaved(const KernelCall &call,
                              const cpu::AttentionDims &a, ElemType type,
                              const void *savedO, const void *savedLse,
                              void *stats, bool simt = false) {
    KernelLaunch s = rowLaunch(a.batch * a.heads * a.seqQ);
    // One block a row of head_dim elements: a warp or two is enough.
    s.block = int(std::min<int64_t>(blockSize, 64));
    s.params.kernel = GpuKernel::AttentionRows;
    s.params.type = type;
    s.params.op = simt ? 3 : 2;
    s.params.cols = a.headDim;
    s.params.shape[0] = a.seqQ;
    s.params.shape[1] = a.heads;
    s.params.in[0] = call.inputs[3].data;
    s.params.in[1] = savedO;
    s.params.in[2] = savedLse;
    s.params.out[0] = stats;
    launch(s);
  }

  /// attention (outs.o) or any of its gradients (outs.dq, dk, dv) as the
  /// cpu backend computes them (cpu/NNKernels.cpp, cpu/GradKernels.cpp),
  /// one batch at a time: strided-batched GEMMs over the kv heads (one per
  /// query head of a group) into a [heads, seq_q, seq_kv] scratch P (and
  /// dP), and the AttentionRows kernel over its rows:
  ///   S = scale Q K^T, P = softmax(S) (causal rows masked), O = P V,
  ///   dV = sum over the group P^T dO, dP = dO V^T,
  ///   dS = P * (dP - rowsum(P * dP)), dQ = scale dS K,
  ///   dK = sum over the group scale dS^T Q.
  /// With the forward's saved output and lse (outs.savedO, savedLse), the
  /// row statistics come first from them (gradientStatsFromSaved): then
  /// P = exp(S - lse) and dS = P * (dP - dO . O), one pass over each row
  /// where the softmax takes three and the row sum two.
  /// P is computed once for every output, dS once for dq and dk; each
  /// output's GEMMs are the same whichever others are asked for. A group's
  /// heads accumulate into their kv head in order (beta 1 after the
  /// first): deterministic. With --tf32 the GEMMs are TF32 too.
  void attentionByGemm(const KernelCall &call, const cpu::AttentionDims &a,
                       ElemType type, const AttentionOutputs &outs) {
    const TensorView &q = call.inputs[0], &k = call.inputs[1],
                     &v = call.inputs[2];
    const void *dy = call.inputs.size() > 3 ? call.inputs[3].data : nullptr;
    size_t bytes = sizeOf(q.dtype);
    int64_t group = a.heads / a.kvHeads, d = a.headDim;
    int64_t ldq = a.heads * d, ldkv = a.kvHeads * d;
    int64_t plane = a.seqQ * a.seqKV; // one head's scores
    int64_t planes = a.heads * plane;
    bool needDS = outs.dq || outs.dk;
    bool saved = outs.savedLse != nullptr;
    int64_t statRows = a.batch * a.heads * a.seqQ;
    char *p = workspace<char>(int64_t(bytes) *
                              (planes * (needDS ? 2 : 1) +
                               (saved ? 2 * statRows : 0)));
    char *dp = p + bytes * planes;
    // The saved statistics [lse; D] after the score planes.
    char *stats = p + bytes * planes * (needDS ? 2 : 1);
    if (saved)
      gradientStatsFromSaved(call, a, type, outs.savedO, outs.savedLse,
                             stats);
    auto at = [&](const void *base, int64_t elements) {
      return static_cast<const char *>(base) + int64_t(bytes) * elements;
    };
    auto outAt = [&](void *base, int64_t elements) {
      return static_cast<char *>(base) + int64_t(bytes) * elements;
    };
    // One GEMM per query head j of each group, batched over the kv heads:
    // C[h'] = alpha op(A[h']) op(B[h']) + beta C[h'], query head h' g + j.
    auto gemm = [&](bool transA, bool transB, int64_t m, int64_t n,
                    int64_t kk, double alpha, double beta, const void *A,
                    int64_t lda, int64_t strideA, const void *B, int64_t ldb,
                    int64_t strideB, void *C, int64_t ldc, int64_t strideC) {
      GemmDesc g;
      g.type = q.dtype;
      g.tf32 = tf32 && g.type == DType::F32;
      g.transA = transA;
      g.transB = transB;
      g.m = m;
      g.n = n;
      g.k = kk;
      g.batch = a.kvHeads;
      g.alpha = alpha;
      g.beta = beta;
      g.a = A;
      g.b = B;
      g.c = C;
      g.lda = lda;
      g.ldb = ldb;
      g.ldc = ldc;
      g.strideA = a.kvHeads > 1 ? strideA : 0;
      g.strideB = a.kvHeads > 1 ? strideB : 0;
      g.strideC = a.kvHeads > 1 ? strideC : 0;
      api->gemm(g, api->computeStream());
    };
    // op 0: the softmax (lseOut: also each row's lse; rowStats: P from a
    // saved lse instead); op 1: dS (rowStats: D from the saved output).
    auto rows = [&](int op, void *lseOut, const void *rowStats) {
      KernelLaunch l = rowLaunch(a.heads * a.seqQ);
      l.params.kernel = GpuKernel::AttentionRows;
      l.params.type = type;
      l.params.op = op;
      l.params.cols = a.seqKV;
      l.params.shape[0] = a.seqQ;
      l.params.shape[1] = call.attrs.queryOffset;
      l.params.shape[2] = call.attrs.causal ? 1 : 0;
      l.params.in[0] = p;
      l.params.in[1] = rowStats;
      l.params.out[0] = op == 0 ? p : dp;
      l.params.out[1] = lseOut;
      launch(l);
    };
    for (int64_t b = 0; b < a.batch; ++b) {
      const char *qb = at(q.data, b * a.seqQ * ldq);
      const char *kb = at(k.data, b * a.seqKV * ldkv);
      const char *vb = at(v.data, b * a.seqKV * ldkv);
      const char *dyb = dy ? at(dy, b * a.seqQ * ldq) : nullptr;
      // P = softmax(scale Q K^T), head h' g + j at plane h' g + j.
      for (int64_t j = 0; j < group; ++j)
        gemm(false, true, a.seqQ, a.seqKV, d, a.scale, 0, qb + bytes * j * d,
             ldq, group * d, kb, ldkv, d, p + bytes * j * plane, a.seqKV,
             group * plane);
      int64_t firstRow = b * a.heads * a.seqQ; // this batch's statistics
      rows(0, outs.lse ? outAt(outs.lse, firstRow) : nullptr,
           saved ? stats + bytes * firstRow : nullptr);
      if (outs.o) { // O = P V
        char *ob = outAt(outs.o, b * a.seqQ * ldq);
        for (int64_t j = 0; j < group; ++j)
          gemm(false, false, a.seqQ, d, a.seqKV, 1, 0, p + bytes * j * plane,
               a.seqKV, group * plane, vb, ldkv, d, ob + bytes * j * d, ldq,
               group * d);
      }
      if (outs.dv) { // dV = sum_j P^T dO
        char *dvb = outAt(outs.dv, b * a.seqKV * ldkv);
        for (int64_t j = 0; j < group; ++j)
          gemm(true, false, a.seqKV, d, a.seqQ, 1, j ? 1 : 0,
               p + bytes * j * plane, a.seqKV, group * plane,
               dyb + bytes * j * d, ldq, group * d, dvb, ldkv, d);
      }
      if (!needDS)
        continue;
      // dP = dO V^T, then dS (into dP; P stays).
      for (int64_t j = 0; j < group; ++j)
        gemm(false, true, a.seqQ, a.seqKV, d, 1, 0, dyb + bytes * j * d, ldq,
             group * d, vb, ldkv, d, dp + bytes * j * plane, a.seqKV,
             group * plane);
      rows(1, nullptr,
           saved ? stats + bytes * (statRows + firstRow) : nullptr);
      for (int64_t j = 0; j < group; ++j) {
        if (outs.dq) // dQ = scale dS K
          gemm(false, false, a.seqQ, d, a.seqKV, a.scale, 0,
               dp + bytes * j * plane, a.seqKV, group * plane, kb, ldkv, d,
               outAt(outs.dq, b * a.seqQ * ldq) + bytes * j * d, ldq,
               group * d);
        if (outs.dk) // dK = sum_j scale dS^T Q
          gemm(true, false, a.seqKV, d, a.seqQ, a.scale, j ? 1 : 0,
               dp + bytes * j * plane, a.seqKV, group * plane,
               qb + bytes * j * d, ldq, group * d,
               outAt(outs.dk, b * a.seqKV * ldkv), ldkv, d);
      }
    }
  }

  /// What a kernel records in a fault slot (recordBadIndex's position and
  /// value) and how checkDeviceErrors words it.
  enum class Fault {
    LabelOutOfRange,  // a label at or beyond `bound` (the vocabulary)
    DivisionByZero,   // an integer divisor of 0
    DivisionOverflow, // MIN / -1 of a `bound`-bit integer
    BadStep,          // an AdamW step below 1 or infinite (its f32 bits)
  };
  struct FaultSlot {
    Fault fault;
    KernelKind kind;
    int64_t bound;
    bool operator==(const FaultSlot &o) const {
      return fault == o.fault && kind == o.kind && bound == o.bound;
    }
  };

  /// The device word in which a kernel records `fault` (in a KernelParams
  /// out[] slot the kernel documents); one per (fault, kind, bound), so a
  /// captured CUDA graph's launches keep theirs, and null past
  /// kMaxFaultSlots of them (the data's NaN or 0 then goes unreported).
  uint64_t *faultSlot(Fault fault, KernelKind kind, int64_t bound) {
    FaultSlot key{fault, kind, bound};
    auto it = std::find(faultSlots.begin(), faultSlots.end(), key);
    if (it == faultSlots.end()) {
      if (faultSlots.size() == kMaxFaultSlots)
        return nullptr;
      if (!faultWords)
        faultWords = dev->allocateBuffer(kMaxFaultSlots * sizeof(uint64_t));
      it = faultSlots.insert(faultSlots.end(), key);
    }
    return reinterpret_cast<uint64_t *>(faultWords.get()) +
           (it - faultSlots.begin());
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
  bool tf32;
  CudaAttention attention;
  DeviceBuffer scratch;
  size_t workspaceBytes = 0;
  std::map<std::tuple<int64_t, int64_t, double, int64_t>, DeviceBuffer>
      rotaryTables;
  static constexpr size_t kMaxFaultSlots = 64;
  std::vector<FaultSlot> faultSlots;
  DeviceBuffer faultWords; // zeroed when allocated
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
    emu.bankReport = options.bankReport;
    emu.synchronousCompute = !options.emulateAsync;
    emu.computeDelay = options.emulatedComputeDelay;
    api = createEmulatedApi(emu);
    if (options.gemmAutotune && options.log)
      options.log("cuda (emulated): gemm autotune: nothing to tune (the "
                  "emulated device runs every GEMM on the CPU's BLAS)");
  } else {
    CudaApiOptions real;
    real.gemmAutotune = options.gemmAutotune;
    real.log = options.log;
    api = createCudaApi(options.device, real);
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

const char *toString(CudaAttention attention) {
  switch (attention) {
  case CudaAttention::Gemm: return "gemm";
  case CudaAttention::Simt: return "simt";
  case CudaAttention::Tensor: return "tensor";
  }
  return "?";
}

std::optional<CudaAttention> parseCudaAttention(const std::string &name) {
  for (CudaAttention a :
       {CudaAttention::Gemm, CudaAttention::Simt, CudaAttention::Tensor})
    if (name == toString(a))
      return a;
  return std::nullopt;
}

int cudaDevices() {
  std::string error;
  return std::max(0, gpu::cudaDeviceCount(error));
}

} // namespace partita::runtime
