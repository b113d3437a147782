//===- Npy.cpp - reads and writes NumPy .npy arrays -----------------------===//

#include "partita/runtime/Npy.h"

#include "runtime/lib/core/FileIO.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

namespace partita::runtime {

namespace {
const char *npyDescr(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return "<f4";
  case DType::F64:
    return "<f8";
  case DType::F16:
    return "<f2";
  case DType::I32:
    return "<i4";
  case DType::I64:
    return "<i8";
  case DType::BF16:
    break;
  }
  return nullptr;
}
} // namespace

std::string describeTensor(DType dtype, const std::vector<int64_t> &shape) {
  std::string s = std::string(toString(dtype)) + "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {
/// What an .npy header says: dtype, shape, where the data starts and how
/// many bytes it has.
struct NpyHeader {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  size_t dataOffset = 0;
  uint64_t dataBytes = 0;
};

Error notNpy(const std::string &path, const std::string &why) {
  return Error("'" + path + "' is not a readable .npy file: " + why);
}

/// The length of the preamble (magic, version, header length) and of the
/// header, from the first 12 bytes (`data` holds `size` >= 10 of them).
void parsePreamble(const char *data, size_t size, const std::string &path,
                   size_t &start, size_t &headerLen) {
  if (size < 10 || std::memcmp(data, "\x93NUMPY", 6) != 0)
    throw notNpy(path, "no NUMPY magic");
  if (data[6] == 1) {
    headerLen = uint8_t(data[8]) | (uint8_t(data[9]) << 8);
    start = 10;
    return;
  }
  if (size < 12)
    throw notNpy(path, "truncated header");
  uint64_t len = uint8_t(data[8]) | (uint8_t(data[9]) << 8) |
                 (uint32_t(uint8_t(data[10])) << 16) |
                 (uint32_t(uint8_t(data[11])) << 24);
  // NumPy writes headers of a few hundred bytes; a longer one is damage,
  // and is not allocated.
  if (len > (1u << 20))
    throw notNpy(path, "its header claims " + std::to_string(len) +
                           " bytes (at most 1048576)");
  headerLen = size_t(len);
  start = 12;
}

/// Parses the header text (the dict after the preamble).
NpyHeader parseHeader(const std::string &header, size_t dataOffset,
                      const std::string &path) {
  auto bad = [&](const std::string &why) { return notNpy(path, why); };
  auto field = [&](const std::string &key) -> std::string {
    size_t at = header.find("'" + key + "'");
    if (at == std::string::npos)
      throw bad("header has no '" + key + "'");
    size_t colon = header.find(':', at);
    if (colon == std::string::npos)
      throw bad("header has no value for '" + key + "'");
    return header.substr(colon + 1);
  };
  NpyHeader h;
  h.dataOffset = dataOffset;
  std::string descr = field("descr");
  size_t q1 = descr.find('\''), q2 = descr.find('\'', q1 + 1);
  if (q1 == std::string::npos || q2 == std::string::npos)
    throw bad("unreadable 'descr'");
  descr = descr.substr(q1 + 1, q2 - q1 - 1);
  std::string fortran = field("fortran_order");
  if (fortran.find("True") < fortran.find(','))
    throw bad("Fortran order is not supported");
  if (descr == "<f4")
    h.dtype = DType::F32;
  else if (descr == "<f8")
    h.dtype = DType::F64;
  else if (descr == "<i4")
    h.dtype = DType::I32;
  else if (descr == "<i8")
    h.dtype = DType::I64;
  else if (descr == "<f2")
    h.dtype = DType::F16;
  else
    throw bad("dtype '" + descr + "' is not supported (f4, f8, f2, i4, i8)");
  std::string shapeText = field("shape");
  size_t open = shapeText.find('(');
  if (open == std::string::npos)
    throw bad("unreadable 'shape'");
  shapeText = shapeText.substr(open + 1);
  shapeText = shapeText.substr(0, shapeText.find(')'));
  std::stringstream ss(shapeText);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.find_first_not_of(" \t\nL") == std::string::npos)
      continue;
    // Digits only (strtoll alone would take "-0", "+5" and " 0x10"), and
    // no more than 2^40 per dimension.
    size_t first = item.find_first_not_of(" \t\n");
    size_t last = item.find_last_not_of(" \t\nL");
    std::string digits = item.substr(first, last + 1 - first);
    if (digits.empty() || digits.size() > 13 ||
        digits.find_first_not_of("0123456789") != std::string::npos ||
        std::strtoll(digits.c_str(), nullptr, 10) > (int64_t(1) << 40))
      throw bad("unreadable dimension '" + item + "' in 'shape'");
    h.shape.push_back(std::strtoll(digits.c_str(), nullptr, 10));
  }
  uint64_t elements = 1;
  for (int64_t d : h.shape) {
    if (d != 0 && elements > (uint64_t(1) << 40) / uint64_t(d))
      throw bad("its shape is too large");
    elements *= uint64_t(d);
  }
  h.dataBytes = elements * sizeOf(h.dtype);
  return h;
}
} // namespace

