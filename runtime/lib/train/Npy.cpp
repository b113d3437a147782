//===- Npy.cpp - reads and writes NumPy .npy arrays -----------------------===//

#include "partita/runtime/Npy.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
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

Tensor readNpy(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in || std::filesystem::is_directory(path))
    throw Error("cannot open '" + path + "'");
  std::string data((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  return parseNpy(data, path);
}

Tensor parseNpy(const std::string &data, const std::string &path) {
  auto bad = [&](const std::string &why) {
    return Error("'" + path + "' is not a readable .npy file: " + why);
  };
  if (data.size() < 10 || data.compare(0, 6, "\x93NUMPY") != 0)
    throw bad("no NUMPY magic");
  size_t headerLen, start;
  if (data[6] == 1) {
    headerLen = uint8_t(data[8]) | (uint8_t(data[9]) << 8);
    start = 10;
  } else {
    if (data.size() < 12)
      throw bad("truncated header");
    headerLen = uint8_t(data[8]) | (uint8_t(data[9]) << 8) |
                (uint32_t(uint8_t(data[10])) << 16) |
                (uint32_t(uint8_t(data[11])) << 24);
    start = 12;
  }
  if (data.size() < start + headerLen)
    throw bad("truncated header");
  std::string header = data.substr(start, headerLen);
  auto field = [&](const std::string &key) -> std::string {
    size_t at = header.find("'" + key + "'");
    if (at == std::string::npos)
      throw bad("header has no '" + key + "'");
    size_t colon = header.find(':', at);
    if (colon == std::string::npos)
      throw bad("header has no value for '" + key + "'");
    return header.substr(colon + 1);
  };
  std::string descr = field("descr");
  size_t q1 = descr.find('\''), q2 = descr.find('\'', q1 + 1);
  if (q1 == std::string::npos || q2 == std::string::npos)
    throw bad("unreadable 'descr'");
  descr = descr.substr(q1 + 1, q2 - q1 - 1);
  std::string fortran = field("fortran_order");
  if (fortran.find("True") < fortran.find(','))
    throw bad("Fortran order is not supported");
  DType dtype;
  if (descr == "<f4")
    dtype = DType::F32;
  else if (descr == "<f8")
    dtype = DType::F64;
  else if (descr == "<i4")
    dtype = DType::I32;
  else if (descr == "<i8")
    dtype = DType::I64;
  else if (descr == "<f2")
    dtype = DType::F16;
  else
    throw bad("dtype '" + descr + "' is not supported (f4, f8, f2, i4, i8)");
  std::string shapeText = field("shape");
  size_t open = shapeText.find('(');
  if (open == std::string::npos)
    throw bad("unreadable 'shape'");
  shapeText = shapeText.substr(open + 1);
  shapeText = shapeText.substr(0, shapeText.find(')'));
  std::vector<int64_t> shape;
  std::stringstream ss(shapeText);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.find_first_not_of(" \t\nL") == std::string::npos)
      continue;
    char *end = nullptr;
    long long d = std::strtoll(item.c_str(), &end, 10);
    if (d < 0 || d > (int64_t(1) << 40) ||
        std::string(end).find_first_not_of(" \t\nL") != std::string::npos)
      throw bad("unreadable dimension '" + item + "' in 'shape'");
    shape.push_back(d);
  }
  size_t elements = 1;
  for (int64_t d : shape) {
    if (d != 0 && elements > (size_t(1) << 40) / size_t(d))
      throw bad("its shape is too large");
    elements *= size_t(d);
  }
  size_t bytes = elements * sizeOf(dtype);
  if (data.size() - start - headerLen != bytes)
    throw bad("holds " + std::to_string(data.size() - start - headerLen) +
              " data bytes, but its header says " + std::to_string(bytes));
  Tensor t(dtype, shape);
  std::memcpy(t.data<char>(), data.data() + start + headerLen, bytes);
  return t;
}

std::string serializeNpy(const Tensor &t) {
  const char *descr = npyDescr(t.getDType());
  if (!descr)
    throw Error("cannot write " + std::string(toString(t.getDType())) +
                " to .npy");
  std::string shape;
  for (int64_t d : t.getShape())
    shape += std::to_string(d) + ", ";
  if (t.getShape().size() > 1)
    shape.resize(shape.size() - 1);
  std::string header = "{'descr': '" + std::string(descr) +
                       "', 'fortran_order': False, 'shape': (" + shape + "), }";
  while ((10 + header.size() + 1) % 64)
    header += ' ';
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += char(header.size() & 0xff);
  out += char(header.size() >> 8);
  out += header;
  out.append(t.data<char>(), t.numElements() * sizeOf(t.getDType()));
  return out;
}

void writeNpy(const std::string &path, const Tensor &t) {
  std::string bytes = serializeNpy(t);
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), bytes.size());
  out.close();
  if (!out)
    throw Error("cannot write '" + path + "'");
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
