//===- PlanChecks.cpp - stream order and collective sequences of a plan ---===//
//
// See PlanChecks.h. The stream model is the executor's (Executor.cpp,
// Bucket): members pack their inputs on the compute stream, the last one
// issues the call on the communication stream, and the outputs are written
// back (unpacked) when the compute stream waits for the call's event,
// before the first instruction that reads one of them.
//
//===----------------------------------------------------------------------===//

#include "runtime/lib/cuda/PlanChecks.h"

#include "partita/runtime/Tensor.h"
#include "runtime/lib/core/PlanInternal.h"

#include <algorithm>
#include <cctype>
#include <map>

namespace partita::runtime::gpu {

namespace {

int64_t bytesOf(const plan::Buffer &b) {
  int64_t n = int64_t(sizeOf(toDType(b.dtype())));
  for (int64_t d : b.local_shape())
    n *= d;
  return n;
}

bool reads(const plan::Instruction &inst, int64_t id) {
  if (inst.has_kernel()) {
    const auto &in = inst.kernel().inputs();
    return std::find(in.begin(), in.end(), id) != in.end();
  }
  return inst.has_collective() && inst.collective().input() == id;
}

std::string where(const plan::Program &program, int64_t i) {
  std::string s = "instruction " + std::to_string(i);
  if (i < program.instructions_size() &&
      !program.instructions(i).location().empty())
    s += " (" + program.instructions(i).location() + ")";
  return s;
}

bool communicates(plan::Collective::Kind kind) {
  return kind != plan::Collective::SLICE &&
         kind != plan::Collective::AXIS_INDEX &&
         kind != plan::Collective::MASK;
}

} // namespace

std::string checkStreamOrder(const plan::Program &program) {
  int64_t n = program.instructions_size();
  // Bucket id -> member instructions, in order.
  std::map<int64_t, std::vector<int64_t>> buckets;
  for (int64_t i = 0; i < n; ++i) {
    const plan::Instruction &inst = program.instructions(i);
    if (inst.has_collective() && inst.collective().bucket() > 0)
      buckets[inst.collective().bucket()].push_back(i);
  }
  for (const auto &[id, members] : buckets) {
    int64_t issue = members.back(), wait = n;
    for (int64_t i = issue + 1; i < n && wait == n; ++i)
      for (int64_t m : members)
        if (reads(program.instructions(i),
                  program.instructions(m).collective().output()))
          wait = i;
    for (int64_t m : members) {
      int64_t outId = program.instructions(m).collective().output();
      if (outId < 0 || outId >= program.buffers_size())
        continue; // the loader reports it
      const plan::Buffer &out = program.buffers(outId);
      if (out.role() != plan::ACTIVATION || out.in_place())
        continue;
      int64_t begin = out.offset(), end = begin + bytesOf(out);
      for (const plan::Buffer &other : program.buffers()) {
        if (other.id() == outId || other.role() != plan::ACTIVATION ||
            other.in_place() || other.memory_space() != out.memory_space())
          continue;
        int64_t obegin = other.offset(), oend = obegin + bytesOf(other);
        if (oend <= begin || end <= obegin)
          continue;
        // Accessed after the issue, up to and including the instruction
        // before which the event is waited for.
        int64_t first = std::max(other.first_use(), issue + 1);
        if (first > std::min(other.last_use(), wait))
          continue;
        return where(program, first) + " on the compute stream uses buffer " +
               std::to_string(other.id()) + ", whose arena bytes [" +
               std::to_string(obegin) + ", " + std::to_string(oend) +
               ") overlap buffer " + std::to_string(outId) +
               ", written by gradient bucket " + std::to_string(id) +
               " on the communication stream from its issue at " +
               where(program, issue) + " until the event wait before " +
               (wait == n ? std::string("the end of the step")
                          : where(program, wait)) +
               ": no event orders the two (buffer " + std::to_string(outId) +
               "'s live range ends at instruction " +
               std::to_string(out.last_use()) + ")";
      }
    }
  }
  return "";
}

std::string
checkCollectiveSequences(const plan::Mesh &mesh,
                         const std::vector<const plan::Program *> &programOfRank) {
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  for (const plan::MeshAxis &a : mesh.axes()) {
    names.push_back(a.name());
    sizes.push_back(a.size());
  }
  int64_t positions = 1;
  for (int64_t s : sizes)
    positions *= s;
  auto rankOf = [&](int64_t position) {
    return mesh.devices_size() ? mesh.devices(position) : position;
  };
  auto coordsOf = [&](int64_t position) {
    std::vector<int64_t> c(sizes.size());
    for (size_t k = sizes.size(); k-- > 0;) {
      c[k] = position % sizes[k];
      position /= sizes[k];
    }
    return c;
  };
  // A collective's signature and axes key, per rank, in program order.
  auto signature = [](const plan::Program &p, const plan::Collective &c) {
    const plan::Buffer *in = c.input() >= 0 && c.input() < p.buffers_size()
                                 ? &p.buffers(c.input())
                                 : nullptr;
    std::string s = plan::Collective::Kind_Name(c.kind());
    for (char &ch : s)
      ch = char(std::tolower(static_cast<unsigned char>(ch)));
    if (in) {
      int64_t count = 1;
      for (int64_t d : in->local_shape())
        count *= d;
      s += " of " + std::to_string(count) + " x " +
           toString(toDType(in->dtype()));
    }
    if (c.kind() == plan::Collective::ALL_REDUCE ||
        c.kind() == plan::Collective::REDUCE_SCATTER)
    {
      std::string op = plan::ReduceOp_Name(c.op());
      for (char &ch : op)
        ch = char(std::tolower(static_cast<unsigned char>(ch)));
      s += " (" + op + ")";
    }
    if (c.kind() != plan::Collective::ALL_REDUCE)
      s += " dim " + std::to_string(c.dim());
    return s;
  };
  // axes key -> group (member positions, in group order) -> sequences.
  for (int64_t position = 0; position < positions &&
                             position < int64_t(programOfRank.size());
       ++position) {
    const plan::Program &p = *programOfRank[rankOf(position)];
    std::map<std::string, std::vector<std::string>> mine;
    std::map<std::string, std::vector<std::string>> axesOf;
    for (const plan::Instruction &inst : p.instructions())
      if (inst.has_collective() && communicates(inst.collective().kind())) {
        std::string key;
        for (const std::string &a : inst.collective().axes())
          key += (key.empty() ? "" : ",") + a;
        mine[key].push_back(signature(p, inst.collective()));
        axesOf[key].assign(inst.collective().axes().begin(),
                           inst.collective().axes().end());
      }
    // Compare with every other member of each of this rank's groups.
    std::vector<int64_t> c = coordsOf(position);
    for (int64_t other = 0; other < positions; ++other) {
      if (other == position ||
          rankOf(other) >= int64_t(programOfRank.size()))
        continue;
      std::vector<int64_t> oc = coordsOf(other);
      const plan::Program &q = *programOfRank[rankOf(other)];
      std::map<std::string, std::vector<std::string>> theirs;
      for (const plan::Instruction &inst : q.instructions())
        if (inst.has_collective() && communicates(inst.collective().kind())) {
          std::string key;
          for (const std::string &a : inst.collective().axes())
            key += (key.empty() ? "" : ",") + a;
          theirs[key].push_back(signature(q, inst.collective()));
        }
      for (const auto &[key, seq] : mine) {
        // Same group: equal coordinates outside the key's axes.
        bool same = true;
        for (size_t k = 0; k < names.size(); ++k) {
          const auto &axes = axesOf[key];
          if (std::find(axes.begin(), axes.end(), names[k]) == axes.end() &&
              c[k] != oc[k])
            same = false;
        }
        if (!same)
          continue;
        const std::vector<std::string> &theirSeq = theirs[key];
        size_t len = std::max(seq.size(), theirSeq.size());
        for (size_t i = 0; i < len; ++i) {
          std::string a = i < seq.size() ? seq[i] : "nothing";
          std::string b = i < theirSeq.size() ? theirSeq[i] : "nothing";
          if (a != b)
            return "ranks " + std::to_string(rankOf(position)) + " and " +
                   std::to_string(rankOf(other)) +
                   " share a communicator over axes " + key +
                   " but issue different collectives as its call " +
                   std::to_string(i) + ": " + a + " on rank " +
                   std::to_string(rankOf(position)) + ", " + b + " on rank " +
                   std::to_string(rankOf(other)) +
                   " (NCCL would hang or mix the two)";
        }
      }
    }
  }
  return "";
}

void checkPlanForCuda(const plan::Plan &plan, const std::string &name) {
  for (const plan::Program &p : plan.programs()) {
    if (p.name() != name)
      continue;
    std::string problem = checkStreamOrder(p);
    if (problem.empty()) {
      int64_t positions = 1;
      for (const plan::MeshAxis &a : plan.mesh().axes())
        positions *= a.size();
      std::vector<const plan::Program *> every(positions, &p);
      problem = checkCollectiveSequences(plan.mesh(), every);
    }
    if (!problem.empty())
      throw Error("program '" + name + "': plan check before the cuda "
                  "backend runs it: " + problem);
  }
}

} // namespace partita::runtime::gpu
