//===- PlanExplain.cpp - what a plan costs, as `partita explain` prints it ===//
//
// For a plan's step program: the mesh; the local bytes per device of each
// buffer role (parameters, inputs, activations, outputs, constants); the
// static arena's peak bytes from the memory plan; every parameter with its
// global shape, sharding and local bytes; and every collective with its kind,
// axes and bytes per device; for a train step, the model state per device
// beside the ZeRO accounting of each stage. Each total names the formula
// behind it. `partita explain` and the Python package print this text; the
// totals also come back as numbers (PlanMemory).
//
//===----------------------------------------------------------------------===//

#include "passes/plan/PlanExplain.h"

#include "partita/runtime/Executor.h"
#include "partita/runtime/PipelineSchedule.h"
#include "passes/sharding/ModelStateMemory.h"
#include "runtime/plan/PlanMemory.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Format.h"

#include <iterator>
#include <map>
#include <string>
#include <vector>

using namespace llvm;
namespace rt = partita::runtime;

namespace partita::plan_lowering {
namespace {
using plan::dtypeBytes;
using plan::localBytes;

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

/// For a train step (a program with sgd or adamw kernels): the model state
/// per device read from the plan -- parameters, gradients as the update
/// reads them, optimizer state, peak activations -- and what the ZeRO
/// paper's accounting (Rajbhandari et al. 2020, section 3.1 and 5; the same
/// computeModelStateBytes its unit test checks against the paper's 7.5B
/// figures) predicts for each stage with this plan's bytes per element.
void printModelState(raw_ostream &os, const plan::Plan &proto,
                     const plan::Program &program, PlanMemory &memory) {
  const auto &buffers = program.buffers();
  auto valid = [&](int64_t id) { return id >= 0 && id < buffers.size(); };
  // The instruction writing each buffer, to look through slices.
  std::vector<const plan::Instruction *> producer(buffers.size(), nullptr);
  for (const plan::Instruction &inst : program.instructions()) {
    if (inst.has_collective() && valid(inst.collective().output()))
      producer[inst.collective().output()] = &inst;
    if (inst.has_kernel())
      for (int64_t out : inst.kernel().outputs())
        if (valid(out))
          producer[out] = &inst;
  }
  int64_t updates = 0, gradBytes = 0, gradElemBytes = 0, stateElemBytes = 0;
  for (const plan::Instruction &inst : program.instructions()) {
    if (!inst.has_kernel())
      continue;
    const plan::Kernel &k = inst.kernel();
    bool adamw = k.kind() == plan::Kernel::ADAMW,
         sgd = k.kind() == plan::Kernel::SGD;
    if ((!adamw && !sgd) || k.inputs().size() < 3 || !valid(k.inputs(1)))
      continue;
    ++updates;
    // The gradient as it lives on the device: a slice taken for a sharded
    // update leaves the whole gradient allocated, and a ZeRO stage-1 step
    // holds each whole gradient until the reduce_scatter at its update
    // (dist-optimize-comm does not issue those early).
    int64_t grad = k.inputs(1);
    auto heldWhole = [&](const plan::Collective &c) {
      return c.kind() == plan::Collective::SLICE ||
             (c.kind() == plan::Collective::REDUCE_SCATTER &&
              program.zero_stage() == 1);
    };
    // One step back only: what the gradient was reduced or cut from, not
    // how that was made (a vocabulary-parallel table gradient is sliced to
    // the device's rows before its reduce_scatter).
    // A mixed-precision update reads its gradient widened to f32 by a
    // convert (a temporary): the gradient is what was converted.
    if (producer[grad] && producer[grad]->has_kernel() &&
        producer[grad]->kernel().kind() == plan::Kernel::CONVERT &&
        producer[grad]->kernel().inputs_size() == 1 &&
        valid(producer[grad]->kernel().inputs(0)))
      grad = producer[grad]->kernel().inputs(0);
    if (producer[grad] && producer[grad]->has_collective() &&
        heldWhole(producer[grad]->collective()) &&
        valid(producer[grad]->collective().input()))
      grad = producer[grad]->collective().input();
    gradBytes += localBytes(buffers[grad]);
    gradElemBytes = dtypeBytes(buffers[grad].dtype());
    // State per parameter element: the moments, and under a mixed recipe
    // the f32 master copy the update reads in place of the parameter (K =
    // 12 for mixed-precision Adam).
    stateElemBytes = (adamw ? 2 : 1) * dtypeBytes(buffers[k.inputs(2)].dtype());
    if (valid(k.inputs(0)) && buffers[k.inputs(0)].role() == plan::STATE)
      stateElemBytes += dtypeBytes(buffers[k.inputs(0)].dtype());
  }
  if (!updates)
    return;

  // The data-parallel degree: the mesh axis named "dp"; every other axis
  // splitting a parameter is its tensor-parallel split.
  int64_t dataSize = 0;
  std::map<std::string, int64_t> axisSize;
  for (const plan::MeshAxis &axis : proto.mesh().axes()) {
    axisSize[axis.name()] = axis.size();
    if (axis.name() == "dp")
      dataSize = axis.size();
  }
  int64_t paramBytes = 0, paramElemBytes = 0, stateBytes = 0, counterBytes = 0;
  SmallVector<int64_t> elements;
  // Per parameter: global shape, and shards per dimension of other axes.
  SmallVector<std::pair<SmallVector<int64_t>, SmallVector<int64_t>>> shapes;
  for (const plan::Buffer &buffer : buffers) {
    if (buffer.role() == plan::PARAMETER) {
      paramBytes += localBytes(buffer);
      paramElemBytes = dtypeBytes(buffer.dtype());
      int64_t n = 1;
      for (int64_t d : buffer.global_shape())
        n *= d;
      elements.push_back(n);
      SmallVector<int64_t> shape(buffer.global_shape().begin(),
                                 buffer.global_shape().end());
      SmallVector<int64_t> other(shape.size(), 1);
      for (int d = 0; d < buffer.sharding_size() && d < int(other.size()); ++d)
        for (const std::string &axis : buffer.sharding(d).axes())
          if (axis != "dp" && axisSize.count(axis))
            other[d] *= axisSize[axis];
      shapes.push_back({std::move(shape), std::move(other)});
    } else if (buffer.role() == plan::STATE) {
      // Rank-0 state is the step counter, outside the paper's accounting.
      (buffer.global_shape().empty() ? counterBytes : stateBytes) +=
          localBytes(buffer);
    }
  }
  int64_t psi = 0;
  for (int64_t n : elements)
    psi += n;

  os << "\nmodel state per device (" << updates << " parameter update"
     << (updates == 1 ? "" : "s") << ", " << psi << " parameters):\n";
  os << "  " << left_justify("parameters", 14) << " " << bytesText(paramBytes)
     << " = sum of local parameter bytes\n";
  os << "  " << left_justify("gradients", 14) << " " << bytesText(gradBytes)
     << " = sum of the local bytes of each update's gradient (through "
        "slices: the whole gradient a sharded update is cut from; under "
        "zero1 through its reduce_scatter: the whole gradient held until "
        "the update)\n";
  os << "  " << left_justify("optimizer", 14) << " " << bytesText(stateBytes)
     << " = sum of local state bytes";
  if (counterBytes)
    os << " (+ " << bytesText(counterBytes) << " step counter)";
  os << "\n";
  int64_t modelState = paramBytes + gradBytes + stateBytes;
  memory.hasModelState = true;
  memory.stateParameters = paramBytes;
  memory.stateGradients = gradBytes;
  memory.stateOptimizer = stateBytes;
  memory.stateCounter = counterBytes;
  memory.modelState = modelState;
  os << "  " << left_justify("model state", 14) << " " << bytesText(modelState)
     << " = parameters + gradients + optimizer\n";
  os << "  " << left_justify("activations", 14) << " "
     << bytesText(program.arena_bytes())
     << " = arena peak of the memory plan (gradients and temporaries "
        "included)\n";

  if (dataSize <= 0)
    return;
  // The plan's bytes per element: fp32 Adam is 4 + 4 + 8; a mixed-precision
  // recipe plugs in its own (PrecisionRecipe).
  sharding::PrecisionRecipe recipe{paramElemBytes, gradElemBytes,
                                   stateElemBytes};
  os << "  ZeRO accounting (Rajbhandari et al. 2020) for these "
     << psi << " parameters on \"dp\"=" << dataSize << ", "
     << paramElemBytes << " + " << gradElemBytes << " + " << stateElemBytes
     << " bytes per parameter, per tensor its tensor-parallel share "
        "(ceil(size / shards) per dimension) divided by \"dp\" where the "
        "stage shards it and the tensor has a dimension \"dp\" divides:\n";
  struct Stage {
    const char *name;
    sharding::ZeroStage stage;
  } stages[] = {{"dp (none)", sharding::ZeroStage::None},
                {"zero1 (Pos)", sharding::ZeroStage::OptimizerState},
                {"zero2 (Pos+g)", sharding::ZeroStage::Gradients},
                {"zero3 (Pos+g+p)", sharding::ZeroStage::Parameters}};
  for (const Stage &stage : stages) {
    SmallVector<sharding::ModelStateTensor> tensors;
    for (const auto &[shape, other] : shapes)
      tensors.push_back(
          sharding::zeroShards(shape, other, stage.stage, dataSize));
    sharding::ModelStateBytes bytes =
        sharding::computeModelStateBytes(tensors, recipe);
    bool same = bytes.params == paramBytes && bytes.grads == gradBytes &&
                bytes.optimizerState == stateBytes;
    os << "    " << left_justify(stage.name, 16) << " params "
       << bytes.params << " + grads " << bytes.grads << " + optimizer "
       << bytes.optimizerState << " = " << bytesText(bytes.total())
       << (same ? "  <- this plan" : "") << "\n";
  }
}
/// Every input with its global shape, sharding and local bytes, and for
/// integer inputs the range the plan declares for their values (the
/// vocabulary for token ids and labels), which `partita run` checks data
/// against and draws --check inputs from.
/// A train step's activations kept for the backward, per layer: the local
/// bytes of every intermediate buffer written before the backward's first
/// instruction and read at or after it (the paper's "activation memory",
/// Korthikanti et al. 2022, section 4), by the layer of the op that writes
/// it. docs/memory.md derives the closed forms these equal.
void printLayerActivations(raw_ostream &os, const plan::Program &program,
                           PlanMemory &memory) {
  int64_t start = program.backward_start();
  if (start <= 0)
    return;
  std::vector<bool> isResult(program.buffers().size(), false);
  for (int64_t id : program.results())
    if (id >= 0 && id < int64_t(isResult.size()))
      isResult[id] = true;
  std::vector<int64_t> bytes, buffers;
  int64_t other = 0, otherBuffers = 0;
  for (const plan::Buffer &buffer : program.buffers()) {
    if (buffer.role() != plan::ACTIVATION || isResult[buffer.id()] ||
        buffer.first_use() >= start || buffer.last_use() < start)
      continue;
    if (buffer.layer() <= 0) {
      other += localBytes(buffer);
      ++otherBuffers;
      continue;
    }
    size_t layer = buffer.layer() - 1;
    if (bytes.size() <= layer) {
      bytes.resize(layer + 1, 0);
      buffers.resize(layer + 1, 0);
    }
    bytes[layer] += localBytes(buffer);
    ++buffers[layer];
  }
  memory.layerActivations = bytes;
  memory.otherActivations = other;
  os << "\nactivations kept for the backward (local bytes of the buffers "
        "the forward writes and the backward, from instruction #"
     << start << " on, reads; by the layer of the op that writes them):\n";
  auto count = [](int64_t n) {
    return " (" + std::to_string(n) + " buffer" + (n == 1 ? "" : "s") + ")";
  };
  for (auto [layer, n] : llvm::enumerate(bytes))
    os << "  " << left_justify("layer " + std::to_string(layer), 14) << " "
       << bytesText(n) << count(buffers[layer]) << "\n";
  os << "  " << left_justify("outside layers", 14) << " " << bytesText(other)
     << count(otherBuffers) << "\n";
}

void printInputs(raw_ostream &os, const plan::Program &program) {
  bool any = false;
  for (const plan::Buffer &buffer : program.buffers()) {
    if (buffer.role() != plan::INPUT)
      continue;
    if (!any)
      os << "\ninputs (name, global shape, sharding, local bytes, values):\n";
    any = true;
    os << "  " << buffer.name() << ": "
       << shapeText(buffer.global_shape(), buffer.dtype()) << ", "
       << shardingText(buffer) << ", " << bytesText(localBytes(buffer));
    if (buffer.value_bound() > 0)
      os << ", values in [0, " << buffer.value_bound() << ")";
    os << "\n";
  }
}

/// Bytes one device sends for a collective over a group of `g` devices
/// under the ring algorithms NCCL and MPI use (Patarasuk and Yuan 2009;
/// Thakur et al. 2005): all_reduce 2(g-1)/g x S, all_gather and
/// reduce_scatter (g-1)/g x S of the whole (gathered result, scattered
/// input), all_to_all (g-1)/g x S of its input, collective_permute its
/// input; slice, mask and axis_index send nothing.
double wireBytes(plan::Collective::Kind kind, int64_t in, int64_t out,
                 int64_t g) {
  if (g <= 1 || !rt::collectiveCommunicates(kind))
    return 0;
  double f = double(g - 1) / double(g);
  switch (kind) {
  case plan::Collective::ALL_REDUCE:
    return 2 * f * double(in);
  case plan::Collective::ALL_GATHER:
    return f * double(out);
  case plan::Collective::REDUCE_SCATTER:
  case plan::Collective::ALL_TO_ALL:
    return f * double(in);
  default:
    return double(in);
  }
}

/// Devices in the group of a collective over `axes`.
int64_t groupSize(const google::protobuf::RepeatedPtrField<std::string> &axes,
                  const std::map<std::string, int64_t> &axisSize) {
  int64_t group = 1;
  for (const std::string &axis : axes)
    if (auto it = axisSize.find(axis); it != axisSize.end())
      group *= it->second;
  return group;
}

/// The mesh's axis sizes by name.
std::map<std::string, int64_t> axisSizes(const plan::Plan &proto) {
  std::map<std::string, int64_t> sizes;
  for (const plan::MeshAxis &axis : proto.mesh().axes())
    sizes[axis.name()] = axis.size();
  return sizes;
}

/// Whether `id` names a buffer of `program`.
bool isBuffer(const plan::Program &program, int64_t id) {
  return id >= 0 && id < program.buffers_size();
}

/// Local bytes of buffer `id`, 0 for none.
int64_t bufferBytes(const plan::Program &program, int64_t id) {
  return isBuffer(program, id) ? localBytes(program.buffers(id)) : 0;
}

/// Local bytes of collective `c`'s input (axis_index has none).
int64_t collectiveInputBytes(const plan::Program &program,
                             const plan::Collective &c) {
  return c.kind() == plan::Collective::AXIS_INDEX
             ? 0
             : bufferBytes(program, c.input());
}

/// Bytes one device sends for collective `c` of `program` (wireBytes).
double collectiveWire(const plan::Program &program, const plan::Collective &c,
                      const std::map<std::string, int64_t> &axisSize) {
  return wireBytes(c.kind(), collectiveInputBytes(program, c),
                   bufferBytes(program, c.output()),
                   groupSize(c.axes(), axisSize));
}

/// A microbatched step's per-microbatch program (the forward of a
/// one-stage pipeline, run `microbatches` times a step) when `program` is
/// its step program (program 0), else null.
const plan::Program *microbatchProgramOf(const plan::Plan &proto,
                                         const plan::Program &program) {
  if (!proto.has_pipeline() || proto.pipeline().stages_size() != 1 ||
      &program != &proto.programs(0))
    return nullptr;
  int32_t index = proto.pipeline().stages(0).forward();
  return index > 0 && index < proto.programs_size() ? &proto.programs(index)
                                                    : nullptr;
}

/// "1536 B (1.50 KiB)" for a fractional byte count, rounded.
std::string wireText(double bytes) {
  return bytesText(int64_t(bytes + 0.5));
}

/// Per-step traffic per device, summed per set of mesh axes, and for a
/// train step on a "dp" axis the ZeRO paper's figure beside it (section 7:
/// data parallelism and P_os, P_os+g move 2 Psi per device, P_os+g+p
/// 3 Psi; with ring algorithms each is times (N-1)/N), Psi being the bytes
/// of the parameters one data-parallel replica holds whole (each device's
/// tensor-parallel share).
void printTraffic(raw_ostream &os, const plan::Plan &proto,
                  const plan::Program &program,
                  const std::map<std::string, double> &byAxes) {
  if (byAxes.empty())
    return;
  os << "\ntraffic per device per step (wire bytes under ring algorithms, by "
        "the mesh axes of each collective):\n";
  for (const auto &[axes, bytes] : byAxes)
    os << "  " << left_justify(axes, 14) << " " << wireText(bytes) << "\n";

  int64_t dataSize = 0;
  for (const plan::MeshAxis &axis : proto.mesh().axes())
    if (axis.name() == "dp")
      dataSize = axis.size();
  bool train = llvm::any_of(program.instructions(), [](const auto &inst) {
    return inst.has_kernel() && (inst.kernel().kind() == plan::Kernel::ADAMW ||
                                 inst.kernel().kind() == plan::Kernel::SGD);
  });
  auto dp = byAxes.find("{\"dp\"}");
  if (!train || dataSize <= 1 || dp == byAxes.end())
    return;
  // Psi: each parameter's bytes whole over "dp" (its local bytes times the
  // shards "dp" cuts it into).
  int64_t psi = 0;
  for (const plan::Buffer &buffer : program.buffers()) {
    if (buffer.role() != plan::PARAMETER)
      continue;
    int64_t shards = 1;
    for (const plan::DimSharding &dim : buffer.sharding())
      for (const std::string &axis : dim.axes())
        if (axis == "dp")
          shards *= dataSize;
    psi += localBytes(buffer) * shards;
  }
  int stage = program.zero_stage();
  int factor = stage == 3 ? 3 : 2;
  double expected =
      factor * double(psi) * double(dataSize - 1) / double(dataSize);
  os << "  ZeRO (Rajbhandari et al. 2020) for "
     << (stage ? "zero" + std::to_string(stage) : std::string("dp"))
     << " on \"dp\"=" << dataSize << ": " << factor << " Psi (N-1)/N = "
     << wireText(expected) << ", Psi = " << bytesText(psi)
     << " of parameters per replica; this plan moves "
     << format("%.4f", expected > 0 ? dp->second / expected : 0.0)
     << " of it over {\"dp\"}\n";
}

/// What the runtime allocates outside the arena for collectives
/// (Executor.cpp): gradient buckets pack into kBucketSlots recycled buffers
/// of the largest bucket's packed size (send bytes, and for a
/// reduce_scatter the received block after them at a 64-byte boundary);
/// a bucket of one all_reduce whose output is read after it reduces in
/// that output and takes no slot;
/// plus one buffer where reduce_scatter members along a dimension other
/// than 0 are transposed before packing; other collectives along such a
/// dimension share one transposition scratch, as large as the largest need.
struct OutsideArena {
  int64_t buckets = 0, largestBucket = 0, packScratch = 0, scratch = 0;
  /// Buffers in flight: kBucketSlots, or one per bucket when fewer.
  int64_t slots() const {
    return std::min<int64_t>(runtime::kBucketSlots, buckets);
  }
  int64_t bucketBound() const { return slots() * largestBucket + packScratch; }
};

OutsideArena outsideArenaBytes(const plan::Plan &proto,
                               const plan::Program &program) {
  auto aligned = [](int64_t bytes) { return (bytes + 63) / 64 * 64; };
  std::map<std::string, int64_t> axisSize = axisSizes(proto);
  auto bytesOf = [&](int64_t id) { return bufferBytes(program, id); };
  OutsideArena out;
  // The open bucket: its id, first member, and packed bytes.
  int64_t bucket = -1, start = 0, send = 0, recv = 0;
  // `end`: the instruction after the bucket's last member.
  auto closeBucket = [&](int64_t end) {
    if (!plan::reducesInItsOutput(program, start, end)) {
      out.largestBucket = std::max(
          out.largestBucket, recv ? aligned(send) + recv : send);
      ++out.buckets;
    }
    bucket = -1, send = 0, recv = 0;
  };
  for (int64_t i = 0; i < program.instructions_size(); ++i) {
    const plan::Instruction &inst = program.instructions(i);
    if (!inst.has_collective()) {
      if (bucket >= 0)
        closeBucket(i);
      continue;
    }
    const plan::Collective &c = inst.collective();
    int64_t g = groupSize(c.axes(), axisSize);
    int64_t in = bytesOf(c.input()), result = bytesOf(c.output());
    if (bucket >= 0 && c.bucket() != bucket)
      closeBucket(i);
    if (c.bucket() > 0) {
      if (bucket < 0)
        start = i;
      bucket = c.bucket();
      send += in;
      if (c.kind() == plan::Collective::REDUCE_SCATTER) {
        recv += result;
        if (c.dim() != 0 && g > 1)
          out.packScratch = std::max(out.packScratch, in);
      }
      continue;
    }
    if (g == 1)
      continue;
    switch (c.kind()) {
    case plan::Collective::ALL_GATHER:
    case plan::Collective::REDUCE_SCATTER:
      if (c.dim() != 0) // the input and result, dimension first
        out.scratch = std::max(out.scratch, aligned(in) + result);
      break;
    case plan::Collective::ALL_TO_ALL: // the blocks sent and received
      out.scratch = std::max(out.scratch, aligned(in) + in);
      break;
    default:
      break;
    }
  }
  if (bucket >= 0)
    closeBucket(program.instructions_size());
  return out;
}
} // namespace

/// Adds `times` runs of `program`'s work to `work`.
static void addProgramWork(PlanWork &work, const plan::Plan &proto,
                           const plan::Program &program, int64_t times) {
  std::map<std::string, int64_t> axisSize = axisSizes(proto);
  int64_t lastBucket = 0;
  for (const plan::Instruction &inst : program.instructions()) {
    if (inst.has_kernel()) {
      const plan::Kernel &kernel = inst.kernel();
      // The costs lowering wrote (the dialect's CostOpInterface).
      work.kernelFlops += double(times) * kernel.flops();
      work.kernelBytes += double(times) * kernel.bytes();
      if (kernel.kind() == plan::Kernel::EINSUM ||
          kernel.kind() == plan::Kernel::ATTENTION ||
          kernel.kind() == plan::Kernel::ATTENTION_GRAD)
        work.flops += double(times) * kernel.flops();
      continue;
    }
    if (!inst.has_collective())
      continue;
    const plan::Collective &c = inst.collective();
    if (!rt::collectiveCommunicates(c.kind()))
      continue;
    work.collectives += times;
    double wire = double(times) * collectiveWire(program, c, axisSize);
    int64_t calls =
        (c.bucket() <= 0 || c.bucket() != lastBucket) ? times : 0;
    work.wireBytes += wire;
    work.calls += calls;
    lastBucket = c.bucket();
    std::vector<std::string> axes(c.axes().begin(), c.axes().end());
    bool bucketed = c.bucket() > 0;
    auto it = llvm::find_if(work.traffic, [&](const PlanTraffic &t) {
      return t.axes == axes && t.bucketed == bucketed;
    });
    if (it == work.traffic.end()) {
      work.traffic.push_back({std::move(axes), bucketed, 0, 0});
      it = std::prev(work.traffic.end());
    }
    it->wireBytes += wire;
    it->calls += calls;
  }
}

PlanWork measurePlanWork(const plan::Plan &proto,
                         const plan::Program &program) {
  PlanWork work;
  addProgramWork(work, proto, program, 1);
  if (const plan::Program *micro = microbatchProgramOf(proto, program))
    addProgramWork(work, proto, *micro, proto.pipeline().microbatches());
  return work;
}

/// explainPlan; `rankTotal`: for a stage of an interleaved rank, also the
/// rank's total over its chunks (each chunk explained to nowhere).
static PlanMemory explain(const plan::Plan &proto, const plan::Program &program,
                          StringRef source, raw_ostream &os, bool rankTotal);

PlanMemory explainPlan(const plan::Plan &proto, const plan::Program &program,
                       StringRef source, raw_ostream &os) {
  return explain(proto, program, source, os, /*rankTotal=*/true);
}

static PlanMemory explain(const plan::Plan &proto, const plan::Program &program,
                          StringRef source, raw_ostream &os, bool rankTotal) {
  PlanMemory memory;
  // A pipelined step: the stage whose once-per-step program this is (its
  // update; stage 0's is program 0), or -1.
  int stageIndex = -1;
  if (proto.has_pipeline() && proto.pipeline().stages_size() > 0 &&
      runtime::pipeline::isPipelinedStage(proto.pipeline().stages(0)))
    for (int t = 0; t < proto.pipeline().stages_size(); ++t) {
      int index = proto.pipeline().stages(t).optimizer();
      if (index >= 0 && index < proto.programs_size() &&
          &proto.programs(index) == &program)
        stageIndex = t;
    }
  const std::string stageName =
      "stage " + std::to_string(std::max(stageIndex, 0));
  int64_t devices = 1;
  os << "plan " << source << ": program '" << program.name() << "' ("
     << (program.partitioned() ? "partitioned" : "not partitioned") << ")\n";
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
  if (proto.has_pipeline() && &program == &proto.programs(0) &&
      proto.pipeline().ranks() == 1 &&
      (proto.pipeline().stages().empty() ||
       !runtime::pipeline::isPipelinedStage(proto.pipeline().stages(0))))
    os << "microbatches: " << proto.pipeline().microbatches()
       << " per step (gradients accumulated in microbatch order; the "
          "data-parallel reductions and the optimizer run once per step)\n";
  else if (stageIndex >= 0)
    os << "pipeline: " << proto.pipeline().stages_size()
       << " stages along \"" << proto.pipeline().axis() << "\""
       << (proto.pipeline().chunks() > 1
               ? " (" + std::to_string(proto.pipeline().ranks()) +
                     " ranks x " + std::to_string(proto.pipeline().chunks()) +
                     " chunks)"
               : std::string())
       << ", " << proto.pipeline().microbatches()
       << " microbatches per step, schedule '"
       << proto.pipeline().kind() << "'; below, " << stageName
       << " (its update is this program; --stage S explains another; "
          "`partita explain --schedule` draws every rank's actions)\n";

  // Buffer roles: results are ACTIVATION buffers too, counted as outputs.
  std::vector<bool> isResult(program.buffers().size(), false);
  for (int64_t id : program.results())
    if (id >= 0 && id < int64_t(isResult.size()))
      isResult[id] = true;
  enum {
    kParam,
    kInput,
    kActivation,
    kOutput,
    kConstant,
    kState,
    kAccumulator,
    kRoles
  };
  int64_t total[kRoles] = {}, count[kRoles] = {};
  for (const plan::Buffer &buffer : program.buffers()) {
    int role = kActivation;
    if (buffer.role() == plan::PARAMETER)
      role = kParam;
    else if (buffer.role() == plan::INPUT)
      role = kInput;
    else if (buffer.role() == plan::CONSTANT)
      role = kConstant;
    else if (buffer.role() == plan::STATE)
      role = buffer.accumulator() ? kAccumulator : kState;
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
  if (count[kState])
    line("state", kState,
         "sum of local optimizer state bytes (moments, step counter)");
  if (count[kAccumulator])
    line("accumulators", kAccumulator,
         "sum of local gradient accumulator bytes (each accumulated "
         "gradient and the loss, as the step reads them; zeroed every step)");
  line("activations", kActivation,
       "sum of local intermediate bytes, not all live at once");
  line("outputs", kOutput, "sum of local result bytes");
  if (count[kConstant])
    line("constants", kConstant, "sum of local constant bytes");
  os << "  " << left_justify("arena peak", 12) << " "
     << bytesText(program.arena_bytes())
     << " = max(offset + local bytes) over activations and outputs, from "
        "the static memory plan (live ranges share bytes; donated updates "
        "take none)\n";
  if (program.host_arena_bytes())
    os << "  " << left_justify("host arena", 12) << " "
       << bytesText(program.host_arena_bytes())
       << " = the same over activations in host memory\n";
  // What the runtime allocates for collectives outside the arena.
  OutsideArena outside = outsideArenaBytes(proto, program);
  int64_t bucketBytes = outside.bucketBound();
  int64_t scratchBytes = outside.scratch;
  if (bucketBytes) {
    os << "  " << left_justify("buckets", 12) << " " << bytesText(bucketBytes)
       << " = " << outside.slots() << " in flight x "
       << bytesText(outside.largestBucket)
       << " (the largest bucket's packed send bytes, + its received bytes "
          "for a reduce_scatter), outside the arena";
    if (outside.packScratch)
      os << ", + " << bytesText(outside.packScratch)
         << " (the largest reduce_scatter member transposed to dimension 0 "
            "before packing)";
    os << "; one in flight with --sync-comm\n";
  }
  if (scratchBytes)
    os << "  " << left_justify("scratch", 12) << " "
       << bytesText(scratchBytes)
       << " = the collectives' one transposition buffer, outside the arena: "
          "the largest need (all_gather and reduce_scatter along a dimension "
          "other than 0: input + output bytes; all_to_all: 2 x input bytes)\n";
  // A microbatched step (Plan.pipeline on one rank): the per-microbatch
  // program's arena, inputs and collective buffers live beside the step's.
  int64_t microBytes = 0;
  const plan::Program *micro = microbatchProgramOf(proto, program);
  if (micro) {
    int64_t microInputs = 0;
    for (const plan::Buffer &buffer : micro->buffers())
      if (buffer.role() == plan::INPUT)
        microInputs += localBytes(buffer);
    OutsideArena mo = outsideArenaBytes(proto, *micro);
    microBytes = micro->arena_bytes() + micro->host_arena_bytes() +
                 microInputs + mo.bucketBound() + mo.scratch;
    os << "  " << left_justify("microbatch", 12) << " "
       << bytesText(microBytes) << " = program '" << micro->name()
       << "' (forward and backward of one microbatch, run "
       << proto.pipeline().microbatches()
       << " times a step): arena peak " << bytesText(micro->arena_bytes());
    if (micro->host_arena_bytes())
      os << " + host arena " << bytesText(micro->host_arena_bytes());
    os << " + inputs " << bytesText(microInputs);
    if (mo.bucketBound())
      os << " + buckets " << bytesText(mo.bucketBound());
    if (mo.scratch)
      os << " + scratch " << bytesText(mo.scratch);
    os << "\n";
  }
  // A pipelined step: the stage's forward and backward programs, and the
  // slots its rank holds for the microbatches in flight (what the
  // executor allocates, Executor.cpp's Pipe).
  int64_t stageBytes = 0, slotBytes = 0;
  bool pipelined = stageIndex >= 0;
  if (pipelined) {
    namespace pl = runtime::pipeline;
    const plan::PipelineSchedule &schedule = proto.pipeline();
    const plan::PipelineStage &stage = schedule.stages(stageIndex);
    // The programs run one at a time and share one device arena, the
    // largest of theirs (Executor.cpp's Pipe::Chunk::arena).
    int64_t sharedArena = 0;
    for (int index : pl::microbatchPrograms(stage))
      if (index < proto.programs_size())
        sharedArena = std::max(sharedArena,
                               int64_t(proto.programs(index).arena_bytes()));
    for (int index : pl::microbatchPrograms(stage)) {
      if (index >= proto.programs_size())
        continue;
      const plan::Program &part = proto.programs(index);
      // The program's row label and what it is.
      auto [label, what] =
          index == stage.forward()
              ? std::pair("forward", "forward")
          : index == stage.backward() ? std::pair("backward", "backward")
          : index == stage.backward_input()
              ? std::pair("backward B", "input-gradient backward (B)")
              : std::pair("backward W", "weight-gradient backward (W)");
      int64_t inputs = 0;
      for (const plan::Buffer &buffer : part.buffers())
        if (buffer.role() == plan::INPUT)
          inputs += localBytes(buffer);
      OutsideArena po = outsideArenaBytes(proto, part);
      int64_t bytes =
          part.host_arena_bytes() + inputs + po.bucketBound() + po.scratch;
      stageBytes += bytes;
      os << "  " << left_justify(label, 12) << " " << bytesText(bytes)
         << " = program '" << part.name() << "' (" << stageName << "'s " << what
         << " of one microbatch): inputs " << bytesText(inputs);
      if (po.bucketBound())
        os << " + buckets " << bytesText(po.bucketBound());
      if (po.scratch)
        os << " + scratch " << bytesText(po.scratch);
      os << "; arena peak " << bytesText(part.arena_bytes())
         << " in the shared arena\n";
    }
    stageBytes += sharedArena;
    os << "  " << left_justify("stage arena", 12) << " "
       << bytesText(sharedArena)
       << " = the largest arena peak of these programs, which run one at a "
          "time and share it\n";
    // Per slot kind, the bytes of one microbatch's values.
    std::vector<const plan::Program *> parts;
    for (int index : pl::microbatchPrograms(stage))
      if (index < proto.programs_size())
        parts.push_back(&proto.programs(index));
    pl::SlotBytes kindBytes = pl::slotBytes(parts);
    pl::SlotPeaks peaks =
        pl::slotPeaks(pl::fromProto(schedule), stageIndex % schedule.ranks(),
                      stageIndex / schedule.ranks());
    std::string formula;
    for (int k = 0; k < pl::kSlotKinds; ++k) {
      int peak = peaks.of(pl::SlotKind(k));
      slotBytes += peak * kindBytes[k];
      if (peak && kindBytes[k])
        formula += std::string(formula.empty() ? "" : " + ") +
                   pl::describe(pl::SlotKind(k)) + " " + std::to_string(peak) +
                   " x " + bytesText(kindBytes[k]);
    }
    os << "  " << left_justify("pipeline", 12) << " " << bytesText(slotBytes)
       << " = " << (formula.empty() ? "nothing in flight" : formula)
       << " (" << stageName << "'s microbatches in flight under '" << schedule.kind()
       << "': the most its action list holds at once, times the bytes per "
          "microbatch)\n";
    int64_t sentActivations = kindBytes[int(pl::SlotKind::ActivationOut)];
    int64_t sentGradients = kindBytes[int(pl::SlotKind::GradientOut)];
    // What the stage's sends move per step (point to point, outside the
    // collectives below).
    int64_t m = schedule.microbatches();
    memory.pipelineSends = m * (sentActivations + sentGradients);
    os << "  " << left_justify("sends", 12) << " "
       << bytesText(m * (sentActivations + sentGradients))
       << " per step = " << m << " microbatches x ("
       << bytesText(sentActivations) << " of activations to the next stage + "
       << bytesText(sentGradients)
       << " of gradients to the previous one), point to point along \""
       << schedule.axis() << "\" (not in the total)\n";
  }
  memory.stagePrograms = stageBytes;
  memory.pipelineSlots = slotBytes;
  memory.accumulators = total[kAccumulator];
  memory.microbatch = microBytes;
  memory.parameters = total[kParam];
  memory.inputs = total[kInput];
  memory.activations = total[kActivation];
  memory.outputs = total[kOutput];
  memory.constants = total[kConstant];
  memory.arenaPeak = program.arena_bytes();
  memory.buckets = bucketBytes;
  memory.scratch = scratchBytes;
  memory.state = total[kState];
  memory.hostArena = program.host_arena_bytes();
  memory.total = total[kParam] + total[kInput] + total[kConstant] +
                 total[kState] + program.arena_bytes() +
                 program.host_arena_bytes() + bucketBytes + scratchBytes +
                 total[kAccumulator] + microBytes + stageBytes + slotBytes;
  os << "  " << left_justify("total", 12) << " " << bytesText(memory.total)
     << " = parameters + inputs + constants"
     << (count[kState] ? " + state" : "") << " + arena peak"
     << (program.host_arena_bytes() ? " + host arena" : "")
     << (bucketBytes ? " + buckets" : "") << (scratchBytes ? " + scratch" : "")
     << (count[kAccumulator] ? " + accumulators" : "")
     << (micro ? " + microbatch" : "")
     << (pipelined ? " + forward + backward + stage arena + pipeline" : "")
     << " (what the runtime allocates; partita run --report-memory measures "
        "it)\n";
  if (pipelined && proto.pipeline().chunks() > 1) {
    int ranks = proto.pipeline().ranks(), rank = stageIndex % ranks;
    std::string others;
    int count = 0;
    for (int t = rank; t < proto.pipeline().stages_size(); t += ranks)
      if (t != stageIndex)
        others += (count++ ? ", " : "") + std::to_string(t);
    os << "  (interleaved: its rank " << rank << " also runs stage"
       << (count == 1 ? " " : "s ") << others << " as its other chunk"
       << (count == 1 ? "" : "s")
       << ", whose programs, parameters and slots this total leaves out)\n";
    if (rankTotal) {
      // The rank holds every chunk's programs, parameters and slots.
      int64_t sum = 0;
      std::string terms;
      for (int t = rank; t < proto.pipeline().stages_size(); t += ranks) {
        int64_t stageTotal =
            t == stageIndex
                ? memory.total
                : explain(proto,
                          proto.programs(proto.pipeline().stages(t).optimizer()),
                          source, llvm::nulls(), /*rankTotal=*/false)
                      .total;
        sum += stageTotal;
        terms += (terms.empty() ? "" : " + ") + std::string("stage ") +
                 std::to_string(t) + " " + std::to_string(stageTotal);
      }
      os << "  " << left_justify("rank total", 12) << " " << bytesText(sum)
         << " = " << terms << " (rank " << rank
         << "'s chunks together: what its executor allocates)\n";
    }
  }

  printModelState(os, proto, program, memory);
  printLayerActivations(os, program, memory);

  os << "\nparameters (name, global shape, sharding, local bytes):\n";
  for (const plan::Buffer &buffer : program.buffers()) {
    if (buffer.role() != plan::PARAMETER)
      continue;
    os << "  " << buffer.name() << ": "
       << shapeText(buffer.global_shape(), buffer.dtype()) << ", "
       << shardingText(buffer) << ", " << bytesText(localBytes(buffer))
       << "\n";
  }

  printInputs(os, program);

  os << "\ncollectives (input = local bytes of the input; wire = bytes each "
        "device sends under the ring algorithm over its group of N: "
        "an all-reduce 2(N-1)/N x input, an all-gather (N-1)/N x output, a "
        "reduce-scatter or all-to-all (N-1)/N x input, a permute its "
        "input):\n";
  std::map<std::string, int64_t> axisSize = axisSizes(proto);
  int64_t collectives = 0, collectiveBytes = 0, calls = 0;
  double wireTotal = 0;
  std::map<std::string, double> trafficByAxes;
  // Gradient buckets (dist-optimize-comm), in order: members and bytes.
  struct Bucket {
    int64_t id, members = 0, bytes = 0;
    plan::Collective::Kind kind;
  };
  std::vector<Bucket> buckets;
  for (const plan::Instruction &inst : program.instructions()) {
    if (!inst.has_collective())
      continue;
    const plan::Collective &c = inst.collective();
    int64_t bytes = collectiveInputBytes(program, c);
    // slice, mask and axis_index move nothing between devices.
    bool local = !rt::collectiveCommunicates(c.kind());
    double wire = collectiveWire(program, c, axisSize);
    if (!local) {
      ++collectives;
      collectiveBytes += bytes;
      wireTotal += wire;
      trafficByAxes[axesText(c.axes())] += wire;
      // A bucket's members are adjacent and make one call.
      if (c.bucket() <= 0 || buckets.empty() || buckets.back().id != c.bucket())
        ++calls;
    }
    if (c.bucket() > 0) {
      if (buckets.empty() || buckets.back().id != c.bucket())
        buckets.push_back({c.bucket(), 0, 0, c.kind()});
      ++buckets.back().members;
      buckets.back().bytes += bytes;
    }
    os << "  " << rt::collectiveKindName(c.kind()) << " over "
       << axesText(c.axes());
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
    else
      os << ", wire " << wireText(wire);
    if (c.bucket() > 0)
      os << " [bucket " << c.bucket() << "]";
    if (!inst.location().empty())
      os << " at " << inst.location();
    os << "\n";
  }
  os << "  total: " << collectives << " communicating collective"
     << (collectives == 1 ? "" : "s") << " in " << calls
     << " communicator call" << (calls == 1 ? "" : "s") << ", "
     << bytesText(collectiveBytes)
     << " per device = sum of their input bytes; on the wire "
     << wireText(wireTotal) << " per device\n";
  if (!buckets.empty()) {
    os << "\ngradient buckets (dist-optimize-comm; each is one communicator "
          "call, bytes = sum of its members' input bytes):\n";
    for (const Bucket &b : buckets)
      os << "  bucket " << b.id << ": " << b.members << " "
         << rt::collectiveKindName(b.kind) << (b.members == 1 ? "" : "s")
         << ", " << bytesText(b.bytes) << "\n";
  }
  // A pipelined step: the stage's forward and backward collectives run
  // once per microbatch, and its sends move activations and gradients.
  if (pipelined) {
    const plan::PipelineSchedule &schedule = proto.pipeline();
    int64_t m = schedule.microbatches();
    double perMicrobatch = 0;
    for (int index :
         runtime::pipeline::microbatchPrograms(schedule.stages(stageIndex)))
      for (const plan::Instruction &inst : proto.programs(index).instructions()) {
        if (!inst.has_collective() ||
            !rt::collectiveCommunicates(inst.collective().kind()))
          continue;
        double wire = collectiveWire(proto.programs(index),
                                     inst.collective(), axisSize);
        trafficByAxes[axesText(inst.collective().axes())] += m * wire;
        perMicrobatch += wire;
      }
    os << "\n" << stageName << "'s forward and backward collectives: "
       << wireText(perMicrobatch) << " on the wire per microbatch, x " << m
       << " microbatches in the traffic below\n";
    double sends = double(memory.pipelineSends);
    if (sends > 0)
      trafficByAxes["{\"" + schedule.axis() + "\"} (sends)"] += sends;
  }
  printTraffic(os, proto, program, trafficByAxes);
  return memory;
}

} // namespace partita::plan_lowering
