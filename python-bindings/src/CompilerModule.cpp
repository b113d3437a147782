//===- CompilerModule.cpp - partita._compiler: the compiler as Python ------===//
//
// Binds Partita's own compiler API (Debian ships no MLIR Python package):
// parsing nn IR, the model builders (dialects/nn/Models), annotating
// arguments with #dist.sharding, the compile stages and the module -> plan
// API (passes/Pipelines.h), and the explain report (passes/plan/
// PlanExplain.h). IR crosses into Python as text and plans as serialized
// bytes; a Model owns its MLIRContext, so two models compile on two threads
// at once (the GIL is released while MLIR runs).
//
// Errors: diagnostics are collected by a handler for the duration of each
// call; a failed call raises partita.Error with them after MLIR returned.
// Nothing here throws through an MLIR frame: every MLIR call reports by
// LogicalResult and the Python exception is raised in this file's frames.
//
//===----------------------------------------------------------------------===//

#include "Errors.h"

#include "dialects/InitAllDialects.h"
#include "dialects/ModelParser.h"
#include "dialects/dist/IR/ShardingAdapters.h"
#include "dialects/nn/IR/NNAttributes.h"
#include "dialects/nn/Models/ModelBuilder.h"
#include "partita/runtime/Executor.h"
#include "passes/Pipelines.h"
#include "passes/autodiff/Autodiff.h"
#include "passes/plan/PlanExplain.h"
#include "passes/search/StrategySearch.h"
#include "passes/sharding/Strategies.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace nb = nanobind;
using namespace mlir;
using partita::python::DiagnosticRecord;
using partita::python::raiseError;

namespace partita::python {
namespace {

constexpr llvm::StringLiteral kMeshName = "mesh";

/// "file:line:col", a NameLoc's name with its place, or empty.
std::string locationText(Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc)) {
    std::string inner = locationText(name.getChildLoc());
    return name.getName().str() + (inner.empty() ? "" : " at " + inner);
  }
  if (auto file = dyn_cast<FileLineColLoc>(loc))
    return (file.getFilename().getValue() + ":" + llvm::Twine(file.getLine()) +
            ":" + llvm::Twine(file.getColumn()))
        .str();
  if (auto fused = dyn_cast<FusedLoc>(loc))
    for (Location part : fused.getLocations()) {
      std::string text = locationText(part);
      if (!text.empty())
        return text;
    }
  if (auto callSite = dyn_cast<CallSiteLoc>(loc))
    return locationText(callSite.getCallee());
  return "";
}

const char *severityText(DiagnosticSeverity severity) {
  switch (severity) {
  case DiagnosticSeverity::Error:
    return "error";
  case DiagnosticSeverity::Warning:
    return "warning";
  case DiagnosticSeverity::Note:
    return "note";
  case DiagnosticSeverity::Remark:
    return "remark";
  }
  return "error";
}

/// Collects every diagnostic emitted on a context while it lives (notes
/// become records of their own, after their diagnostic).
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(MLIRContext &context)
      : handler(&context, [this](Diagnostic &diag) {
          record(diag);
          for (Diagnostic &note : diag.getNotes())
            record(note);
          return success();
        }) {}

  std::vector<DiagnosticRecord> records;

  /// The first error's text, with its location, for the exception message.
  std::string summary(const std::string &fallback) const {
    for (const DiagnosticRecord &r : records)
      if (r.severity == "error")
        return r.location.empty() ? r.message : r.location + ": " + r.message;
    return fallback;
  }

private:
  void record(Diagnostic &diag) {
    records.push_back({severityText(diag.getSeverity()),
                       locationText(diag.getLocation()), diag.str()});
  }
  ScopedDiagnosticHandler handler;
};

std::unique_ptr<MLIRContext> makeContext() {
  DialectRegistry registry;
  registerAllDialects(registry);
  auto context = std::make_unique<MLIRContext>(registry);
  // One thread per model: parallelism comes from compiling several models
  // (each its own context) on several Python threads.
  context->disableMultithreading();
  context->printOpOnDiagnostic(false);
  context->loadAllAvailableDialects();
  return context;
}

