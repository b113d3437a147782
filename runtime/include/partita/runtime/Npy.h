//===- Npy.h - reads and writes NumPy .npy arrays ---------------*- C++ -*-===//
//
// The exchange format of the runtime's tools and checkpoints: NumPy's .npy
// (format 1.0-3.0, little-endian, C order) for f32, f64, f16, i32 and i64.
// Plain C++17; errors are runtime::Error naming the file.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_NPY_H
#define PARTITA_RUNTIME_NPY_H

#include "partita/runtime/Tensor.h"

#include <string>
#include <utility>
#include <vector>

namespace partita::runtime {

/// Reads `path`, a regular file (a FIFO or directory is refused), checking
/// its size against its header before allocating. Throws Error "cannot
/// read '<path>': <why>" or "'<path>' is not a readable .npy file: <why>".
Tensor readNpy(const std::string &path);

/// Reads an .npy file already in memory; `path` names it in errors.
Tensor parseNpy(const std::string &bytes, const std::string &path);

/// The bytes of `t` as an .npy file (format 1.0). Throws Error for a dtype
/// .npy cannot hold (bf16).
std::string serializeNpy(const Tensor &t);

/// The size of serializeNpy's file for an array of `dtype` and `shape`
/// (whose element count the caller has checked).
uint64_t npyFileSize(DType dtype, const std::vector<int64_t> &shape);

/// Writes `t` to `path`. Throws Error "cannot write '<path>': <errno text>"
/// (or "cannot create").
void writeNpy(const std::string &path, const Tensor &t);

/// Arrays to write, by name (not copied).
using NamedArrays = std::vector<std::pair<std::string, const Tensor *>>;

/// Writes each array as DIR/<name>.npy, creating DIR and its parents.
void writeNpyDirectory(const std::string &dir, const NamedArrays &arrays);

/// "f32[4x8]".
std::string describeTensor(DType dtype, const std::vector<int64_t> &shape);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_NPY_H
