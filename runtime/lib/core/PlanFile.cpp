//===- PlanFile.cpp - parsing and validating plan files
//--------------------===//
//
// Everything the executor later relies on is checked here, once, so that a
// malformed plan is an Error naming what is wrong instead of a crash or a
// silent out-of-bounds write: versions, the mesh, buffer ids, shapes against
// shardings, the memory plan (alignment, bounds and overlap of live ranges,
// arena sizes equal to what the buffers need), kernels and collectives; and
// first of all the content checksum (runtime/plan/PlanChecksum.h).
//
//===----------------------------------------------------------------------===//

#include "FileIO.h"
#include "PlanInternal.h"
#include "partita/runtime/PipelineSchedule.h"
#include "runtime/plan/PlanMemory.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace partita::runtime {

namespace {

[[noreturn]] void fail(const std::string &what, const std::string &msg) {
  throw Error(what + ": " + msg);
}

std::string shapeString(const google::protobuf::RepeatedField<int64_t> &s) {
  std::string out = "[";
  for (int i = 0; i < s.size(); ++i)
    out += (i ? "x" : "") + std::to_string(s[i]);
  return out + "]";
}

/// A CUSTOM kernel names its kernel, and each attribute once, with a value.
/// (Whether the name is registered is checked when an executor is built,
/// against its backend: KernelRegistry.h.)
template <typename Fail>
void checkCustomKernel(const plan::Kernel &k, Fail fail) {
  if (k.custom_name().empty())
    fail(" is a custom kernel with no custom_name");
  std::set<std::string> seen;
  for (const plan::NamedAttr &a : k.custom_attrs()) {
    if (!seen.insert(a.name()).second)
      fail(" (custom kernel '" + k.custom_name() + "') has attribute '" +
           a.name() + "' twice");
    if (a.value().value_case() == plan::AttrValue::VALUE_NOT_SET)
      fail(" (custom kernel '" + k.custom_name() + "') has attribute '" +
           a.name() + "' with no value");
  }
}

void validateMesh(const plan::Mesh &mesh, const std::string &what,
                  std::map<std::string, int64_t> &axisSizes,
                  int64_t &numDevices) {
  numDevices = 1;
  for (const plan::MeshAxis &axis : mesh.axes()) {
    if (axis.name().empty())
      fail(what, "mesh axis with an empty name");
    if (axis.size() < 1)
      fail(what, "mesh axis '" + axis.name() + "' has size " +
                     std::to_string(axis.size()) + " (must be >= 1)");
    if (!axisSizes.emplace(axis.name(), axis.size()).second)
      fail(what, "mesh axis '" + axis.name() + "' appears twice");
    if (numDevices > (int64_t(1) << 20) / axis.size())
      fail(what, "mesh has more than 2^20 devices");
    numDevices *= axis.size();
  }
  if (!mesh.devices().empty()) {
    if (mesh.devices_size() != numDevices)
      fail(what, "mesh lists " + std::to_string(mesh.devices_size()) +
                     " devices but its axes make " +
                     std::to_string(numDevices));
    std::vector<bool> seen(numDevices, false);
    for (int64_t d : mesh.devices()) {
      if (d < 0 || d >= numDevices || seen[d])
        fail(what, "mesh devices are not a permutation of 0.." +
                       std::to_string(numDevices - 1));
      seen[d] = true;
    }
  }
}

int64_t checkedNumBytes(const plan::Buffer &buffer, const std::string &what) {
  int64_t n = 1;
  for (int64_t d : buffer.local_shape()) {
    if (d < 0)
      fail(what, "negative dimension in local shape " +
                     shapeString(buffer.local_shape()));
    if (d != 0 && n > (int64_t(1) << 50) / d)
      fail(what, "local shape " + shapeString(buffer.local_shape()) +
                     " is too large");
    n *= d;
  }
  return n * int64_t(sizeOf(toDType(buffer.dtype())));
}

/// Gradient buckets (Collective.bucket > 0): the members of one bucket are
/// adjacent all_reduces or reduce_scatters with one kind, axes, op and
/// dtype, and an id names one run only.
void validateBuckets(const plan::Program &program, const std::string &what) {
  std::set<int64_t> seen;
  int64_t n = program.instructions_size();
  for (int64_t i = 0; i < n;) {
    const plan::Instruction &first = program.instructions(i);
    int64_t id = first.has_collective() ? first.collective().bucket() : 0;
    if (id == 0) {
      ++i;
      continue;
    }
    std::string iw = "instruction " + std::to_string(i);
    const plan::Collective &c = first.collective();
    if (id < 0)
      fail(what, iw + ": bucket " + std::to_string(id) + " is negative");
    if (c.kind() != plan::Collective::ALL_REDUCE &&
        c.kind() != plan::Collective::REDUCE_SCATTER)
      fail(what, iw + ": only all_reduce and reduce_scatter can be in a " +
                     "bucket (bucket " + std::to_string(id) + ")");
    if (!seen.insert(id).second)
      fail(what, iw + ": bucket " + std::to_string(id) +
                     " continues after other instructions (a bucket's "
                     "members must be adjacent)");
    auto dtypeOf = [&](const plan::Collective &m) {
      return program.buffers(m.input()).dtype();
    };
    // The call runs once every member has packed its input, so no member
    // may read another's output.
    std::set<int64_t> outputs{c.output()};
    int64_t j = i + 1;
    for (; j < n; ++j) {
      const plan::Instruction &next = program.instructions(j);
      if (!next.has_collective() || next.collective().bucket() != id)
        break;
      const plan::Collective &m = next.collective();
      if (outputs.count(m.input()))
        fail(what, "instruction " + std::to_string(j) + ": bucket " +
                       std::to_string(id) + " member reads buffer " +
                       std::to_string(m.input()) +
                       ", the output of an earlier member of the bucket");
      outputs.insert(m.output());
      if (m.kind() != c.kind() || m.op() != c.op() ||
          !std::equal(m.axes().begin(), m.axes().end(), c.axes().begin(),
                      c.axes().end()) ||
          dtypeOf(m) != dtypeOf(c))
        fail(what, "instruction " + std::to_string(j) + ": bucket " +
                       std::to_string(id) + " mixes collectives of " +
                       "different kinds, axes, ops or dtypes");
    }
    i = j;
  }
}

/// Parameters and state are found by name, and each result that replaces
/// one is copied into it after a step: names must be unique, and a result
/// must have exactly the local layout of what it replaces (else the copy
/// would mix up shards, or write past the buffer).
void validateReplacements(const plan::Program &program,
                          const std::string &what) {
  std::map<std::string, int64_t> persistent;
  for (const plan::Buffer &b : program.buffers())
    if (b.role() == plan::PARAMETER || b.role() == plan::STATE)
      if (!persistent.emplace(b.name(), b.id()).second)
        fail(what, "two parameters or state buffers are named '" + b.name() +
                       "'");
  std::set<int64_t> results(program.results().begin(),
                            program.results().end());
  std::set<std::string> replaced;
  for (const plan::Buffer &b : program.buffers()) {
    if (b.replaces().empty())
      continue;
    std::string bw = "buffer " + std::to_string(b.id()) + " replaces '" +
                     b.replaces() + "'";
    if (!results.count(b.id()))
      fail(what, bw + " but is not a result of the program");
    auto it = persistent.find(b.replaces());
    if (it == persistent.end())
      fail(what, bw + ", which is no parameter or state buffer");
    if (!replaced.insert(b.replaces()).second)
      fail(what, "two results replace '" + b.replaces() + "'");
    const plan::Buffer &target = program.buffers(it->second);
    auto shardingOf = [](const plan::Buffer &x) {
      std::vector<std::vector<std::string>> s;
      for (const plan::DimSharding &d : x.sharding())
        s.emplace_back(d.axes().begin(), d.axes().end());
      s.resize(x.local_shape_size());
      return s;
    };
    if (b.dtype() != target.dtype() ||
        !std::equal(b.local_shape().begin(), b.local_shape().end(),
                    target.local_shape().begin(),
                    target.local_shape().end()) ||
        !std::equal(b.global_shape().begin(), b.global_shape().end(),
                    target.global_shape().begin(),
                    target.global_shape().end()) ||
        shardingOf(b) != shardingOf(target))
      fail(what, bw + " but its dtype, shapes or sharding differ from it");
    if (b.partial_axes_size())
      fail(what, bw + " but is a partial value (reduce it before the step "
                      "ends)");
  }
}

/// A donated result (Buffer.in_place) shares the address of the buffer it
/// replaces from the instruction that writes it on: nothing may read the
/// old value later, and that instruction only where it may write over it
/// (plan::writesOverOldValue, the compiler's rule too).
void validateInPlace(const plan::Program &program, const std::string &what) {
  std::map<std::string, int64_t> persistent;
  for (const plan::Buffer &b : program.buffers())
    if (b.role() == plan::PARAMETER || b.role() == plan::STATE)
      persistent.emplace(b.name(), b.id());
  for (const plan::Buffer &b : program.buffers()) {
    if (!b.in_place())
      continue;
    std::string bw = "buffer " + std::to_string(b.id()) + " is in_place";
    if (b.role() != plan::ACTIVATION || b.replaces().empty())
      fail(what, bw + " but is no activation result that replaces a "
                      "parameter or state buffer");
    int64_t target = persistent.at(b.replaces()); // validateReplacements
    int64_t writer = -1;
    for (int64_t i = 0; i < program.instructions_size(); ++i) {
      const plan::Instruction &inst = program.instructions(i);
      bool writes =
          inst.has_kernel()
              ? std::count(inst.kernel().outputs().begin(),
                           inst.kernel().outputs().end(), b.id()) > 0
              : inst.collective().output() == b.id();
      if (writes && writer < 0)
        writer = i;
    }
    if (writer < 0)
      fail(what, bw + " but no instruction writes it");
    for (int64_t i = writer; i < program.instructions_size(); ++i) {
      const plan::Instruction &inst = program.instructions(i);
      std::vector<int64_t> reads;
      if (inst.has_kernel())
        reads.assign(inst.kernel().inputs().begin(),
                     inst.kernel().inputs().end());
      else if (inst.collective().kind() != plan::Collective::AXIS_INDEX)
        reads.push_back(inst.collective().input());
      if (std::count(reads.begin(), reads.end(), target) == 0)
        continue;
      // Read once, where the writer may write over it.
      if (i != writer ||
          !plan::writesOverOldValue(program, inst, b.id(), target))
        fail(what, bw + " (shares the bytes of '" + b.replaces() +
                       "' from instruction " + std::to_string(writer) +
                       " on), but instruction " + std::to_string(i) +
                       " reads the old '" + b.replaces() + "'");
    }
  }
}

void validateProgram(const plan::Program &program, const std::string &planWhat,
                     const std::map<std::string, int64_t> &axisSizes) {
  std::string what = planWhat + ": program '" + program.name() + "'";
  int64_t devices = 1;
  for (const auto &axis : axisSizes)
    devices *= axis.second;
  int64_t numBuffers = program.buffers_size();
  int64_t numInstructions = program.instructions_size();
  if (program.arena_bytes() < 0 || program.host_arena_bytes() < 0)
    fail(what, "negative arena size");

  auto checkAxes = [&](const auto &axes, const std::string &where) {
    std::set<std::string> seen;
    for (const std::string &axis : axes) {
      if (!axisSizes.count(axis))
        fail(what, where + " names mesh axis '" + axis +
                       "', which the mesh does not have");
      if (!seen.insert(axis).second)
        fail(what, where + " names mesh axis '" + axis + "' twice");
    }
  };

  struct Interval {
    int64_t begin, end, first, last, id;
  };
  // Per memory space (plan::DEVICE, plan::HOST): each has its own arena,
  // and the bytes its memory plan needs (the largest offset plus size).
  std::vector<Interval> arenas[2];
  int64_t needed[2] = {0, 0};
  for (int64_t i = 0; i < numBuffers; ++i) {
    const plan::Buffer &buffer = program.buffers(i);
    std::string bw =
        "buffer " + std::to_string(i) +
        (buffer.name().empty() ? "" : " ('" + buffer.name() + "')");
    if (buffer.id() != i)
      fail(what, bw + " has id " + std::to_string(buffer.id()) +
                     " (buffers are numbered by position)");
    if (!plan::DType_IsValid(buffer.dtype()))
      fail(what,
           bw + " has an unknown dtype " + std::to_string(buffer.dtype()));
    if (!plan::Role_IsValid(buffer.role()))
      fail(what, bw + " has an unknown role " + std::to_string(buffer.role()));
    if (!plan::MemorySpace_IsValid(buffer.memory_space()))
      fail(what, bw + " has an unknown memory space " +
                     std::to_string(buffer.memory_space()) +
                     " (0: device, 1: host)");
    bool host = buffer.memory_space() == plan::HOST;
    int64_t arenaBytes =
        host ? program.host_arena_bytes() : program.arena_bytes();
    int64_t bytes = checkedNumBytes(buffer, what + ": " + bw);
    if (buffer.global_shape_size() != buffer.local_shape_size())
      fail(what, bw + " has local shape " + shapeString(buffer.local_shape()) +
                     " but global shape " + shapeString(buffer.global_shape()));
    if (!program.partitioned()) {
      if (buffer.sharding_size() || buffer.partial_axes_size())
        fail(what, bw + " is sharded in a program that is not partitioned");
    } else {
      if (buffer.sharding_size() &&
          buffer.sharding_size() != buffer.local_shape_size())
        fail(what, bw + " has " + std::to_string(buffer.sharding_size()) +
                       " dimension shardings for rank " +
                       std::to_string(buffer.local_shape_size()));
      std::vector<std::string> all;
      for (const plan::DimSharding &dim : buffer.sharding())
        all.insert(all.end(), dim.axes().begin(), dim.axes().end());
      all.insert(all.end(), buffer.partial_axes().begin(),
                 buffer.partial_axes().end());
      checkAxes(all, bw + "'s sharding");
      if (!plan::ReduceOp_IsValid(buffer.partial_op()) ||
          buffer.partial_op() == plan::MIN)
        fail(what, bw + " has an unsupported partial reduction");
    }
    for (int d = 0; d < buffer.local_shape_size(); ++d) {
      int64_t factor = 1;
      if (d < buffer.sharding_size())
        for (const std::string &axis : buffer.sharding(d).axes())
          factor *= axisSizes.at(axis);
      // Padded dimensions (a global size the shard count does not divide)
      // hold fewer real elements than local size times shard count.
      if (buffer.global_shape(d) > buffer.local_shape(d) * factor ||
          (buffer.global_shape(d) == 0) != (buffer.local_shape(d) == 0))
        fail(what, bw + ": global shape " + shapeString(buffer.global_shape()) +
                       " exceeds local shape " +
                       shapeString(buffer.local_shape()) +
                       " times its sharding at dimension " + std::to_string(d));
      // Padding is below the lcm of shard counts, each a product of mesh
      // axes, so below the device count: more means local and global
      // shapes disagree (a mesh changed after partitioning).
      if (buffer.local_shape(d) * factor - buffer.global_shape(d) >= devices)
        fail(what, bw + ": global shape " + shapeString(buffer.global_shape()) +
                       " is smaller than local shape " +
                       shapeString(buffer.local_shape()) +
                       " times its sharding at dimension " +
                       std::to_string(d) + " by " + std::to_string(devices) +
                       " or more (padding is less than the device count)");
    }
    switch (buffer.role()) {
    case plan::ACTIVATION:
      // A donated update (in_place) lives in the buffer it replaces, not
      // in the arena (validateInPlace).
      if (!buffer.in_place() &&
          (buffer.offset() < 0 || bytes > arenaBytes ||
           buffer.offset() > arenaBytes - bytes))
        fail(what, bw + " at " + (host ? "host " : "") + "arena offset " +
                       std::to_string(buffer.offset()) + " with " +
                       std::to_string(bytes) + " bytes does not fit the " +
                       (host ? "host " : "") + "arena of " +
                       std::to_string(arenaBytes) + " bytes");
      // Kernels cast arena bytes to the buffer's dtype.
      if (buffer.offset() % kArenaAlignment)
        fail(what, bw + " at " + (host ? "host " : "") + "arena offset " +
                       std::to_string(buffer.offset()) +
                       " is not a multiple of " +
                       std::to_string(kArenaAlignment) + " bytes");
      needed[host] = std::max(needed[host], buffer.offset() + bytes);
      if (buffer.first_use() < 0 || buffer.last_use() < buffer.first_use() ||
          buffer.last_use() > numInstructions)
        fail(what, bw + " has an invalid live range [" +
                       std::to_string(buffer.first_use()) + ", " +
                       std::to_string(buffer.last_use()) + "]");
      if (bytes > 0 && !buffer.in_place())
        arenas[host].push_back({buffer.offset(), buffer.offset() + bytes,
                         buffer.first_use(), buffer.last_use(), i});
      break;
    case plan::PARAMETER: {
      if (buffer.name().empty())
        fail(what, bw + " is a parameter without a name");
      const plan::Init &init = buffer.init();
      if (!plan::Init::Kind_IsValid(init.kind()))
        fail(what, bw + " has an unknown initializer kind");
      DType dt = toDType(buffer.dtype());
      if (dt != DType::F32 && dt != DType::F64 && dt != DType::BF16 &&
          dt != DType::F16)
        fail(what, bw + ": parameters of dtype " + toString(dt) +
                       " cannot be initialized (f32, f64, bf16 or f16 only)");
      break;
    }
    case plan::INPUT:
      break;
    case plan::STATE:
      if (buffer.name().empty())
        fail(what, bw + " is training state without a name");
      if (!buffer.master_of().empty() && !buffer.has_init())
        fail(what, bw + " is the master copy of '" + buffer.master_of() +
                       "' without an initializer");
      if (buffer.has_init()) {
        if (!plan::Init::Kind_IsValid(buffer.init().kind()))
          fail(what, bw + " has an unknown initializer kind");
        DType dt = toDType(buffer.dtype());
        if (dt != DType::F32 && dt != DType::F64)
          fail(what, bw + " is initialized state of dtype " + toString(dt) +
                         " (f32 or f64 only)");
      }
      break;
    case plan::CONSTANT:
      if (int64_t(buffer.data().size()) != bytes)
        fail(what, bw + " is a constant of " + std::to_string(bytes) +
                       " bytes, but holds " +
                       std::to_string(buffer.data().size()));
      break;
    default:
      break;
    }
  }
  // Every rank allocates (and zero-fills) the arenas the plan declares: a
  // size beyond what its buffers need is an error, not memory to waste.
  if (program.arena_bytes() != needed[0] ||
      program.host_arena_bytes() != needed[1])
    fail(what, (program.arena_bytes() != needed[0]
                    ? "arena_bytes is " + std::to_string(program.arena_bytes()) +
                          ", but its activations need " +
                          std::to_string(needed[0])
                    : "host_arena_bytes is " +
                          std::to_string(program.host_arena_bytes()) +
                          ", but its host activations need " +
                          std::to_string(needed[1])) +
                   " (the largest offset plus size)");
  // A buffer that takes over an input's bytes (Buffer.reuses): written by
  // an instruction that may write over an input (PlanMemory.h), reading
  // that input there for the last time, at the same offset, size and memory
  // space. The two are then live at once only at that instruction, where
  // the overlap below is allowed.
  for (int64_t i = 0; i < numBuffers; ++i) {
    const plan::Buffer &b = program.buffers(i);
    if (!b.has_reuses())
      continue;
    std::string bw = "buffer " + std::to_string(i) + " reuses buffer " +
                     std::to_string(b.reuses());
    if (b.reuses() < 0 || b.reuses() >= numBuffers || b.reuses() == i)
      fail(what, bw + ", which is not another buffer of the program");
    const plan::Buffer &in = program.buffers(b.reuses());
    if (b.role() != plan::ACTIVATION || in.role() != plan::ACTIVATION ||
        b.in_place() || in.in_place())
      fail(what, bw + ", but only an activation may take over another "
                      "activation's arena bytes");
    if (in.offset() != b.offset() || in.memory_space() != b.memory_space() ||
        checkedNumBytes(in, what) != checkedNumBytes(b, what))
      fail(what, bw + " at another offset, size or memory space");
    int64_t at = b.first_use();
    bool reads = false, writes = false;
    if (at >= 0 && at < numInstructions) {
      const plan::Instruction &inst = program.instructions(at);
      if (inst.has_kernel()) {
        const auto &ins = inst.kernel().inputs();
        const auto &outs = inst.kernel().outputs();
        reads = std::find(ins.begin(), ins.end(), b.reuses()) != ins.end();
        writes = std::find(outs.begin(), outs.end(), i) != outs.end();
      } else if (inst.has_collective()) {
        reads = inst.collective().input() == b.reuses();
        writes = inst.collective().output() == i;
      }
      if (!plan::mayWriteOverInput(inst, b.reuses()))
        reads = false;
    }
    if (!reads || !writes || in.last_use() != at)
      fail(what, bw + ", but instruction " + std::to_string(at) +
                      " (where it is written) is not one that writes its "
                      "output over an input it reads for the last time");
  }
  auto reusePair = [&](const Interval &a, const Interval &b) {
    const plan::Buffer &x = program.buffers(a.id), &y = program.buffers(b.id);
    return (y.has_reuses() && y.reuses() == a.id && a.last == b.first) ||
           (x.has_reuses() && x.reuses() == b.id && b.last == a.first);
  };
  // The memory plan: two buffers of one arena that are live at once must
  // not overlap.
  for (std::vector<Interval> &arena : arenas) {
    std::sort(
        arena.begin(), arena.end(),
        [](const Interval &a, const Interval &b) { return a.begin < b.begin; });
    for (size_t i = 0; i < arena.size(); ++i)
      for (size_t j = i + 1; j < arena.size() && arena[j].begin < arena[i].end;
           ++j)
        if (arena[i].first <= arena[j].last &&
            arena[j].first <= arena[i].last && !reusePair(arena[i], arena[j]))
          fail(what, "the memory plan overlaps buffers " +
                         std::to_string(arena[i].id) + " and " +
                         std::to_string(arena[j].id) +
                         ", which are live at the same time");
  }

  auto checkId = [&](int64_t id, const std::string &where) {
    if (id < 0 || id >= numBuffers)
      fail(what, where + " refers to buffer " + std::to_string(id) +
                     ", but the program has " + std::to_string(numBuffers));
  };
  // A use outside the declared live range could read bytes that the memory
  // plan gave to another buffer.
  auto checkLive = [&](int64_t id, int64_t index) {
    const plan::Buffer &b = program.buffers(id);
    if (b.role() == plan::ACTIVATION &&
        (index < b.first_use() || index > b.last_use()))
      fail(what, "instruction " + std::to_string(index) + " uses buffer " +
                     std::to_string(id) + " outside its live range [" +
                     std::to_string(b.first_use()) + ", " +
                     std::to_string(b.last_use()) + "]");
  };
  auto checkWritable = [&](int64_t id, const std::string &where) {
    checkId(id, where);
    if (program.buffers(id).role() != plan::ACTIVATION)
      fail(what, where + " writes buffer " + std::to_string(id) +
                     ", which is not an activation");
  };
  for (int64_t i = 0; i < numInstructions; ++i) {
    const plan::Instruction &inst = program.instructions(i);
    std::string iw = "instruction " + std::to_string(i);
    if (inst.has_kernel()) {
      const plan::Kernel &k = inst.kernel();
      std::optional<KernelKind> kind = kernelKindFromPlan(k.kind());
      if (!kind)
        fail(what, iw + " has unknown kernel kind " + std::to_string(k.kind()));
      if (k.outputs_size() == 0)
        fail(what, iw + " (" + toString(*kind) + ") has no output");
      if (*kind == KernelKind::Custom)
        checkCustomKernel(k, [&](const std::string &m) { fail(what, iw + m); });
      for (int64_t id : k.inputs()) {
        checkId(id, iw);
        checkLive(id, i);
      }
      for (int64_t id : k.outputs()) {
        checkWritable(id, iw);
        checkLive(id, i);
      }
    } else if (inst.has_collective()) {
      const plan::Collective &c = inst.collective();
      if (!program.partitioned())
        fail(what,
             iw + " is a collective in a program that is not partitioned");
      if (!plan::Collective::Kind_IsValid(c.kind()) ||
          !plan::ReduceOp_IsValid(c.op()))
        fail(what, iw + " is a collective of an unknown kind");
      checkAxes(c.axes(), iw);
      checkWritable(c.output(), iw);
      checkLive(c.output(), i);
      if (c.kind() == plan::Collective::AXIS_INDEX) {
        const plan::Buffer &out = program.buffers(c.output());
        if (out.local_shape_size() != 0 ||
            (out.dtype() != plan::I32 && out.dtype() != plan::I64))
          fail(what, iw + ": axis_index writes a rank-0 i32 or i64 buffer");
        continue;
      }
      checkId(c.input(), iw);
      checkLive(c.input(), i);
      const plan::Buffer &in = program.buffers(c.input());
      const plan::Buffer &out = program.buffers(c.output());
      if (in.dtype() != out.dtype())
        fail(what, iw + ": collective input and output dtypes differ");
      int64_t rank = in.local_shape_size();
      if (out.local_shape_size() != rank)
        fail(what, iw + ": collective input and output ranks differ");
      int64_t g = 1;
      for (const std::string &axis : c.axes())
        g *= axisSizes.at(axis);
      std::vector<int64_t> expect(in.local_shape().begin(),
                                  in.local_shape().end());
      auto checkDim = [&](int64_t d, const char *name) {
        if (d < 0 || d >= rank)
          fail(what, iw + ": collective " + name + " " + std::to_string(d) +
                         " is out of range for rank " + std::to_string(rank));
      };
      switch (c.kind()) {
      case plan::Collective::ALL_REDUCE:
        break;
      case plan::Collective::MASK:
        checkDim(c.dim(), "dim");
        if (c.size() < 1 || c.size() > expect[c.dim()] * g)
          fail(what, iw + ": mask size " + std::to_string(c.size()) +
                         " is not in [1, local size times group size]");
        break;
      case plan::Collective::ALL_GATHER:
        checkDim(c.dim(), "dim");
        expect[c.dim()] *= g;
        break;
      case plan::Collective::REDUCE_SCATTER:
        checkDim(c.dim(), "dim");
        if (expect[c.dim()] % g)
          fail(what, iw + ": reduce_scatter dimension is not divisible by the "
                          "group size");
        expect[c.dim()] /= g;
        break;
      case plan::Collective::SLICE:
        checkDim(c.dim(), "dim");
        if (expect[c.dim()] % g)
          fail(what,
               iw + ": slice dimension is not divisible by the group size");
        expect[c.dim()] /= g;
        break;
      case plan::Collective::COLLECTIVE_PERMUTE: {
        if (c.pairs_size() % 2)
          fail(what,
               iw + ": collective_permute has an odd number of pair entries");
        std::set<int64_t> sources, targets;
        for (int k = 0; k < c.pairs_size(); k += 2) {
          int64_t s = c.pairs(k), t = c.pairs(k + 1);
          if (s < 0 || s >= g || t < 0 || t >= g || !sources.insert(s).second ||
              !targets.insert(t).second)
            fail(what, iw +
                           ": collective_permute pairs must be distinct "
                           "positions in [0, " +
                           std::to_string(g) + ")");
        }
        break;
      }
      case plan::Collective::ALL_TO_ALL:
        checkDim(c.dim(), "dim");
        checkDim(c.concat_dim(), "concat_dim");
        if (expect[c.dim()] % g)
          fail(what, iw + ": all_to_all split dimension is not divisible by "
                          "the group size");
        expect[c.dim()] /= g;
        expect[c.concat_dim()] *= g;
        break;
      default:
        break;
      }
      if (!std::equal(expect.begin(), expect.end(), out.local_shape().begin()))
        fail(what, iw + ": collective output shape " +
                       shapeString(out.local_shape()) +
                       " does not follow from its input shape " +
                       shapeString(in.local_shape()));
    } else {
      fail(what, iw + " is empty (neither kernel nor collective)");
    }
  }
  validateBuckets(program, what);
  for (int64_t id : program.arguments()) {
    checkId(id, "an argument");
    if (program.buffers(id).role() == plan::ACTIVATION)
      fail(what, "argument buffer " + std::to_string(id) + " is an activation");
  }
  for (int64_t id : program.results()) {
    checkId(id, "a result");
    checkLive(id, numInstructions);
  }
  validateReplacements(program, what);
  validateInPlace(program, what);
}

void validatePipeline(const plan::Plan &p, const std::string &what) {
  if (!p.has_pipeline())
    return;
  const plan::PipelineSchedule &s = p.pipeline();
  // What any schedule must be (complete, ordered, free of deadlock): the
  // pipeline library's validator. A plan that passes loads, so `partita
  // explain` can draw it; what this runtime can run of it is
  // pipelineUnrunnable's question, asked when an Executor is built.
  std::string invalid;
  try {
    if (auto error = pipeline::validate(pipeline::fromProto(s)))
      invalid = "pipeline schedule '" + s.kind() +
                "': " + pipeline::toString(*error);
  } catch (const Error &e) {
    invalid = e.what(); // names the schedule itself
  }
  if (!invalid.empty())
    fail(what, invalid);
  // The values stages exchange are named "<prefix><k>" (slotOfValue): a
  // name with a pipeline prefix and no number is refused here, where the
  // executor and `partita explain` both meet it.
  for (const plan::PipelineStage &stage : s.stages())
    for (int index : pipeline::microbatchPrograms(stage)) {
      if (index >= p.programs_size())
        continue; // pipelineUnrunnable names it
      const plan::Program &program = p.programs(index);
      for (const plan::Buffer &b : program.buffers())
        try {
          pipeline::slotOfValue(b.name(), false);
        } catch (const Error &e) {
          fail(what, "program '" + program.name() + "': " + e.what());
        }
    }
}

} // namespace

