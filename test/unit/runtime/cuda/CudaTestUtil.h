//===- CudaTestUtil.h - running kernel calls through a backend's device ===//
//
// Helpers of the cuda backend's tests: place host tensors in a backend's
// device memory, run one kernel call there, and copy the outputs back, so
// one test body checks the emulated device layer in CI and a GPU where
// there is one.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_TEST_UNIT_RUNTIME_CUDA_CUDATESTUTIL_H
#define PARTITA_TEST_UNIT_RUNTIME_CUDA_CUDATESTUTIL_H

#include "partita/runtime/Backend.h"
#include "partita/runtime/CudaBackend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace partita::runtime::test {

/// The backend under test with `options` (defined by each test binary's
/// main file: the emulated device layer with its race check, or the GPU).
std::unique_ptr<Backend> cudaTestBackend(CudaBackendOptions options);

/// A tensor of T (float: f32, double: f64) uniform in [lo, hi), the same
/// values for the same seed.
template <typename T>
Tensor random(std::vector<int64_t> shape, uint64_t seed, double lo = -3,
              double hi = 3) {
  Tensor t(sizeof(T) == 4 ? DType::F32 : DType::F64, std::move(shape));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < t.numElements(); ++i)
    t.data<T>()[i] = static_cast<T>(dist(rng));
  return t;
}

/// Whether cudaTestBackend runs on the emulated device layer.
bool cudaTestEmulated();

/// The backend under test with `blockSize` threads per block, its f32
/// GEMMs in TF32 with `tf32`. attention: CudaBackendOptions::attention
/// (GEMMs and the row kernel, or the flash-style kernels on CUDA cores or
/// tensor cores).
inline std::unique_ptr<Backend>
cudaTestBackend(int blockSize, bool tf32 = false,
                CudaAttention attention = CudaAttention::Gemm) {
  CudaBackendOptions options;
  options.tf32 = tf32;
  options.attention = attention;
  options.blockSize = blockSize;
  return cudaTestBackend(options);
}

/// Every way the backend runs attention.
inline const CudaAttention kAttentionKinds[] = {
    CudaAttention::Gemm, CudaAttention::Simt, CudaAttention::Tensor};

struct OutputSpec {
  DType dtype;
  std::vector<int64_t> shape;
};

inline std::vector<Tensor> runOnBackend(Backend &backend, KernelKind kind,
                                        const KernelAttrs &attrs,
                                        const std::vector<Tensor> &inputs,
                                        const std::vector<OutputSpec> &outputs,
                                        int outputOverInput = -1) {
  Device &dev = backend.device();
  Stream &stream = dev.computeStream();
  std::vector<DeviceBuffer> buffers;
  KernelCall call{kind, attrs, {}, {}};
  for (const Tensor &t : inputs) {
    TensorView view{nullptr, t.getDType(), t.getShape()};
    buffers.push_back(dev.allocateBuffer(view.numBytes()));
    view.data = buffers.back().get();
    dev.copyFromHost(view.data, t.data<unsigned char>(), view.numBytes(),
                     stream);
    call.inputs.push_back(view);
  }
  for (const OutputSpec &o : outputs) {
    TensorView view{nullptr, o.dtype, o.shape};
    if (call.outputs.empty() && outputOverInput >= 0) {
      // Output 0 in input outputOverInput's bytes (Buffer.reuses).
      view.data = call.inputs.at(size_t(outputOverInput)).data;
    } else {
      buffers.push_back(dev.allocateBuffer(view.numBytes()));
      view.data = buffers.back().get();
    }
    call.outputs.push_back(view);
  }
  backend.run(call);
  std::vector<Tensor> results;
  for (const TensorView &view : call.outputs) {
    results.emplace_back(view.dtype, view.shape);
    dev.copyToHost(results.back().data<unsigned char>(), view.data,
                   view.numBytes(), stream);
  }
  return results;
}

/// The message of the Error that running the call throws ("" if none).
inline std::string runError(Backend &backend, KernelKind kind,
                            const KernelAttrs &attrs,
                            const std::vector<Tensor> &inputs,
                            const std::vector<OutputSpec> &outputs) {
  try {
    runOnBackend(backend, kind, attrs, inputs, outputs);
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

inline double elementAt(const Tensor &t, int64_t i) {
  switch (t.getDType()) {
  case DType::F32: return t.data<float>()[i];
  case DType::F64: return t.data<double>()[i];
  case DType::I32: return t.data<int32_t>()[i];
  case DType::I64: return double(t.data<int64_t>()[i]);
  case DType::BF16:
  case DType::F16:
    return widenFloat(t.data<uint16_t>()[i], t.getDType());
  default: return NAN;
  }
}

/// max |a - b| / max |b| (0 when both are all zero; infinite on a shape
/// or dtype mismatch, or when a NaN appears in only one of them).
inline double relativeDifference(const Tensor &a, const Tensor &b) {
  if (a.getDType() != b.getDType() || a.getShape() != b.getShape())
    return INFINITY;
  double maxAbs = 0, maxRef = 0;
  for (int64_t i = 0; i < a.numElements(); ++i) {
    double x = elementAt(a, i), y = elementAt(b, i);
    if (std::isnan(x) != std::isnan(y))
      return INFINITY;
    if (std::isnan(x))
      continue;
    maxAbs = std::max(maxAbs, std::fabs(x - y));
    maxRef = std::max(maxRef, std::fabs(y));
  }
  return maxAbs == 0 ? 0 : maxRef == 0 ? INFINITY : maxAbs / maxRef;
}

} // namespace partita::runtime::test

#endif // PARTITA_TEST_UNIT_RUNTIME_CUDA_CUDATESTUTIL_H
