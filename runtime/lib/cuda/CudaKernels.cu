//===- CudaKernels.cu - the kernel templates as __global__ kernels --------===//
//
// One __global__ kernel per (kernel, element type) of Kernels.h, each the
// template run in a DeviceContext, at most maxBlockOf(K) threads a block
// (1024; the attention kernels 256, for their registers). Compiled for
// sm_80 and sm_90 with every warning and every register spill an error
// (runtime/CMakeLists.txt).
//
//===----------------------------------------------------------------------===//

#include "runtime/lib/cuda/CudaKernels.h"

#include <cub/device/device_radix_sort.cuh>

namespace partita::runtime::gpu {

namespace {

template <GpuKernel K, typename T>
__global__ void __launch_bounds__(maxBlockOf(K), minBlocksOf(K)) partitaKernel(KernelParams p) {
  DeviceContext ctx;
  runKernel<K, T>(ctx, p);
}

} // namespace

cudaError_t launchOnDevice(const KernelLaunch &launch, cudaStream_t stream) {
  cudaError_t status = cudaErrorInvalidValue;
  dispatchKernel(launch.params, [&](auto tag, auto type) {
    using T = decltype(type);
    partitaKernel<decltype(tag)::value, T>
        <<<launch.grid, launch.block, launch.sharedBytes, stream>>>(
            launch.params);
    status = cudaGetLastError();
  });
  return status;
}

cudaError_t sortPairsOnDevice(void *temp, size_t &tempBytes,
                              const uint32_t *keysIn, uint32_t *keysOut,
                              const uint32_t *valuesIn, uint32_t *valuesOut,
                              int count, int keyBits, cudaStream_t stream) {
  return cub::DeviceRadixSort::SortPairs(temp, tempBytes, keysIn, keysOut,
                                         valuesIn, valuesOut, count, 0,
                                         keyBits, stream);
}

} // namespace partita::runtime::gpu