/// A pipeline schedule this runtime can run: one rank, one chunk, one stage
/// whose optimizer program is program 0 (the step) and whose forward
/// program runs forward and backward of a microbatch; every microbatch's
/// FORWARD once, in order, BACKWARDs after their FORWARD, then
/// REDUCE_GRADIENTS and OPTIMIZER last. (Multi-rank schedules need the
/// pipeline runtime of issue 18, not built yet.)
std::string pipelineUnrunnable(const plan::Plan &p, const std::string &what) {
  if (!p.has_pipeline())
    return "";
  const plan::PipelineSchedule &s = p.pipeline();
  // The first reason wins; the lambda's throw stays inside this function.
  struct Unrunnable {
    std::string message;
  };
  auto bad = [&](const std::string &why) {
    throw Unrunnable{what + ": pipeline schedule '" + s.kind() + "': " + why};
  };
  try {
    if (isPipelined(p)) {
      // Stages with programs of their own (dist-stage-split), any number of
      // pipeline ranks: validate() proved the action lists.
      if (s.stages_size() != s.ranks() * s.chunks() ||
          s.rank_actions_size() != s.ranks())
        bad("needs one stage per pipeline rank and chunk, and one action "
            "list per pipeline rank");
      int64_t axisSize = 0;
      for (const plan::MeshAxis &axis : p.mesh().axes())
        if (axis.name() == s.axis())
          axisSize = axis.size();
      if (axisSize != s.ranks())
        bad("its axis '" + s.axis() + "' is not a mesh axis of size " +
            std::to_string(s.ranks()));
      for (int t = 0; t < s.stages_size(); ++t) {
        const plan::PipelineStage &st = s.stages(t);
        std::string where = "stage " + std::to_string(t) + ": ";
        bool split = st.backward() == -1;
        if (!split && (st.backward_input() != -1 || st.backward_weight() != -1))
          bad(where + "has a full backward program and input- or "
                      "weight-gradient ones");
        for (int index : {st.forward(), st.optimizer(),
                          split ? st.backward_input() : st.backward(),
                          split ? st.backward_weight() : st.backward()})
          if (index < 0 || index >= p.programs_size())
            bad(where + "program " + std::to_string(index) +
                " is not a program of the plan");
        if ((t == 0) != (st.optimizer() == 0))
          bad(where + "only stage 0's once-per-step program is program 0");
      }
      // A stage runs the backward its programs make: full, or B and W.
      for (int r = 0; r < s.rank_actions_size(); ++r) {
        const auto &actions = s.rank_actions(r).actions();
        for (int i = 0; i < actions.size(); ++i) {
          const plan::PipelineAction &a = actions[i];
          bool full = a.kind() == plan::PipelineAction::BACKWARD;
          bool part = a.kind() == plan::PipelineAction::BACKWARD_INPUT ||
                      a.kind() == plan::PipelineAction::BACKWARD_WEIGHT;
          int64_t stage = int64_t(a.chunk()) * s.ranks() + r;
          if ((!full && !part) || stage < 0 || stage >= s.stages_size())
            continue;
          bool split = s.stages(int(stage)).backward() == -1;
          if (full == split)
            bad("rank " + std::to_string(r) + " action " + std::to_string(i) +
                ": " + plan::PipelineAction::Kind_Name(a.kind()) +
                " on stage " + std::to_string(stage) + ", whose backward is " +
                (split ? "split into input- and weight-gradient programs"
                       : "one program"));
        }
      }
      return "";
    }
    if (s.ranks() != 1 || s.chunks() != 1)
      bad("runs on " + std::to_string(s.ranks()) + " ranks with " +
          std::to_string(s.chunks()) +
          " chunks; this runtime runs microbatched steps on one pipeline rank "
          "and one chunk only");
    if (s.microbatches() < 1)
      bad("needs at least one microbatch");
    if (s.stages_size() != 1 || s.rank_actions_size() != 1)
      bad("needs exactly one stage and one action list");
    const plan::PipelineStage &st = s.stages(0);
    if (st.optimizer() != 0)
      bad("the stage's optimizer program must be program 0 (the step)");
    if (st.forward() < 1 || st.forward() >= p.programs_size())
      bad("the stage's forward program " + std::to_string(st.forward()) +
          " is not a program of the plan other than the step");
    if (st.backward() != -1 || st.backward_input() != -1 ||
        st.backward_weight() != -1)
      bad("separate backward programs are not supported (the forward program "
          "runs the backward too)");
    int next = 0, backwards = 0;
    bool reduced = false, updated = false;
    const auto &actions = s.rank_actions(0).actions();
    for (int i = 0; i < actions.size(); ++i) {
      const plan::PipelineAction &a = actions[i];
      std::string where = "action " + std::to_string(i) + ": ";
      if (updated)
        bad(where + "comes after the optimizer");
      if (a.chunk() != 0)
        bad(where + "names chunk " + std::to_string(a.chunk()));
      switch (a.kind()) {
      case plan::PipelineAction::FORWARD:
        if (reduced || a.microbatch() != next)
          bad(where + "forward of microbatch " + std::to_string(a.microbatch()) +
              ", expected " + std::to_string(next) +
              " (microbatches run in order, before the reduction)");
        ++next;
        break;
      case plan::PipelineAction::BACKWARD:
        if (reduced || a.microbatch() != backwards || a.microbatch() >= next)
          bad(where + "backward of microbatch " +
              std::to_string(a.microbatch()) + " out of order");
        ++backwards;
        break;
      case plan::PipelineAction::REDUCE_GRADIENTS:
        if (reduced || next != s.microbatches() || backwards != next)
          bad(where + "gradient reduction before every microbatch ran "
                      "forward and backward, or twice");
        reduced = true;
        break;
      case plan::PipelineAction::OPTIMIZER:
        if (!reduced)
          bad(where + "optimizer before the gradient reduction");
        updated = true;
        break;
      default:
        bad(where + "kind " + std::to_string(a.kind()) +
            " needs more than one pipeline rank");
      }
    }
    if (!updated)
      bad("the action list has no optimizer action");
  } catch (const Unrunnable &u) {
    return u.message;
  }
  return "";
}

