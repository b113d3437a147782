//===- Tensor.cpp - dtypes and owning tensors -----------------------------===//

#include "partita/runtime/Tensor.h"

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
  for (int64_t d : this->shape)
    if (d < 0)
      throw Error("negative dimension in tensor shape");
  storage.assign(numElements() * sizeOf(dtype), 0);
}

int64_t Tensor::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

} // namespace partita::runtime
