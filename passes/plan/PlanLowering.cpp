//===- PlanLowering.cpp - MLIR function -> plan protobuf
//-------------------===//
//
// Algorithm: one walk over the function body in order. Every function
// argument becomes a persistent buffer (PARAMETER when it has `nn.param`,
// STATE when it has `nn.state`, else INPUT); every op result an ACTIVATION
// buffer; every op one instruction (the kernel its dist::KernelOpInterface
// names, with one output per result, or a collective): a name the plan has a
// Kernel.Kind for lowers to that kind, its attributes to the KernelAttrs
// fields of the same names; any other name to a CUSTOM kernel that carries
// name and attributes for a runtime kernel library. No op is known here by
// its class. A result carrying `nn.param` or
// `nn.state` names the persistent buffer it replaces after a step (a train
// step's updated parameters and optimizer state); where nothing reads the
// old value after the update writes the new one, the result is donated
// (`in_place`: written straight into the replaced buffer, no arena bytes,
// no copy-back). Live ranges
// are instruction indices (definition to last use; function results live to
// the end), and `planMemory` places the activations in one arena by greedy
// first fit over those ranges; an elementwise add, sub or mul, an einsum's
// addend, or a bucket's all_reduce, writes its output over an input it
// reads for the last time (`reuses`, from `reuseDyingInputs`).
//
// Fusion (LowerToPlanOptions::fuseAdds): an `add` of a two-operand einsum's
// result that nothing else reads becomes that einsum with a third input,
// the addend (the add's other operand, or the input of a `broadcast` that
// only the add reads, with its dims), in one instruction where the add
// stood; the einsum and the broadcast emit nothing. Ops are matched by the
// kernels they describe, as everywhere here.
//
// Known limits: no other buffer aliasing (reshape copies; other
// collectives write a new buffer), one memory space; splat constants are
// `fill` kernels, others CONSTANT buffers outside the arena; sub-axes in
// shardings are rejected.
//
//===----------------------------------------------------------------------===//

#include "passes/plan/PlanLowering.h"

#include "dialects/dist/IR/CostInterface.h"
#include "dialects/dist/IR/DistDialect.h"
#include "dialects/dist/IR/DistOps.h"
#include "dialects/dist/IR/KernelInterface.h"
#include "dialects/dist/IR/ShardingAdapters.h"
#include "dialects/nn/IR/NNAttributes.h"
#include "partita/runtime/PipelineSchedule.h"
#include "runtime/plan/PlanMemory.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"

#include <algorithm>
#include <optional>
#include <variant>

using namespace mlir;
namespace pb = partita::plan;

namespace partita::plan_lowering {

namespace {

constexpr uint32_t kPlanFormatVersion = 2;

FailureOr<pb::DType> toDType(Type type,
                             function_ref<InFlightDiagnostic()> emitError) {
  if (type.isF32())
    return pb::F32;
  if (type.isF64())
    return pb::F64;
  if (type.isF16())
    return pb::F16;
  if (type.isBF16())
    return pb::BF16;
  if (type.isSignlessInteger(32))
    return pb::I32;
  if (type.isSignlessInteger(64))
    return pb::I64;
  emitError() << "element type " << type
              << " has no runtime dtype (f32, f64, f16, bf16, i32 or i64)";
  return failure();
}

std::string locationString(Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc))
    return name.getName().str();
  if (auto file = dyn_cast<FileLineColLoc>(loc))
    return (file.getFilename().strref() + ":" + Twine(file.getLine()) + ":" +
            Twine(file.getColumn()))
        .str();
  if (auto fused = dyn_cast<FusedLoc>(loc))
    for (Location inner : fused.getLocations())
      if (std::string s = locationString(inner); !s.empty())
        return s;
  if (auto callSite = dyn_cast<CallSiteLoc>(loc))
    return locationString(callSite.getCallee());
  return "";
}

/// `dist.axis_index` (this device's position in a group), matched by name.
bool isAxisIndex(Operation *op) {
  return op->getName().getStringRef() == "dist.axis_index";
}

/// Whether `func` is a per-device program (see lowerFunction).
bool isPartitioned(func::FuncOp func) {
  if (func->hasAttr("dist.mesh"))
    return true;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (func.getArgAttr(i, "dist.global_type"))
      return true;
  bool collective = false;
  func.walk([&](Operation *op) {
    if (isa<dist::AllReduceOp, dist::AllGatherOp, dist::ReduceScatterOp,
            dist::AllToAllOp, dist::CollectivePermuteOp, dist::SendOp,
            dist::RecvOp, dist::SliceOp, dist::MaskOp>(op) ||
        isAxisIndex(op))
      collective = true;
  });
  return collective;
}

/// The sharding of argument `i` relative to its global type:
/// `dist.global_sharding` (dist-partition's output), else `dist.sharding`.
dist::ShardingAttr argSharding(func::FuncOp func, unsigned i) {
  if (auto s =
          func.getArgAttrOfType<dist::ShardingAttr>(i, "dist.global_sharding"))
    return s;
  return dist::getSharding(func.getArgument(i));
}

dist::ShardingAttr resultSharding(func::FuncOp func, unsigned i) {
  if (auto s = func.getResultAttrOfType<dist::ShardingAttr>(
          i, "dist.global_sharding"))
    return s;
  return dist::getFuncResultSharding(func, i);
}

/// The plan's mesh: with shardingToPlan, the one adapter from the sharding
/// model (dialects/dist/IR/ShardingModel.h) to plan.proto's layout.
pb::Mesh meshToPlan(const dist::Mesh &mesh) {
  pb::Mesh lowered;
  for (const dist::MeshAxis &axis : mesh.axes) {
    pb::MeshAxis *a = lowered.add_axes();
    a->set_name(axis.name);
    a->set_size(axis.size);
  }
  for (int64_t d : mesh.deviceIds)
    lowered.add_devices(d);
  return lowered;
}

/// Writes `sharding` (on `mesh`) as the layout of `buffer`: per dimension
/// its axes, the partial axes and how they combine. Fails on what a plan
/// cannot hold: sub-axes, axes `mesh` lacks, and a partial minimum (the
/// runtime gathers partial sums and maxima only).
LogicalResult shardingToPlan(const dist::Sharding &sharding,
                             const dist::Mesh &mesh, pb::Buffer &buffer,
                             function_ref<InFlightDiagnostic()> emitError) {
  buffer.clear_sharding();
  buffer.clear_partial_axes();
  auto axisName = [&](const dist::AxisRef &axis) -> FailureOr<std::string> {
    if (axis.isSubAxis()) {
      emitError() << "uses sub-axis #dist.axis<" << axis.toIRString()
                  << ">, which the plan lowering does not support yet";
      return failure();
    }
    if (!mesh.findAxis(axis.name)) {
      emitError() << "names axis '" << axis.name << "', which mesh @"
                  << mesh.name << " does not have";
      return failure();
    }
    return axis.name;
  };
  for (const dist::DimSharding &dim : sharding.dims) {
    pb::DimSharding *d = buffer.add_sharding();
    for (const dist::AxisRef &axis : dim.axes) {
      FailureOr<std::string> name = axisName(axis);
      if (failed(name))
        return failure();
      d->add_axes(*name);
    }
  }
  for (const dist::AxisRef &axis : sharding.partialAxes) {
    FailureOr<std::string> name = axisName(axis);
    if (failed(name))
      return failure();
    buffer.add_partial_axes(*name);
  }
  buffer.set_partial_op(
      sharding.partialKind == dist::ReductionKind::Max ? pb::MAX : pb::SUM);
  if (sharding.partialKind == dist::ReductionKind::Min &&
      sharding.isPartial()) {
    emitError() << "is a partial minimum, which the runtime cannot gather";
    return failure();
  }
  return success();
}

/// The plan kind of a built-in kernel name: the Kernel.Kind whose name is
/// `name` in upper case ("layer_norm" -> LAYER_NORM); nullopt for any other
/// name (a custom kernel).
std::optional<pb::Kernel::Kind> builtinKernelKind(StringRef name) {
  pb::Kernel::Kind kind;
  if (!pb::Kernel::Kind_Parse(name.upper(), &kind) ||
      kind == pb::Kernel::KIND_UNSPECIFIED || kind == pb::Kernel::CUSTOM ||
      StringRef(pb::Kernel::Kind_Name(kind)).lower() != name)
    return std::nullopt;
  return kind;
}