/// An nn module with its own context. Calls on one Model are serialized by
/// its mutex; different Models share nothing.
class Model {
public:
  std::mutex mutex;
  std::unique_ptr<MLIRContext> context;
  OwningOpRef<ModuleOp> module;

  /// The function the compile stages start from: @forward, else the only
  /// function.
  func::FuncOp entry() {
    if (auto forward = module->lookupSymbol<func::FuncOp>("forward"))
      return forward;
    auto funcs = module->getOps<func::FuncOp>();
    if (!funcs.empty() && std::next(funcs.begin()) == funcs.end())
      return *funcs.begin();
    return {};
  }
};

/// Locks `model` for this call. The lock is taken with the GIL released: a
/// thread that holds a model's lock may wait for the GIL (when its compile
/// returns), so waiting for the lock while holding the GIL could deadlock.
std::unique_lock<std::mutex> lockModel(Model &model) {
  std::unique_lock<std::mutex> lock(model.mutex, std::defer_lock);
  nb::gil_scoped_release release;
  lock.lock();
  return lock;
}

/// Runs `body` with the GIL released and diagnostics collected on
/// `context`; raises partita.Error (with the GIL) when it fails.
template <typename Body>
void runCompiler(MLIRContext &context, const std::string &what, Body &&body) {
  std::vector<DiagnosticRecord> records;
  std::string message;
  bool ok;
  {
    nb::gil_scoped_release release;
    DiagnosticCollector collector(context);
    std::string error;
    ok = succeeded(body(error));
    if (!ok)
      message = what + ": " + collector.summary(error.empty() ? "failed"
                                                               : error);
    records = std::move(collector.records);
  }
  if (!ok)
    raiseError(message, records);
}

std::unique_ptr<Model> parseModel(const std::string &text,
                                  const std::string &source) {
  auto model = std::make_unique<Model>();
  model->context = makeContext();
  runCompiler(*model->context, "cannot parse " + source,
              [&](std::string &error) -> LogicalResult {
                llvm::SourceMgr sourceMgr;
                sourceMgr.AddNewSourceBuffer(
                    llvm::MemoryBuffer::getMemBufferCopy(text, source),
                    llvm::SMLoc());
                model->module = parseModelSource(
                    sourceMgr, *model->context, source);
                if (!model->module)
                  return failure();
                if (model->module->getOps<func::FuncOp>().empty()) {
                  error = source + " defines no func.func to compile";
                  return failure();
                }
                return success();
              });
  return model;
}

std::unique_ptr<Model>
buildModel(const std::string &kind, std::optional<int64_t> layers,
           std::optional<int64_t> hidden, std::optional<int64_t> heads,
           std::optional<int64_t> kvHeads, std::optional<int64_t> seq,
           std::optional<int64_t> vocab, std::optional<int64_t> batch,
           std::optional<int64_t> ffn, const std::string &dtype, bool tied) {
  models::ModelConfig config;
  std::optional<models::ModelKind> modelKind = models::parseModelKind(kind);
  if (!modelKind)
    raiseError("unknown model kind '" + kind + "': expected mlp, gpt or llama");
  config.kind = *modelKind;
  std::optional<models::DType> elementType = models::parseDType(dtype);
  if (!elementType)
    raiseError("dtype must be f32, bf16 or f16, got '" + dtype + "'");
  config.dtype = *elementType;
  config.layers = layers.value_or(config.layers);
  config.hidden = hidden.value_or(config.hidden);
  config.heads = heads.value_or(config.heads);
  config.kvHeads = kvHeads;
  config.seq = seq.value_or(config.seq);
  config.vocab = vocab.value_or(config.vocab);
  config.batch = batch.value_or(config.batch);
  config.ffn = ffn;
  config.tied = tied;
  if (llvm::Error err = models::verifyModelConfig(config))
    raiseError("model " + kind + ": " + llvm::toString(std::move(err)));
  auto model = std::make_unique<Model>();
  model->context = makeContext();
  runCompiler(*model->context, "cannot build the " + kind + " model",
              [&](std::string &) -> LogicalResult {
                auto built = models::buildModel(*model->context, config);
                if (failed(built))
                  return failure();
                model->module = std::move(*built);
                return success();
              });
  return model;
}

