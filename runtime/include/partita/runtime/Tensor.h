//===- Tensor.h - dtypes and tensor views of the runtime --------*- C++ -*-===//
//
// The runtime's vocabulary for tensors: element types and non-owning views of
// row-major, contiguous buffers. Plain C++17; no LLVM dependency.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_TENSOR_H
#define PARTITA_RUNTIME_TENSOR_H

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace partita::runtime {

enum class DType : uint8_t { F32, F64, F16, BF16, I32, I64 };

/// Bytes per element.
size_t sizeOf(DType dtype);
/// "f32", "bf16", ... (the MLIR spelling).
const char *toString(DType dtype);

/// An f32 value rounded to nearest (ties to even) in bf16 or f16 (`dtype`),
/// as its bits: overflow gives inf, NaN stays NaN.
uint16_t narrowFloat(float value, DType dtype);
/// A bf16 or f16 (`dtype`) value's bits as f32 (exact).
float widenFloat(uint16_t bits, DType dtype);

/// Every runtime failure the caller can act on: a bad plan, a shape the
/// kernel cannot take, a collective that failed or timed out. The message
/// names what failed (rank, collective, op) so a user can act on it.
class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// A non-owning view of a contiguous row-major tensor.
struct TensorView {
  void *data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;

  int64_t numElements() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  size_t numBytes() const { return numElements() * sizeOf(dtype); }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  template <typename T> T *as() const { return static_cast<T *>(data); }
};

/// An owning tensor (for tests, tools and framework glue; the executor
/// itself places buffers in its arena).
class Tensor {
public:
  Tensor() = default;
  Tensor(DType dtype, std::vector<int64_t> shape);
  TensorView view() { return {storage.data(), dtype, shape}; }
  DType getDType() const { return dtype; }
  const std::vector<int64_t> &getShape() const { return shape; }
  template <typename T> T *data() { return reinterpret_cast<T *>(storage.data()); }
  template <typename T> const T *data() const {
    return reinterpret_cast<const T *>(storage.data());
  }
  int64_t numElements() const;

private:
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> storage;
};

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_TENSOR_H