/// Sets the KernelAttrs field named `key` to `value` (by reflection: the
/// field names are the attribute names, so no kernel is special here).
LogicalResult setBuiltinAttr(Operation *op, StringRef kernelName,
                             const std::string &key,
                             const dist::KernelAttrValue &value,
                             pb::KernelAttrs &attrs) {
  namespace gp = google::protobuf;
  const gp::FieldDescriptor *field =
      pb::KernelAttrs::descriptor()->FindFieldByName(key);
  if (!field)
    return op->emitError() << "describes kernel '" << kernelName
                           << "' with attribute '" << key
                           << "', which that kernel kind has no field for "
                              "(KernelAttrs in runtime/plan/plan.proto)";
  const gp::Reflection *reflection = attrs.GetReflection();
  bool fits = true;
  if (field->is_repeated()) {
    auto *ints = std::get_if<std::vector<int64_t>>(&value);
    fits = ints && field->cpp_type() == gp::FieldDescriptor::CPPTYPE_INT64;
    if (fits)
      for (int64_t v : *ints)
        reflection->AddInt64(&attrs, field, v);
  } else {
    switch (field->cpp_type()) {
    case gp::FieldDescriptor::CPPTYPE_INT64:
      if (auto *v = std::get_if<int64_t>(&value))
        reflection->SetInt64(&attrs, field, *v);
      else
        fits = false;
      break;
    case gp::FieldDescriptor::CPPTYPE_DOUBLE:
      if (auto *v = std::get_if<double>(&value))
        reflection->SetDouble(&attrs, field, *v);
      else
        fits = false;
      break;
    case gp::FieldDescriptor::CPPTYPE_BOOL:
      if (auto *v = std::get_if<bool>(&value))
        reflection->SetBool(&attrs, field, *v);
      else
        fits = false;
      break;
    case gp::FieldDescriptor::CPPTYPE_STRING:
      if (auto *v = std::get_if<std::string>(&value))
        reflection->SetString(&attrs, field, *v);
      else
        fits = false;
      break;
    default:
      fits = false;
    }
  }
  if (!fits)
    return op->emitError() << "describes kernel '" << kernelName
                           << "' with attribute '" << key << "' of kind "
                           << dist::getKernelAttrKindName(value)
                           << ", but KernelAttrs." << key << " takes "
                           << (field->is_repeated() ? "a list of " : "")
                           << field->type_name();
  return success();
}

/// `description` as a plan kernel (without inputs and outputs): a built-in
/// kind with its attributes in KernelAttrs, or a CUSTOM kernel carrying the
/// name and the attributes as they are.
LogicalResult kernelToPlan(Operation *op,
                           const dist::KernelDescription &description,
                           pb::Kernel &kernel) {
  StringRef name = description.name;
  if (name.empty())
    return op->emitError() << "describes a kernel with an empty name";
  // Present even when empty, as plans always had it.
  kernel.mutable_attrs();
  if (std::optional<pb::Kernel::Kind> kind = builtinKernelKind(name)) {
    kernel.set_kind(*kind);
    for (const auto &[key, value] : description.attrs)
      if (failed(setBuiltinAttr(op, name, key, value,
                                *kernel.mutable_attrs())))
        return failure();
    return success();
  }
  kernel.set_kind(pb::Kernel::CUSTOM);
  kernel.set_custom_name(description.name);
  // std::map: by name, so the plan's bytes do not depend on insertion order.
  for (const auto &[key, value] : description.attrs) {
    pb::NamedAttr *attr = kernel.add_custom_attrs();
    attr->set_name(key);
    pb::AttrValue *v = attr->mutable_value();
    if (auto *i = std::get_if<int64_t>(&value))
      v->set_int_value(*i);
    else if (auto *f = std::get_if<double>(&value))
      v->set_float_value(*f);
    else if (auto *b = std::get_if<bool>(&value))
      v->set_bool_value(*b);
    else if (auto *str = std::get_if<std::string>(&value))
      v->set_string_value(*str);
    else
      for (int64_t x : std::get<std::vector<int64_t>>(value))
        v->mutable_ints_value()->add_values(x);
  }
  return success();
}

class FunctionLowering {
public:
  FunctionLowering(func::FuncOp func, const LowerToPlanOptions &options,
                   pb::Mesh &mesh, bool &haveMesh, pb::Program &program)
      : func(func), options(options), mesh(mesh), haveMesh(haveMesh),
        program(program) {}

  LogicalResult run();

private:
  func::FuncOp func;
  const LowerToPlanOptions &options;
  pb::Mesh &mesh;
  bool &haveMesh;
  pb::Program &program;
  bool partitioned = false;
  StringRef meshName;
  /// The mesh of meshName, as the sharding model.
  dist::Mesh meshModel;
  llvm::DenseMap<Value, int64_t> bufferOf;
  /// Each op's kernel, described once (a description that failed has
  /// emitted its diagnostic).
  llvm::DenseMap<Operation *, FailureOr<dist::KernelDescription>> described;
  /// An add lowered as an einsum with an addend (fuseAdds).
  struct Fusion {
    Operation *einsum;
    Value addend;
    SmallVector<int64_t> dims;
  };
  llvm::DenseMap<Operation *, Fusion> fusions;
  /// The einsums and broadcasts that fusions emit.
  llvm::DenseSet<Operation *> fused;

  FailureOr<dist::KernelDescription> describe(Operation *op);
  /// Whether `op` describes the kernel named `name`.
  bool isKernel(Operation *op, StringRef name);
  void findFusions();
  LogicalResult useMesh(Operation *at, FlatSymbolRefAttr symbol);
  FailureOr<int64_t> addBuffer(Value value, pb::Role role,
                               function_ref<InFlightDiagnostic()> emitError);
  LogicalResult applySharding(pb::Buffer &buffer, dist::ShardingAttr sharding,
                              Type globalType,
                              function_ref<InFlightDiagnostic()> emitError);
  LogicalResult lowerOp(Operation *op);
  LogicalResult lowerKernel(Operation *op, Operation *kernelOp,
                            ArrayRef<Value> inputs,
                            const Fusion *fusion = nullptr);
  /// Sets `kernel`'s flops and bytes from the CostOpInterface of the op(s)
  /// it runs (none: left 0).
  void setCost(Operation *op, Operation *kernelOp, const Fusion *fusion,
               pb::Kernel &kernel);
  LogicalResult lowerCollective(Operation *op);
  LogicalResult lowerConstant(Operation *op, DenseElementsAttr dense);
  LogicalResult lowerResult(func::ReturnOp ret, unsigned index, Value value);
  LogicalResult checkReplacements(func::ReturnOp ret);
  void setInit(pb::Buffer &buffer);
  void setValueBounds();
  int64_t use(Value value) { return bufferOf.lookup(value); }
};

LogicalResult FunctionLowering::useMesh(Operation *at,
                                        FlatSymbolRefAttr symbol) {
  if (!symbol) {
    at->emitError() << "partitioned function names no mesh";
    return failure();
  }
  dist::MeshOp meshOp = dist::lookupMesh(at, symbol);
  if (!meshOp) {
    at->emitError() << "mesh " << symbol << " is not declared in the module";
    return failure();
  }
  if (!meshName.empty() && meshName != symbol.getValue()) {
    at->emitError() << "uses mesh " << symbol << ", but the function uses @"
                    << meshName << " (a plan has one mesh)";
    return failure();
  }
  meshName = symbol.getValue();
  FailureOr<dist::Mesh> model = dist::meshFromOp(meshOp);
  if (failed(model))
    return failure();
  meshModel = std::move(*model);
  pb::Mesh lowered = meshToPlan(meshModel);
  if (haveMesh && lowered.SerializeAsString() != mesh.SerializeAsString()) {
    at->emitError() << "mesh " << symbol
                    << " differs from the mesh of another program of the plan";
    return failure();
  }
  mesh = lowered;
  haveMesh = true;
  return success();
}