DType toDType(int dtype) {
  switch (dtype) {
  case plan::F32:
    return DType::F32;
  case plan::F64:
    return DType::F64;
  case plan::F16:
    return DType::F16;
  case plan::BF16:
    return DType::BF16;
  case plan::I32:
    return DType::I32;
  case plan::I64:
    return DType::I64;
  }
  throw Error("unknown plan dtype " + std::to_string(dtype));
}

PlanFile::PlanFile() : pimpl(std::make_unique<Impl>()) {}
PlanFile::~PlanFile() = default;

std::shared_ptr<const PlanFile> PlanFile::parse(const std::string &bytes,
                                                const std::string &what) {
  std::shared_ptr<PlanFile> file(new PlanFile());
  plan::Plan &p = file->pimpl->proto;
  if (bytes.empty())
    fail(what, "empty plan file");
  if (!p.ParseFromString(bytes))
    fail(what, "not a valid plan (malformed or truncated protobuf)");
  if (p.trailer() != kPlanTrailer)
    fail(what, "not a complete plan (truncated, or not a plan file: the "
               "end-of-plan marker is missing)");
  if (p.format_version() != kPlanFormatVersion)
    fail(what, "plan format version " + std::to_string(p.format_version()) +
                   ", but this runtime reads version " +
                   std::to_string(kPlanFormatVersion) +
                   (p.format_version() < kPlanFormatVersion
                        ? " (an older plan: compile it again with `partita "
                          "plan`)"
                        : ""));
  // Before any other check of the content: a plan changed after compilation
  // could otherwise pass validation and run with, say, another learning rate.
  std::string checksumError = plan::verifyPlanChecksum(bytes);
  if (!checksumError.empty())
    fail(what, checksumError);
  validateMesh(p.mesh(), what, file->pimpl->axisSizes, file->pimpl->numDevices);
  if (p.programs().empty())
    fail(what, "the plan has no program");
  for (int i = 0; i < p.programs_size(); ++i) {
    const plan::Program &program = p.programs(i);
    if (!file->pimpl->programs.emplace(program.name(), i).second)
      fail(what, "two programs are named '" + program.name() + "'");
    validateProgram(program, what, file->pimpl->axisSizes);
  }
  validatePipeline(p, what);
  file->pimpl->pipelineUnrunnable = pipelineUnrunnable(p, what);
  return file;
}

