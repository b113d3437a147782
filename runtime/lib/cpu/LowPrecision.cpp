//===- LowPrecision.cpp - bf16 and f16 kernels by widening to f32 ---------===//
//
// Every element is widened exactly to f32, the f32 kernel computes (its
// accumulations in f32 or wider, as for f32 operands), and each output
// element is rounded once to nearest even. So a bf16 kernel's result is the
// f32 kernel's result on the same (bf16-representable) values, rounded:
// the same numerics on every rank and in --check's one-rank reference.
// bf16 is widened and narrowed in vectorized loops (bf16 is f32's upper
// half) split over the intra-op pool at fixed chunks (no sums, so the same
// bits at any thread count); the f32 scratch is kept per thread and reused
// by the next call (a step calls the same sizes again), not allocated per
// call: it stays allocated, at most a few of the step's largest bf16
// tensors in f32, outside the plan's arena. Elementwise kernels (binary,
// unary, their gradients) on tensors larger than a piece run piece by
// piece instead, each piece widened, computed and narrowed while it is in
// cache (the same bits: an element's value does not depend on where it
// falls). Contractions of bf16 operands do not come here where oneDNN runs
// them natively (OneDnnGemm.h).
//
//===----------------------------------------------------------------------===//

#include "LowPrecision.h"

#include "CpuKernels.h"
#include "ThreadPool.h"
#include "runtime/lib/core/HalfFloat.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

namespace partita::runtime::cpu {

namespace {
/// Elements per chunk of the intra-op pool below which a conversion is not
/// split (as the elementwise kernels').
constexpr int64_t kConvertChunk = 1 << 15;

PARTITA_VECTOR_CLONES
void widenBF16(const uint16_t *src, float *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) // the bits are f32's upper half
    out[i] = half::fromBF16(src[i]);
}

PARTITA_VECTOR_CLONES
void narrowBF16(const float *in, uint16_t *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = half::toBF16(in[i]);
}

/// n elements of 16-bit `dtype` (bf16 or f16) to f32, and back.
void widenRange(const uint16_t *src, float *out, int64_t n, DType dtype) {
  if (dtype == DType::BF16)
    widenBF16(src, out, n);
  else
    for (int64_t i = 0; i < n; ++i)
      out[i] = widenFloat(src[i], DType::F16);
}

void narrowRange(const float *in, uint16_t *dst, int64_t n, DType dtype) {
  if (dtype == DType::BF16)
    narrowBF16(in, dst, n);
  else
    for (int64_t i = 0; i < n; ++i)
      dst[i] = narrowFloat(in[i], dtype);
}

void widenInto(const TensorView &in, float *out) {
  auto *src = static_cast<const uint16_t *>(in.data);
  parallelFor(in.numElements(), kConvertChunk, [&](int64_t b, int64_t e) {
    widenRange(src + b, out + b, e - b, in.dtype);
  });
}

void narrowInto(const float *in, const TensorView &out) {
  auto *dst = static_cast<uint16_t *>(out.data);
  parallelFor(out.numElements(), kConvertChunk, [&](int64_t b, int64_t e) {
    narrowRange(in + b, dst + b, e - b, out.dtype);
  });
}

/// This thread's f32 scratch, one buffer per operand position, grown as
/// needed and kept for the next call. A call made while one is in progress
/// (none does today) gets buffers of its own.
struct Scratch {
  std::vector<std::unique_ptr<float[]>> buffers;
  std::vector<int64_t> sizes;
  bool busy = false;
};
thread_local Scratch scratch;
/// Elements per piece of an elementwise call widened piece by piece: three
/// f32 pieces stay in a core's L2 cache.
constexpr int64_t kPiece = 1 << 13;

/// Whether `call` is a well-formed elementwise call (binary, unary, an
/// elementwise gradient or >=) on 16-bit operands of one dtype and shape,
/// whose outputs are inputs exactly or overlap none: each output element
/// then depends on the same element of the inputs alone, so the call may
/// run piece by piece. Anything else, errors included, takes the whole-
/// tensor path.
bool isPiecewise(const KernelCall &call) {
  size_t inputs = 0;
  switch (call.kind) {
  case KernelKind::Add:
  case KernelKind::Sub:
  case KernelKind::Mul:
  case KernelKind::Div:
  case KernelKind::Max:
  case KernelKind::ReluGrad:
  case KernelKind::SiluGrad:
  case KernelKind::GeluGrad:
  case KernelKind::GreaterEqual:
    inputs = 2;
    break;
  case KernelKind::Neg:
  case KernelKind::Exp:
  case KernelKind::Log:
  case KernelKind::Tanh:
  case KernelKind::Relu:
  case KernelKind::Silu:
  case KernelKind::Rsqrt:
  case KernelKind::Sqrt:
  case KernelKind::Gelu:
    inputs = 1;
    break;
  default:
    return false;
  }
  if (call.inputs.size() != inputs || call.outputs.size() != 1)
    return false;
  const TensorView &out = call.outputs[0];
  if (!isLowPrecision(out.dtype) || out.numElements() <= kPiece ||
      (out.numElements() > 0 && !out.data))
    return false;
  for (const TensorView &in : call.inputs) {
    if (in.dtype != out.dtype || in.shape != out.shape || !in.data)
      return false;
    auto begin = static_cast<const char *>(in.data);
    auto outBegin = static_cast<const char *>(out.data);
    if (in.data != out.data && begin < outBegin + out.numBytes() &&
        outBegin < begin + in.numBytes())
      return false;
  }
  return true;
}

/// An elementwise call in pieces of kPiece elements over the intra-op
/// pool's chunks: each piece's inputs widened into this thread's f32
/// buffers, the f32 kernel run on them serially, its output narrowed into
/// place. The same bits as the whole-tensor path: the f32 kernels give an
/// element the same bits wherever it falls (ThreadPool.h).
void runPiecewise(const KernelCall &call,
                  const std::function<void(const KernelCall &)> &runF32) {
  const TensorView &out = call.outputs[0];
  DType dtype = out.dtype;
  size_t inputs = call.inputs.size();
  parallelFor(out.numElements(), kConvertChunk, [&](int64_t b, int64_t e) {
    PoolScope serial(nullptr); // the f32 kernel runs on this thread alone
    thread_local std::vector<float> buffer;
    buffer.resize((inputs + 1) * kPiece);
    KernelCall piece{call.kind, call.attrs, {}, {}};
    piece.inputs.resize(inputs);
    piece.outputs.resize(1);
    for (int64_t start = b; start < e; start += kPiece) {
      int64_t n = std::min(kPiece, e - start);
      for (size_t i = 0; i <= inputs; ++i) {
        TensorView &view = i < inputs ? piece.inputs[i] : piece.outputs[0];
        view.dtype = DType::F32;
        view.shape = {n};
        view.data = buffer.data() + i * kPiece;
      }
      for (size_t i = 0; i < inputs; ++i)
        widenRange(static_cast<const uint16_t *>(call.inputs[i].data) + start,
                   static_cast<float *>(piece.inputs[i].data), n, dtype);
      runF32(piece);
      narrowRange(static_cast<const float *>(piece.outputs[0].data),
                  static_cast<uint16_t *>(out.data) + start, n, dtype);
    }
  });
}
} // namespace

