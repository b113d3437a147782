//===- ExplainCommand.cpp - `partita explain`: what a plan costs ----------===//
//
// Loads a plan (validated by the runtime exactly as `partita run` loads it)
// and prints, for its step program: the mesh; the local bytes per device of
// each buffer role (parameters, inputs, activations, outputs, constants); the
// static arena's peak bytes from the memory plan; every parameter with its
// global shape, sharding and local bytes; and every collective with its kind,
// axes and bytes per device. Each total names the formula behind it.
//
// Compiled with exceptions: the runtime reports errors as runtime::Error.
//
//===----------------------------------------------------------------------===//

#include "tools/partita/Driver.h"

#include "partita/runtime/Executor.h"
#include "runtime/plan/plan.pb.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <fstream>
#include <sstream>

using namespace llvm;
namespace rt = partita::runtime;

namespace partita::driver {
namespace {
cl::SubCommand explainCommand("explain",
                              "Print a plan's mesh, memory per device, "
                              "parameter shardings and collectives");

cl::opt<std::string> planFile(cl::Positional, cl::sub(explainCommand),
                              cl::desc("<plan.pb>"));

constexpr StringLiteral kCommand = "explain";

int64_t dtypeBytes(int dtype) {
  switch (dtype) {
  case plan::F64:
  case plan::I64:
    return 8;
  case plan::F16:
  case plan::BF16:
    return 2;
  default:
    return 4;
  }
}

StringRef dtypeName(int dtype) {
  switch (dtype) {
  case plan::F32:
    return "f32";
  case plan::F64:
    return "f64";
  case plan::F16:
    return "f16";
  case plan::BF16:
    return "bf16";
  case plan::I32:
    return "i32";
  case plan::I64:
    return "i64";
  default:
    return "?";
  }
}

int64_t localBytes(const plan::Buffer &buffer) {
  int64_t n = dtypeBytes(buffer.dtype());
  for (int64_t d : buffer.local_shape())
    n *= d;
  return n;
}

/// "1536 B (1.50 KiB)": exact bytes, and a readable size from 1 KiB on.
std::string bytesText(int64_t bytes) {
  std::string text;
  raw_string_ostream os(text);
  os << bytes << " B";
  if (bytes >= 1024 * 1024 * 1024)
    os << format(" (%.2f GiB)", double(bytes) / (1024.0 * 1024 * 1024));
  else if (bytes >= 1024 * 1024)
    os << format(" (%.2f MiB)", double(bytes) / (1024.0 * 1024));
  else if (bytes >= 1024)
    os << format(" (%.2f KiB)", double(bytes) / 1024.0);
  return text;
}

std::string shapeText(const google::protobuf::RepeatedField<int64_t> &shape,
                      int dtype) {
  std::string text = "[";
  for (int i = 0; i < shape.size(); ++i)
    text += (i ? "x" : "") + std::to_string(shape[i]);
  return text + "] " + dtypeName(dtype).str();
}

std::string axesText(const google::protobuf::RepeatedPtrField<std::string> &axes) {
  std::string text = "{";
  for (int i = 0; i < axes.size(); ++i)
    text += (i ? ", \"" : "\"") + axes[i] + "\"";
  return text + "}";
}

/// The buffer's sharding as dist writes it: `[{"dp"}, {}]`, then any
/// partial axes. An unpartitioned program's buffers print `replicated`.
std::string shardingText(const plan::Buffer &buffer) {
  if (buffer.sharding().empty() && buffer.partial_axes().empty())
    return buffer.global_shape().empty() ? "[]" : "replicated";
  std::string text = "[";
  for (int i = 0; i < buffer.sharding().size(); ++i)
    text += (i ? ", " : "") + axesText(buffer.sharding(i).axes());
  text += "]";
  if (!buffer.partial_axes().empty())
    text += std::string(", partial=") +
            (buffer.partial_op() == plan::MAX ? "max" : "") +
            axesText(buffer.partial_axes());
  return text;
}

StringRef collectiveName(int kind) {
  switch (kind) {
  case plan::Collective::ALL_REDUCE:
    return "all_reduce";
  case plan::Collective::ALL_GATHER:
    return "all_gather";
  case plan::Collective::REDUCE_SCATTER:
    return "reduce_scatter";
  case plan::Collective::ALL_TO_ALL:
    return "all_to_all";
  case plan::Collective::SLICE:
    return "slice";
  case plan::Collective::COLLECTIVE_PERMUTE:
    return "collective_permute";
  case plan::Collective::AXIS_INDEX:
    return "axis_index";
  case plan::Collective::MASK:
    return "mask";
  default:
    return "?";
  }
}

int runExplain() {
  if (planFile.empty())
    return reportError(kCommand, "missing the plan file (partita explain "
                                 "PLAN.pb)");
  plan::Plan proto;
  std::string programName;
  try {
    // The runtime's own validation: a plan explained is a plan that loads.
    std::shared_ptr<const rt::PlanFile> loaded = rt::PlanFile::load(planFile);
    programName = loaded->programNames().front();
    std::ifstream in(planFile, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    if (!in || !proto.ParseFromString(bytes.str()))
      return reportError(kCommand, "cannot read plan file '" + planFile + "'");
  } catch (const rt::Error &e) {
    return reportError(kCommand, e.what());
  } catch (const std::exception &e) {
    return reportError(kCommand,
                       std::string("unexpected failure: ") + e.what());
  }
  const plan::Program *program = nullptr;
  for (const plan::Program &p : proto.programs())
    if (p.name() == programName)
      program = &p;
  if (!program)
    return reportError(kCommand, "the plan has no program '" + programName + "'");

  raw_ostream &os = outs();
  int64_t devices = 1;
  os << "plan " << planFile << ": program '" << program->name() << "' ("
     << (program->partitioned() ? "partitioned" : "not partitioned") << ")\n";
  os << "mesh: ";
  if (proto.mesh().axes().empty())
    os << "single device";
  for (int i = 0; i < proto.mesh().axes().size(); ++i) {
    const plan::MeshAxis &axis = proto.mesh().axes(i);
    os << (i ? ", " : "") << "\"" << axis.name() << "\"=" << axis.size();
    devices *= axis.size();
  }
  os << " (" << devices << " device" << (devices == 1 ? "" : "s");
  if (!proto.mesh().devices().empty()) {
    os << ", devices=[";
    for (int i = 0; i < proto.mesh().devices().size(); ++i)
      os << (i ? ", " : "") << proto.mesh().devices(i);
    os << "]";
  }
  os << ")\n";

  // Buffer roles: results are ACTIVATION buffers too, counted as outputs.
  std::vector<bool> isResult(program->buffers().size(), false);
  for (int64_t id : program->results())
    if (id >= 0 && id < int64_t(isResult.size()))
      isResult[id] = true;
  enum { kParam, kInput, kActivation, kOutput, kConstant, kRoles };
  int64_t total[kRoles] = {}, count[kRoles] = {};
  for (const plan::Buffer &buffer : program->buffers()) {
    int role = kActivation;
    if (buffer.role() == plan::PARAMETER)
      role = kParam;
    else if (buffer.role() == plan::INPUT)
      role = kInput;
    else if (buffer.role() == plan::CONSTANT)
      role = kConstant;
    else if (isResult[buffer.id()])
      role = kOutput;
    total[role] += localBytes(buffer);
    ++count[role];
  }
  os << "\nmemory per device (a buffer's local bytes = product of its local "
        "shape x dtype bytes):\n";
  auto line = [&](StringRef label, int role, StringRef formula) {
    os << "  " << left_justify(label, 12) << " " << bytesText(total[role])
       << " = " << formula << " (" << count[role] << " buffer"
       << (count[role] == 1 ? "" : "s") << ")\n";
  };
  line("parameters", kParam, "sum of local parameter bytes");
  line("inputs", kInput, "sum of local input bytes");
  line("activations", kActivation,
       "sum of local intermediate bytes, not all live at once");
  line("outputs", kOutput, "sum of local result bytes");
  if (count[kConstant])
    line("constants", kConstant, "sum of local constant bytes");
  os << "  " << left_justify("arena peak", 12) << " "
     << bytesText(program->arena_bytes())
     << " = max(offset + local bytes) over activations and outputs, from "
        "the static memory plan (live ranges share bytes)\n";
  os << "  " << left_justify("total", 12) << " "
     << bytesText(total[kParam] + total[kInput] + total[kConstant] +
                  program->arena_bytes())
     << " = parameters + inputs + constants + arena peak\n";

  os << "\nparameters (name, global shape, sharding, local bytes):\n";
  for (const plan::Buffer &buffer : program->buffers()) {
    if (buffer.role() != plan::PARAMETER)
      continue;
    os << "  " << buffer.name() << ": "
       << shapeText(buffer.global_shape(), buffer.dtype()) << ", "
       << shardingText(buffer) << ", " << bytesText(localBytes(buffer))
       << "\n";
  }

  os << "\ncollectives (bytes per device = local bytes of the input; an "
        "all_gather's output is group-size times larger):\n";
  int64_t collectives = 0, collectiveBytes = 0;
  for (const plan::Instruction &inst : program->instructions()) {
    if (!inst.has_collective())
      continue;
    const plan::Collective &c = inst.collective();
    int64_t bytes = 0;
    if (c.kind() != plan::Collective::AXIS_INDEX && c.input() >= 0 &&
        c.input() < program->buffers().size())
      bytes = localBytes(program->buffers(c.input()));
    // slice and axis_index move nothing between devices.
    bool local = c.kind() == plan::Collective::SLICE ||
                 c.kind() == plan::Collective::AXIS_INDEX ||
                 c.kind() == plan::Collective::MASK;
    if (!local) {
      ++collectives;
      collectiveBytes += bytes;
    }
    os << "  " << collectiveName(c.kind()) << " over " << axesText(c.axes());
    if (c.kind() == plan::Collective::ALL_REDUCE ||
        c.kind() == plan::Collective::REDUCE_SCATTER)
      os << (c.op() == plan::MAX ? " max" : c.op() == plan::MIN ? " min"
                                                                 : " sum");
    if (c.kind() == plan::Collective::ALL_GATHER ||
        c.kind() == plan::Collective::REDUCE_SCATTER ||
        c.kind() == plan::Collective::SLICE)
      os << " dim " << c.dim();
    os << ": " << bytesText(bytes);
    if (local)
      os << " (no communication)";
    if (!inst.location().empty())
      os << " at " << inst.location();
    os << "\n";
  }
  os << "  total: " << collectives << " communicating collective"
     << (collectives == 1 ? "" : "s") << ", " << bytesText(collectiveBytes)
     << " per device = sum of their input bytes\n";
  return 0;
}
} // namespace

Command getExplainCommand() { return {explainCommand, runExplain}; }

} // namespace partita::driver