std::shared_ptr<const PlanFile> PlanFile::load(const std::string &path) {
  // A regular file (a directory read as an empty plan, a FIFO blocked), of
  // at most protobuf's 2 GiB, sized before it is read.
  return parse(io::readFile(path, uint64_t(2) << 30, "plan file"), path);
}

const plan::Program &PlanFile::Impl::program(const std::string &name) const {
  auto it = programs.find(name);
  if (it == programs.end()) {
    std::string known;
    for (const auto &entry : programs)
      known += (known.empty() ? "'" : ", '") + entry.first + "'";
    throw Error("the plan has no program '" + name + "' (it has " + known +
                ")");
  }
  return proto.programs(it->second);
}

int64_t PlanFile::numDevices() const { return pimpl->numDevices; }
uint64_t PlanFile::seed() const { return pimpl->proto.seed(); }

std::vector<std::string> PlanFile::programNames() const {
  std::vector<std::string> names;
  for (const plan::Program &program : pimpl->proto.programs())
    names.push_back(program.name());
  return names;
}

bool PlanFile::hasProgram(const std::string &name) const {
  return pimpl->programs.count(name) != 0;
}

bool PlanFile::isPartitioned(const std::string &program) const {
  return pimpl->program(program).partitioned();
}

static ProgramValue toValue(const plan::Buffer &buffer) {
  ProgramValue value;
  value.name = buffer.name();
  value.dtype = toDType(buffer.dtype());
  value.globalShape.assign(buffer.global_shape().begin(),
                           buffer.global_shape().end());
  value.isParameter = buffer.role() == plan::PARAMETER;
  value.isState = buffer.role() == plan::STATE;
  value.replaces = buffer.replaces();
  value.valueBound = buffer.value_bound();
  return value;
}

