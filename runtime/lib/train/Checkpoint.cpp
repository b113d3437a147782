//===- Checkpoint.cpp - sharded training checkpoints ----------------------===//

#include "partita/runtime/Checkpoint.h"
#include "partita/runtime/Npy.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#ifdef PARTITA_HAVE_ZLIB
#include <zlib.h>
#endif

namespace fs = std::filesystem;

namespace partita::runtime {

uint32_t crc32(const void *data, size_t size, uint32_t crc) {
#ifdef PARTITA_HAVE_ZLIB
  const auto *p = static_cast<const Bytef *>(data);
  // zlib takes uInt lengths: feed large buffers in pieces.
  while (size > 0) {
    uInt n = uInt(std::min<size_t>(size, 1u << 30));
    crc = uint32_t(::crc32(crc, p, n));
    p += n;
    size -= n;
  }
  return crc;
#else
  // The reflected IEEE polynomial, one byte at a time through a table.
  static const auto table = [] {
    std::vector<uint32_t> t(256);
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  const auto *p = static_cast<const unsigned char *>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i)
    crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
#endif
}

namespace {

constexpr const char *kHeader = "partita checkpoint 2";
constexpr const char *kManifest = "manifest.txt";

std::string join(const std::string &dir, const std::string &name) {
  return (fs::path(dir) / name).string();
}

std::string joinInts(const std::vector<int64_t> &v, char sep,
                     const char *empty) {
  if (v.empty())
    return empty;
  std::string s;
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? std::string(1, sep) : "") + std::to_string(v[i]);
  return s;
}

bool parseInts(const std::string &text, char sep, const char *empty,
               std::vector<int64_t> &out) {
  out.clear();
  if (text == empty)
    return true;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, sep)) {
    char *end = nullptr;
    long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end || v < 0)
      return false;
    out.push_back(v);
  }
  return true;
}

bool parseDType(const std::string &text, DType &dtype) {
  for (DType d : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32,
                  DType::I64})
    if (text == toString(d)) {
      dtype = d;
      return true;
    }
  return false;
}

std::string readFile(const std::string &path, bool &ok) {
  std::ifstream in(path, std::ios::binary);
  ok = bool(in) && !fs::is_directory(path);
  if (!ok)
    return "";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Writes `bytes` to `path`; throws naming it.
void writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), bytes.size());
  out.close();
  if (!out)
    throw Error("cannot write '" + path + "'");
}

std::string shardFileName(const std::string &name,
                          const Executor::Block &block) {
  bool whole = block.shape == block.globalShape;
  return whole ? name + ".npy"
               : name + ".shard-" + joinInts(block.offsets, '-', "") + ".npy";
}

std::string shardLine(const std::string &name, const CheckpointShard &s) {
  char crc[16];
  std::snprintf(crc, sizeof(crc), "%08x", s.crc);
  return "shard " + name + " " + s.file + " " +
         joinInts(s.offsets, ',', "-") + " " + joinInts(s.shape, ',', "-") +
         " " + std::to_string(s.bytes) + " " + crc + " " +
         std::to_string(s.rank) + "\n";
}

void barrier(Communicator *comm) {
  if (!comm)
    return;
  std::vector<int> world(comm->size());
  std::iota(world.begin(), world.end(), 0);
  comm->barrier(world);
}

/// Copies the intersection of a shard (global region at `sOff`, compact
/// tensor `shard`) and a block (at `bOff`, compact tensor `block`) into
/// the block; returns the number of elements copied.
int64_t copyOverlap(const Tensor &shard, const std::vector<int64_t> &sOff,
                    Tensor &block, const std::vector<int64_t> &bOff) {
  const std::vector<int64_t> &sShape = shard.getShape(),
                             &bShape = block.getShape();
  size_t rank = sShape.size();
  std::vector<int64_t> lo(rank), hi(rank);
  int64_t count = 1;
  for (size_t d = 0; d < rank; ++d) {
    lo[d] = std::max(sOff[d], bOff[d]);
    hi[d] = std::min(sOff[d] + sShape[d], bOff[d] + bShape[d]);
    if (hi[d] <= lo[d])
      return 0;
    count *= hi[d] - lo[d];
  }
  size_t elem = sizeOf(shard.getDType());
  if (rank == 0) {
    std::memcpy(block.data<unsigned char>(), shard.data<unsigned char>(), elem);
    return 1;
  }
  std::vector<int64_t> index(lo);
  size_t rowBytes = (hi[rank - 1] - lo[rank - 1]) * elem;
  while (true) {
    int64_t s = 0, b = 0;
    for (size_t d = 0; d < rank; ++d) {
      s = s * sShape[d] + index[d] - sOff[d];
      b = b * bShape[d] + index[d] - bOff[d];
    }
    std::memcpy(block.data<unsigned char>() + b * elem,
                shard.data<unsigned char>() + s * elem, rowBytes);
    int64_t d = int64_t(rank) - 2;
    while (d >= 0 && ++index[d] == hi[d]) {
      index[d] = lo[d];
      --d;
    }
    if (d < 0)
      return count;
  }
}

} // namespace

