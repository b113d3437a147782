//===- ShapeKernels.cpp - cpu kernels: broadcast, reduce, transpose, reshape
//===//
//
// Data movement works on every dtype (it copies elements by size);
// reductions take f32/f64 and accumulate sums in double.
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace partita::runtime::cpu {

namespace {
void checkSameDType(const KernelCall &call) {
  if (call.inputs[0].dtype != call.outputs[0].dtype)
    fail(call.kind, std::string("input 0 has dtype ") +
                        toString(call.inputs[0].dtype) + " but output 0 has " +
                        toString(call.outputs[0].dtype));
}

std::string dimsToString(const std::vector<int64_t> &dims) {
  return shapeToString(dims);
}
} // namespace

std::vector<int64_t> broadcastStrides(KernelKind kind, const TensorView &in,
                                      const char *what, const TensorView &out,
                                      const std::vector<int64_t> &dims) {
  if (static_cast<int64_t>(dims.size()) != in.rank())
    fail(kind, "dims " + dimsToString(dims) + " has " +
                   std::to_string(dims.size()) + " entries but " + what +
                   " has rank " + std::to_string(in.rank()));
  std::vector<int64_t> inStrides = rowMajorStrides(in.shape);
  std::vector<int64_t> strides(out.rank(), 0);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = dims[i];
    if (d < 0 || d >= out.rank())
      fail(kind, "dims[" + std::to_string(i) + "] = " + std::to_string(d) +
                     " is out of range for output 0 of rank " +
                     std::to_string(out.rank()));
    if (i > 0 && d <= dims[i - 1])
      fail(kind, "dims " + dimsToString(dims) + " is not strictly increasing");
  }
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = dims[i];
    if (in.shape[i] != out.shape[d] && in.shape[i] != 1)
      fail(kind, std::string(what) + " dimension " + std::to_string(i) +
                     " has size " + std::to_string(in.shape[i]) +
                     " but output dimension " + std::to_string(d) +
                     " has size " + std::to_string(out.shape[d]) +
                     " (sizes must match or the input's be 1)");
    if (in.shape[i] != 1)
      strides[d] = inStrides[i];
  }
  return strides;
}

void runBroadcast(const KernelCall &call) {
  checkCall(call, 1, 1);
  checkSameDType(call);
  checkNoOverlap(call, /*allowExactAlias=*/false);
  const TensorView &in = call.inputs[0], &out = call.outputs[0];
  stridedCopy(in.data, out.data, sizeOf(in.dtype), out.shape,
              broadcastStrides(call.kind, in, "input 0", out, call.attrs.dims));
}

void runReduce(const KernelCall &call) {
  checkCall(call, 1, 1);
  checkSameDType(call);
  checkNoOverlap(call, /*allowExactAlias=*/false);
  const TensorView &in = call.inputs[0], &out = call.outputs[0];
  std::vector<bool> reduced(in.rank(), false);
  int64_t reducedCount = 1;
  for (int64_t d : call.attrs.dims) {
    if (d < 0 || d >= in.rank())
      fail(call.kind, "dims " + dimsToString(call.attrs.dims) + " names " +
                          std::to_string(d) +
                          ", out of range for input 0 of "
                          "rank " +
                          std::to_string(in.rank()));
    if (reduced[d])
      fail(call.kind, "dims " + dimsToString(call.attrs.dims) + " names " +
                          std::to_string(d) + " twice");
    reduced[d] = true;
    reducedCount *= in.shape[d];
  }
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < in.rank(); ++d)
    if (!reduced[d])
      kept.push_back(in.shape[d]);
  checkShape(call.kind, out, "output 0", kept);
  if (call.attrs.meanCount < 0)
    fail(call.kind,
         "meanCount must be >= 0, got " + std::to_string(call.attrs.meanCount));
  double scale = 1.0;
  if (call.kind == KernelKind::ReduceMean) {
    // A sharded mean divides its local sum by the global count, so the
    // partial results only need an all-reduce sum. The mean of nothing is
    // 0/0 = NaN, as in numpy.
    int64_t count =
        call.attrs.meanCount > 0 ? call.attrs.meanCount : reducedCount;
    scale = 1.0 / static_cast<double>(count);
  }
  ReduceKind kind =
      call.kind == KernelKind::ReduceMax ? ReduceKind::Max : ReduceKind::Sum;
  dispatchFloat(call.kind, in.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (reducedCount == 0 && call.kind == KernelKind::ReduceMean &&
        call.attrs.meanCount == 0) {
      std::fill(out.as<T>(), out.as<T>() + out.numElements(),
                std::numeric_limits<T>::quiet_NaN());
      return;
    }
    reduce(in.as<T>(), out.as<T>(), in.shape, reduced, kind, scale);
  });
}

void runTranspose(const KernelCall &call) {
  checkCall(call, 1, 1);
  checkSameDType(call);
  checkNoOverlap(call, /*allowExactAlias=*/false);
  const TensorView &in = call.inputs[0], &out = call.outputs[0];
  const std::vector<int64_t> &perm = call.attrs.dims;
  if (static_cast<int64_t>(perm.size()) != in.rank())
    fail(call.kind, "permutation " + dimsToString(perm) + " has " +
                        std::to_string(perm.size()) +
                        " entries but input 0 has rank " +
                        std::to_string(in.rank()));
  std::vector<bool> seen(perm.size(), false);
  std::vector<int64_t> shape(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    int64_t p = perm[i];
    if (p < 0 || p >= in.rank() || seen[p])
      fail(call.kind, dimsToString(perm) + " is not a permutation of [0, " +
                          std::to_string(in.rank()) + ")");
    seen[p] = true;
    shape[i] = in.shape[p];
  }
  checkShape(call.kind, out, "output 0", shape);
  permute(in.data, out.data, sizeOf(in.dtype), in.shape, perm);
}

void runReshape(const KernelCall &call) {
  checkCall(call, 1, 1);
  checkSameDType(call);
  checkNoOverlap(call, /*allowExactAlias=*/true);
  const TensorView &in = call.inputs[0], &out = call.outputs[0];
  if (in.numElements() != out.numElements())
    fail(call.kind, "input 0 (" + typeToString(in) + ") has " +
                        std::to_string(in.numElements()) +
                        " elements but output 0 (" + typeToString(out) +
                        ") has " + std::to_string(out.numElements()));
  if (in.data != out.data && in.numBytes() > 0)
    std::memcpy(out.data, in.data, in.numBytes());
}

} // namespace partita::runtime::cpu
