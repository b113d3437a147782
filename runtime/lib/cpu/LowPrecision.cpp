//===- LowPrecision.cpp - bf16 and f16 kernels by widening to f32 ---------===//
//
// Every element is widened exactly to f32, the f32 kernel computes (its
// accumulations in f32 or wider, as for f32 operands), and each output
// element is rounded once to nearest even. So a bf16 kernel's result is the
// f32 kernel's result on the same (bf16-representable) values, rounded:
// the same numerics on every rank and in --check's one-rank reference.
// Known limit: scratch is allocated per call (no reuse across calls), and
// contractions run sgemm on widened copies rather than a native bf16 GEMM
// (OpenBLAS's sbgemm).
//
//===----------------------------------------------------------------------===//

#include "LowPrecision.h"

#include "CpuKernels.h"

#include <cstring>
#include <memory>
#include <vector>

namespace partita::runtime::cpu {

namespace {
void widenInto(const TensorView &in, float *out) {
  auto *src = static_cast<const uint16_t *>(in.data);
  int64_t n = in.numElements();
  if (in.dtype == DType::BF16) // the bits are f32's upper half
    for (int64_t i = 0; i < n; ++i) {
      uint32_t u = uint32_t(src[i]) << 16;
      std::memcpy(&out[i], &u, 4);
    }
  else
    for (int64_t i = 0; i < n; ++i)
      out[i] = widenFloat(src[i], DType::F16);
}

void narrowInto(const float *in, const TensorView &out) {
  auto *dst = static_cast<uint16_t *>(out.data);
  int64_t n = out.numElements();
  for (int64_t i = 0; i < n; ++i)
    dst[i] = narrowFloat(in[i], out.dtype);
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
  KernelCall wide = call;
  std::vector<std::unique_ptr<float[]>> scratch;
  auto widen = [&](TensorView &view) {
    int64_t n = view.numElements();
    scratch.emplace_back(new float[n > 0 ? n : 1]);
    view.dtype = DType::F32;
    view.data = scratch.back().get();
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