Checkpoint openCheckpoint(const PlanFile &plan, const std::string &program,
                          const std::string &dirArg, bool paramsOnly) {
  std::string what = "checkpoint '" + dirArg + "'";
  Checkpoint ck;
  ck.dir = dirArg;
  // A save that died between moving DIR aside and renaming DIR.partial
  // leaves the previous checkpoint as DIR.old.
  if (!fs::exists(dirArg) && fs::exists(join(dirArg + ".old", kManifest)))
    ck.dir = dirArg + ".old";
  std::string path = join(ck.dir, kManifest);
  bool ok;
  std::string text = readFile(path, ok);
  if (!ok)
    throw Error(what + ": cannot open '" + path +
                "' (write checkpoints with --save-checkpoint)");
  auto corrupt = [&](int line, const std::string &why) {
    return Error(what + ": '" + path + "' is not a checkpoint manifest: line " +
                 std::to_string(line) + ": " + why);
  };
  std::stringstream lines(text);
  std::string line;
  int number = 0;
  if (!std::getline(lines, line) || line != kHeader)
    throw corrupt(1, std::string("expected '") + kHeader + "'");
  ++number;
  bool sawSteps = false;
  while (std::getline(lines, line)) {
    ++number;
    std::stringstream ss(line);
    std::string kind;
    ss >> kind;
    if (kind.empty())
      continue;
    if (kind == "steps") {
      if (!(ss >> ck.steps) || ck.steps < 0)
        throw corrupt(number, "expected 'steps N'");
      sawSteps = true;
    } else if (kind == "tensor") {
      std::string name, role, dtype, shape;
      CheckpointTensor t;
      if (!(ss >> name >> role >> dtype >> shape) ||
          (role != "parameter" && role != "state") ||
          !parseDType(dtype, t.dtype) ||
          !parseInts(shape, 'x', "scalar", t.globalShape))
        throw corrupt(number, "expected 'tensor NAME parameter|state DTYPE "
                              "DIMS'");
      t.isState = role == "state";
      ck.tensors[name] = t;
    } else if (kind == "shard") {
      std::string name, offsets, shape, crc;
      CheckpointShard s;
      if (!(ss >> name >> s.file >> offsets >> shape >> s.bytes >> crc >>
            s.rank) ||
          !parseInts(offsets, ',', "-", s.offsets) ||
          !parseInts(shape, ',', "-", s.shape) || crc.size() != 8 ||
          crc.find_first_not_of("0123456789abcdef") != std::string::npos ||
          s.file.find('/') != std::string::npos || s.file == "..")
        throw corrupt(number, "expected 'shard NAME FILE OFFSETS SHAPE BYTES "
                              "CRC32 RANK'");
      s.crc = uint32_t(std::strtoul(crc.c_str(), nullptr, 16));
      auto it = ck.tensors.find(name);
      if (it == ck.tensors.end())
        throw corrupt(number, "shard of '" + name + "' before its tensor line");
      const std::vector<int64_t> &global = it->second.globalShape;
      bool inside = s.offsets.size() == global.size() &&
                    s.shape.size() == global.size();
      for (size_t d = 0; inside && d < global.size(); ++d)
        inside = s.offsets[d] + s.shape[d] <= global[d];
      if (!inside)
        throw corrupt(number, "the shard lies outside '" + name + "'");
      it->second.shards.push_back(s);
    } else {
      throw corrupt(number, "unknown line '" + kind + "'");
    }
  }
  if (!sawSteps)
    throw corrupt(number, "no 'steps N' line");
  for (const ProgramValue &value : plan.persistent(program)) {
    if (paramsOnly && !value.isParameter)
      continue;
    std::string role = value.isState ? "state" : "parameter";
    auto it = ck.tensors.find(value.name);
    if (it == ck.tensors.end())
      throw Error(what + " has no '" + value.name + "': the plan's " + role +
                  " '" + value.name +
                  "' (was it saved from another model or optimizer?)");
    if (it->second.dtype != value.dtype ||
        it->second.globalShape != value.globalShape)
      throw Error(what + ": '" + value.name + "' is " +
                  describeTensor(it->second.dtype, it->second.globalShape) +
                  ", but the plan's " + role + " '" + value.name + "' is " +
                  describeTensor(value.dtype, value.globalShape));
  }
  return ck;
}

