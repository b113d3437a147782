//===- Checkpoint.cpp - sharded training checkpoints ----------------------===//

#include "partita/runtime/Checkpoint.h"
#include "partita/runtime/Npy.h"

#include "runtime/lib/core/FileIO.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
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

constexpr const char *kHeader = "partita checkpoint 3";
constexpr const char *kManifest = "manifest.txt";
/// A manifest is a few lines per tensor and shard; a larger file is damage
/// and is not read into memory.
constexpr uint64_t kMaxManifestBytes = uint64_t(64) << 20;

std::string join(const std::string &dir, const std::string &name) {
  return (fs::path(dir) / name).string();
}

/// DIR without trailing separators, so DIR.partial and DIR.old are its
/// siblings ("ck/" must not give "ck/.partial").
std::string withoutTrailingSlash(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/')
    dir.pop_back();
  return dir;
}

std::string hex8(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof(text), "%08x", v);
  return text;
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

/// A whole number of at most `max`: digits only, no sign, no overflow.
bool parseWhole(const std::string &text, int64_t max, int64_t &out) {
  if (text.empty() || text.size() > 19 ||
      text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  uint64_t v = std::strtoull(text.c_str(), nullptr, 10);
  if (v > uint64_t(max))
    return false;
  out = int64_t(v);
  return true;
}

/// Dimensions or offsets; each at most 2^40 (as .npy's reader allows).
bool parseInts(const std::string &text, char sep, const char *empty,
               std::vector<int64_t> &out) {
  out.clear();
  if (text == empty)
    return true;
  size_t begin = 0;
  while (true) {
    size_t end = text.find(sep, begin);
    int64_t v;
    if (!parseWhole(text.substr(begin, end - begin), int64_t(1) << 40, v))
      return false;
    out.push_back(v);
    if (end == std::string::npos)
      return true;
    begin = end + 1;
  }
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

/// The number of elements of `shape`, or -1 when it overflows.
int64_t elementCount(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (!io::multiplyChecked(n, d, n))
      return -1;
  return n;
}

std::vector<std::string> splitWords(const std::string &line) {
  std::vector<std::string> words;
  std::stringstream ss(line);
  std::string word;
  while (ss >> word)
    words.push_back(word);
  return words;
}

/// The file a shard is saved in: its tensor's name, and its offsets unless
/// it is the whole tensor. The loader checks a shard line's file against
/// this, so a file stands for one tensor and one region only.
std::string shardFileName(const std::string &name,
                          const std::vector<int64_t> &offsets,
                          const std::vector<int64_t> &shape,
                          const std::vector<int64_t> &globalShape) {
  bool whole = shape == globalShape;
  return whole ? name + ".npy"
               : name + ".shard-" + joinInts(offsets, '-', "") + ".npy";
}

std::string shardLine(const std::string &name, const CheckpointShard &s) {
  return "shard " + name + " " + s.file + " " +
         joinInts(s.offsets, ',', "-") + " " + joinInts(s.shape, ',', "-") +
         " " + std::to_string(s.bytes) + " " + hex8(s.crc) + " " +
         std::to_string(s.rank) + "\n";
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

/// Where a save stands, for the test-only failures of CheckpointSaveOptions:
/// counts this rank's files and bytes and dies (as a kill would) or fails
/// a write (as a full disk would) at the point they name.
struct SaveFaults {
  const CheckpointSaveOptions &options;
  std::string dir;
  int rank = 0;
  int files = 0;
  int64_t bytes = 0;

  [[noreturn]] void die(const std::string &where) const {
    io::writeErrorLine(options.toolName + ": rank " + std::to_string(rank) +
                       ": injected failure while saving checkpoint '" + dir +
                       "', " + where);
    std::_Exit(1);
  }

  void atStage(const char *stage) const {
    if (options.failAtStage == stage)
      die(std::string("at stage ") + stage);
  }

  /// Writes `data` to `path` durably (write, fsync, close, all checked),
  /// dying or failing part way where the options say.
  void writeFile(const std::string &path, const std::string &data) {
    io::OutputFile out(path);
    size_t done = 0;
    while (done < data.size()) {
      size_t n = data.size() - done;
      for (int64_t limit : {options.failAfterBytes, options.diskFullAfterBytes})
        if (limit >= 0)
          n = size_t(std::clamp<int64_t>(limit - bytes, 0, int64_t(n)));
      out.write(data.data() + done, n);
      done += n;
      bytes += int64_t(n);
      if (done == data.size())
        break;
      if (bytes == options.failAfterBytes)
        die("after " + std::to_string(bytes) + " bytes, in '" + path + "'");
      out.fail("write", ENOSPC);
    }
    out.sync();
    out.close();
    if (++files == options.failAfterFiles)
      die("after " + std::to_string(files) + " shard files");
  }
};

} // namespace

Checkpoint openCheckpoint(const PlanFile &plan, const std::string &program,
                          const std::string &dirArg, bool paramsOnly) {
  std::string what = "checkpoint '" + dirArg + "'";
  std::string base = withoutTrailingSlash(dirArg);
  Checkpoint ck;
  ck.dir = base;
  // A save that died between moving DIR aside and renaming DIR.partial
  // leaves the previous checkpoint as DIR.old.
  std::error_code ec;
  if (!fs::exists(base, ec) && fs::exists(join(base + ".old", kManifest), ec))
    ck.dir = base + ".old";
  std::string path = join(ck.dir, kManifest);
  if (!fs::exists(path, ec))
    throw Error(what + ": cannot open '" + path +
                "' (write checkpoints with --save-checkpoint)");
  std::string text;
  try {
    text = io::readFile(path, kMaxManifestBytes, "the manifest");
  } catch (const Error &e) {
    throw Error(what + ": " + e.what());
  }
  auto corrupt = [&](int line, const std::string &why) {
    return Error(what + ": '" + path + "' is not a checkpoint manifest: line " +
                 std::to_string(line) + ": " + why);
  };
  size_t firstEnd = text.find('\n');
  std::string first = text.substr(0, firstEnd);
  if (first != kHeader) {
    if (first.rfind("partita checkpoint ", 0) == 0)
      throw corrupt(1, "expected '" + std::string(kHeader) + "', found '" +
                           first +
                           "' (a checkpoint format this partita does not "
                           "read: save it again with the partita that "
                           "wrote it, or start from --load-params)");
    throw corrupt(1, std::string("expected '") + kHeader + "'");
  }
  // The manifest is written last and ends with the CRC-32 of everything
  // before its last line: a manifest cut short, or with any byte changed,
  // is refused before a field of it is believed.
  size_t endLine = text.rfind("\nend ");
  if (text.empty() || text.back() != '\n' || endLine == std::string::npos ||
      text.find('\n', endLine + 1) != text.size() - 1)
    throw Error(what + ": '" + path +
                "' is incomplete: it does not end with its 'end CRC32' line "
                "(cut short, or not written by partita)");
  std::string endCrc = text.substr(endLine + 5, text.size() - endLine - 6);
  uint32_t crc = crc32(text.data(), endLine + 1);
  if (endCrc != hex8(crc))
    throw Error(what + ": '" + path + "' is damaged: its CRC-32 is " +
                hex8(crc) + ", its last line says '" + endCrc + "'");

  std::stringstream lines(text.substr(0, endLine + 1));
  std::string line;
  std::getline(lines, line);
  int number = 1;
  bool sawSteps = false;
  std::set<std::string> files;
  while (std::getline(lines, line)) {
    ++number;
    std::vector<std::string> w = splitWords(line);
    if (w.empty())
      continue;
    const std::string &kind = w[0];
    if (kind == "steps") {
      if (w.size() != 2 || sawSteps ||
          !parseWhole(w[1], kMaxCheckpointSteps, ck.steps))
        throw corrupt(number, "expected one 'steps N' line, N from 0 to " +
                                  std::to_string(kMaxCheckpointSteps));
      sawSteps = true;
    } else if (kind == "tensor") {
      CheckpointTensor t;
      if (w.size() != 5 || (w[2] != "parameter" && w[2] != "state") ||
          !parseDType(w[3], t.dtype) ||
          !parseInts(w[4], 'x', "scalar", t.globalShape) ||
          elementCount(t.globalShape) < 0 ||
          elementCount(t.globalShape) > (int64_t(1) << 40))
        throw corrupt(number, "expected 'tensor NAME parameter|state DTYPE "
                              "DIMS'");
      t.isState = w[2] == "state";
      if (!ck.tensors.emplace(w[1], t).second)
        throw corrupt(number, "a second tensor line for '" + w[1] + "'");
    } else if (kind == "shard") {
      CheckpointShard s;
      int64_t bytes = 0, rank = 0;
      const std::string &name = w.size() > 1 ? w[1] : kind;
      if (w.size() != 8 || !parseInts(w[3], ',', "-", s.offsets) ||
          !parseInts(w[4], ',', "-", s.shape) ||
          !parseWhole(w[5], int64_t(1) << 50, bytes) || w[6].size() != 8 ||
          w[6].find_first_not_of("0123456789abcdef") != std::string::npos ||
          !parseWhole(w[7], 1 << 24, rank))
        throw corrupt(number, "expected 'shard NAME FILE OFFSETS SHAPE BYTES "
                              "CRC32 RANK'");
      s.file = w[2];
      s.bytes = uint64_t(bytes);
      s.rank = int(rank);
      s.crc = uint32_t(std::strtoul(w[6].c_str(), nullptr, 16));
      auto it = ck.tensors.find(name);
      if (it == ck.tensors.end())
        throw corrupt(number, "shard of '" + name + "' before its tensor line");
      const std::vector<int64_t> &global = it->second.globalShape;
      bool inside = s.offsets.size() == global.size() &&
                    s.shape.size() == global.size();
      for (size_t d = 0; inside && d < global.size(); ++d)
        inside = s.offsets[d] + s.shape[d] <= global[d] && s.shape[d] > 0;
      if (!inside)
        throw corrupt(number, "the shard lies outside '" + name + "'");
      std::string expected = shardFileName(name, s.offsets, s.shape, global);
      if (s.file != expected)
        throw corrupt(number, "the shard at " + joinInts(s.offsets, ',', "-") +
                                  " of '" + name + "' is saved as '" +
                                  expected + "', not '" + s.file + "'");
      if (!files.insert(s.file).second)
        throw corrupt(number, "a second shard line for '" + s.file + "'");
      uint64_t size = npyFileSize(it->second.dtype, s.shape);
      if (s.bytes != size)
        throw corrupt(number, "'" + s.file + "' would be " +
                                  std::to_string(size) +
                                  " bytes as .npy, the line says " +
                                  std::to_string(s.bytes));
      it->second.shards.push_back(s);
    } else {
      throw corrupt(number, "unknown line '" + kind + "'");
    }
  }
  if (!sawSteps)
    throw corrupt(number, "no 'steps N' line");

  // The shards of every tensor tile it: disjoint, and together as many
  // elements as the tensor (so none is missing).
  for (const auto &[name, tensor] : ck.tensors) {
    int64_t covered = 0;
    const std::vector<CheckpointShard> &shards = tensor.shards;
    for (size_t i = 0; i < shards.size(); ++i) {
      covered += elementCount(shards[i].shape);
      for (size_t j = 0; j < i; ++j) {
        bool overlap = true;
        for (size_t d = 0; d < tensor.globalShape.size(); ++d)
          overlap &= shards[i].offsets[d] <
                         shards[j].offsets[d] + shards[j].shape[d] &&
                     shards[j].offsets[d] <
                         shards[i].offsets[d] + shards[i].shape[d];
        if (overlap)
          throw Error(what + ": '" + path + "': the shards '" +
                      shards[j].file + "' and '" + shards[i].file + "' of '" +
                      name + "' overlap");
      }
    }
    if (covered != elementCount(tensor.globalShape))
      throw Error(what + ": '" + path + "': the shards of '" + name +
                  "' hold " + std::to_string(covered) + " of its " +
                  std::to_string(elementCount(tensor.globalShape)) +
                  " elements");
  }

  // Against the plan: every parameter (and state buffer) the plan has, with
  // its dtype, shape and role; and nothing the plan does not have (an
  // untied model's lm_head in a tied plan would otherwise be dropped).
  std::map<std::string, const ProgramValue *> planned;
  std::vector<ProgramValue> values = plan.persistent(program);
  for (const ProgramValue &value : values)
    planned[value.name] = &value;
  for (const ProgramValue &value : values) {
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
  for (const auto &[name, tensor] : ck.tensors) {
    if (paramsOnly && tensor.isState)
      continue;
    auto it = planned.find(name);
    if (it == planned.end())
      throw Error(what + " has " + (tensor.isState ? "state" : "parameter") +
                  " '" + name + "', which the plan has not (saved from " +
                  "another model or optimizer? a model with an untied "
                  "lm_head does not load into a tied one, nor the reverse)");
    if (tensor.isState != it->second->isState)
      throw Error(what + ": '" + name + "' is " +
                  (tensor.isState ? "state" : "a parameter") +
                  " there, but the plan's '" + name + "' is " +
                  (it->second->isState ? "state" : "a parameter"));
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
    auto found = ck.tensors.find(value.name);
    if (found == ck.tensors.end())
      throw Error(what + " has no '" + value.name + "': program '" + program +
                  "' of the plan needs it");
    const CheckpointTensor &tensor = found->second;
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
      std::error_code ec;
      if (!fs::exists(path, ec))
        throw Error(what + ": cannot open shard '" + path + "' of '" +
                    value.name + "'");
      // The size first: only a file of the manifest's size is read.
      std::string bytes;
      try {
        io::InputFile in(path, "shard");
        if (in.size() != shard.bytes)
          throw Error(what + ": shard '" + path + "' holds " +
                      std::to_string(in.size()) + " bytes, the manifest says " +
                      std::to_string(shard.bytes));
        bytes.resize(size_t(in.size()));
        in.readAt(0, bytes.data(), bytes.size());
      } catch (const Error &e) {
        if (std::string(e.what()).rfind(what, 0) == 0)
          throw;
        throw Error(what + ": " + e.what());
      }
      uint32_t crc = crc32(bytes.data(), bytes.size());
      if (crc != shard.crc)
        throw Error(what + ": shard '" + path + "' is damaged: its CRC-32 is " +
                    hex8(crc) + ", the manifest says " + hex8(shard.crc));
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
    // The data position is the step count (TokenData.h); the optimizer's
    // step counter, where it has one (nn-autodiff's scalar state "step",
    // adding 1 in f32: exact to 2^24, where it stays), must agree with it.
    // With fp16-mixed's loss scaling (state "loss_scale") a skipped step
    // does not count, so the counter may lag the data position.
    float counted = float(std::min<int64_t>(ck.steps, int64_t(1) << 24));
    bool skips = false;
    for (const ProgramValue &other : plan.persistent(program))
      skips |= other.isState && other.name == "loss_scale";
    float stepCount = data.numElements() == 1 ? data.data<float>()[0] : 0;
    if (value.name == "step" && value.isState && value.globalShape.empty() &&
        value.dtype == DType::F32 && data.numElements() == 1 &&
        (skips ? !(stepCount >= 0 && stepCount <= counted)
               : stepCount != counted))
      throw Error(what + ": its optimizer step counter 'step' is " +
                  (std::ostringstream() << data.data<float>()[0]).str() +
                  ", but its manifest says 'steps " + std::to_string(ck.steps) +
                  "' (the data position): they disagree");
    executor.writePersistentBlock(value.name, data);
  }
}

void loadParameters(const std::string &dirArg, Executor &executor,
                    const PlanFile &plan, const std::string &program) {
  std::string dir = withoutTrailingSlash(dirArg);
  std::error_code ec;
  if (fs::exists(join(dir, kManifest), ec) ||
      (!fs::exists(dir, ec) && fs::exists(join(dir + ".old", kManifest), ec))) {
    Checkpoint ck = openCheckpoint(plan, program, dir, /*paramsOnly=*/true);
    loadCheckpoint(ck, executor, plan, program, /*paramsOnly=*/true);
    return;
  }
  std::set<std::string> parameters;
  for (const ProgramValue &value : plan.persistent(program))
    if (value.isParameter)
      parameters.insert(value.name);
  for (const ProgramValue &value : plan.persistent(program)) {
    if (!value.isParameter)
      continue;
    std::string path = join(dir, value.name + ".npy");
    if (!fs::exists(path, ec))
      throw Error("parameters '" + dirArg + "' have no '" + value.name +
                  ".npy' (nor a checkpoint manifest): the plan's parameter '" +
                  value.name + "'");
    Tensor t = readNpy(path);
    if (t.getDType() != value.dtype || t.getShape() != value.globalShape)
      throw Error("parameters '" + dirArg + "': '" + value.name + ".npy' is " +
                  describeTensor(t.getDType(), t.getShape()) +
                  ", but the plan's parameter '" + value.name + "' is " +
                  describeTensor(value.dtype, value.globalShape));
    executor.setPersistent(value.name, t);
  }
  // And no array the plan has no parameter for (an untied model's lm_head
  // into a tied plan would otherwise be dropped without a word).
  if (fs::is_directory(dir, ec))
    for (const fs::directory_entry &entry : fs::directory_iterator(dir, ec))
      if (entry.path().extension() == ".npy" &&
          !parameters.count(entry.path().stem().string()))
        throw Error("parameters '" + dirArg + "' have '" +
                    entry.path().filename().string() +
                    "', but the plan has no parameter '" +
                    entry.path().stem().string() +
                    "' (saved from another model? a model with an untied "
                    "lm_head does not load into a tied one)");
}

bool parseCheckpointFault(const std::string &specArg,
                          CheckpointSaveOptions &options) {
  std::string spec = specArg;
  int64_t n = 0;
  size_t at = spec.find('@');
  if (at != std::string::npos) {
    if (!parseWhole(spec.substr(at + 1), 1 << 24, n))
      return false;
    options.failRank = int(n);
    spec = spec.substr(0, at);
  }
  size_t colon = spec.find(':');
  std::string kind = colon == std::string::npos ? "files" : spec.substr(0, colon);
  std::string arg = colon == std::string::npos ? spec : spec.substr(colon + 1);
  if (kind == "stage") {
    for (const char *stage : kCheckpointSaveStages)
      if (arg == stage) {
        options.failAtStage = arg;
        return true;
      }
    return false;
  }
  if (!parseWhole(arg, INT64_MAX, n))
    return false;
  if (kind == "files" && n >= 1 && n <= INT32_MAX)
    options.failAfterFiles = int(n);
  else if (kind == "bytes")
    options.failAfterBytes = n;
  else if (kind == "full")
    options.diskFullAfterBytes = n;
  else
    return false;
  return true;
}

CheckpointSaveReport saveCheckpoint(Executor &executor, Communicator *comm,
                                    const PlanFile &plan,
                                    const std::string &program,
                                    const std::string &dirArg, int64_t steps,
                                    const CheckpointSaveOptions &options) {
  int rank = comm ? comm->rank() : 0;
  int ranks = comm ? comm->size() : 1;
  std::string dir = withoutTrailingSlash(dirArg);
  std::string partial = dir + ".partial", old = dir + ".old";
  std::string parent = fs::path(dir).parent_path().string();
  if (parent.empty())
    parent = ".";
  // The test-only failures, for the rank they name.
  CheckpointSaveOptions none;
  none.toolName = options.toolName;
  SaveFaults faults{options.failRank < 0 || options.failRank == rank ? options
                                                                     : none,
                    dirArg, rank};
  if (steps < 0 || steps > kMaxCheckpointSteps)
    throw Error("cannot checkpoint '" + dirArg + "' after " +
                std::to_string(steps) + " steps: a checkpoint holds 0 to " +
                std::to_string(kMaxCheckpointSteps));
  std::vector<ProgramValue> values = plan.persistent(program);
  for (const ProgramValue &value : values)
    if (value.name.empty() ||
        value.name.find_first_of(" \t\n/\\") != std::string::npos)
      throw Error("cannot checkpoint '" + value.name +
                  "': a tensor name in a checkpoint has no spaces or slashes");
  if (rank == 0) {
    std::error_code ec;
    if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
      throw Error("cannot save checkpoint '" + dirArg +
                  "': it exists and is not a directory");
    fs::remove_all(partial, ec); // a save that died before
    fs::create_directories(partial, ec);
    if (ec)
      throw Error("cannot create '" + partial + "': " + ec.message());
  }
  barrierOfAll(comm);

  // This rank's blocks: only those it owns, read from its own memory.
  std::string part;
  for (const ProgramValue &value : values) {
    Executor::Block block = executor.persistentBlock(value.name);
    if (!block.owner || elementCount(block.shape) == 0)
      continue;
    CheckpointShard shard;
    shard.file = shardFileName(value.name, block.offsets, block.shape,
                               block.globalShape);
    shard.offsets = block.offsets;
    shard.shape = block.shape;
    shard.rank = rank;
    std::string bytes = serializeNpy(executor.readPersistentBlock(value.name));
    shard.bytes = bytes.size();
    shard.crc = crc32(bytes.data(), bytes.size());
    faults.writeFile(join(partial, shard.file), bytes);
    part += shardLine(value.name, shard);
  }
  faults.writeFile(join(partial, "manifest.rank" + std::to_string(rank)), part);
  barrierOfAll(comm);

  CheckpointSaveReport report;
  if (rank == 0) {
    faults.atStage("shards-written");
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
      std::string text = io::readFile(path, kMaxManifestBytes,
                                      "rank " + std::to_string(r) +
                                          "'s part of the checkpoint");
      manifest += text;
      std::stringstream ss(text);
      std::string line;
      while (std::getline(ss, line)) {
        std::vector<std::string> w = splitWords(line);
        ++report.files[r];
        report.bytes[r] += w.size() > 5 ? std::atoll(w[5].c_str()) : 0;
      }
    }
    manifest += "end " + hex8(crc32(manifest.data(), manifest.size())) + "\n";
    // The manifest last: a DIR.partial without it is never loaded.
    faults.writeFile(join(partial, kManifest), manifest);
    for (int r = 0; r < ranks; ++r)
      fs::remove(join(partial, "manifest.rank" + std::to_string(r)));
    io::syncDirectory(partial);
    faults.atStage("manifest-written");

    // The swap. DIR, when there, is the checkpoint, and a DIR.old beside
    // it is stale; without DIR, DIR.old (a save that died between the
    // renames below) is the checkpoint and stays until DIR is there again.
    // So at every instant DIR, or else DIR.old, holds a whole checkpoint.
    std::error_code ec;
    if (fs::exists(dir, ec)) {
      fs::remove_all(old, ec);
      if (ec)
        throw Error("cannot remove '" + old + "': " + ec.message());
      io::renamePath(dir, old);
      io::syncDirectory(parent);
      faults.atStage("moved-aside");
    }
    io::renamePath(partial, dir);
    io::syncDirectory(parent);
    faults.atStage("renamed");
    fs::remove_all(old, ec);
    io::syncDirectory(parent);
  }
  barrierOfAll(comm);
  return report;
}

} // namespace partita::runtime
