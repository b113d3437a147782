//===- Tensor.cpp - dtypes and owning tensors -----------------------------===//

#include "partita/runtime/Tensor.h"

#include "FileIO.h"
#include "runtime/lib/core/HalfFloat.h"

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

uint16_t narrowFloat(float value, DType dtype) {
  return dtype == DType::BF16 ? half::toBF16(value) : half::toF16(value);
}

float widenFloat(uint16_t bits, DType dtype) {
  return dtype == DType::BF16 ? half::fromBF16(bits) : half::fromF16(bits);
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
