//===- Tensor.cpp - dtypes and owning tensors -----------------------------===//

#include "partita/runtime/Tensor.h"

#include "FileIO.h"

#include <cstring>

namespace partita::runtime {

size_t sizeOf(DType dtype) {
  switch (dtype) {
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::F64:
  case DType::I64:
    return 8;
  case DType::F16:
  case DType::BF16:
    return 2;
  }
  throw Error("unknown dtype");
}

namespace {
uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t narrowBF16(float f) {
  uint32_t u = bitsOf(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN stays a (quiet) NaN
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  // Round to nearest even on the 16 bits dropped.
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float widenBF16(uint16_t h) { return floatOf(uint32_t(h) << 16); }

// IEEE binary16 by exponent arithmetic (normal, subnormal, inf, NaN).
uint16_t narrowF16(float f) {
  uint32_t u = bitsOf(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u)
    return static_cast<uint16_t>(sign | 0x7e00u);
  if (abs >= 0x477ff000u) // rounds to 65536 or more: inf
    return static_cast<uint16_t>(sign | 0x7c00u);
  int exp = int(abs >> 23) - 127;
  if (exp < -25) // below half the smallest subnormal: zero
    return static_cast<uint16_t>(sign);
  uint32_t mant = (abs & 0x7fffffu) | 0x800000u; // 24 significant bits
  int shift = exp >= -14 ? 13 : 13 + (-14 - exp); // bits to drop
  uint32_t kept = mant >> shift;
  uint32_t rest = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (kept & 1u)))
    ++kept; // may carry into the exponent: still the right encoding
  uint32_t out = exp >= -14 ? (uint32_t(exp + 15) << 10) + (kept - 0x400u)
                            : kept;
  return static_cast<uint16_t>(sign | out);
}

float widenF16(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f)
    return floatOf(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) { // zero or subnormal: mant x 2^-24
    float v = float(mant) * floatOf(0x33800000u);
    return floatOf(sign | bitsOf(v));
  }
  return floatOf(sign | ((exp + 112u) << 23) | (mant << 13));
}

} // namespace

uint16_t narrowFloat(float value, DType dtype) {
  return dtype == DType::BF16 ? narrowBF16(value) : narrowF16(value);
}

float widenFloat(uint16_t bits, DType dtype) {
  return dtype == DType::BF16 ? widenBF16(bits) : widenF16(bits);
}

const char *toString(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return "f32";
  case DType::F64:
    return "f64";
  case DType::F16:
    return "f16";
  case DType::BF16:
    return "bf16";
  case DType::I32:
    return "i32";
  case DType::I64:
    return "i64";
  }
  return "unknown";
}

Tensor::Tensor(DType dtype, std::vector<int64_t> shape)
    : dtype(dtype), shape(std::move(shape)) {
  // Shapes come from files (.npy headers, checkpoint manifests, plans):
  // the element and byte counts are checked before anything is allocated,
  // so a damaged shape is an error, not a signed overflow.
  int64_t elements = 1, bytes = 0;
  for (int64_t d : this->shape) {
    if (d < 0)
      throw Error("negative dimension in tensor shape");
    if (!io::multiplyChecked(elements, d, elements))
      elements = -1;
  }
  if (elements < 0 ||
      !io::multiplyChecked(elements, int64_t(sizeOf(dtype)), bytes)) {
    std::string dims;
    for (int64_t d : this->shape)
      dims += (dims.empty() ? "" : "x") + std::to_string(d);
    throw Error("a tensor of shape [" + dims +
                "] has more bytes than fit in 64 bits");
  }
  storage.assign(size_t(bytes), 0);
}

int64_t Tensor::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

} // namespace partita::runtime
