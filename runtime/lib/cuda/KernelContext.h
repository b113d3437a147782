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
//                       load(i) / store(i, v), and load16(i, out) /
//                       store16(i, v) of 16 bytes at once (T float or
//                       double, i a multiple of 16 / sizeof(T)), which the
//                       emulator can check for races between barriers and
//                       count in bank wavefronts
//   barrier()           __syncthreads
//   shuffleXor(v, m)    __shfl_xor_sync over the full warp (32 lanes)
//   shuffle(v, lane)    __shfl_sync: every lane reads `lane`'s v
//   mmaTf32(d, a, b)    d += A B on tensor cores, one m16n8k8 TF32 tile of
//                       the warp (mma.sync, fp32 accumulators; the
//                       fragment layout below, MmaTf32Layout)
//   mmaTf32x3(d, aBig, aSmall, bBig, bSmall)
//                       the three mmas of a product split in TF32 parts,
//                       small*big, big*small, big*big, in that order (one
//                       warp exchange in the emulator)
// Block sizes are multiples of 32 (whole warps), so every lane of a warp
// exists and takes part in each shuffle.
//
// Header-only, no dependency besides the C++ library: kernels include it.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_LIB_CUDA_KERNELCONTEXT_H
#define PARTITA_RUNTIME_LIB_CUDA_KERNELCONTEXT_H

#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__)
#define PARTITA_HD __host__ __device__
#define PARTITA_DEVICE __device__
#else
#define PARTITA_HD
#define PARTITA_DEVICE
#endif

namespace partita::runtime::gpu {

constexpr int kWarpSize = 32;

/// Which elements a lane holds in an m16n8k8 TF32 mma (PTX ISA, "Matrix
/// fragments for mma.m16n8k8", .tf32): with g = lane / 4 and t = lane % 4,
///   A (16 x 8, row-major)  a[r]: row g + 8 (r % 2), column t + 4 (r / 2)
///   B (8 x 8, column)      b[r]: row t + 4 r, column g
///   C, D (16 x 8)          c[r]: row g + 8 (r / 2), column 2 t + r % 2
/// The emulator's mma reads and writes by these; kernels place their
/// operands by them.
struct MmaTf32Layout {
  PARTITA_HD static int aRow(int lane, int r) { return lane / 4 + 8 * (r % 2); }
  PARTITA_HD static int aCol(int lane, int r) { return lane % 4 + 4 * (r / 2); }
  PARTITA_HD static int bRow(int lane, int r) { return lane % 4 + 4 * r; }
  PARTITA_HD static int bCol(int lane, int) { return lane / 4; }
  PARTITA_HD static int cRow(int lane, int r) { return lane / 4 + 8 * (r / 2); }
  PARTITA_HD static int cCol(int lane, int r) { return 2 * (lane % 4) + r % 2; }
};

#if defined(__CUDACC__)
/// Shared memory on the device: plain loads and stores.
template <typename T> struct DeviceShared {
  T *base;
  __device__ T load(int64_t i) const { return base[i]; }
  __device__ void store(int64_t i, T v) const { base[i] = v; }
  /// One 16-byte access (ld.shared.v4.f32 / .v2.f64).
  __device__ void load16(int64_t i, T (&out)[16 / sizeof(T)]) const {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
    if constexpr (std::is_same_v<T, float>) {
      float4 v = *reinterpret_cast<const float4 *>(base + i);
      out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
    } else {
      double2 v = *reinterpret_cast<const double2 *>(base + i);
      out[0] = v.x, out[1] = v.y;
    }
  }
  __device__ void store16(int64_t i, const T (&v)[16 / sizeof(T)]) const {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
    if constexpr (std::is_same_v<T, float>)
      *reinterpret_cast<float4 *>(base + i) = make_float4(v[0], v[1], v[2], v[3]);
    else
      *reinterpret_cast<double2 *>(base + i) = make_double2(v[0], v[1]);
  }
};

/// The context of a __global__ kernel (1-D grid and block).
struct DeviceContext {
  template <typename T> using Shared = DeviceShared<T>;
  __device__ int threadIndex() const { return threadIdx.x; }
  __device__ int blockIndex() const { return blockIdx.x; }
  __device__ int blockSize() const { return blockDim.x; }
  __device__ int gridSize() const { return gridDim.x; }
  template <typename T> __device__ DeviceShared<T> shared() const {
    // 16-byte aligned: kernels stage tiles with 16-byte (float4) stores.
    extern __shared__ __align__(16) double partitaSharedMemory[];
    return DeviceShared<T>{reinterpret_cast<T *>(partitaSharedMemory)};
  }
  __device__ void barrier() const { __syncthreads(); }
  template <typename T> __device__ T shuffleXor(T v, int laneMask) const {
    return __shfl_xor_sync(0xffffffffu, v, laneMask);
  }
  template <typename T> __device__ T shuffle(T v, int lane) const {
    return __shfl_sync(0xffffffffu, v, lane);
  }
  /// d += A B, A 16 x 8 and B 8 x 8 in TF32 (half::toTF32Bits), d in f32.
  __device__ void mmaTf32(float (&d)[4], const uint32_t (&a)[4],
                          const uint32_t (&b)[2]) const {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
                   "r"(b[1]));
  }
  __device__ void mmaTf32x3(float (&d)[4], const uint32_t (&aBig)[4],
                            const uint32_t (&aSmall)[4],
                            const uint32_t (&bBig)[2],
                            const uint32_t (&bSmall)[2]) const {
    mmaTf32(d, aSmall, bBig);
    mmaTf32(d, aBig, bSmall);
    mmaTf32(d, aBig, bBig);
  }
};
#endif

} // namespace partita::runtime::gpu

#endif // PARTITA_RUNTIME_LIB_CUDA_KERNELCONTEXT_H