std::string printModel(Model &model) {
  std::unique_lock<std::mutex> lock = lockModel(model);
  std::string text;
  llvm::raw_string_ostream os(text);
  OpPrintingFlags flags;
  flags.printNameLocAsPrefix();
  model.module->print(os, flags);
  return text;
}

/// One argument of the entry function, as Python sees it.
struct Argument {
  std::string name;
  std::string role; // "param", "input", "state" or ""
  std::vector<int64_t> shape;
  std::string dtype;
  std::optional<std::string> sharding; // the #dist.sharding, as text
};

std::vector<Argument> modelArguments(Model &model) {
  std::unique_lock<std::mutex> lock = lockModel(model);
  std::vector<Argument> out;
  func::FuncOp func = model.entry();
  if (!func)
    return out;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    Argument arg;
    if (StringAttr name = nn::paramAttr.getArg(func, i)) {
      arg.name = name.str();
      arg.role = "param";
    } else if (StringAttr name = nn::inputAttr.getArg(func, i)) {
      arg.name = name.str();
      arg.role = "input";
    } else if (StringAttr name = nn::stateAttr.getArg(func, i)) {
      arg.name = name.str();
      arg.role = "state";
    }
    Type type = func.getArgument(i).getType();
    if (auto tensor = dyn_cast<RankedTensorType>(type)) {
      arg.shape.assign(tensor.getShape().begin(), tensor.getShape().end());
      llvm::raw_string_ostream(arg.dtype) << tensor.getElementType();
    }
    if (Attribute sharding =
            func.getArgAttr(i, dist::DistDialect::kShardingAttrName))
      llvm::raw_string_ostream(*(arg.sharding = std::string())) << sharding;
    out.push_back(std::move(arg));
  }
  return out;
}

std::string meshText(const dist::Mesh &mesh) {
  std::string text;
  for (const dist::MeshAxis &axis : mesh.axes)
    text += (text.empty() ? "" : ",") + axis.name + "=" +
            std::to_string(axis.size);
  return text;
}