FailureOr<int64_t>
FunctionLowering::addBuffer(Value value, pb::Role role,
                            function_ref<InFlightDiagnostic()> emitError) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type || !type.hasStaticShape()) {
    emitError() << "has type " << value.getType()
                << "; the plan needs statically shaped tensors";
    return failure();
  }
  FailureOr<pb::DType> dtype = toDType(type.getElementType(), emitError);
  if (failed(dtype))
    return failure();
  pb::Buffer *buffer = program.add_buffers();
  int64_t id = program.buffers_size() - 1;
  buffer->set_id(id);
  buffer->set_dtype(*dtype);
  buffer->set_role(role);
  for (int64_t d : type.getShape()) {
    buffer->add_local_shape(d);
    buffer->add_global_shape(d);
  }
  buffer->set_first_use(program.instructions_size());
  buffer->set_last_use(program.instructions_size());
  bufferOf[value] = id;
  return id;
}

LogicalResult
FunctionLowering::applySharding(pb::Buffer &buffer, dist::ShardingAttr sharding,
                                Type globalType,
                                function_ref<InFlightDiagnostic()> emitError) {
  buffer.clear_sharding();
  buffer.clear_partial_axes();
  std::map<std::string, int64_t> sizes;
  for (const pb::MeshAxis &axis : mesh.axes())
    sizes[axis.name()] = axis.size();
  if (sharding) {
    if (sharding.getMeshName().getValue() != meshName) {
      emitError() << "is sharded over " << sharding.getMeshName()
                  << ", but the function runs on @" << meshName;
      return failure();
    }
    if (sharding.getRank() != buffer.local_shape_size()) {
      emitError() << "has a sharding of rank " << sharding.getRank()
                  << " for a tensor of rank " << buffer.local_shape_size();
      return failure();
    }
    FailureOr<dist::Sharding> model =
        dist::shardingFromAttr(sharding, emitError);
    if (failed(model) ||
        failed(shardingToPlan(*model, meshModel, buffer, emitError)))
      return failure();
  }
  // The global shape: the local one times each dimension's shard count.
  SmallVector<int64_t> global;
  for (int d = 0; d < buffer.local_shape_size(); ++d) {
    int64_t n = buffer.local_shape(d);
    if (d < buffer.sharding_size())
      for (const std::string &axis : buffer.sharding(d).axes())
        n *= sizes[axis];
    global.push_back(n);
  }
  if (globalType) {
    // A padded dimension (dist-partition pads dimensions their axes do not
    // divide) declares its real size, at most the local size times the
    // shard count; the runtime scatters and gathers only the real elements.
    auto declared = dyn_cast<RankedTensorType>(globalType);
    bool fits = declared && declared.getRank() == int64_t(global.size());
    for (int64_t d = 0; fits && d < int64_t(global.size()); ++d)
      fits = declared.getDimSize(d) <= global[d] &&
             declared.getDimSize(d) > 0;
    if (!fits) {
      InFlightDiagnostic diag = emitError();
      diag << "declares global type " << globalType
           << ", but its local shape and sharding hold at most [";
      llvm::interleave(global, diag, "x");
      diag << "]";
      return failure();
    }
    // dist-partition pads a dimension to a multiple of the least common
    // multiple of its shard counts, each a product of mesh axes, so padding
    // is always less than the number of devices. More means the local type
    // and the global one disagree (a changed mesh size, or a global type
    // smaller than its shard): the runtime would read shards as padding.
    int64_t devices = 1;
    for (const pb::MeshAxis &axis : mesh.axes())
      devices *= axis.size();
    bool padded = false;
    for (int64_t d = 0; d < int64_t(global.size()); ++d)
      padded |= global[d] - declared.getDimSize(d) >= devices;
    if (padded) {
      InFlightDiagnostic diag = emitError();
      diag << "declares global type " << globalType
           << ", but its local shape and sharding hold [";
      llvm::interleave(global, diag, "x");
      diag << "]: a padding of " << devices
           << " or more elements in a dimension, which no partition of a "
              "mesh of "
           << devices << " devices makes";
      return failure();
    }
  }
  if (globalType)
    global.assign(cast<RankedTensorType>(globalType).getShape().begin(),
                  cast<RankedTensorType>(globalType).getShape().end());
  buffer.clear_global_shape();
  for (int64_t n : global)
    buffer.add_global_shape(n);
  return success();
}

void FunctionLowering::setInit(pb::Buffer &buffer) {
  StringRef name =
      buffer.master_of().empty() ? buffer.name() : buffer.master_of();
  pb::Init *init = buffer.mutable_init();
  if (name.ends_with("gamma")) {
    init->set_kind(pb::Init::CONSTANT);
    init->set_a(1.0);
  } else if (name.ends_with("beta")) {
    init->set_kind(pb::Init::CONSTANT);
    init->set_a(0.0);
  } else {
    init->set_kind(pb::Init::NORMAL);
    init->set_a(0.0);
    init->set_b(options.initStd);
  }
}

LogicalResult FunctionLowering::run() {
  partitioned = isPartitioned(func);
  program.set_name(func.getName().str());
  program.set_partitioned(partitioned);
  if (auto stage = func->getAttrOfType<IntegerAttr>(
          dist::DistDialect::kZeroStageAttrName))
    program.set_zero_stage(stage.getInt());
  if (partitioned) {
    auto symbol = func->getAttrOfType<FlatSymbolRefAttr>("dist.mesh");
    if (!symbol) {
      // Else the mesh of the first annotation or collective.
      for (unsigned i = 0; i < func.getNumArguments() && !symbol; ++i)
        if (dist::ShardingAttr s = argSharding(func, i))
          symbol = s.getMeshName();
      func.walk([&](Operation *op) {
        if (!symbol)
          if (auto attr = op->getAttrOfType<FlatSymbolRefAttr>("mesh"))
            symbol = attr;
      });
    }
    if (failed(useMesh(func, symbol)))
      return failure();
  }
  if (func.isExternal())
    return func.emitError() << "has no body to lower";
  if (!func.getBody().hasOneBlock())
    return func.emitError() << "has more than one block; the plan lowering "
                               "takes straight-line functions";

  for (BlockArgument arg : func.getArguments()) {
    unsigned i = arg.getArgNumber();
    auto param = nn::paramAttr.getArg(func, i);
    auto state = nn::stateAttr.getArg(func, i);
    auto input = nn::inputAttr.getArg(func, i);
    StringAttr named = param ? param : state;
    auto emitError = [&] {
      return func.emitError()
             << "argument #" << i
             << (named ? " ('" + named.getValue() + "')" : "") << " ";
    };
    if (param && state)
      return emitError() << "has both nn.param and nn.state; an argument is "
                            "a parameter or optimizer state, not both";
    FailureOr<int64_t> id = addBuffer(
        arg, param ? pb::PARAMETER : state ? pb::STATE : pb::INPUT, emitError);
    if (failed(id))
      return failure();
    pb::Buffer &buffer = *program.mutable_buffers(*id);
    if (state && func.getArgAttr(i, "dist.accumulator"))
      buffer.set_accumulator(true);
    if (named)
      buffer.set_name(named.getValue().str());
    else if (input)
      buffer.set_name(input.getValue().str());
    else
      buffer.set_name(("arg" + Twine(i)).str());
    if (partitioned) {
      auto globalType = func.getArgAttrOfType<TypeAttr>(i, "dist.global_type");
      if (failed(applySharding(buffer, argSharding(func, i),
                               globalType ? globalType.getValue() : Type(),
                               emitError)))
        return failure();
    }
    // Parameters of any float type are initialized (bf16 and f16 ones with
    // the f32 value rounded); a master copy draws its parameter's values.
    StringAttr master = nn::masterAttr.getArg(func, i);
    if (param || (state && master)) {
      if (buffer.dtype() != pb::F32 && buffer.dtype() != pb::F64 &&
          buffer.dtype() != pb::BF16 && buffer.dtype() != pb::F16)
        return emitError()
               << "is a parameter of element type "
               << cast<RankedTensorType>(arg.getType()).getElementType()
               << "; the runtime initializes f32, f64, bf16 and f16 "
                  "parameters";
      if (master)
        buffer.set_master_of(master.getValue().str());
      setInit(buffer);
    }
    // State that starts from a constant (fp16-mixed's loss scale).
    if (auto value = func.getArgAttrOfType<FloatAttr>(i, nn::kInitValueAttrName);
        state && value) {
      buffer.mutable_init()->set_kind(pb::Init::CONSTANT);
      buffer.mutable_init()->set_a(value.getValueAsDouble());
    }
    program.add_arguments(*id);
  }

  if (options.fuseAdds)
    findFusions();
  for (Operation &op : func.getBody().front()) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      for (auto [index, value] : llvm::enumerate(ret.getOperands()))
        if (failed(lowerResult(ret, index, value)))
          return failure();
      if (failed(checkReplacements(ret)))
        return failure();
      continue;
    }
    // The backward starts at the first input- or weight-gradient op.
    std::optional<nn::GradKind> kind = nn::getGradKind(&op);
    if (!program.backward_start() && kind &&
        (*kind == nn::GradKind::Input || *kind == nn::GradKind::Weight))
      program.set_backward_start(program.instructions_size());
    int64_t firstNew = program.buffers_size();
    if (failed(lowerOp(&op)))
      return failure();
    // The layer of what the op writes (a collective's: its input's).
    int64_t layer = 0;
    if (std::optional<int64_t> index = nn::getLayerIndex(&op))
      layer = *index + 1;
    else if (isa_and_nonnull<dist::DistDialect>(op.getDialect()) &&
             op.getNumOperands() && bufferOf.count(op.getOperand(0)))
      layer = program.buffers(bufferOf.lookup(op.getOperand(0))).layer();
    for (int64_t id = firstNew; id < program.buffers_size(); ++id)
      if (program.buffers(id).role() == pb::ACTIVATION)
        program.mutable_buffers(id)->set_layer(layer);
  }
  setValueBounds();
  donateUpdatedBuffers(program);
  reuseDyingInputs(program);
  planMemory(program);
  return success();
}