std::vector<ProgramValue> PlanFile::inputs(const std::string &name) const {
  const plan::Program &program = pimpl->program(name);
  std::vector<ProgramValue> values;
  for (int64_t id : program.arguments())
    if (program.buffers(id).role() == plan::INPUT)
      values.push_back(toValue(program.buffers(id)));
  return values;
}

std::vector<ProgramValue> PlanFile::results(const std::string &name) const {
  std::vector<ProgramValue> values;
  std::set<std::string> seen; // a step counter's update is on every stage
  for (const plan::Program *program : pimpl->stepPrograms(name))
    for (int64_t id : program->results()) {
      const plan::Buffer &b = program->buffers(id);
      if (b.name().empty() || seen.insert(b.name()).second)
        values.push_back(toValue(b));
    }
  return values;
}

std::vector<ProgramValue>
PlanFile::persistent(const std::string &name) const {
  std::vector<ProgramValue> values;
  std::set<std::string> seen; // a step counter is on every stage
  for (const plan::Program *program : pimpl->stepPrograms(name))
    for (const plan::Buffer &b : program->buffers())
      if ((b.role() == plan::PARAMETER || b.role() == plan::STATE) &&
          !b.accumulator() && seen.insert(b.name()).second)
        values.push_back(toValue(b));
  return values;
}