/// Annotates argument `name` of the entry function with a sharding on the
/// mesh `axes` (declared as dist.mesh @mesh when the module has none):
/// `dims[d]` lists the axes splitting dimension d, `partial` the axes over
/// which the value is a partial sum. The annotation is closed and has
/// priority 0, as the strategy presets' are. Every axis must be a mesh axis
/// and every split dimension must divide by its shard count (a user asking
/// for an uneven split more likely made a mistake than wants padding).
void shardArgument(Model &model, const std::string &name,
                   const std::vector<std::pair<std::string, int64_t>> &axes,
                   const std::vector<std::vector<std::string>> &dims,
                   const std::vector<std::string> &partial) {
  std::unique_lock<std::mutex> lock = lockModel(model);
  func::FuncOp func = model.entry();
  if (!func)
    raiseError("the module has no @forward function to annotate");
  std::optional<unsigned> index;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    StringAttr argName = nn::paramAttr.getArg(func, i);
    if (!argName)
      argName = nn::inputAttr.getArg(func, i);
    if (argName && argName.getValue() == name)
      index = i;
  }
  if (!index)
    raiseError("no parameter or input named '" + name + "'");
  auto type = dyn_cast<RankedTensorType>(func.getArgument(*index).getType());
  if (!type)
    raiseError("tensor '" + name + "' is not a ranked tensor");

  dist::Mesh mesh;
  mesh.name = kMeshName.str();
  for (const auto &[axisName, size] : axes)
    mesh.axes.push_back({axisName, size});
  if (std::optional<std::string> why = mesh.verify())
    raiseError("invalid mesh " + meshText(mesh) + ": " + *why);
  auto meshOp = model.module->lookupSymbol<dist::MeshOp>(kMeshName);
  if (meshOp) {
    dist::Mesh declared;
    for (dist::MeshAxisAttr axis : meshOp.getMesh().getAxes())
      declared.axes.push_back({axis.getName().str(), axis.getSize()});
    if (declared.axes != mesh.axes)
      raiseError("tensor '" + name + "': the model's mesh @" +
                 kMeshName.str() + " is " + meshText(declared) +
                 ", not " + meshText(mesh));
  }

  int64_t rank = type.getRank();
  if (int64_t(dims.size()) != rank)
    raiseError("tensor '" + name + "' has " + std::to_string(rank) +
               " dimension" + (rank == 1 ? "" : "s") + ", the spec gives " +
               std::to_string(dims.size()));
  auto checkAxis = [&](const std::string &axis, const std::string &where) {
    if (!mesh.findAxis(axis))
      raiseError("tensor '" + name + "' " + where + ": unknown mesh axis '" +
                 axis + "' (the mesh has " + meshText(mesh) + ")");
  };
  dist::Sharding sharding;
  for (int64_t d = 0; d < rank; ++d) {
    std::string where = "dimension " + std::to_string(d);
    std::vector<dist::AxisRef> refs;
    int64_t shards = 1;
    for (const std::string &axis : dims[d]) {
      checkAxis(axis, where);
      shards *= mesh.axisSize(axis);
      int64_t size = type.getDimSize(d);
      if (!ShapedType::isDynamic(size) && size % shards != 0)
        raiseError("tensor '" + name + "' " + where + " of size " +
                   std::to_string(size) + " does not divide by mesh axis '" +
                   axis + "' (" + std::to_string(shards) + " shards)");
      refs.emplace_back(axis);
    }
    sharding.dims.emplace_back(std::move(refs), /*closed=*/true,
                               /*priority=*/0);
  }
  for (const std::string &axis : partial) {
    checkAxis(axis, "partial");
    sharding.partialAxes.emplace_back(axis);
  }
  if (std::optional<std::string> why = sharding.verify(mesh))
    raiseError("tensor '" + name + "': " + *why);

  if (!meshOp) {
    auto builder = OpBuilder::atBlockBegin(model.module->getBody());
    dist::MeshOp::create(builder, model.module->getLoc(), kMeshName,
                         dist::meshToAttr(model.context.get(), mesh));
  }
  func.setArgAttr(*index, dist::DistDialect::kShardingAttrName,
                  dist::shardingToAttr(model.context.get(), sharding,
                                       kMeshName));
}

/// What Model.compile() takes: the subset of `partita plan`'s flags the
/// Python API exposes.
struct CompileRequest {
  std::string strategy = "none";
  std::vector<std::pair<std::string, int64_t>> mesh;
  std::optional<std::string> train; // adamw, sgd or none (gradients only)
  std::optional<double> lr;
  std::optional<double> weightDecay;
  std::string last = "plan";
  uint64_t seed = 0;
  bool sequenceParallel = false;
  std::string precision = "fp32"; // fp32, bf16-mixed or fp16-mixed
  int64_t microbatches = 1;       // with train: gradient accumulation
  int64_t pipelineStages = 0;     // with train: --pp (0: not pipelined)
  std::string schedule = "1f1b";  // with pipelineStages: gpipe, 1f1b, zb-h1,
                                  // interleaved (2 chunks a rank)
  std::string stagesBy = "layers"; // with pipelineStages: layers or cost
  /// With strategy "ilp": the cost model dist-auto-shard prices choices by,
  /// CBC's seconds and the solver (`--ilp-seconds`, `--ilp-solver`).
  search::CostModel cost;
  double ilpSeconds = 60;
  std::string ilpSolver = "cbc";
};

