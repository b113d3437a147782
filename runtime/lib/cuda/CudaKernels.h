//===- CudaKernels.h - launching the __global__ kernels ---------*- C++ -*-===//
//
// The bridge between the device layer (CudaApi.cpp, plain C++) and the
// kernels nvcc compiles (CudaKernels.cu). Built only with PARTITA_CUDA.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_LIB_CUDA_CUDAKERNELS_H
#define PARTITA_RUNTIME_LIB_CUDA_CUDAKERNELS_H

#include "runtime/lib/cuda/Kernels.h"

#include <cuda_runtime_api.h>

namespace partita::runtime::gpu {

/// Queues `launch` on `stream`; cudaErrorInvalidValue when the launch's
/// kernel and element type have no instantiation, else the launch's error.
cudaError_t launchOnDevice(const KernelLaunch &launch, cudaStream_t stream);

/// cub::DeviceRadixSort::SortPairs over uint32 keys and values (bits
/// [0, keyBits) of the key): with temp null, sets tempBytes to the scratch
/// it needs; else sorts on `stream`. Stable.
cudaError_t sortPairsOnDevice(void *temp, size_t &tempBytes,
                              const uint32_t *keysIn, uint32_t *keysOut,
                              const uint32_t *valuesIn, uint32_t *valuesOut,
                              int count, int keyBits, cudaStream_t stream);

} // namespace partita::runtime::gpu

#endif // PARTITA_RUNTIME_LIB_CUDA_CUDAKERNELS_H