bool PlanFile::isPipelined() const { return runtime::isPipelined(pimpl->proto); }

pipeline::Schedule PlanFile::pipelineSchedule() const {
  return pipeline::fromProto(pimpl->proto.pipeline());
}

int PlanFile::pipelineStageOf(int rank) const {
  const plan::Mesh &mesh = pimpl->proto.mesh();
  std::map<std::string, int64_t> coords =
      meshCoordinates(mesh, meshPosition(mesh, rank));
  auto it = coords.find(pimpl->proto.pipeline().axis());
  return it == coords.end() ? 0 : int(it->second);
}

int64_t meshPosition(const plan::Mesh &mesh, int rank) {
  for (int k = 0; k < mesh.devices_size(); ++k)
    if (mesh.devices(k) == rank)
      return k;
  return rank;
}

std::map<std::string, int64_t> meshCoordinates(const plan::Mesh &mesh,
                                               int64_t position) {
  std::map<std::string, int64_t> c;
  for (int i = mesh.axes_size() - 1; i >= 0; --i) {
    int64_t size = mesh.axes(i).size();
    c[mesh.axes(i).name()] = position % size;
    position /= size;
  }
  return c;
}

bool isPipelined(const plan::Plan &plan) {
  return plan.has_pipeline() && plan.pipeline().stages_size() > 0 &&
         pipeline::isPipelinedStage(plan.pipeline().stages(0));
}

std::vector<const plan::Program *>
PlanFile::Impl::stepPrograms(const std::string &name) const {
  const plan::Program &named = program(name);
  if (!runtime::isPipelined(proto) || &named != &proto.programs(0))
    return {&named};
  std::vector<const plan::Program *> programs;
  for (const plan::PipelineStage &stage : proto.pipeline().stages())
    programs.push_back(&proto.programs(stage.optimizer()));
  return programs;
}

int64_t PlanFile::arenaBytes(const std::string &program) const {
  return pimpl->program(program).arena_bytes();
}

} // namespace partita::runtime