/// The train step's options of `request` (train, lr, weight decay,
/// precision) in `options`; raises on a bad value.
void setTrainOptions(const CompileRequest &request, CompilerOptions &options) {
  if (request.train) {
    if (*request.train != "adamw" && *request.train != "sgd" &&
        *request.train != "none")
      raiseError("unknown train '" + *request.train +
                 "': expected adamw, sgd or none");
    options.train = true;
    options.autodiff.optimizer = *request.train;
    if (request.lr)
      options.autodiff.lr = *request.lr;
    if (request.weightDecay)
      options.autodiff.weightDecay = *request.weightDecay;
    if (!autodiff::parsePrecision(request.precision))
      raiseError("unknown precision '" + request.precision +
                 "': expected fp32, bf16-mixed or fp16-mixed");
    options.autodiff.precision = request.precision;
  } else if (request.precision != "fp32") {
    raiseError("precision '" + request.precision +
               "' needs train= (a mixed recipe is a train step's)");
  }
  options.optimizeComm.bucketBytes = 25 << 20;
  options.seed = request.seed;
  if (request.microbatches < 1 || (request.microbatches > 1 && !request.train))
    raiseError("microbatches must be at least 1, and above 1 only with "
               "train=");
  options.microbatches = request.microbatches;
  if (request.pipelineStages < 0 ||
      (request.pipelineStages > 0 && !request.train))
    raiseError("pp must be at least 0, and above 0 only with train=");
  if (request.pipelineStages > 0) {
    if (request.schedule != "gpipe" && request.schedule != "1f1b" &&
        request.schedule != "zb-h1" && request.schedule != "interleaved")
      raiseError("unknown schedule '" + request.schedule +
                 "': expected gpipe, 1f1b, zb-h1 or interleaved");
    options.pipelineSplit = true;
    options.pipelineStages = request.pipelineStages;
    if (!llvm::is_contained(search::kStageCuts, request.stagesBy))
      raiseError("unknown stages_by '" + request.stagesBy +
                 "': expected layers or cost");
    options.stagesBy = request.stagesBy;
    options.schedule = request.schedule;
    // Interleaved runs --chunks' default, as the search prices it.
    if (request.schedule == "interleaved")
      options.pipelineChunks = search::kInterleavedChunks;
  }
}

/// Compiles a copy of the model through `last`: returns the module after
/// that stage (as a new Model) or, for "plan", the serialized plan.
std::pair<std::unique_ptr<Model>, std::optional<nb::bytes>>
compileModel(Model &model, const CompileRequest &request) {
  CompilerOptions options;
  bool ilp = request.strategy == kILPStrategy;
  if (request.strategy != "none" && !ilp &&
      !sharding::lookupStrategy(request.strategy)) {
    std::string known;
    for (const sharding::Strategy &strategy : sharding::getStrategies())
      known += strategy.name.str() + ", ";
    raiseError("unknown strategy '" + request.strategy + "': expected " +
               known + "none or ilp");
  }
  if (ilp && (request.pipelineStages > 0 || request.microbatches > 1 ||
              request.sequenceParallel))
    raiseError("strategy ilp does not take pp, microbatches or "
               "sequence_parallel: it shards one step on one mesh");
  options.annotate.strategy = request.strategy;
  if (ilp) {
    options.autoShard = search::toAutoShardOptions(request.cost);
    options.autoShard.timeLimit = request.ilpSeconds;
    options.autoShard.solver = request.ilpSolver;
  }
  options.annotate.meshName = kMeshName.str();
  options.annotate.sequenceParallel = request.sequenceParallel;
  if (!request.mesh.empty()) {
    dist::Mesh mesh;
    for (const auto &[axisName, size] : request.mesh)
      mesh.axes.push_back({axisName, size});
    options.annotate.mesh = meshText(mesh);
  }
  setTrainOptions(request, options);
  std::optional<CompileStage> last = symbolizeCompileStage(request.last);
  if (!last || !llvm::is_contained(getCompileStages(options), *last))
    raiseError("unknown stage '" + request.last +
               "': expected annotated, propagated, partitioned or plan" +
               (options.train ? " (or differentiated)" : ""));

  std::unique_lock<std::mutex> lock = lockModel(model);
  auto result = std::make_unique<Model>();
  std::string planBytes;
  runCompiler(
      *model.context, "cannot compile the model",
      [&](std::string &error) -> LogicalResult {
        OwningOpRef<ModuleOp> copy = model.module->clone();
        if (request.strategy != "none" && request.mesh.empty() &&
            !copy->lookupSymbol<dist::MeshOp>(kMeshName)) {
          error = "strategy " + request.strategy +
                  " needs a mesh, and the model declares no dist.mesh @mesh";
          return failure();
        }
        plan::Plan plan;
        if (failed(compileModule(*copy, options, *last, {},
                                 *last == CompileStage::Plan ? &plan
                                                             : nullptr)))
          return failure();
        if (*last == CompileStage::Plan) {
          planBytes = plan.SerializeAsString();
          return success();
        }
        // The stage's module goes on in a context of its own (text crosses),
        // so that the copy is independent of this model.
        std::string text;
        llvm::raw_string_ostream os(text);
        OpPrintingFlags flags;
        flags.printNameLocAsPrefix();
        copy->print(os, flags);
        result->context = makeContext();
        llvm::SourceMgr sourceMgr;
        sourceMgr.AddNewSourceBuffer(
            llvm::MemoryBuffer::getMemBufferCopy(text, request.last),
            llvm::SMLoc());
        result->module =
            parseModelSource(sourceMgr, *result->context, request.last);
        if (!result->module) {
          error = "the compiled module does not parse again";
          return failure();
        }
        return success();
      });
  if (*last == CompileStage::Plan)
    return {nullptr, nb::bytes(planBytes.data(), planBytes.size())};
  return {std::move(result), std::nullopt};
}