LogicalResult FunctionLowering::lowerResult(func::ReturnOp ret,
                                            unsigned index, Value value) {
  int64_t id = use(value);
  pb::Buffer &buffer = *program.mutable_buffers(id);
  buffer.set_last_use(program.instructions_size());
  auto emitError = [&] { return ret.emitError() << "result #" << index << " "; };
  if (auto name = nn::outputAttr.getResult(func, index))
    if (buffer.role() == pb::ACTIVATION)
      buffer.set_name(name.getValue().str());
  // A gradient of @grads is named after its parameter, so that --check and
  // tools can report and match it by name.
  if (auto of = nn::gradAttr.getResult(func, index))
    if (buffer.role() == pb::ACTIVATION && buffer.name().empty())
      buffer.set_name((of.getValue() + ".grad").str());
  auto param = nn::paramAttr.getResult(func, index);
  auto state = nn::stateAttr.getResult(func, index);
  if (param && state)
    return emitError() << "has both nn.param and nn.state";
  if (StringAttr replaces = param ? param : state) {
    if (!buffer.replaces().empty() &&
        buffer.replaces() != replaces.getValue())
      return emitError() << "replaces '" << replaces.getValue()
                         << "', but its value is also returned as '"
                         << buffer.replaces()
                         << "' (each update needs its own value)";
    buffer.set_replaces(replaces.getValue().str());
    if (buffer.role() == pb::ACTIVATION)
      buffer.set_name(replaces.getValue().str());
  }
  if (partitioned && buffer.role() == pb::ACTIVATION) {
    auto globalType =
        func.getResultAttrOfType<TypeAttr>(index, "dist.global_type");
    if (failed(applySharding(buffer, resultSharding(func, index),
                             globalType ? globalType.getValue() : Type(),
                             emitError)))
      return failure();
  }
  program.add_results(id);
  return success();
}

/// A result that replaces a parameter or state buffer is copied into it
/// after every step: it must name one, once, with the same local layout.
LogicalResult FunctionLowering::checkReplacements(func::ReturnOp ret) {
  llvm::StringMap<int64_t> persistent, seen;
  for (const pb::Buffer &b : program.buffers())
    if (b.role() == pb::PARAMETER || b.role() == pb::STATE)
      if (!persistent.try_emplace(b.name(), b.id()).second)
        return func.emitError()
               << "has two arguments named '" << b.name()
               << "' (nn.param and nn.state names must be unique)";
  for (auto [index, id] : llvm::enumerate(program.results())) {
    const pb::Buffer &b = program.buffers(id);
    if (b.replaces().empty())
      continue;
    auto emitError = [&, index = index] {
      return ret.emitError() << "result #" << index << " ('" << b.replaces()
                             << "') ";
    };
    auto it = persistent.find(b.replaces());
    if (it == persistent.end())
      return emitError() << "updates a parameter or state that no argument "
                            "carries (nn.param / nn.state)";
    if (!seen.try_emplace(b.replaces(), index).second)
      return emitError() << "updates what result #" << seen[b.replaces()]
                         << " already updates";
    const pb::Buffer &target = program.buffers(it->second);
    auto same = [](const auto &x, const auto &y) {
      return std::equal(x.begin(), x.end(), y.begin(), y.end());
    };
    bool shardingEqual = true;
    for (int d = 0; d < b.local_shape_size(); ++d) {
      auto axes = [&](const pb::Buffer &x) {
        return d < x.sharding_size() ? std::vector<std::string>(
                                           x.sharding(d).axes().begin(),
                                           x.sharding(d).axes().end())
                                     : std::vector<std::string>();
      };
      shardingEqual &= axes(b) == axes(target);
    }
    if (b.dtype() != target.dtype() ||
        !same(b.local_shape(), target.local_shape()) ||
        !same(b.global_shape(), target.global_shape()) || !shardingEqual)
      return emitError() << "has a different type or sharding than argument "
                            "'"
                         << target.name() << "', which it updates";
    if (b.partial_axes_size())
      return emitError() << "is a partial value; reduce it before it updates "
                            "argument '"
                         << target.name() << "'";
  }
  return success();
}

/// Integer inputs that ops read as indices (KernelOpInterface's index
/// operands: embedding ids, cross-entropy labels) get the size of the
/// dimension they index as their bound, so tools generate valid ones. Only
/// arguments and results carry their global shape, and a dist op keeps the
/// global shape of its operand (it reshards): a value reached through dist
/// ops from an argument has the argument's global size (an embedding table
/// stored sharded over the data axis is all-gathered before the lookup
/// under fsdp+megatron; its local rows are the tensor-axis shard, not the
/// vocabulary). Other values have their local size, which in a partitioned
/// program may be a shard (logits split over the vocabulary): there the
/// largest global size found bounds them instead, when it is larger.
void FunctionLowering::setValueBounds() {
  auto dimOf = [&](Value v, int64_t dim) -> int64_t {
    const pb::Buffer &b = program.buffers(use(v));
    return b.global_shape(dim < 0 ? b.global_shape_size() + dim : dim);
  };
  auto isOwnArgument = [&](Value v) {
    auto arg = dyn_cast<BlockArgument>(v);
    return arg && arg.getOwner()->getParentOp() == func.getOperation();
  };
  // The argument `v` reshards, if any.
  auto argumentOf = [&](Value v) -> Value {
    while (Operation *def = v.getDefiningOp()) {
      auto in = def->getNumOperands() == 1
                    ? dyn_cast<RankedTensorType>(def->getOperand(0).getType())
                    : RankedTensorType();
      if (!isa_and_nonnull<dist::DistDialect>(def->getDialect()) || !in ||
          in.getRank() != cast<RankedTensorType>(v.getType()).getRank())
        return nullptr;
      v = def->getOperand(0);
    }
    return isOwnArgument(v) ? v : nullptr;
  };
  struct Bound {
    Value indices;
    int64_t size;
    bool global;
  };
  SmallVector<Bound> bounds;
  int64_t largestGlobal = 0, largest = 0;
  func.walk([&](dist::KernelOpInterface op) {
    for (dist::IndexOperand index : op.getIndexOperands()) {
      Value indexed = op->getOperand(index.into);
      Value arg = argumentOf(indexed);
      int64_t size = dimOf(arg ? arg : indexed, index.dim);
      // Padded over that dimension (dist-partition): masked past its real
      // size first, which bounds the indices.
      if (auto mask = indexed.getDefiningOp<dist::MaskOp>()) {
        int64_t rank = cast<RankedTensorType>(mask.getType()).getRank();
        if (int64_t(mask.getDim()) ==
            (index.dim < 0 ? rank + index.dim : index.dim))
          size = std::min<int64_t>(size, mask.getSize());
      }
      bounds.push_back({op->getOperand(index.index), size, bool(arg)});
      int64_t &largestOfKind = arg ? largestGlobal : largest;
      largestOfKind = std::max(largestOfKind, size);
    }
  });
  for (Bound &bound : bounds) {
    if (partitioned && !bound.global)
      bound.size = std::max(bound.size, largestGlobal);
    if (!isOwnArgument(bound.indices))
      continue;
    pb::Buffer *b = program.mutable_buffers(use(bound.indices));
    b->set_value_bound(b->value_bound() ? std::min(b->value_bound(), bound.size)
                                        : bound.size);
  }
  // A partitioned program may remap indices before they reach the op (a
  // vocabulary-parallel embedding subtracts its shard's first row): such
  // inputs get the largest global size, else the largest size.
  for (pb::Buffer &b : *program.mutable_buffers())
    if (b.role() == pb::INPUT &&
        (b.dtype() == pb::I32 || b.dtype() == pb::I64) && b.value_bound() == 0)
      b.set_value_bound(largestGlobal ? largestGlobal : largest);
}