void loadCheckpoint(const Checkpoint &ck, Executor &executor,
                    const PlanFile &plan, const std::string &program,
                    bool paramsOnly) {
  std::string what = "checkpoint '" + ck.dir + "'";
  for (const ProgramValue &value : plan.persistent(program)) {
    if (paramsOnly && !value.isParameter)
      continue;
    const CheckpointTensor &tensor = ck.tensors.at(value.name);
    Executor::Block block = executor.persistentBlock(value.name);
    Tensor data(value.dtype, block.shape);
    int64_t covered = 0;
    for (const CheckpointShard &shard : tensor.shards) {
      bool overlaps = true;
      for (size_t d = 0; d < block.shape.size(); ++d)
        overlaps &= shard.offsets[d] < block.offsets[d] + block.shape[d] &&
                    block.offsets[d] < shard.offsets[d] + shard.shape[d];
      if (!overlaps)
        continue;
      std::string path = join(ck.dir, shard.file);
      bool ok;
      std::string bytes = readFile(path, ok);
      if (!ok)
        throw Error(what + ": cannot open shard '" + path + "' of '" +
                    value.name + "'");
      if (bytes.size() != shard.bytes)
        throw Error(what + ": shard '" + path + "' holds " +
                    std::to_string(bytes.size()) + " bytes, the manifest says " +
                    std::to_string(shard.bytes));
      uint32_t crc = crc32(bytes.data(), bytes.size());
      if (crc != shard.crc) {
        char got[16], want[16];
        std::snprintf(got, sizeof(got), "%08x", crc);
        std::snprintf(want, sizeof(want), "%08x", shard.crc);
        throw Error(what + ": shard '" + path + "' is damaged: its CRC-32 is " +
                    got + ", the manifest says " + want);
      }
      Tensor t = parseNpy(bytes, path);
      if (t.getDType() != tensor.dtype || t.getShape() != shard.shape)
        throw Error(what + ": shard '" + path + "' is " +
                    describeTensor(t.getDType(), t.getShape()) +
                    ", the manifest says " +
                    describeTensor(tensor.dtype, shard.shape));
      covered += copyOverlap(t, shard.offsets, data, block.offsets);
    }
    if (covered != data.numElements())
      throw Error(what + ": the shards of '" + value.name + "' cover " +
                  std::to_string(covered) + " of the " +
                  std::to_string(data.numElements()) +
                  " elements of this rank's block");
    executor.writePersistentBlock(value.name, data);
  }
}

void loadParameters(const std::string &dir, Executor &executor,
                    const PlanFile &plan, const std::string &program) {
  if (fs::exists(join(dir, kManifest)) ||
      (!fs::exists(dir) && fs::exists(join(dir + ".old", kManifest)))) {
    Checkpoint ck = openCheckpoint(plan, program, dir, /*paramsOnly=*/true);
    loadCheckpoint(ck, executor, plan, program, /*paramsOnly=*/true);
    return;
  }
  for (const ProgramValue &value : plan.persistent(program)) {
    if (!value.isParameter)
      continue;
    std::string path = join(dir, value.name + ".npy");
    if (!fs::exists(path))
      throw Error("parameters '" + dir + "' have no '" + value.name +
                  ".npy' (nor a checkpoint manifest): the plan's parameter '" +
                  value.name + "'");
    Tensor t = readNpy(path);
    if (t.getDType() != value.dtype || t.getShape() != value.globalShape)
      throw Error("parameters '" + dir + "': '" + value.name + ".npy' is " +
                  describeTensor(t.getDType(), t.getShape()) +
                  ", but the plan's parameter '" + value.name + "' is " +
                  describeTensor(value.dtype, value.globalShape));
    executor.setPersistent(value.name, t);
  }
}

