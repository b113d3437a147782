//===- TestKernels.cpp - CPU kernels of the ptest ops, as a kernel library ===//
//
// A kernel library (runtime/include/partita/runtime/KernelRegistry.h) that
// registers the CPU kernels of ptest.sum_normalize and ptest.row_max
// (test/lib/TestDialect.cpp), so plans with those ops run under
// `partita run --kernel-library`. Built twice: as PartitaTestKernels, and
// with PARTITA_TEST_KERNELS_WRONG as PartitaTestKernelsWrong, whose row_max
// returns row sums: a kernel wrong in a way that partitioning changes (the
// partitioned program takes the maximum of local sums), which `--check`
// must catch.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/KernelRegistry.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

using partita::runtime::DType;
using partita::runtime::Error;
using partita::runtime::KernelCall;
using partita::runtime::TensorView;

namespace {

/// A rank-2 f32 or f64 input; its rows and columns.
void checkMatrix(const KernelCall &call, const char *kernel,
                 size_t numOutputs) {
  if (call.inputs.size() != 1 || call.outputs.size() != numOutputs)
    throw Error(std::string(kernel) + " takes 1 input and " +
                std::to_string(numOutputs) + " output");
  const TensorView &x = call.inputs[0];
  if (x.rank() != 2 || (x.dtype != DType::F32 && x.dtype != DType::F64))
    throw Error(std::string(kernel) + " takes a rank-2 f32 or f64 tensor");
  if (call.outputs[0].dtype != x.dtype)
    throw Error(std::string(kernel) + ": output dtype differs from input");
}

template <typename T> void sumNormalize(const T *x, T *y, int64_t r, int64_t c) {
  for (int64_t i = 0; i < r; ++i) {
    T sum = 0;
    for (int64_t j = 0; j < c; ++j)
      sum += x[i * c + j];
    for (int64_t j = 0; j < c; ++j)
      y[i * c + j] = x[i * c + j] / sum;
  }
}

/// y[i, j] = x[i, j] / sum_k x[i, k]; attrs: dims = [1].
void runSumNormalize(const KernelCall &call) {
  checkMatrix(call, "ptest.sum_normalize", 1);
  if (call.attrs.custom.getInts("dims") != std::vector<int64_t>{1})
    throw Error("ptest.sum_normalize normalizes dims = [1] only");
  const TensorView &x = call.inputs[0], &y = call.outputs[0];
  if (y.shape != x.shape)
    throw Error("ptest.sum_normalize: output shape differs from input");
  if (x.dtype == DType::F32)
    sumNormalize(x.as<float>(), y.as<float>(), x.shape[0], x.shape[1]);
  else
    sumNormalize(x.as<double>(), y.as<double>(), x.shape[0], x.shape[1]);
}

template <typename T> void rowMax(const T *x, T *y, int64_t r, int64_t c) {
  for (int64_t i = 0; i < r; ++i) {
    T best = x[i * c];
    for (int64_t j = 1; j < c; ++j) {
#ifdef PARTITA_TEST_KERNELS_WRONG
      best += x[i * c + j]; // deliberately wrong: the row sum
#else
      best = std::max(best, x[i * c + j]);
#endif
    }
    y[i] = best;
  }
}

/// y[i] = max_j x[i, j]; attrs: dim = 1.
void runRowMax(const KernelCall &call) {
  checkMatrix(call, "ptest.row_max", 1);
  if (call.attrs.custom.getInt("dim") != 1)
    throw Error("ptest.row_max reduces dim 1 only");
  const TensorView &x = call.inputs[0], &y = call.outputs[0];
  if (y.shape != std::vector<int64_t>{x.shape[0]})
    throw Error("ptest.row_max: output is not one value per row");
  if (x.shape[1] == 0)
    throw Error("ptest.row_max: a row has no elements");
  if (x.dtype == DType::F32)
    rowMax(x.as<float>(), y.as<float>(), x.shape[0], x.shape[1]);
  else
    rowMax(x.as<double>(), y.as<double>(), x.shape[0], x.shape[1]);
}

} // namespace

extern "C" __attribute__((visibility("default"))) void
partita_register_kernels() {
  partita::runtime::registerKernel("cpu", "ptest.sum_normalize",
                                   runSumNormalize);
  partita::runtime::registerKernel("cpu", "ptest.row_max", runRowMax);
}