/// A constant that is not a splat: a CONSTANT buffer holding its bytes.
LogicalResult FunctionLowering::lowerConstant(Operation *op,
                                              DenseElementsAttr dense) {
  FailureOr<int64_t> id = addBuffer(op->getResult(0), pb::CONSTANT, [&] {
    return op->emitError() << "result ";
  });
  if (failed(id))
    return failure();
  pb::Buffer &buffer = *program.mutable_buffers(*id);
  std::string data;
  auto append = [&](auto value) {
    data.append(reinterpret_cast<const char *>(&value), sizeof(value));
  };
  Type et = dense.getElementType();
  if (et.isF32())
    for (float v : dense.getValues<float>())
      append(v);
  else if (et.isF64())
    for (double v : dense.getValues<double>())
      append(v);
  else if (et.isSignlessInteger(32))
    for (int32_t v : dense.getValues<int32_t>())
      append(v);
  else if (et.isSignlessInteger(64))
    for (int64_t v : dense.getValues<int64_t>())
      append(v);
  else if (et.isBF16() || et.isF16())
    for (APFloat v : dense.getValues<APFloat>())
      append(static_cast<uint16_t>(v.bitcastToAPInt().getZExtValue()));
  else
    return op->emitError() << "is a non-splat constant of element type " << et
                           << "; the plan lowering takes f32, f64, i32 and "
                              "i64 ones";
  buffer.set_data(std::move(data));
  return success();
}

LogicalResult FunctionLowering::lowerCollective(Operation *op) {
  pb::Instruction *inst = program.add_instructions();
  inst->set_location(locationString(op->getLoc()));
  pb::Collective *c = inst->mutable_collective();
  auto reduceOp = [](dist::ReductionKind kind) {
    return kind == dist::ReductionKind::Max   ? pb::MAX
           : kind == dist::ReductionKind::Min ? pb::MIN
                                              : pb::SUM;
  };
  ArrayAttr axes;
  if (auto o = dyn_cast<dist::AllReduceOp>(op)) {
    c->set_kind(pb::Collective::ALL_REDUCE);
    c->set_op(reduceOp(o.getKind()));
    axes = o.getAxes();
  } else if (auto o = dyn_cast<dist::AllGatherOp>(op)) {
    c->set_kind(pb::Collective::ALL_GATHER);
    c->set_dim(o.getDim());
    axes = o.getAxes();
  } else if (auto o = dyn_cast<dist::ReduceScatterOp>(op)) {
    c->set_kind(pb::Collective::REDUCE_SCATTER);
    c->set_dim(o.getDim());
    c->set_op(reduceOp(o.getKind()));
    axes = o.getAxes();
  } else if (auto o = dyn_cast<dist::AllToAllOp>(op)) {
    c->set_kind(pb::Collective::ALL_TO_ALL);
    c->set_dim(o.getSplitDim());
    c->set_concat_dim(o.getConcatDim());
    axes = o.getAxes();
  } else if (auto o = dyn_cast<dist::SliceOp>(op)) {
    c->set_kind(pb::Collective::SLICE);
    c->set_dim(o.getDim());
    axes = o.getAxes();
  } else if (auto o = dyn_cast<dist::CollectivePermuteOp>(op)) {
    c->set_kind(pb::Collective::COLLECTIVE_PERMUTE);
    for (int64_t v : o.getPairs())
      c->add_pairs(v);
    axes = o.getAxes();
  } else if (auto o = dyn_cast<dist::MaskOp>(op)) {
    // Padding (dist-partition, Padding.h); the executor resolves the
    // device's group position.
    c->set_kind(pb::Collective::MASK);
    c->set_dim(o.getDim());
    c->set_size(o.getSize());
    c->set_value(o.getValue().convertToDouble());
    axes = o.getAxes();
  } else if (isAxisIndex(op)) {
    c->set_kind(pb::Collective::AXIS_INDEX);
    axes = op->getAttrOfType<ArrayAttr>("axes");
    if (!axes)
      return op->emitError() << "has no axes";
  }
  for (Attribute axis : axes)
    c->add_axes(cast<StringAttr>(axis).getValue().str());
  if (auto bucket = op->getAttrOfType<IntegerAttr>(
          dist::DistDialect::kBucketAttrName))
    c->set_bucket(bucket.getInt());
  if (failed(useMesh(op, op->getAttrOfType<FlatSymbolRefAttr>("mesh"))))
    return failure();
  if (op->getNumOperands())
    c->set_input(use(op->getOperand(0)));
  FailureOr<int64_t> out = addBuffer(op->getResult(0), pb::ACTIVATION, [&] {
    return op->emitError() << "result ";
  });
  if (failed(out))
    return failure();
  c->set_output(*out);
  // Defined by this instruction, which was added before the buffer.
  int64_t index = program.instructions_size() - 1;
  program.mutable_buffers(*out)->set_first_use(index);
  program.mutable_buffers(*out)->set_last_use(index);
  return success();
}

LogicalResult FunctionLowering::lowerOp(Operation *op) {
  if (isa<dist::AllReduceOp, dist::AllGatherOp, dist::ReduceScatterOp,
          dist::AllToAllOp, dist::SliceOp, dist::CollectivePermuteOp,
          dist::MaskOp>(op) ||
      isAxisIndex(op)) {
    for (Value operand : op->getOperands())
      program.mutable_buffers(use(operand))
          ->set_last_use(program.instructions_size());
    return lowerCollective(op);
  }
  // A non-splat dense constant is data, not a kernel: a CONSTANT buffer.
  if (op->hasTrait<OpTrait::ConstantLike>() && op->getNumResults() == 1) {
    Attribute value;
    if (matchPattern(op, m_Constant(&value)))
      if (auto dense = dyn_cast<DenseElementsAttr>(value);
          dense && !dense.isSplat())
        return lowerConstant(op, dense);
  }
  if (fused.contains(op))
    return success(); // emitted by the add it is fused into
  if (auto it = fusions.find(op); it != fusions.end()) {
    const Fusion &fusion = it->second;
    SmallVector<Value, 3> inputs(fusion.einsum->getOperands());
    inputs.push_back(fusion.addend);
    return lowerKernel(op, fusion.einsum, inputs, &fusion);
  }
  if (!isa<dist::KernelOpInterface>(op))
    return op->emitError() << "cannot be lowered to a plan: the runtime has "
                              "no kernel or collective for it (it implements "
                              "no dist::KernelOpInterface)";
  return lowerKernel(op, op, SmallVector<Value>(op->getOperands()));
}

/// One kernel instruction writing `op`'s results: the kernel `kernelOp`
/// describes (op itself, or, for a `fusion`, the einsum the add is fused
/// into, its addend's dims as the kernel's) reading `inputs`.
LogicalResult FunctionLowering::lowerKernel(Operation *op, Operation *kernelOp,
                                            ArrayRef<Value> inputs,
                                            const Fusion *fusion) {
  FailureOr<dist::KernelDescription> description = describe(kernelOp);
  if (failed(description))
    return failure();
  pb::Kernel kernel;
  if (failed(kernelToPlan(kernelOp, *description, kernel)))
    return failure();
  if (fusion) {
    kernel.mutable_attrs()->clear_dims();
    for (int64_t d : fusion->dims)
      kernel.mutable_attrs()->add_dims(d);
  }
  setCost(op, kernelOp, fusion, kernel);
  int64_t index = program.instructions_size();
  for (Value operand : inputs) {
    kernel.add_inputs(use(operand));
    program.mutable_buffers(use(operand))->set_last_use(index);
  }
  // Every result is an output of this instruction; live at once, the
  // memory plan gives them disjoint bytes (and none of the inputs', which
  // are live here too).
  for (OpResult result : op->getResults()) {
    FailureOr<int64_t> out = addBuffer(result, pb::ACTIVATION, [&] {
      return op->emitError() << "result #" << result.getResultNumber() << " ";
    });
    if (failed(out))
      return failure();
    kernel.add_outputs(*out);
  }
  pb::Instruction *inst = program.add_instructions();
  inst->set_location(locationString(kernelOp->getLoc()));
  *inst->mutable_kernel() = std::move(kernel);
  return success();
}