/// One candidate of Model.search, as the Python side takes it: strategy,
/// preset, sequence parallel, mesh axes, microbatches, pipeline stages (1:
/// not pipelined), schedule and stages by ("" when not), rank (0: does not
/// fit), seconds, compute, comm, hidden, bubble, flops, wire bytes, calls,
/// collectives, memory, crosses nodes, rejection.
using CandidateTuple =
    std::tuple<std::string, std::string, bool,
               std::vector<std::pair<std::string, int64_t>>, int64_t,
               int64_t, std::string, std::string, int64_t, double, double,
               double, double, double, double, double, int64_t, int64_t,
               int64_t, bool, std::string>;

/// `partita plan --strategy auto` on a copy of the model: the ranked
/// candidates and the table the command prints.
std::pair<std::string, std::vector<CandidateTuple>>
searchModel(Model &model, const CompileRequest &request, int64_t devices,
            const search::CostModel &cost,
            const std::vector<std::string> &strategies,
            std::optional<std::vector<std::string>> schedules) {
  if (std::string error = search::checkDevices(devices); !error.empty())
    raiseError(error);
  for (const std::string &name : strategies)
    if (std::string error = search::checkSearchable(name); !error.empty())
      raiseError(error);
  if (schedules)
    for (const std::string &name : *schedules)
      if (std::string error = search::checkSearchableSchedule(name);
          !error.empty())
        raiseError(error);
  if (!(cost.deviceFlops > 0) || !(cost.memoryBytesPerSecond > 0) ||
      !(cost.linkBytesPerSecond > 0) ||
      !(cost.nodeLinkBytesPerSecond > 0) || !(cost.callSeconds >= 0) ||
      cost.memoryPerDevice < 0 || cost.devicesPerNode < 0 ||
      (cost.devicesPerNode > 0 && devices % cost.devicesPerNode != 0))
    raiseError("the cost model needs rates above 0, a call cost and memory "
               "of at least 0, and devices_per_node dividing devices");
  CompilerOptions options;
  options.annotate.meshName = kMeshName.str();
  setTrainOptions(request, options);
  search::SearchSpace space;
  space.strategies = strategies;
  space.axisOrders = cost.devicesPerNode > 0 && cost.devicesPerNode < devices;
  // Pipelines split a train step; None: every schedule the search prices.
  if (options.train)
    space.schedules = schedules ? *schedules : search::searchableSchedules();
  std::vector<search::Candidate> candidates =
      search::enumerateCandidates(devices, space, options.annotate);
  if (candidates.empty())
    raiseError("no strategy can use " + std::to_string(devices) +
               " devices (each mesh axis needs at least 2)");
  std::unique_lock<std::mutex> lock = lockModel(model);
  search::SearchResult result;
  runCompiler(*model.context, "cannot search",
              [&](std::string &error) -> LogicalResult {
                if (model.module->lookupSymbol<dist::MeshOp>(kMeshName)) {
                  error = "the model declares dist.mesh @mesh, and the "
                          "search chooses the mesh";
                  return failure();
                }
                result = search::searchStrategies(*model.module, options,
                                                  std::move(candidates), cost);
                return success();
              });
  std::string table;
  llvm::raw_string_ostream os(table);
  search::printSearchTable(result, cost, os);
  std::vector<CandidateTuple> out;
  for (const search::Candidate &c : result.candidates)
    out.emplace_back(c.strategy, c.preset, c.sequenceParallel, c.axes,
                     c.microbatches, c.pipelineStages, c.schedule, c.stagesBy,
                     c.rank, c.seconds, c.computeSeconds, c.commSeconds,
                     c.hiddenSeconds, c.bubbleSeconds, c.work.flops,
                     c.work.wireBytes, c.work.calls, c.work.collectives,
                     c.memory, c.crossesNodes, c.rejection);
  return {table, out};
}

