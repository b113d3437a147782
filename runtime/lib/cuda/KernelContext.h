//===- KernelContext.h - what a kernel written once may ask of its launch -*- C++ -*-===//
//
// Kernels of the cuda backend are templates over an execution context, so
// one source is compiled twice: by nvcc into __global__ kernels (the
// DeviceContext below, over threadIdx, __syncthreads and __shfl_xor_sync)
// and by the host compiler into the block emulator (EmuContext in
// BlockEmulator.h, where the threads of a block are real threads meeting at
// real barriers), so CI runs the kernel code itself without a GPU.
//
// A context offers, for a 1-D launch:
//   threadIndex() blockIndex() blockSize() gridSize()
//   shared<T>()         the block's dynamic shared memory as a Shared<T>:
//                       load(i) / store(i, v), which the emulator can check
//                       for races between barriers
//   barrier()           __syncthreads
//   shuffleXor(v, m)    __shfl_xor_sync over the full warp (32 lanes)
// Block sizes are multiples of 32 (whole warps), so every lane of a warp
// exists and takes part in each shuffle.
//
// Header-only, no dependency besides the C++ library: kernels include it.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_LIB_CUDA_KERNELCONTEXT_H
#define PARTITA_RUNTIME_LIB_CUDA_KERNELCONTEXT_H

#include <cstdint>

#if defined(__CUDACC__)
#define PARTITA_HD __host__ __device__
#define PARTITA_DEVICE __device__
#else
#define PARTITA_HD
#define PARTITA_DEVICE
#endif

namespace partita::runtime::gpu {

constexpr int kWarpSize = 32;

#if defined(__CUDACC__)
/// Shared memory on the device: plain loads and stores.
template <typename T> struct DeviceShared {
  T *base;
  __device__ T load(int64_t i) const { return base[i]; }
  __device__ void store(int64_t i, T v) const { base[i] = v; }
};

/// The context of a __global__ kernel (1-D grid and block).
struct DeviceContext {
  template <typename T> using Shared = DeviceShared<T>;
  __device__ int threadIndex() const { return threadIdx.x; }
  __device__ int blockIndex() const { return blockIdx.x; }
  __device__ int blockSize() const { return blockDim.x; }
  __device__ int gridSize() const { return gridDim.x; }
  template <typename T> __device__ DeviceShared<T> shared() const {
    extern __shared__ double partitaSharedMemory[];
    return DeviceShared<T>{reinterpret_cast<T *>(partitaSharedMemory)};
  }
  __device__ void barrier() const { __syncthreads(); }
  template <typename T> __device__ T shuffleXor(T v, int laneMask) const {
    return __shfl_xor_sync(0xffffffffu, v, laneMask);
  }
};
#endif

} // namespace partita::runtime::gpu

#endif // PARTITA_RUNTIME_LIB_CUDA_KERNELCONTEXT_H