void FunctionLowering::setCost(Operation *op, Operation *kernelOp,
                               const Fusion *fusion, pb::Kernel &kernel) {
  // (costOfOwnTypes fails for an op without a cost model.)
  FailureOr<dist::OpCost> cost = dist::costOfOwnTypes(kernelOp);
  if (failed(cost))
    return;
  double bytes = cost->bytesRead + cost->bytesWritten;
  if (fusion) {
    // The einsum reads its operands, the add its addend; the sum is
    // written once, the einsum's own result never.
    FailureOr<dist::OpCost> add = dist::costOfOwnTypes(op);
    auto bytesOf = [](Value value) {
      FailureOr<SmallVector<dist::TensorShape>> shapes =
          dist::getTensorShapes(value.getType());
      return succeeded(shapes) ? dist::getBytes((*shapes)[0]).value_or(0) : 0;
    };
    if (succeeded(add))
      cost->flops += add->flops;
    bytes = cost->bytesRead + bytesOf(fusion->addend) +
            bytesOf(op->getResult(0));
  }
  kernel.set_flops(cost->flops);
  kernel.set_bytes(bytes);
}

FailureOr<dist::KernelDescription>
FunctionLowering::describe(Operation *op) {
  auto it = described.find(op);
  if (it == described.end()) {
    auto kernelOp = cast<dist::KernelOpInterface>(op);
    it = described.try_emplace(op, kernelOp.getKernel()).first;
  }
  return it->second;
}

bool FunctionLowering::isKernel(Operation *op, StringRef name) {
  if (!op || !isa<dist::KernelOpInterface>(op))
    return false;
  FailureOr<dist::KernelDescription> description = describe(op);
  return succeeded(description) && description->name == name;
}

void FunctionLowering::findFusions() {
  // An einsum of two operands whose one result only `add` reads, with the
  // add's type.
  auto fusable = [&](Operation *add, Value v) -> Operation * {
    Operation *def = v.getDefiningOp();
    if (!def || def->getNumOperands() != 2 || def->getNumResults() != 1 ||
        !v.hasOneUse() || v.getType() != add->getResult(0).getType() ||
        !isKernel(def, "einsum"))
      return nullptr;
    return def;
  };
  for (Operation &op : func.getBody().front()) {
    if (op.getNumOperands() != 2 || op.getNumResults() != 1 ||
        op.getOperand(0) == op.getOperand(1) || !isKernel(&op, "add"))
      continue;
    Operation *lhs = fusable(&op, op.getOperand(0));
    Operation *rhs = fusable(&op, op.getOperand(1));
    if (!lhs && !rhs)
      continue;
    // Of two einsums, the later one: the earlier is computed by then, and
    // its bytes can be the output's.
    bool right = rhs && (!lhs || lhs->isBeforeInBlock(rhs));
    Fusion fusion{right ? rhs : lhs, op.getOperand(right ? 0 : 1), {}};
    // The whole other operand, or what a broadcast only the add reads
    // broadcasts, by its dims.
    auto type = cast<RankedTensorType>(fusion.addend.getType());
    for (int64_t d = 0; d < type.getRank(); ++d)
      fusion.dims.push_back(d);
    Operation *broadcast = fusion.addend.getDefiningOp();
    if (broadcast && fusion.addend.hasOneUse() &&
        broadcast->getNumOperands() == 1 && isKernel(broadcast, "broadcast")) {
      FailureOr<dist::KernelDescription> b = describe(broadcast);
      auto dims = b->attrs.find("dims");
      if (dims != b->attrs.end())
        if (auto *list = std::get_if<std::vector<int64_t>>(&dims->second)) {
          fusion.addend = broadcast->getOperand(0);
          fusion.dims.assign(list->begin(), list->end());
          fused.insert(broadcast);
        }
    }
    fused.insert(fusion.einsum);
    fusions.try_emplace(&op, std::move(fusion));
  }
}

} // namespace

void donateUpdatedBuffers(pb::Program &program) {
  llvm::StringMap<int64_t> persistent;
  for (const pb::Buffer &b : program.buffers())
    if (b.role() == pb::PARAMETER || b.role() == pb::STATE)
      persistent.try_emplace(b.name(), b.id());
  // The last instruction reading each buffer (results aside: the old value
  // of a replaced buffer is never a result that is read back).
  std::vector<int64_t> lastRead(program.buffers_size(), -1);
  auto read = [&](int64_t id, int64_t index) {
    if (id >= 0 && id < int64_t(lastRead.size()))
      lastRead[id] = std::max(lastRead[id], index);
  };
  for (auto [index, inst] : llvm::enumerate(program.instructions())) {
    if (inst.has_kernel())
      for (int64_t id : inst.kernel().inputs())
        read(id, index);
    else if (inst.collective().kind() != pb::Collective::AXIS_INDEX)
      read(inst.collective().input(), index);
  }
  for (int64_t id : program.results()) {
    pb::Buffer &b = *program.mutable_buffers(id);
    if (b.role() != pb::ACTIVATION || b.replaces().empty())
      continue;
    auto it = persistent.find(b.replaces());
    if (it == persistent.end())
      continue;
    int64_t target = it->second, def = b.first_use();
    if (lastRead[target] > def)
      continue; // the old value is still read after the update
    // The writer reads the old value too: only where it may write over it.
    if (lastRead[target] == def &&
        !pb::writesOverOldValue(program, program.instructions(def), id,
                                target))
      continue;
    b.set_in_place(true);
  }
}

namespace {
/// Whether `b` is an arena buffer the memory plan may share: an activation
/// that is neither a donated update nor a replacing result.
bool plainActivation(const pb::Buffer &b) {
  return b.role() == pb::ACTIVATION && !b.in_place() && b.replaces().empty();
}
} // namespace

void reuseDyingInputs(pb::Program &program) {
  std::vector<bool> taken(program.buffers_size(), false);
  auto valid = [&](int64_t id) {
    return id >= 0 && id < program.buffers_size();
  };
  for (auto [index, inst] : llvm::enumerate(program.instructions())) {
    if (inst.has_kernel() && inst.kernel().outputs_size() != 1)
      continue;
    int64_t out = inst.has_kernel() ? inst.kernel().outputs(0)
                                    : inst.collective().output();
    SmallVector<int64_t, 2> inputs;
    if (inst.has_kernel())
      inputs.append(inst.kernel().inputs().begin(),
                    inst.kernel().inputs().end());
    else
      inputs.push_back(inst.collective().input());
    if (!valid(out) || !plainActivation(program.buffers(out)) ||
        program.buffers(out).first_use() != int64_t(index))
      continue;
    pb::Buffer &result = *program.mutable_buffers(out);
    for (int64_t in : inputs) {
      if (!valid(in) || in == out || taken[in] ||
          !pb::mayWriteOverInput(inst, in))
        continue;
      const pb::Buffer &input = program.buffers(in);
      if (!plainActivation(input) || input.last_use() != int64_t(index) ||
          input.memory_space() != result.memory_space() ||
          pb::localBytes(input) != pb::localBytes(result) ||
          pb::localBytes(input) == 0)
        continue;
      result.set_reuses(in);
      taken[in] = true;
      break;
    }
  }
}