bool needsWidening(const KernelCall &call) {
  switch (call.kind) {
  case KernelKind::Convert:   // converts between the types itself
  case KernelKind::Broadcast: // data movement by element size
  case KernelKind::Transpose:
  case KernelKind::Reshape:
  case KernelKind::Custom: // a registered kernel sees its operands as given
    return false;
  default:
    break;
  }
  for (const TensorView &v : call.inputs)
    if (isLowPrecision(v.dtype))
      return true;
  for (const TensorView &v : call.outputs)
    if (isLowPrecision(v.dtype))
      return true;
  return false;
}

void runWidened(const KernelCall &call,
                const std::function<void(const KernelCall &)> &runF32) {
  // Check the views as every kernel does before touching their data.
  checkCall(call, call.inputs.size(), call.outputs.size());
  if (isPiecewise(call))
    return runPiecewise(call, runF32);
  KernelCall wide = call;
  Scratch own;
  Scratch &pool = scratch.busy ? own : scratch;
  pool.busy = true;
  struct Release {
    Scratch &pool;
    ~Release() { pool.busy = false; }
  } release{pool};
  size_t used = 0;
  auto widen = [&](TensorView &view) {
    int64_t n = std::max<int64_t>(view.numElements(), 1);
    if (used == pool.buffers.size()) {
      pool.buffers.emplace_back();
      pool.sizes.push_back(0);
    }
    if (pool.sizes[used] < n) {
      pool.buffers[used].reset(); // free before allocating the larger one
      pool.buffers[used].reset(new float[n]);
      pool.sizes[used] = n;
    }
    view.dtype = DType::F32;
    view.data = pool.buffers[used++].get();
  };
  for (TensorView &v : wide.inputs)
    if (isLowPrecision(v.dtype)) {
      TensorView original = v;
      widen(v);
      widenInto(original, static_cast<float *>(v.data));
    }
  for (TensorView &v : wide.outputs)
    if (isLowPrecision(v.dtype))
      widen(v);
  runF32(wide);
  for (size_t o = 0; o < call.outputs.size(); ++o)
    if (isLowPrecision(call.outputs[o].dtype))
      narrowInto(static_cast<const float *>(wide.outputs[o].data),
                 call.outputs[o]);
}

} // namespace partita::runtime::cpu