Tensor readNpy(const std::string &path) {
  io::InputFile in(path);
  // The header first; the data is allocated only once the file is known
  // to hold as many bytes as the header says.
  char preamble[12] = {};
  size_t have = size_t(std::min<uint64_t>(in.size(), sizeof(preamble)));
  in.readAt(0, preamble, have);
  size_t start, headerLen;
  parsePreamble(preamble, have, path, start, headerLen);
  if (in.size() < start + headerLen)
    throw notNpy(path, "truncated header");
  std::string header(headerLen, '\0');
  in.readAt(start, header.data(), headerLen);
  NpyHeader h = parseHeader(header, start + headerLen, path);
  uint64_t dataBytes = in.size() - h.dataOffset;
  if (dataBytes != h.dataBytes)
    throw notNpy(path, "holds " + std::to_string(dataBytes) +
                           " data bytes, but its header says " +
                           std::to_string(h.dataBytes));
  Tensor t(h.dtype, h.shape);
  in.readAt(h.dataOffset, t.data<char>(), size_t(h.dataBytes));
  return t;
}

Tensor parseNpy(const std::string &data, const std::string &path) {
  size_t start, headerLen;
  parsePreamble(data.data(), data.size(), path, start, headerLen);
  if (data.size() < start + headerLen)
    throw notNpy(path, "truncated header");
  NpyHeader h = parseHeader(data.substr(start, headerLen), start + headerLen,
                            path);
  uint64_t dataBytes = data.size() - h.dataOffset;
  if (dataBytes != h.dataBytes)
    throw notNpy(path, "holds " + std::to_string(dataBytes) +
                           " data bytes, but its header says " +
                           std::to_string(h.dataBytes));
  Tensor t(h.dtype, h.shape);
  std::memcpy(t.data<char>(), data.data() + h.dataOffset,
              size_t(h.dataBytes));
  return t;
}

namespace {
/// The preamble and header serializeNpy writes for `dtype` and `shape`.
std::string npyHeader(DType dtype, const std::vector<int64_t> &shapeDims) {
  const char *descr = npyDescr(dtype);
  if (!descr)
    throw Error("cannot write " + std::string(toString(dtype)) + " to .npy");
  std::string shape;
  for (int64_t d : shapeDims)
    shape += std::to_string(d) + ", ";
  if (shapeDims.size() > 1)
    shape.resize(shape.size() - 1);
  std::string header = "{'descr': '" + std::string(descr) +
                       "', 'fortran_order': False, 'shape': (" + shape + "), }";
  while ((10 + header.size() + 1) % 64)
    header += ' ';
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += char(header.size() & 0xff);
  out += char(header.size() >> 8);
  return out + header;
}
} // namespace

std::string serializeNpy(const Tensor &t) {
  std::string out = npyHeader(t.getDType(), t.getShape());
  out.append(t.data<char>(), t.numElements() * sizeOf(t.getDType()));
  return out;
}

uint64_t npyFileSize(DType dtype, const std::vector<int64_t> &shape) {
  uint64_t elements = 1;
  for (int64_t d : shape)
    elements *= uint64_t(d);
  return npyHeader(dtype, shape).size() + elements * sizeOf(dtype);
}

void writeNpy(const std::string &path, const Tensor &t) {
  io::writeFile(path, serializeNpy(t), /*durable=*/false);
}

void writeNpyDirectory(const std::string &dir, const NamedArrays &arrays) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw Error("cannot create '" + dir + "': " + ec.message());
  for (const auto &[name, tensor] : arrays)
    writeNpy((std::filesystem::path(dir) / (name + ".npy")).string(), *tensor);
}

} // namespace partita::runtime