CheckpointSaveReport saveCheckpoint(Executor &executor, Communicator *comm,
                                    const PlanFile &plan,
                                    const std::string &program,
                                    const std::string &dir, int64_t steps,
                                    const CheckpointSaveOptions &options) {
  int rank = comm ? comm->rank() : 0;
  int ranks = comm ? comm->size() : 1;
  std::string partial = dir + ".partial", old = dir + ".old";
  std::vector<ProgramValue> values = plan.persistent(program);
  for (const ProgramValue &value : values)
    if (value.name.empty() ||
        value.name.find_first_of(" \t\n/\\") != std::string::npos)
      throw Error("cannot checkpoint '" + value.name +
                  "': a tensor name in a checkpoint has no spaces or slashes");
  if (rank == 0) {
    std::error_code ec;
    fs::remove_all(partial, ec); // a save that died before
    fs::create_directories(partial, ec);
    if (ec)
      throw Error("cannot create '" + partial + "': " + ec.message());
  }
  barrier(comm);

  // This rank's blocks: only those it owns, read from its own memory.
  std::string part;
  int files = 0;
  for (const ProgramValue &value : values) {
    Executor::Block block = executor.persistentBlock(value.name);
    int64_t elements = 1;
    for (int64_t d : block.shape)
      elements *= d;
    if (!block.owner || elements == 0)
      continue;
    CheckpointShard shard;
    shard.file = shardFileName(value.name, block);
    shard.offsets = block.offsets;
    shard.shape = block.shape;
    shard.rank = rank;
    std::string bytes = serializeNpy(executor.readPersistentBlock(value.name));
    shard.bytes = bytes.size();
    shard.crc = crc32(bytes.data(), bytes.size());
    writeFile(join(partial, shard.file), bytes);
    part += shardLine(value.name, shard);
    if (++files == options.failAfterFiles) {
      std::string line = options.toolName + ": rank " + std::to_string(rank) +
                         ": injected failure while saving checkpoint '" + dir +
                         "', after " + std::to_string(files) + " shard files\n";
      std::fwrite(line.data(), 1, line.size(), stderr);
      std::fflush(stderr);
      std::_Exit(1);
    }
  }
  writeFile(join(partial, "manifest.rank" + std::to_string(rank)), part);
  barrier(comm);

  CheckpointSaveReport report;
  if (rank == 0) {
    std::string manifest = std::string(kHeader) + "\nsteps " +
                           std::to_string(steps) + "\n";
    for (const ProgramValue &value : values)
      manifest += "tensor " + value.name + " " +
                  (value.isState ? "state " : "parameter ") +
                  toString(value.dtype) + " " +
                  joinInts(value.globalShape, 'x', "scalar") + "\n";
    report.files.assign(ranks, 0);
    report.bytes.assign(ranks, 0);
    report.tensors = int64_t(values.size());
    for (int r = 0; r < ranks; ++r) {
      std::string path = join(partial, "manifest.rank" + std::to_string(r));
      bool ok;
      std::string text = readFile(path, ok);
      if (!ok)
        throw Error("cannot read '" + path + "' (rank " + std::to_string(r) +
                    "'s part of the checkpoint)");
      manifest += text;
      std::stringstream ss(text);
      std::string line;
      while (std::getline(ss, line)) {
        std::stringstream fields(line);
        std::string kind, name, file, offsets, shape;
        uint64_t bytes = 0;
        fields >> kind >> name >> file >> offsets >> shape >> bytes;
        ++report.files[r];
        report.bytes[r] += int64_t(bytes);
      }
      fs::remove(path);
    }
    writeFile(join(partial, kManifest), manifest);
    // The swap: DIR moves aside for an instant (a load finds DIR.old
    // then), DIR.partial becomes DIR, DIR.old goes.
    std::error_code ec;
    fs::remove_all(old, ec);
    if (fs::exists(dir)) {
      fs::rename(dir, old, ec);
      if (ec)
        throw Error("cannot move '" + dir + "' aside to '" + old +
                    "': " + ec.message());
    }
    fs::rename(partial, dir, ec);
    if (ec)
      throw Error("cannot rename '" + partial + "' to '" + dir +
                  "': " + ec.message());
    fs::remove_all(old, ec);
  }
  barrier(comm);
  return report;
}

} // namespace partita::runtime