void planMemory(pb::Program &program) {
  struct Placed {
    int64_t offset, end, first, last, id;
  };
  std::vector<Placed> placed;
  int64_t arena = 0;
  for (pb::Buffer &buffer : *program.mutable_buffers()) {
    if (buffer.role() != pb::ACTIVATION)
      continue;
    int64_t bytes = pb::localBytes(buffer);
    if (buffer.has_reuses()) {
      // At the input's offset, placed before it (a lower id: defined
      // earlier); nothing placed so far is live there after the input
      // dies, since it would have been live beside the input at its last
      // use. Checked all the same: otherwise the buffer is placed anew.
      const pb::Buffer &input = program.buffers(buffer.reuses());
      bool free = buffer.reuses() < buffer.id();
      int64_t offset = input.offset();
      for (const Placed &p : placed)
        if (p.id != buffer.reuses() && p.first <= buffer.last_use() &&
            buffer.first_use() <= p.last && offset < p.end &&
            p.offset < offset + bytes)
          free = false;
      if (free) {
        buffer.set_offset(offset);
        placed.push_back({offset, offset + bytes, buffer.first_use(),
                          buffer.last_use(), buffer.id()});
        continue;
      }
      buffer.clear_reuses();
    }
    if (buffer.in_place()) {
      buffer.set_offset(0); // it lives in the buffer it replaces
      // The plan's validator (PlanFile.cpp) counts it at offset 0, so the
      // arena covers its size; only a program whose arena is smaller than
      // an update (the step program of a microbatched plan) pays for that.
      arena = std::max(arena, bytes);
      continue;
    }
    // Live at once with this buffer, sorted by offset: take the lowest gap.
    std::vector<const Placed *> conflicts;
    for (const Placed &p : placed)
      if (p.first <= buffer.last_use() && buffer.first_use() <= p.last)
        conflicts.push_back(&p);
    llvm::sort(conflicts, [](const Placed *a, const Placed *b) {
      return a->offset < b->offset;
    });
    int64_t offset = 0;
    for (const Placed *p : conflicts) {
      if (offset + bytes <= p->offset)
        break;
      int64_t next =
          (p->end + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
      offset = std::max(offset, next);
    }
    buffer.set_offset(offset);
    if (bytes > 0)
      placed.push_back({offset, offset + bytes, buffer.first_use(),
                        buffer.last_use(), buffer.id()});
    arena = std::max(arena, offset + bytes);
  }
  program.set_arena_bytes(arena);
}

LogicalResult lowerFunction(func::FuncOp func,
                            const LowerToPlanOptions &options, pb::Mesh &mesh,
                            bool &haveMesh, pb::Program &program) {
  return FunctionLowering(func, options, mesh, haveMesh, program).run();
}

/// A microbatched step (dist-microbatch-split): its per-microbatch function
/// as program 1 and the schedule that runs it m times, then the step
/// (program 0: gradient reductions, clipping, optimizer) once. One stage;
/// the per-microbatch program runs forward and backward together, so the
/// stage's `backward` is -1 and each BACKWARD action has nothing left to run.
static LogicalResult lowerMicrobatchProgram(ModuleOp module, func::FuncOp main,
                                            const LowerToPlanOptions &options,
                                            pb::Plan &plan, bool &haveMesh) {
  auto symbol = main->getAttrOfType<FlatSymbolRefAttr>("dist.microbatch_step");
  if (!symbol)
    return success();
  auto count = main->getAttrOfType<IntegerAttr>("dist.microbatches");
  auto micro = module.lookupSymbol<func::FuncOp>(symbol.getAttr());
  if (!micro || !count || count.getInt() < 1)
    return main.emitError() << "names a per-microbatch function " << symbol
                            << " that does not exist, or no positive "
                               "dist.microbatches";
  int32_t index = plan.programs_size();
  if (failed(lowerFunction(micro, options, *plan.mutable_mesh(), haveMesh,
                           *plan.add_programs())))
    return failure();
  // The step's inputs (the whole batch) take the bounds their microbatches'
  // readers gave.
  for (const pb::Buffer &in : plan.programs(index).buffers())
    if (in.role() == pb::INPUT && in.value_bound() > 0)
      for (pb::Buffer &b : *plan.mutable_programs(0)->mutable_buffers())
        if (b.role() == pb::INPUT && b.name() == in.name())
          b.set_value_bound(in.value_bound());
  int32_t m = int32_t(count.getInt());
  pb::PipelineSchedule &schedule = *plan.mutable_pipeline();
  // One rank: 1F1B has no warm-up, so F0 B0 F1 B1 ... then the reduction and
  // the optimizer (each forward program runs its own backward). The one
  // generator the pipelined schedules come from writes it.
  runtime::pipeline::toProto(runtime::pipeline::makeSchedule("1f1b", 1, m),
                             schedule);
  pb::PipelineStage &stage = *schedule.add_stages();
  stage.set_forward(index);
  stage.set_backward(-1);
  stage.set_backward_input(-1);
  stage.set_backward_weight(-1);
  stage.set_optimizer(0);
  return success();
}

/// A pipelined step (dist-stage-split): program 0 is stage 0's update;
/// then, per stage, its update (stages >= 1), forward and backward (under
/// zb-h1 its input- and weight-gradient backwards), and the
/// schedule's action list for every pipeline rank. Every stage's update
/// takes the step's inputs (the whole batch), whose bounds its forward and
/// backward give.
static LogicalResult lowerPipelinePrograms(ModuleOp module, func::FuncOp main,
                                           const LowerToPlanOptions &options,
                                           pb::Plan &plan, bool &haveMesh) {
  auto stages = main->getAttrOfType<ArrayAttr>("dist.stage_programs");
  if (!stages)
    return success();
  auto count = main->getAttrOfType<IntegerAttr>("dist.microbatches");
  auto kind = main->getAttrOfType<StringAttr>("dist.schedule");
  if (!count || count.getInt() < 1 || !kind || stages.empty())
    return main.emitError() << "a pipelined step needs dist.stage_programs, "
                               "a positive dist.microbatches and "
                               "dist.schedule";
  // A stage function lowered on its own, appended to the plan once the
  // schedule has chosen what runs; true when it is the step itself (stage
  // 0's update, already program 0).
  auto lower = [&](Attribute stage, StringRef field,
                   pb::Program &into) -> FailureOr<bool> {
    auto dict = dyn_cast<DictionaryAttr>(stage);
    auto symbol = dict ? dict.getAs<FlatSymbolRefAttr>(field) : nullptr;
    auto func = symbol ? module.lookupSymbol<func::FuncOp>(symbol.getAttr())
                       : func::FuncOp();
    if (!func)
      return main.emitError() << "dist.stage_programs: a stage names no '"
                              << field << "' function that exists";
    if (func == main)
      return true;
    if (failed(lowerFunction(func, options, *plan.mutable_mesh(), haveMesh,
                             into)))
      return failure();
    return false;
  };
  pb::PipelineSchedule &schedule = *plan.mutable_pipeline();
  auto chunksAttr = main->getAttrOfType<IntegerAttr>("dist.pipeline_chunks");
  int64_t chunks = chunksAttr ? chunksAttr.getInt() : 1;
  int64_t m = count.getInt();
  if (chunks < 1 || int64_t(stages.size()) % chunks != 0)
    return main.emitError() << "dist.pipeline_chunks " << chunks
                            << " does not divide the " << stages.size()
                            << " stages";
  int64_t ranks = int64_t(stages.size()) / chunks;
  StringRef name = kind.getValue();
  if (name == "file") {
    // A hand-written schedule (--schedule-file), parsed and validated by
    // the caller, for these sizes.
    const runtime::pipeline::Schedule *hand = options.schedule;
    if (!hand)
      return main.emitError() << "pipeline schedule 'file': the lowering was "
                                 "given no hand-written schedule";
    if (hand->ranks != ranks || hand->chunks != chunks ||
        hand->microbatches != m)
      return main.emitError()
             << "the hand-written pipeline schedule is for " << hand->ranks
             << " ranks x " << hand->chunks << " chunks and "
             << hand->microbatches << " microbatches, the step has " << ranks
             << " x " << chunks << " and " << m;
    runtime::pipeline::toProto(*hand, schedule);
  }
  // What makeSchedule would throw for (passes build without exceptions).
  if (name != "gpipe" && name != "1f1b" && name != "interleaved" &&
      name != "zb-h1" && name != "file")
    return main.emitError() << "pipeline schedule '" << name
                            << "': plans run gpipe, 1f1b, interleaved, "
                               "zb-h1 or a hand-written one";
  if (name != "file" && (chunks > 1) != (name == "interleaved"))
    return main.emitError() << "pipeline schedule '" << name << "' with "
                            << chunks
                            << " chunks per rank: only interleaved runs "
                               "several, and it needs more than one";
  if (name == "interleaved" && (ranks < 2 || m % ranks != 0))
    return main.emitError()
           << "pipeline schedule 'interleaved' needs at least 2 pipeline "
              "ranks and a microbatch count that is a multiple of them (as "
              "Megatron-LM's), got "
           << ranks << " ranks and " << m << " microbatches";
  if (int64_t(stages.size()) * m > (int64_t(1) << 20))
    return main.emitError() << "pipeline schedule '" << name << "' for "
                            << stages.size() << " stages and " << m
                            << " microbatches: at most 2^20 "
                               "stage-microbatches";
  namespace pl = runtime::pipeline;
  // Per stage: its update, forward and backward programs (a full backward,
  // or B and W, or under zb-h1 both: the schedule picks per rank).
  struct StagePrograms {
    pb::Program step, forward, backward, input, weight;
    bool stepIsMain = false, full = false, split = false;
  };
  std::vector<StagePrograms> lowered(stages.size());
  for (auto [t, stage] : llvm::enumerate(stages)) {
    StagePrograms &sp = lowered[t];
    auto dict = dyn_cast<DictionaryAttr>(stage);
    sp.split = dict && dict.contains("backward_input");
    sp.full = !sp.split || dict.contains("backward");
    FailureOr<bool> step = lower(stage, "step", sp.step);
    if (failed(step) || failed(lower(stage, "forward", sp.forward)) ||
        (sp.full && failed(lower(stage, "backward", sp.backward))) ||
        (sp.split && (failed(lower(stage, "backward_input", sp.input)) ||
                      failed(lower(stage, "backward_weight", sp.weight)))))
      return failure();
    sp.stepIsMain = *step;
  }
  // What each stage holds per microbatch (the slots and arena the executor
  // allocates), split and whole as lowered.
  std::vector<pl::StageMemory> memory(lowered.size());
  for (auto [t, sp] : llvm::enumerate(lowered)) {
    if (sp.split) {
      memory[t].split = pl::slotBytes({&sp.forward, &sp.input, &sp.weight});
      memory[t].splitArena =
          std::max({sp.forward.arena_bytes(), sp.input.arena_bytes(),
                    sp.weight.arena_bytes()});
    }
    if (sp.full) {
      memory[t].fused = pl::slotBytes({&sp.forward, &sp.backward});
      memory[t].fusedArena =
          std::max(sp.forward.arena_bytes(), sp.backward.arena_bytes());
    }
  }
  // The limit: bytes, kStageMemoryLimit1F1B (1f1b's busiest stage) or
  // none (the default).
  int64_t limit = options.stageMemoryLimit;
  if (limit == kStageMemoryLimit1F1B) {
    if (chunks != 1)
      return main.emitError()
             << "a stage memory limit of '1f1b' needs one chunk per pipeline "
                "rank; give the limit in bytes for '"
             << name << "' with " << chunks << " chunks";
    pl::Schedule onef = pl::makeSchedule("1f1b", int(ranks), int(m));
    int64_t most = 0;
    for (int64_t t = 0; t < ranks; ++t) {
      if (!lowered[t].full)
        return main.emitError()
               << "a stage memory limit of '1f1b': stage " << t
               << " has no whole backward to measure 1f1b by";
      most = std::max(most, pl::activationBytes(onef, int(t), 0, memory[t]));
    }
    limit = std::max<int64_t>(most, 1); // 0 would read as none
  }
  if (name == "zb-h1") {
    for (auto [t, sp] : llvm::enumerate(lowered))
      if (!sp.split || !sp.full)
        return main.emitError()
               << "pipeline schedule 'zb-h1': stage " << t
               << " needs its backward both split (B and W) and whole";
    // Each rank defers as many Ws as fit the limit.
    pl::toProto(pl::makeBoundedZeroBubbleH1(
                    int(ranks), int(m), memory,
                    limit == kStageMemoryLimitNone ? INT64_MAX : limit),
                schedule);
  } else if (name != "file") {
    pl::toProto(pl::makeSchedule(name.str(), int(ranks), int(m), int(chunks)),
                schedule);
  }
  schedule.set_axis("pp");
  pl::Schedule chosen = pl::fromProto(schedule);
  auto append = [&](pb::Program &program) {
    int32_t index = plan.programs_size();
    *plan.add_programs() = std::move(program);
    return index;
  };
  for (auto [t, sp] : llvm::enumerate(lowered)) {
    // B and W where the stage's rank runs them, else the whole backward.
    bool split = sp.split && (!sp.full || pl::runsSplitBackward(
                                              chosen, int(t % ranks),
                                              int(t / ranks)));
    int32_t step = sp.stepIsMain ? 0 : append(sp.step);
    int32_t forward = append(sp.forward);
    int32_t backward = split ? -1 : append(sp.backward);
    int32_t input = split ? append(sp.input) : -1;
    int32_t weight = split ? append(sp.weight) : -1;
    pb::PipelineStage &s = *schedule.add_stages();
    s.set_forward(forward);
    s.set_backward(backward);
    s.set_backward_input(input);
    s.set_backward_weight(weight);
    s.set_optimizer(step);
  }
  if (limit != kStageMemoryLimitNone)
    for (auto [t, sp] : llvm::enumerate(lowered)) {
      int64_t bytes = pl::activationBytes(chosen, int(t % ranks),
                                          int(t / ranks), memory[t]);
      if (bytes > limit)
        return main.emitError()
               << "pipeline schedule '" << name << "': stage " << t
               << " holds " << bytes
               << " bytes of activations (its microbatches' slots and its "
                  "programs' arena), over the stage memory limit of "
               << limit
               << " bytes; hold fewer microbatches at once (1f1b or zb-h1, "
                  "fewer microbatches), cut more stages, or raise the limit";
    }
  // Input bounds: what any stage's forward or backward gave, on every
  // stage's copy of the whole batch.
  std::map<std::string, int64_t> bounds;
  for (const pb::Program &program : plan.programs())
    for (const pb::Buffer &b : program.buffers())
      if (b.role() == pb::INPUT && b.value_bound() > 0)
        bounds[b.name()] = std::max(bounds[b.name()], b.value_bound());
  for (const pb::PipelineStage &s : schedule.stages())
    for (pb::Buffer &b :
         *plan.mutable_programs(s.optimizer())->mutable_buffers())
      if (b.role() == pb::INPUT && bounds.count(b.name()))
        b.set_value_bound(bounds[b.name()]);
  return success();
}

FailureOr<pb::Plan> lowerToPlan(ModuleOp module,
                                const LowerToPlanOptions &options) {
  auto find = [&](StringRef name) -> func::FuncOp {
    if (!name.empty())
      return module.lookupSymbol<func::FuncOp>(name);
    // A train step (nn-autodiff) before gradients only, before the model.
    for (StringRef preferred : {"train_step", "grads", "forward"})
      if (auto f = module.lookupSymbol<func::FuncOp>(preferred))
        return f;
    auto funcs = module.getOps<func::FuncOp>();
    if (std::distance(funcs.begin(), funcs.end()) == 1)
      return *funcs.begin();
    return {};
  };
  func::FuncOp main = find(options.function);
  if (!main) {
    module.emitError() << (options.function.empty()
                               ? Twine("has no function @train_step, @grads "
                                       "or @forward (and not exactly one "
                                       "function) to lower")
                               : "has no function @" + options.function +
                                     " to lower");
    return failure();
  }
  pb::Plan plan;
  plan.set_format_version(kPlanFormatVersion);
  plan.set_seed(options.seed);
  bool haveMesh = false;
  if (failed(lowerFunction(main, options, *plan.mutable_mesh(), haveMesh,
                           *plan.add_programs())))
    return failure();
  if (failed(lowerMicrobatchProgram(module, main, options, plan, haveMesh)) ||
      failed(lowerPipelinePrograms(module, main, options, plan, haveMesh)))
    return failure();
  if (!options.reference.empty()) {
    func::FuncOp reference =
        module.lookupSymbol<func::FuncOp>(options.reference);
    if (!reference) {
      module.emitError() << "has no reference function @" << options.reference;
      return failure();
    }
    if (isPartitioned(reference)) {
      reference.emitError() << "is partitioned; the reference program must be "
                               "the unpartitioned function";
      return failure();
    }
    pb::Program *program = plan.add_programs();
    if (failed(lowerFunction(reference, options, *plan.mutable_mesh(), haveMesh,
                             *program)))
      return failure();
    program->set_name("reference");
  }
  partita::plan::sealPlan(plan);
  return plan;
}

} // namespace partita::plan_lowering