/// The explain report of a serialized plan's step program, and its memory
/// totals by name.
std::pair<std::string, nb::dict> explainPlan(nb::bytes bytes,
                                             const std::string &source) {
  std::string data(static_cast<const char *>(bytes.data()), bytes.size());
  std::string text, error;
  plan_lowering::PlanMemory memory;
  {
    nb::gil_scoped_release release;
    try {
      // The runtime's own validation: a plan explained is a plan that loads.
      auto loaded = runtime::PlanFile::parse(data, source);
      plan::Plan proto;
      if (!proto.ParseFromString(data))
        throw runtime::Error("cannot read " + source);
      std::string programName = loaded->programNames().front();
      for (const plan::Program &program : proto.programs())
        if (program.name() == programName) {
          llvm::raw_string_ostream os(text);
          memory = plan_lowering::explainPlan(proto, program, source, os);
        }
    } catch (const std::exception &e) {
      error = e.what();
    }
  }
  if (!error.empty())
    raiseError(error);
  nb::dict dict;
  dict["parameters"] = memory.parameters;
  dict["inputs"] = memory.inputs;
  dict["activations"] = memory.activations;
  dict["outputs"] = memory.outputs;
  dict["constants"] = memory.constants;
  dict["state"] = memory.state;
  dict["arena_peak"] = memory.arenaPeak;
  dict["host_arena"] = memory.hostArena;
  dict["buckets"] = memory.buckets;
  dict["scratch"] = memory.scratch;
  dict["total"] = memory.total;
  if (memory.hasModelState) {
    nb::dict state;
    state["parameters"] = memory.stateParameters;
    state["gradients"] = memory.stateGradients;
    state["optimizer"] = memory.stateOptimizer;
    state["step_counter"] = memory.stateCounter;
    state["total"] = memory.modelState;
    dict["model_state"] = state;
  }
  return {text, dict};
}

} // namespace
} // namespace partita::python

using namespace partita::python;

