//===- HalfFloat.h - f32 to and from bf16 and f16 -----------------*- C++ -*-===//
//
// Rounding to nearest even between f32 and the two 16-bit float types, with
// NaN kept quiet and signed, overflow to inf and f16 subnormals exact. One
// copy for the convert kernel, the widening bf16/f16 path and Tensor's
// narrowFloat/widenFloat, so every place rounds alike, and for the cuda
// backend's convert kernel (runtime/lib/cuda/Kernels.h), which nvcc compiles
// from this same source (the functions are __host__ __device__ there).
// Internal to the runtime; plain C++17.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_LIB_CORE_HALFFLOAT_H
#define PARTITA_RUNTIME_LIB_CORE_HALFFLOAT_H

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define PARTITA_HALF_HD __host__ __device__
#else
#define PARTITA_HALF_HD
#endif

namespace partita::runtime::half {

PARTITA_HALF_HD inline uint32_t bitsOf(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

PARTITA_HALF_HD inline float floatOf(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

PARTITA_HALF_HD inline uint16_t toBF16(float f) {
  uint32_t u = bitsOf(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: keep it quiet and signed
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  // Add half an ulp, plus one when the kept part is odd (ties to even);
  // a carry into the exponent rounds up to the next binade or to inf.
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

PARTITA_HALF_HD inline float fromBF16(uint16_t h) {
  return floatOf(uint32_t(h) << 16);
}

/// `f` rounded to TF32 (8-bit exponent, 10-bit mantissa: the low 13
/// mantissa bits cleared), to nearest even; NaN and inf unchanged, a carry
/// past the largest finite value giving inf. What a TF32 tensor-core GEMM
/// takes of an f32 operand (the emulated --tf32).
inline float roundToTF32(float f) {
  uint32_t u = bitsOf(f);
  if ((u & 0x7f800000u) == 0x7f800000u)
    return f;
  u += 0xfffu + ((u >> 13) & 1u);
  return floatOf(u & 0xffffe000u);
}

/// The bits of `f` rounded to TF32 to nearest with ties away from zero, as
/// PTX's cvt.rna.tf32.f32 does (the tensor-core kernels' operands,
/// KernelContext.h's mmaTf32): an f32 whose low 13 mantissa bits are 0;
/// NaN and inf unchanged, a carry past the largest finite value giving inf.
PARTITA_HALF_HD inline uint32_t toTF32Bits(float f) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
  return r;
#else
  uint32_t u = bitsOf(f);
  if ((u & 0x7f800000u) == 0x7f800000u)
    return u;
  return (u + 0x1000u) & 0xffffe000u;
#endif
}

// After F. Giesen's float_to_half_fast3_rtne (public domain).
PARTITA_HALF_HD inline uint16_t toF16(float f) {
  const uint32_t f32Inf = 255u << 23, f16Overflow = (127u + 16u) << 23;
  const uint32_t denormMagic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  uint32_t u = bitsOf(f);
  uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint16_t out;
  if (u >= f16Overflow) {
    // |f| >= 65536 (inf or NaN included): inf, or a quiet NaN.
    out = u > f32Inf ? 0x7e00 : 0x7c00;
  } else if (u < (113u << 23)) {
    // Below 2^-14: a subnormal or zero; the float addition rounds to
    // nearest even at the subnormal's precision.
    u = bitsOf(floatOf(u) + floatOf(denormMagic)) - denormMagic;
    out = static_cast<uint16_t>(u);
  } else {
    uint32_t odd = (u >> 13) & 1u;
    u += ((15u - 127u) << 23) + 0xfffu + odd;
    out = static_cast<uint16_t>(u >> 13); // >= 65520 carries into inf
  }
  return static_cast<uint16_t>(out | (sign >> 16));
}

PARTITA_HALF_HD inline float fromF16(uint16_t h) {
  const uint32_t shiftedExp = 0x7c00u << 13;
  uint32_t u = (uint32_t(h) & 0x7fffu) << 13;
  uint32_t exp = u & shiftedExp;
  u += (127u - 15u) << 23;
  if (exp == shiftedExp) { // inf or NaN
    u += (128u - 16u) << 23;
  } else if (exp == 0) { // zero or subnormal: renormalize
    u += 1u << 23;
    u = bitsOf(floatOf(u) - floatOf(113u << 23));
  }
  return floatOf(u | ((uint32_t(h) & 0x8000u) << 16));
}

} // namespace partita::runtime::half

#endif // PARTITA_RUNTIME_LIB_CORE_HALFFLOAT_H