NB_MODULE(_compiler, m) {
  m.doc() = "Partita's compiler (links libMLIR); use it through `partita`.";

  nb::class_<Model>(m, "Model")
      .def("text", &printModel)
      .def("arguments",
           [](Model &model) {
             nb::list out;
             for (Argument &arg : modelArguments(model))
               out.append(nb::make_tuple(arg.name, arg.role, arg.shape,
                                         arg.dtype, arg.sharding));
             return out;
           })
      .def("shard", &shardArgument, nb::arg("name"), nb::arg("mesh"),
           nb::arg("dims"), nb::arg("partial"))
      .def(
          "compile",
          [](Model &model, const std::string &strategy,
             const std::vector<std::pair<std::string, int64_t>> &mesh,
             std::optional<std::string> train, std::optional<double> lr,
             std::optional<double> weightDecay, const std::string &last,
             uint64_t seed, bool sequenceParallel,
             const std::string &precision, int64_t microbatches,
             int64_t pipelineStages, const std::string &schedule,
             const std::string &stagesBy, int64_t memoryPerDevice,
             double deviceTflops, double linkGbytes, double callUs,
             int64_t devicesPerNode, double nodeLinkGbytes,
             double ilpSeconds, const std::string &ilpSolver,
             double memoryGbytes) {
            CompileRequest request;
            request.ilpSeconds = ilpSeconds;
            request.ilpSolver = ilpSolver;
            request.cost.memoryPerDevice = memoryPerDevice;
            request.cost.deviceFlops = deviceTflops * 1e12;
            request.cost.memoryBytesPerSecond = memoryGbytes * 1e9;
            request.cost.linkBytesPerSecond = linkGbytes * 1e9;
            request.cost.callSeconds = callUs * 1e-6;
            request.cost.devicesPerNode = devicesPerNode;
            request.cost.nodeLinkBytesPerSecond = nodeLinkGbytes * 1e9;
            request.precision = precision;
            request.microbatches = microbatches;
            request.pipelineStages = pipelineStages;
            request.schedule = schedule;
            request.stagesBy = stagesBy;
            request.strategy = strategy;
            request.mesh = mesh;
            request.train = train;
            request.lr = lr;
            request.weightDecay = weightDecay;
            request.last = last;
            request.seed = seed;
            request.sequenceParallel = sequenceParallel;
            return compileModel(model, request);
          },
          nb::arg("strategy"), nb::arg("mesh"), nb::arg("train").none(),
          nb::arg("lr").none(), nb::arg("weight_decay").none(),
          nb::arg("last"), nb::arg("seed"), nb::arg("sequence_parallel"),
          nb::arg("precision") = "fp32", nb::arg("microbatches") = 1,
          nb::arg("pp") = 0, nb::arg("schedule") = "1f1b",
          nb::arg("stages_by") = "layers", nb::arg("memory_per_device") = 0,
          nb::arg("device_tflops") = 100.0, nb::arg("link_gbytes") = 100.0,
          nb::arg("call_us") = 20.0, nb::arg("devices_per_node") = 0,
          nb::arg("node_link_gbytes") = 25.0, nb::arg("ilp_seconds") = 60.0,
          nb::arg("ilp_solver") = "cbc", nb::arg("memory_gbytes") = 2000.0);

  m.def(
      "search",
      [](Model &model, int64_t devices, std::optional<std::string> train,
         std::optional<double> lr, std::optional<double> weightDecay,
         const std::string &precision, uint64_t seed, int64_t memoryPerDevice,
         double deviceTflops, double linkGbytes, double callUs,
         int64_t devicesPerNode, double nodeLinkGbytes,
         const std::vector<std::string> &strategies,
         std::optional<std::vector<std::string>> schedules,
         double memoryGbytes) {
        CompileRequest request;
        request.train = train;
        request.lr = lr;
        request.weightDecay = weightDecay;
        request.precision = precision;
        request.seed = seed;
        partita::search::CostModel cost;
        cost.memoryPerDevice = memoryPerDevice;
        cost.deviceFlops = deviceTflops * 1e12;
        cost.memoryBytesPerSecond = memoryGbytes * 1e9;
        cost.linkBytesPerSecond = linkGbytes * 1e9;
        cost.callSeconds = callUs * 1e-6;
        cost.devicesPerNode = devicesPerNode;
        cost.nodeLinkBytesPerSecond = nodeLinkGbytes * 1e9;
        return searchModel(model, request, devices, cost, strategies,
                           schedules);
      },
      nb::arg("model"), nb::arg("devices"), nb::arg("train").none(),
      nb::arg("lr").none(), nb::arg("weight_decay").none(),
      nb::arg("precision"), nb::arg("seed"), nb::arg("memory_per_device"),
      nb::arg("device_tflops"), nb::arg("link_gbytes"), nb::arg("call_us"),
      nb::arg("devices_per_node"), nb::arg("node_link_gbytes"),
      nb::arg("strategies"), nb::arg("schedules").none(),
      nb::arg("memory_gbytes") = 2000.0);
  m.def("parse", &parseModel, nb::arg("text"), nb::arg("source"));
  m.def("build_model", &buildModel, nb::arg("kind"), nb::arg("layers").none(),
        nb::arg("hidden").none(), nb::arg("heads").none(),
        nb::arg("kv_heads").none(), nb::arg("seq").none(),
        nb::arg("vocab").none(), nb::arg("batch").none(),
        nb::arg("ffn").none(), nb::arg("dtype"), nb::arg("tied"));
  m.def("explain", &explainPlan, nb::arg("plan"), nb::arg("source"));
}
