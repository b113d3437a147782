//===- PlanCommand.cpp - `partita plan`: compile a model for a mesh -------===//
//
// Reads a model, checks the flags, and runs the compiler library's stages
// (passes/Pipelines.h: with --train, differentiate into a train step;
// annotate with a strategy, propagate shardings, partition, lower) through
// the one --emit names, printing the module after it or writing the plan.
// This file owns the flags, their messages and the progress lines only.
//
//===----------------------------------------------------------------------===//

#include "dialects/InitAllDialects.h"
#include "passes/Pipelines.h"
#include "passes/autodiff/Autodiff.h"
#include "passes/autoshard/OpShardingSearch.h"
#include "passes/search/StrategySearch.h"
#include "passes/sharding/Strategies.h"
#include "tools/partita/Driver.h"
#include "tools/partita/MeshSpec.h"
#include "tools/partita/ModelInput.h"
#include "tools/partita/ScheduleFile.h"
#ifdef PARTITA_DRIVER_TEST_DIALECT
#include "test/lib/TestDialect.h"
#endif

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <initializer_list>
#include <limits>
#include <memory>

using namespace llvm;
using partita::CompileCallbacks;
using partita::CompilerOptions;
using partita::CompileStage;
using partita::kILPStrategy;

namespace partita::driver {
namespace {
cl::SubCommand planCommand(
    "plan", "Compile a model for a device mesh (differentiate with --train, "
            "annotate, propagate, partition, write the plan)");

cl::opt<std::string> inputFile(cl::Positional, cl::sub(planCommand),
                               cl::desc("<model.mlir>"));
cl::opt<std::string> meshArg(
    "mesh", cl::sub(planCommand), cl::value_desc("name=size,..."),
    cl::desc("Device mesh, major axis first, e.g. dp=2,tp=4 (default: the "
             "model's dist.mesh @mesh)"));
cl::opt<std::string> strategyArg(
    "strategy", cl::sub(planCommand), cl::value_desc("name"),
    cl::desc("Parallelization recipe: one of dist-annotate's strategies (dp, "
             "megatron, dp+megatron, ...), none (keep the model's own "
             "annotations), auto (search every strategy and mesh of "
             "--devices n, and with --train pipelines of them, by a cost "
             "model), or ilp (choose every op's sharding on --mesh by an "
             "integer program over the same cost model, as Alpa does)"));
// The automatic search (--strategy auto; passes/search/StrategySearch.h).
cl::OptionCategory searchCategory(
    "Search (partita plan --strategy auto, and the cost model of ilp)");
cl::opt<int64_t> devicesArg(
    "devices", cl::sub(planCommand), cl::init(0), cl::value_desc("n"),
    cl::cat(searchCategory),
    cl::desc("--strategy auto: the number of devices to plan for (at least "
             "2); every strategy is tried on every mesh of n devices it can "
             "use"));
cl::opt<std::string> memoryPerDeviceArg(
    "memory-per-device", cl::sub(planCommand), cl::value_desc("n[KiB|MiB|GiB]"),
    cl::cat(searchCategory),
    cl::desc("--strategy auto: the most memory a device may use for the plan "
             "(what `partita explain` totals; default: no limit); a train "
             "step over it is tried again with 2, 4, ... microbatches. "
             "--strategy ilp: the most argument bytes (parameters, optimizer "
             "state, inputs) a device may hold"));
cl::opt<std::string> deviceTflopsArg(
    "device-tflops", cl::sub(planCommand), cl::value_desc("x"),
    cl::cat(searchCategory),
    cl::desc("--strategy auto or ilp: the cost model's FLOP rate of a device "
             "in TFLOP/s (default 100)"));
cl::opt<std::string> memoryGbytesArg(
    "memory-gbytes", cl::sub(planCommand), cl::value_desc("x"),
    cl::cat(searchCategory),
    cl::desc("--strategy auto or ilp: the cost model's bytes a device reads "
             "or writes its memory a second, in GB/s (default 2000): every "
             "kernel costs its FLOPs at --device-tflops plus its bytes at "
             "this rate"));
cl::opt<std::string> linkGbytesArg(
    "link-gbytes", cl::sub(planCommand), cl::value_desc("x"),
    cl::cat(searchCategory),
    cl::desc("--strategy auto or ilp: the cost model's bytes a device sends a "
             "second, in GB/s (default 100)"));
cl::opt<int64_t> devicesPerNodeArg(
    "devices-per-node", cl::sub(planCommand), cl::init(0), cl::value_desc("k"),
    cl::cat(searchCategory),
    cl::desc("--strategy auto or ilp: devices a node holds (numbered "
             "consecutively; it divides --devices): a collective whose group "
             "spans nodes runs at --node-link-gbytes, and auto tries every "
             "order of a mesh's axes (default: one node)"));
cl::opt<std::string> nodeLinkGbytesArg(
    "node-link-gbytes", cl::sub(planCommand), cl::value_desc("x"),
    cl::cat(searchCategory),
    cl::desc("--strategy auto or ilp, --devices-per-node: the bytes a device sends "
             "to another node a second, in GB/s (default 25)"));
cl::opt<std::string> callMicrosArg(
    "call-us", cl::sub(planCommand), cl::value_desc("x"),
    cl::cat(searchCategory),
    cl::desc("--strategy auto or ilp: the cost model's fixed cost of a communicator "
             "call in microseconds (default 20)"));
cl::opt<double> ilpSecondsArg(
    "ilp-seconds", cl::sub(planCommand), cl::init(60), cl::value_desc("s"),
    cl::cat(searchCategory),
    cl::desc("--strategy ilp: the seconds CBC may search the integer "
             "program; when they run out, the better of its best solution "
             "and the greedy heuristic's is taken (default 60)"));
cl::opt<std::string> ilpSolverArg(
    "ilp-solver", cl::sub(planCommand), cl::init("cbc"),
    cl::value_desc("cbc|greedy|one-axis"), cl::cat(searchCategory),
    cl::desc("--strategy ilp: cbc (the integer program, default), greedy "
             "(a heuristic alone: fast, not optimal, no --memory-per-device) "
             "or one-axis (the program on the mesh's devices as one axis, "
             "much smaller on a 2-D mesh, mapped back and improved by single "
             "moves)"));
cl::list<std::string> searchStrategiesArg(
    "search-strategies", cl::sub(planCommand), cl::CommaSeparated,
    cl::value_desc("a,b,..."), cl::cat(searchCategory),
    cl::desc("--strategy auto: try only these strategies (default: all; "
             "megatron+sp and dp+megatron+sp name the two with sequence "
             "parallelism, pp the pipeline whose stages are not sharded "
             "further); a pipelined candidate's stages are sharded by them"));
cl::list<std::string> searchSchedulesArg(
    "search-schedules", cl::sub(planCommand), cl::CommaSeparated,
    cl::value_desc("a,b,...|none"), cl::cat(searchCategory),
    cl::desc("--strategy auto --train: the pipeline schedules to try "
             "pipelined candidates with (default 1f1b,zb-h1,interleaved; "
             "none: no pipelines)"));
cl::opt<std::string> searchReportArg(
    "search-report", cl::sub(planCommand), cl::value_desc("file.tsv"),
    cl::cat(searchCategory),
    cl::desc("--strategy auto: also write every candidate with its exact "
             "numbers as tab-separated values"));
cl::opt<std::string> emitArg(
    "emit", cl::sub(planCommand), cl::init("propagated"),
    cl::value_desc("stage"),
    cl::desc("Print the module after this stage: differentiated (with "
             "--train), annotated, propagated or partitioned; or write the "
             "plan file: plan (the default when -o ends in .pb)"));

// Training: nn-autodiff turns @forward into @train_step (or @grads) before
// annotation. Numbers are read as text so a bad one names its flag.
cl::OptionCategory trainCategory("Training (partita plan --train)");
cl::opt<std::string> trainArg(
    "train", cl::sub(planCommand), cl::value_desc("adamw|sgd|none"),
    cl::cat(trainCategory),
    cl::desc("Compile a training step: forward, backward and this optimizer "
             "(none: @grads, the loss and every gradient)"));
cl::opt<std::string> lrArg("lr", cl::sub(planCommand), cl::value_desc("x"),
                           cl::cat(trainCategory),
                           cl::desc("--train: learning rate (>= 0)"));
cl::opt<std::string> momentumArg(
    "momentum", cl::sub(planCommand), cl::value_desc("x"),
    cl::cat(trainCategory), cl::desc("--train sgd: momentum (>= 0)"));
cl::opt<std::string> beta1Arg("beta1", cl::sub(planCommand),
                              cl::value_desc("x"), cl::cat(trainCategory),
                              cl::desc("--train adamw: beta1, in [0, 1)"));
cl::opt<std::string> beta2Arg("beta2", cl::sub(planCommand),
                              cl::value_desc("x"), cl::cat(trainCategory),
                              cl::desc("--train adamw: beta2, in [0, 1)"));
cl::opt<std::string> epsArg("eps", cl::sub(planCommand), cl::value_desc("x"),
                            cl::cat(trainCategory),
                            cl::desc("--train adamw: epsilon (> 0)"));
cl::opt<std::string> weightDecayArg(
    "weight-decay", cl::sub(planCommand), cl::value_desc("x"),
    cl::cat(trainCategory),
    cl::desc("--train adamw|sgd: weight decay (>= 0; decoupled for adamw)"));
cl::opt<std::string> clipNormArg(
    "clip-norm", cl::sub(planCommand), cl::value_desc("x"),
    cl::cat(trainCategory),
    cl::desc("--train adamw|sgd: clip gradients to this global norm (> 0; "
             "default off)"));
cl::opt<std::string> recomputeArg(
    "recompute", cl::sub(planCommand), cl::value_desc("none|full|selective"),
    cl::cat(trainCategory),
    cl::desc("--train: recompute activations in backward: none (default), "
             "full (every layer), selective (the attention core)"));
cl::opt<std::string> precisionArg(
    "precision", cl::sub(planCommand),
    cl::value_desc("fp32|bf16-mixed|fp16-mixed"), cl::cat(trainCategory),
    cl::desc("--train: fp32 (default), or a mixed recipe: parameters, "
             "activations and gradients in bf16 (f16), f32 master weights "
             "and moments (docs/user-guide.md, Mixed precision)"));
cl::opt<std::string> lossScaleArg(
    "loss-scale", cl::sub(planCommand), cl::value_desc("x"),
    cl::cat(trainCategory),
    cl::desc("--precision fp16-mixed: the initial dynamic loss scale (> 0; "
             "default 65536)"));
cl::opt<std::string> lossScaleGrowthArg(
    "loss-scale-growth-interval", cl::sub(planCommand), cl::value_desc("n"),
    cl::cat(trainCategory),
    cl::desc("--precision fp16-mixed: clean steps after which the loss scale "
             "doubles (default 2000)"));
cl::opt<std::string> reduceDTypeArg(
    "reduce-dtype", cl::sub(planCommand), cl::value_desc("compute|fp32"),
    cl::cat(trainCategory),
    cl::desc("--precision *-mixed: gradient reductions in the compute type "
             "(default) or in fp32"));
cl::opt<bool> recordOrigins(
    "record-origins", cl::sub(planCommand),
    cl::desc("Attach dist.origin to every value, naming the annotation its "
             "sharding came from"));
cl::opt<bool> sequenceParallel(
    "sequence-parallel", cl::sub(planCommand),
    cl::desc("With megatron or dp+megatron: also split the residual stream on "
             "the sequence over tp (Megatron sequence parallelism)"));
cl::opt<bool> regatherNormOutputs(
    "regather-norm-outputs", cl::sub(planCommand), cl::init(true),
    cl::desc("With --sequence-parallel: the backward gathers each norm's "
             "output again from its sequence shard, as Megatron does "
             "(default); =false keeps the forward's gathered output instead "
             "(two all-gathers per layer fewer, more activation memory)"));
cl::opt<bool> overlapComm(
    "overlap-comm", cl::sub(planCommand), cl::init(true),
    cl::desc("--train: after partitioning, issue each gradient all_reduce / "
             "reduce_scatter right after its gradient is produced, in "
             "buckets of --bucket-bytes (dist-optimize-comm), so it overlaps "
             "the rest of backward (on by default; =false keeps every "
             "reduction where the partitioner put it)"));
cl::opt<bool> fuseAdds(
    "fuse-adds", cl::sub(planCommand), cl::init(true),
    cl::desc("Lower an add of an einsum's result (a linear layer's bias, or "
             "a gradient added to another) as that einsum accumulating onto "
             "the addend: one instruction, no broadcast or add pass (on by "
             "default; =false keeps them apart)"));
cl::opt<bool> keepAttentionStats(
    "keep-attention-stats", cl::sub(planCommand), cl::init(true),
    cl::desc("--train: each attention gradient reads its forward's output "
             "and the log-sum-exp of its rows, which the forward then also "
             "writes, instead of recomputing them (nn-keep-attention-stats; "
             "on by default; =false recomputes)"));
cl::opt<std::string> bucketBytesArg(
    "bucket-bytes", cl::sub(planCommand), cl::value_desc("n[KiB|MiB]"),
    cl::desc("--train: cap on a gradient bucket's bytes per device (default "
             "25MiB, PyTorch DDP's bucket_cap_mb; 0: one reduction per "
             "gradient)"));
cl::opt<int64_t> microbatchesArg(
    "microbatches", cl::sub(planCommand), cl::init(1), cl::value_desc("m"),
    cl::desc("--train: split each step's batch into m microbatches, "
             "accumulate their gradients and update once (the batch must "
             "divide by m)"));
cl::opt<int64_t> ppArg(
    "pp", cl::sub(planCommand), cl::init(0), cl::value_desc("n"),
    cl::desc("--train: split the step into n pipeline stages along a new "
             "major-most mesh axis 'pp' (dist-pipeline-split, then "
             "dist-stage-split: each stage's forward, backward and update "
             "programs; --emit differentiated shows dist.stage)"));
cl::opt<std::string> scheduleArg(
    "schedule", cl::sub(planCommand), cl::init("1f1b"),
    cl::value_desc("gpipe|1f1b|interleaved|zb-h1"),
    cl::desc("With --pp: the pipeline schedule (default 1f1b)"));
cl::opt<std::string> scheduleFileArg(
    "schedule-file", cl::sub(planCommand), cl::value_desc("file"),
    cl::desc("With --pp: a hand-written schedule instead of a named one, one "
             "action per line, 'rank KIND microbatch [chunk]' "
             "(docs/pipeline.md); with BACKWARD_INPUT and BACKWARD_WEIGHT "
             "actions each backward is split into B and W. Validated now "
             "and again before it runs"));
cl::opt<std::string> stageMemoryLimitArg(
    "stage-memory-limit", cl::sub(planCommand),
    cl::value_desc("1f1b|none|bytes"),
    cl::desc("With --pp: the most activation memory a stage may hold (its "
             "in-flight microbatches' slots and its programs' arena, e.g. "
             "512MiB), or '1f1b': what 1f1b holds on its busiest stage "
             "(ZB-H1's bound). zb-h1 defers fewer weight gradients on a rank "
             "to stay within it; a stage of another schedule over it is an "
             "error (default none: zb-h1 defers as the published list does)"));
cl::opt<int64_t> chunksArg(
    "chunks", cl::sub(planCommand), cl::init(2), cl::value_desc("v"),
    cl::desc("With --schedule interleaved (default 2) or --schedule-file "
             "(default 1): model chunks per pipeline rank (the model is "
             "split into --pp x v stages)"));
cl::opt<std::string> stagesByArg(
    "stages-by", cl::sub(planCommand), cl::init("layers"),
    cl::value_desc("layers|cost|annotation"),
    cl::desc("With --pp: split by nn.layer (default), balanced by cost, or "
             "by the model's dist.stage annotations"));
cl::opt<std::string> output("o", cl::sub(planCommand), cl::init("-"),
                            cl::value_desc("file"),
                            cl::desc("Output file (default: stdout)"));
cl::opt<bool> quiet("quiet", cl::sub(planCommand),
                    cl::desc("No progress lines on stderr"));
// MLIR's pass-manager options, as mlir-opt takes them (libMLIR registers
// its own at the top level, where a subcommand does not see them).
cl::OptionCategory mlirCategory("MLIR pass manager (as mlir-opt)");
cl::opt<bool> mlirTiming(
    "mlir-timing", cl::sub(planCommand), cl::cat(mlirCategory),
    cl::desc("Print each compile stage's pass timing report on stderr"));
cl::opt<bool> mlirStatistics(
    "mlir-pass-statistics", cl::sub(planCommand), cl::cat(mlirCategory),
    cl::desc("Print each compile stage's pass statistics on stderr"));
cl::opt<bool> mlirPrintBefore(
    "mlir-print-ir-before-all", cl::sub(planCommand), cl::cat(mlirCategory),
    cl::desc("Print the IR before every pass, on stderr"));
cl::opt<bool> mlirPrintAfter(
    "mlir-print-ir-after-all", cl::sub(planCommand), cl::cat(mlirCategory),
    cl::desc("Print the IR after every pass that changed it, on stderr"));
cl::opt<bool> printPipeline(
    "print-pipeline", cl::sub(planCommand),
    cl::desc("Print each stage's pass pipeline on stderr, as partita-opt "
             "--pass-pipeline takes it"));

constexpr StringLiteral kCommand = "plan";
constexpr StringLiteral kMeshName = "mesh";

/// The progress line after `stage`.
std::string describeStage(CompileStage stage, const CompilerOptions &options) {
  const sharding::DistAnnotateOptions &annotate = options.annotate;
  switch (stage) {
  case CompileStage::Differentiated:
    return options.autodiff.optimizer == "none"
               ? std::string("differentiated into @grads")
               : "differentiated into @train_step with " +
                     options.autodiff.optimizer;
  case CompileStage::Annotated:
    if (annotate.strategy == "none")
      return "kept the model's annotations";
    return ("annotated with strategy " + annotate.strategy +
            (annotate.mesh.empty() ? Twine("") : " on mesh " + annotate.mesh))
               .str() +
           (annotate.sequenceParallel ? " and sequence parallelism" : "");
  case CompileStage::Propagated:
    return "propagated shardings";
  case CompileStage::Partitioned:
    if (!options.train || !options.overlapComm)
      return "partitioned into per-device programs";
    return "partitioned into per-device programs, gradient reductions "
           "issued early " +
           (options.optimizeComm.bucketBytes
                ? "in buckets of up to " +
                      std::to_string(options.optimizeComm.bucketBytes) +
                      " bytes"
                : std::string("one per gradient"));
  case CompileStage::Plan:
    return "lowered to a plan";
  }
  llvm_unreachable("unknown compile stage");
}

/// What dist-auto-shard solved and estimated, from the `dist.auto_shard`
/// it left on the step function: ": an integer program of ... ".
std::string describeAutoShard(mlir::ModuleOp module) {
  for (auto func : module.getOps<mlir::func::FuncOp>()) {
    auto report = func->getAttrOfType<mlir::DictionaryAttr>(
        dist::DistDialect::kAutoShardAttrName);
    if (!report)
      continue;
    auto number = [&](StringRef key) {
      if (auto i = report.getAs<mlir::IntegerAttr>(key))
        return double(i.getInt());
      if (auto f = report.getAs<mlir::FloatAttr>(key))
        return f.getValueAsDouble();
      return 0.0;
    };
    auto method = report.getAs<mlir::StringAttr>("method");
    StringRef how = method ? method.getValue() : "";
    std::string text;
    raw_string_ostream os(text);
    int64_t programs = number("programs");
    os << ": " << int64_t(number("nodes")) << " ops and values, "
       << int64_t(number("choices")) << " choices";
    if (programs == 0) {
      os << "; no integer program"; // --ilp-solver greedy
    } else {
      os << ", " << int64_t(number("solved_nodes"))
         << " left once those their neighbours decide are taken out; ";
      if (number("binary_variables") == 0)
        os << "nothing left for CBC";
      else
        os << (programs > 1 ? std::to_string(programs) + " integer programs"
                            : std::string("an integer program"))
           << " of " << int64_t(number("binary_variables")) << " binary and "
           << int64_t(number("continuous_variables"))
           << " continuous variables, " << int64_t(number("constraints"))
           << " rows" << (programs > 1 ? " in all" : "");
    }
    os << ", solved "
       << (how == "optimal"      ? "optimally"
           : how == "time-limit" ? "to CBC's time limit (not proven optimal)"
           : how == "one-axis"
               ? "from the answer on the mesh's devices as one axis, "
                 "improved by single moves"
           : how == "bounded"
               ? "within " +
                     formatv("{0:g}",
                             100 * number("gap_seconds") /
                                 std::max(1e-300, number("compute_seconds") +
                                                      number("comm_seconds") -
                                                      number("hidden_seconds")))
                         .str() +
                     "% of a lower bound (the best answer of the programs "
                     "that weight the gradient reductions' overlap)"
           : how == "rounded"
               ? "from the relaxation's largest choices, improved by single "
                 "moves (CBC found nothing better in its time limit)"
           : how == "one-axis-fallback"
               ? "from the answer on the mesh's devices as one axis, "
                 "improved by single moves (CBC found nothing better in its "
                 "time limit)"
           : programs == 0
               ? "by the greedy heuristic alone"
               : "by the greedy heuristic (CBC found nothing better in its "
                 "time limit)")
       << "; estimated step " << format("%.4g", number("compute_seconds") * 1e3)
       << " ms compute + " << format("%.4g", number("comm_seconds") * 1e3)
       << " ms communication";
    if (number("hidden_seconds") > 0)
      os << " (" << format("%.4g", number("hidden_seconds") * 1e3)
         << " ms of it behind the backward)";
    os << ", " << int64_t(number("reshards")) << " reshards, "
       << int64_t(number("argument_bytes")) << " argument bytes a device";
    return text;
  }
  return "";
}

/// Axes a strategy needs, under the names dist-annotate uses by default.
SmallVector<StringRef> axesNeededBy(StringRef strategy) {
  SmallVector<StringRef> axes;
  if (const sharding::Strategy *recipe = sharding::lookupStrategy(strategy)) {
    if (recipe->needsDataAxis())
      axes.push_back("dp");
    if (recipe->needsTensorAxis())
      axes.push_back("tp");
    if (recipe->needsContextAxis())
      axes.push_back("cp");
  }
  return axes;
}

/// "dp, megatron, dp+megatron, none, auto or ilp": every strategy
/// --strategy takes.
std::string knownStrategies() {
  std::string known;
  for (const sharding::Strategy &strategy : sharding::getStrategies())
    known += strategy.name.str() + ", ";
  if (!known.empty())
    known.resize(known.size() - 2);
  return known + (known.empty() ? "" : ", ") + "none, auto or ilp";
}

/// "4096", "64KiB", "25MiB" or "2GiB" as bytes (at least 0).
Expected<int64_t> parseByteCount(StringRef text) {
  StringRef digits = text.trim();
  int64_t unit = 1;
  if (digits.consume_back("KiB"))
    unit = 1 << 10;
  else if (digits.consume_back("MiB"))
    unit = 1 << 20;
  else if (digits.consume_back("GiB"))
    unit = int64_t(1) << 30;
  int64_t value;
  if (digits.getAsInteger(10, value) || value < 0 ||
      value > std::numeric_limits<int64_t>::max() / unit)
    return createStringError(
        "expected a byte count of at least 0, optionally with KiB, MiB or "
        "GiB (e.g. 65536, 64KiB, 25MiB), got '" +
        text + "'");
  return value * unit;
}

/// "--flag must be greater than 0, got 'x'" unless `option` (if given) is
/// a finite number above 0; stores it times `unit` in `value`.
int parsePositive(const cl::opt<std::string> &option, double unit,
                  double &value) {
  if (!option.getNumOccurrences())
    return 0;
  double parsed;
  if (parseNumber(kCommand, option, parsed))
    return 1;
  if (!(parsed > 0) || parsed == INFINITY)
    return reportError(kCommand, "--" + option.ArgStr +
                                     " must be greater than 0, got " + option);
  value = parsed * unit;
  return 0;
}

int parseCostFlags(search::CostModel &cost, int64_t devices);

/// Checks the search flags: with --strategy auto, --devices and the cost
/// model's (into `cost`); with ilp the cost model's; otherwise none of them.
/// Returns 1 after reporting.
int checkSearchOptions(search::CostModel &cost) {
  bool automatic = strategyArg == "auto";
  bool ilp = strategyArg == kILPStrategy;
  // By reference: a cl::list's operator& gives its vector of values, not
  // the option.
  std::initializer_list<const cl::Option *> searchOnly = {
      std::addressof(devicesArg), std::addressof(searchStrategiesArg),
      std::addressof(searchSchedulesArg), std::addressof(searchReportArg)};
  std::initializer_list<const cl::Option *> costFlags = {
      std::addressof(memoryPerDeviceArg), std::addressof(deviceTflopsArg),
      std::addressof(memoryGbytesArg),    std::addressof(linkGbytesArg),
      std::addressof(callMicrosArg),      std::addressof(devicesPerNodeArg),
      std::addressof(nodeLinkGbytesArg)};
  if (!automatic) {
    for (const cl::Option *option : searchOnly)
      if (option->getNumOccurrences())
        return reportError(kCommand, "--" + option->ArgStr +
                                         " needs --strategy auto");
    if (!ilp) {
      for (const cl::Option *option : std::initializer_list<const cl::Option *>{
               std::addressof(ilpSecondsArg), std::addressof(ilpSolverArg)})
        if (option->getNumOccurrences())
          return reportError(kCommand,
                             "--" + option->ArgStr + " needs --strategy ilp");
      for (const cl::Option *option : costFlags)
        if (option->getNumOccurrences())
          return reportError(kCommand, "--" + option->ArgStr +
                                           " needs --strategy auto or ilp");
      return 0;
    }
  }
  if (ilp) {
    if (sequenceParallel)
      return reportError(kCommand, "--sequence-parallel and --strategy ilp "
                                   "both given: ilp chooses every op's "
                                   "sharding itself");
    if (ppArg.getNumOccurrences() || microbatchesArg > 1)
      return reportError(kCommand, "--strategy ilp does not take --pp or "
                                   "--microbatches yet: it shards one step "
                                   "on one mesh");
    if (!(ilpSecondsArg > 0))
      return reportError(kCommand, "--ilp-seconds must be positive, got " +
                                       std::to_string(ilpSecondsArg));
    if (!autoshard::parseSolver(ilpSolverArg))
      return reportError(kCommand,
                         "--ilp-solver must be cbc, greedy or one-axis, not '" +
                             ilpSolverArg + "'");
    if (ilpSolverArg == "greedy" && memoryPerDeviceArg.getNumOccurrences())
      return reportError(kCommand, "--ilp-solver greedy does not take "
                                   "--memory-per-device (only the integer "
                                   "program keeps a limit)");
    return parseCostFlags(cost, /*devices=*/0);
  }
  if (!devicesArg.getNumOccurrences())
    return reportError(kCommand, "--strategy auto needs --devices n, the "
                                 "number of devices to plan for");
  if (std::string error = search::checkDevices(devicesArg); !error.empty())
    return reportError(kCommand, "--" + error);
  if (meshArg.getNumOccurrences())
    return reportError(kCommand, "--mesh and --strategy auto both given: "
                                 "the search chooses the mesh (give "
                                 "--devices n), or give a strategy");
  if (sequenceParallel)
    return reportError(kCommand, "--sequence-parallel and --strategy auto "
                                 "both given: the search tries megatron and "
                                 "dp+megatron with and without it "
                                 "(megatron+sp, dp+megatron+sp)");
  if (ppArg.getNumOccurrences() || stagesByArg.getNumOccurrences() ||
      microbatchesArg > 1 || scheduleArg.getNumOccurrences() ||
      scheduleFileArg.getNumOccurrences() || chunksArg.getNumOccurrences() ||
      stageMemoryLimitArg.getNumOccurrences())
    return reportError(kCommand,
                       "--strategy auto chooses the pipeline stages, the "
                       "schedule (among --search-schedules) and the "
                       "microbatches itself: give a strategy to set --pp, "
                       "--stages-by, --schedule, --schedule-file, --chunks, "
                       "--stage-memory-limit or --microbatches");
  for (const std::string &name : searchStrategiesArg)
    if (std::string error = search::checkSearchable(name); !error.empty())
      return reportError(kCommand, "--search-strategies: " + error);
  bool noPipelines = llvm::is_contained(searchSchedulesArg, "none");
  if (noPipelines && searchSchedulesArg.size() > 1)
    return reportError(kCommand, "--search-schedules: none (no pipelines) "
                                 "stands alone, got " +
                                     llvm::join(searchSchedulesArg, ","));
  if (!noPipelines)
    for (const std::string &name : searchSchedulesArg)
      if (std::string error = search::checkSearchableSchedule(name);
          !error.empty())
        return reportError(kCommand, "--search-schedules: " + error +
                                         " (or none: no pipelines)");
  return parseCostFlags(cost, devicesArg);
}

/// Reads the cost model's flags into `cost`; `devices` (0: not known yet)
/// must be a multiple of --devices-per-node. Returns 1 after reporting.
int parseCostFlags(search::CostModel &cost, int64_t devices) {
  if (memoryPerDeviceArg.getNumOccurrences()) {
    Expected<int64_t> parsed = parseByteCount(memoryPerDeviceArg);
    if (!parsed || *parsed == 0)
      return reportError(kCommand,
                         "--memory-per-device: " +
                             (parsed ? std::string("expected a byte count "
                                                   "above 0, got '0'")
                                     : toString(parsed.takeError())));
    cost.memoryPerDevice = *parsed;
  }
  if (parsePositive(deviceTflopsArg, 1e12, cost.deviceFlops) ||
      parsePositive(memoryGbytesArg, 1e9, cost.memoryBytesPerSecond) ||
      parsePositive(linkGbytesArg, 1e9, cost.linkBytesPerSecond) ||
      parsePositive(nodeLinkGbytesArg, 1e9, cost.nodeLinkBytesPerSecond) ||
      parsePositive(callMicrosArg, 1e-6, cost.callSeconds))
    return 1;
  if (devicesPerNodeArg.getNumOccurrences()) {
    if (devicesPerNodeArg < 1 ||
        (devices > 0 && devices % devicesPerNodeArg != 0))
      return reportError(kCommand,
                         devices > 0
                             ? "--devices-per-node must be at least 1 and "
                               "divide --devices " +
                                   std::to_string(devices) + ", got " +
                                   std::to_string(devicesPerNodeArg)
                             : "--devices-per-node must be at least 1, got " +
                                   std::to_string(devicesPerNodeArg));
    cost.devicesPerNode = devicesPerNodeArg;
  } else if (nodeLinkGbytesArg.getNumOccurrences()) {
    return reportError(kCommand, "--node-link-gbytes needs --devices-per-node "
                                 "(without it every device is in one node)");
  }
  return 0;
}

/// Checks the training flags and sets nn-autodiff's options in `options`
/// (train stays off without --train). Returns 1 after reporting a bad value,
/// a flag that needs --train, or one that the chosen optimizer does not use.
int checkTrainOptions(CompilerOptions &options) {
  autodiff::NNAutodiffOptions &autodiff = options.autodiff;
  struct NumberFlag {
    const cl::opt<std::string> &option;
    double &value;
    /// Optimizers the flag applies to; empty: all but none.
    SmallVector<StringRef, 2> optimizers;
    double min;
    bool minExclusive;
    double max; // exclusive
  };
  const double inf = INFINITY;
  NumberFlag numbers[] = {
      {lrArg, autodiff.lr, {}, 0, false, inf},
      {momentumArg, autodiff.momentum, {"sgd"}, 0, false, inf},
      {beta1Arg, autodiff.beta1, {"adamw"}, 0, false, 1},
      {beta2Arg, autodiff.beta2, {"adamw"}, 0, false, 1},
      {epsArg, autodiff.eps, {"adamw"}, 0, true, inf},
      {weightDecayArg, autodiff.weightDecay, {}, 0, false, inf},
      {clipNormArg, autodiff.clipNorm, {}, 0, true, inf},
  };
  if (!trainArg.getNumOccurrences()) {
    for (const NumberFlag &flag : numbers)
      if (flag.option.getNumOccurrences())
        return reportError(kCommand, "--" + flag.option.ArgStr +
                                         " needs --train adamw or sgd");
    if (recomputeArg.getNumOccurrences())
      return reportError(kCommand, "--recompute needs --train");
    if (precisionArg.getNumOccurrences() && precisionArg != "fp32")
      return reportError(kCommand, "--precision " + precisionArg +
                                       " needs --train (a mixed recipe is "
                                       "a train step's)");
    if (reduceDTypeArg.getNumOccurrences())
      return reportError(kCommand, "--reduce-dtype needs --train");
    if (lossScaleArg.getNumOccurrences() ||
        lossScaleGrowthArg.getNumOccurrences())
      return reportError(kCommand, "--loss-scale and "
                                   "--loss-scale-growth-interval need "
                                   "--train adamw --precision fp16-mixed");
    return 0;
  }
  if (trainArg != "adamw" && trainArg != "sgd" && trainArg != "none")
    return reportError(kCommand, "unknown --train '" + trainArg +
                                     "': expected adamw, sgd or none");
  options.train = true;
  autodiff.optimizer = trainArg;
  for (const NumberFlag &flag : numbers) {
    if (!flag.option.getNumOccurrences())
      continue;
    bool applies = trainArg != "none" &&
                   (flag.optimizers.empty() ||
                    llvm::is_contained(flag.optimizers, trainArg.getValue()));
    if (!applies)
      return reportError(kCommand,
                         "--" + flag.option.ArgStr +
                             " does not apply to --train " + trainArg +
                             (flag.optimizers.empty()
                                  ? Twine(" (no optimizer step)")
                                  : " (only to --train " +
                                        flag.optimizers.front() + ")"));
    double value;
    if (parseNumber(kCommand, flag.option, value))
      return 1;
    bool tooSmall = flag.minExclusive ? value <= flag.min : value < flag.min;
    if (tooSmall || value >= flag.max) {
      std::string range =
          flag.max == inf
              ? (flag.minExclusive ? "greater than 0" : "at least 0")
              : "in [0, 1)";
      return reportError(kCommand, "--" + flag.option.ArgStr +
                                       " must be " + range + ", got " +
                                       flag.option);
    }
    flag.value = value;
  }
  if (recomputeArg.getNumOccurrences()) {
    if (recomputeArg != "none" && recomputeArg != "full" &&
        recomputeArg != "selective")
      return reportError(kCommand, "unknown --recompute '" + recomputeArg +
                                       "': expected none, full or selective");
    autodiff.recompute = recomputeArg;
  }
  if (precisionArg.getNumOccurrences()) {
    if (!autodiff::parsePrecision(precisionArg))
      return reportError(kCommand,
                         "unknown --precision '" + precisionArg +
                             "': expected fp32, bf16-mixed or fp16-mixed");
    autodiff.precision = precisionArg;
  }
  if (reduceDTypeArg.getNumOccurrences()) {
    if (reduceDTypeArg != "compute" && reduceDTypeArg != "fp32")
      return reportError(kCommand, "unknown --reduce-dtype '" +
                                       reduceDTypeArg +
                                       "': expected compute or fp32");
    if (autodiff.precision == "fp32")
      return reportError(kCommand, "--reduce-dtype needs --precision "
                                   "bf16-mixed or fp16-mixed");
    autodiff.reduceDType = reduceDTypeArg;
  }
  if (lossScaleArg.getNumOccurrences() ||
      lossScaleGrowthArg.getNumOccurrences()) {
    if (autodiff.precision != "fp16-mixed")
      return reportError(kCommand, "--loss-scale and "
                                   "--loss-scale-growth-interval need "
                                   "--precision fp16-mixed");
    if (lossScaleArg.getNumOccurrences()) {
      double value;
      if (parseNumber(kCommand, lossScaleArg, value))
        return 1;
      if (!(value > 0) || value == inf)
        return reportError(kCommand, "--loss-scale must be greater than 0, "
                                     "got " +
                                         lossScaleArg);
      autodiff.lossScale = value;
    }
    if (lossScaleGrowthArg.getNumOccurrences()) {
      long long n = 0;
      if (StringRef(lossScaleGrowthArg).getAsInteger(10, n) || n < 1)
        return reportError(kCommand,
                           "--loss-scale-growth-interval must be an integer "
                           ">= 1, got '" +
                               lossScaleGrowthArg + "'");
      autodiff.lossScaleGrowthInterval = n;
    }
  }
  return 0;
}

/// Fails (after reporting) when the model's own mesh disagrees with --mesh:
/// silently preferring either would compile for a mesh the user did not ask
/// for.
LogicalResult checkModelMesh(mlir::ModuleOp module,
                             ArrayRef<MeshAxisSpec> axes) {
  for (auto meshOp : module.getOps<dist::MeshOp>()) {
    if (meshOp.getSymName() != kMeshName)
      continue;
    SmallVector<MeshAxisSpec> declared = llvm::map_to_vector(
        meshOp.getMesh().getAxes(), [](dist::MeshAxisAttr axis) {
          return MeshAxisSpec{axis.getName().str(), axis.getSize()};
        });
    if (printMeshSpec(declared) != printMeshSpec(axes)) {
      meshOp.emitError() << "the model declares mesh @" << kMeshName << " as "
                         << printMeshSpec(declared) << ", but --mesh asks for "
                         << printMeshSpec(axes);
      return failure();
    }
  }
  return success();
}

bool hasModelMesh(mlir::ModuleOp module) {
  return llvm::any_of(module.getOps<dist::MeshOp>(), [](dist::MeshOp mesh) {
    return mesh.getSymName() == kMeshName;
  });
}

/// Writes `plan` to `filename`. Returns 1 after reporting on failure.
int writePlan(StringRef command, const partita::plan::Plan &plan,
              StringRef filename) {
  std::string message;
  std::unique_ptr<ToolOutputFile> file =
      mlir::openOutputFile(filename, &message);
  if (!file)
    return reportError(command, "cannot write '" + filename + "': " + message);
  file->os() << plan.SerializeAsString();
  file->keep();
  return 0;
}

/// --strategy auto: searches every strategy and mesh of --devices devices
/// (StrategySearch.h), prints the ranked table (unless --quiet), writes
/// --search-report, and sets the winner's strategy and mesh in `options`.
/// Returns 1 after reporting when nothing fits.
int chooseStrategy(mlir::ModuleOp module, CompilerOptions &options,
                   const search::CostModel &cost, Progress &progress) {
  bool nodes = cost.devicesPerNode > 0 && cost.devicesPerNode < devicesArg;
  search::SearchSpace space;
  space.strategies = searchStrategiesArg;
  space.axisOrders = nodes;
  // Pipelines split a train step (a forward plan has no backward to
  // schedule).
  if (options.train)
    space.schedules = searchSchedulesArg.empty() ? search::searchableSchedules()
                                                 : searchSchedulesArg;
  if (space.schedules.size() == 1 && space.schedules.front() == "none")
    space.schedules.clear();
  std::vector<search::Candidate> candidates =
      search::enumerateCandidates(devicesArg, space, options.annotate);
  if (candidates.empty())
    return reportError(
        kCommand,
        "no strategy of --search-strategies can use " +
            std::to_string(devicesArg) +
            " devices (each mesh axis needs at least 2" +
            (llvm::is_contained(searchStrategiesArg, "pp") &&
                     space.schedules.empty()
                 ? "; pp, a pipeline, splits only a train step (--train) "
                   "and needs a schedule (--search-schedules)"
                 : "") +
            ")");
  progress.start();
  search::SearchResult result = search::searchStrategies(
      module, options, std::move(candidates), cost,
      [&](const search::Candidate &c, size_t index, size_t count) {
        if (quiet)
          return;
        errs() << "partita plan: [" << index + 1 << "/" << count << "] "
               << c.strategy << " on " << c.mesh;
        if (c.pipelined())
          errs() << " (" << c.schedule << ", stages by " << c.stagesBy << ")";
        if (c.microbatches > 1)
          errs() << " with " << c.microbatches << " microbatches";
        errs() << ": " << (c.compiled() ? "compiled" : "rejected");
        if (c.compiled() && !c.fits(cost))
          errs() << ", over the memory limit";
        errs() << "\n";
      });
  progress.done("searched " + Twine(result.candidates.size()) +
                " candidates for " + Twine(int64_t(devicesArg)) + " devices");
  if (!quiet) {
    errs() << "partita plan: cost model: "
           << format("%g", cost.deviceFlops / 1e12) << " TFLOP/s and "
           << format("%g", cost.memoryBytesPerSecond / 1e9)
           << " GB/s of memory a device, "
           << format("%g", cost.linkBytesPerSecond / 1e9) << " GB/s a link, "
           << format("%g", cost.callSeconds * 1e6) << " us a communicator call";
    if (nodes)
      errs() << "; " << cost.devicesPerNode << " devices a node, "
             << format("%g", cost.nodeLinkBytesPerSecond / 1e9)
             << " GB/s across nodes";
    errs() << "; step = compute + comm - hidden + bubble";
    if (cost.memoryPerDevice > 0)
      errs() << "; at most " << cost.memoryPerDevice << " bytes a device";
    errs() << "\n";
    search::printSearchTable(result, cost, errs());
  }
  if (!searchReportArg.empty()) {
    std::string message;
    std::unique_ptr<ToolOutputFile> file =
        mlir::openOutputFile(searchReportArg, &message);
    if (!file)
      return reportError(kCommand, "cannot write '" + searchReportArg +
                                       "': " + message);
    search::writeSearchReport(result, file->os());
    file->keep();
  }
  if (!result.found) {
    const search::Candidate &first = result.candidates.front();
    if (!first.compiled())
      return reportError(kCommand,
                         "no candidate compiled for " +
                             Twine(int64_t(devicesArg)) +
                             " devices; the first, " + first.strategy +
                             " on " + first.mesh + ": " + first.rejection);
    return reportError(kCommand, "no candidate fits --memory-per-device " +
                                     memoryPerDeviceArg + " (" +
                                     Twine(cost.memoryPerDevice) +
                                     " bytes): the smallest, " +
                                     first.strategy + " on " + first.mesh +
                                     ", needs " + Twine(first.memory) +
                                     " bytes a device");
  }
  const search::Candidate &best = result.candidates.front();
  search::applyCandidate(best, cost, options);
  if (!quiet)
    errs() << "partita plan: chose " << best.strategy << " on " << best.mesh
           << (best.pipelined()
                   ? " (" + best.schedule + ", stages by " + best.stagesBy + ")"
                   : std::string())
           << (best.microbatches > 1
                   ? " with " + std::to_string(best.microbatches) +
                         " microbatches"
                   : std::string())
           << " (estimated step " << format("%.4g", best.seconds * 1e3)
           << " ms, " << best.memory << " bytes a device)\n";
  return 0;
}

int runPlan() {
  // Everything that can be checked without the model is checked first.
  if (inputFile.empty())
    return reportError(kCommand, "missing the model file (partita plan "
                                 "MODEL.mlir --mesh ... --strategy ...)");
  if (strategyArg.getNumOccurrences() == 0)
    return reportError(kCommand, "missing --strategy: " + knownStrategies());
  bool automatic = strategyArg == "auto";
  if (strategyArg != "none" && !automatic && strategyArg != kILPStrategy &&
      !sharding::lookupStrategy(strategyArg))
    return reportError(kCommand, "unknown --strategy '" + strategyArg +
                                     "': expected " + knownStrategies());
  search::CostModel cost;
  if (checkSearchOptions(cost))
    return 1;
  SmallVector<MeshAxisSpec> axes;
  std::string mesh;
  if (meshArg.getNumOccurrences() && strategyArg == "none")
    return reportError(kCommand, "--mesh has no effect with --strategy none: "
                                 "the model's annotations name their mesh");
  if (meshArg.getNumOccurrences()) {
    Expected<SmallVector<MeshAxisSpec>> parsed = parseMeshSpec(meshArg);
    if (!parsed)
      return reportError(kCommand, "--mesh: " + toString(parsed.takeError()));
    axes = std::move(*parsed);
    mesh = printMeshSpec(axes);
    for (StringRef axis : axesNeededBy(strategyArg))
      if (llvm::none_of(axes, [&](const MeshAxisSpec &spec) {
            return spec.name == axis;
          }))
        return reportError(kCommand, "--strategy " + strategyArg +
                                         " needs a mesh axis named '" + axis +
                                         "', and --mesh " + mesh +
                                         " has none");
  }
  if (sequenceParallel && strategyArg != "megatron" &&
      strategyArg != "dp+megatron")
    return reportError(kCommand,
                       "--sequence-parallel splits the sequence over the "
                       "tensor axis tp and needs --strategy megatron or "
                       "dp+megatron, not " +
                           strategyArg);
  CompilerOptions options;
  if (checkTrainOptions(options))
    return 1;
  options.annotate.strategy = strategyArg;
  options.annotate.mesh = mesh;
  options.annotate.meshName = kMeshName.str();
  options.annotate.sequenceParallel = sequenceParallel;
  if (regatherNormOutputs.getNumOccurrences() && !sequenceParallel)
    return reportError(kCommand, "--regather-norm-outputs needs "
                                 "--sequence-parallel");
  options.annotate.regatherNormOutputs = regatherNormOutputs;
  if (strategyArg == kILPStrategy) {
    options.autoShard = search::toAutoShardOptions(cost);
    options.autoShard.timeLimit = ilpSecondsArg;
    options.autoShard.solver = ilpSolverArg;
  }
  options.propagate.recordOrigins = recordOrigins;
  options.overlapComm = overlapComm;
  options.fuseAdds = fuseAdds;
  options.keepAttentionStats = keepAttentionStats;
  options.optimizeComm.bucketBytes = 25 << 20;
  if (microbatchesArg < 1)
    return reportError(kCommand, "--microbatches must be at least 1, got " +
                                     std::to_string(microbatchesArg));
  if (microbatchesArg > 1 && !options.train)
    return reportError(kCommand, "--microbatches needs --train (it splits "
                                 "a train step's batch)");
  options.microbatches = microbatchesArg;
  if (ppArg.getNumOccurrences() || stagesByArg.getNumOccurrences()) {
    if (!options.train)
      return reportError(kCommand, "--pp needs --train (it splits a train "
                                   "step into stages)");
    if (ppArg < 0 || (ppArg == 0 && stagesByArg != "annotation"))
      return reportError(kCommand, "--pp must be at least 1 (0 only with "
                                   "--stages-by annotation), got " +
                                       std::to_string(ppArg));
    if (stagesByArg != "layers" && stagesByArg != "cost" &&
        stagesByArg != "annotation")
      return reportError(kCommand, "--stages-by must be layers, cost or "
                                   "annotation, not '" +
                                       stagesByArg + "'");
    options.pipelineSplit = true;
    options.pipelineStages = ppArg;
    options.stagesBy = stagesByArg;
  }
  if (scheduleArg.getNumOccurrences()) {
    if (!options.pipelineSplit)
      return reportError(kCommand, "--schedule needs --pp (it orders the "
                                   "pipeline stages' work)");
    if (scheduleArg != "gpipe" && scheduleArg != "1f1b" &&
        scheduleArg != "interleaved" && scheduleArg != "zb-h1")
      return reportError(kCommand,
                         "--schedule must be gpipe, 1f1b, interleaved or "
                         "zb-h1, not '" +
                             scheduleArg + "'");
    options.schedule = scheduleArg;
  }
  if (scheduleFileArg.getNumOccurrences()) {
    if (!options.pipelineSplit || ppArg < 1)
      return reportError(kCommand, "--schedule-file needs --pp n with n at "
                                   "least 1 (the file's pipeline ranks)");
    if (scheduleArg.getNumOccurrences())
      return reportError(kCommand, "--schedule-file and --schedule both "
                                   "given: give one schedule");
    options.schedule = "file";
    int64_t chunks = chunksArg.getNumOccurrences() ? chunksArg : 1;
    if (chunks < 1)
      return reportError(kCommand, "--chunks must be at least 1, got " +
                                       std::to_string(chunks));
    options.pipelineChunks = chunks;
    auto small = [](int64_t x) { return x <= (1 << 20); };
    if (!small(ppArg) || !small(chunks) || !small(options.microbatches))
      return reportError(kCommand, "--pp, --chunks and --microbatches must "
                                   "be at most 1048576 with --schedule-file");
    std::string error;
    options.handSchedule =
        readScheduleFile(scheduleFileArg, int(ppArg), int(options.microbatches),
                         int(chunks), options.splitBackward, error);
    if (!options.handSchedule)
      return reportError(kCommand, error);
  }
  if (stageMemoryLimitArg.getNumOccurrences()) {
    if (!options.pipelineSplit)
      return reportError(kCommand, "--stage-memory-limit needs --pp n");
    if (stageMemoryLimitArg == "1f1b") {
      options.stageMemoryLimit = plan_lowering::kStageMemoryLimit1F1B;
    } else if (stageMemoryLimitArg == "none") {
      options.stageMemoryLimit = plan_lowering::kStageMemoryLimitNone;
    } else {
      Expected<int64_t> parsed = parseByteCount(stageMemoryLimitArg);
      if (!parsed || *parsed == 0)
        return reportError(
            kCommand, "--stage-memory-limit: " +
                          (parsed ? std::string("expected 1f1b, none or a "
                                                "byte count above 0, got '0'")
                                  : toString(parsed.takeError())));
      options.stageMemoryLimit = *parsed;
    }
  }
  if (chunksArg.getNumOccurrences() && options.schedule != "interleaved" &&
      options.schedule != "file")
    return reportError(kCommand, "--chunks needs --schedule interleaved or "
                                 "--schedule-file (the other schedules run "
                                 "one chunk per rank)");
  if (options.schedule == "interleaved") {
    if (chunksArg < 2)
      return reportError(kCommand, "--chunks must be at least 2 for "
                                   "interleaved, got " +
                                       std::to_string(chunksArg));
    options.pipelineChunks = chunksArg;
  }
  if (bucketBytesArg.getNumOccurrences()) {
    if (!options.train)
      return reportError(kCommand, "--bucket-bytes needs --train (only "
                                   "gradient reductions are bucketed)");
    if (!overlapComm)
      return reportError(kCommand, "--bucket-bytes has no effect with "
                                   "--overlap-comm=false");
    Expected<int64_t> parsed = parseByteCount(bucketBytesArg);
    if (!parsed)
      return reportError(kCommand,
                         "--bucket-bytes: " + toString(parsed.takeError()));
    options.optimizeComm.bucketBytes = *parsed;
  }
  // What is written follows --emit, or else the -o name: a .pb is a plan,
  // a .mlir (or stdout, /dev/null) the module after --emit's default stage.
  // Any other name is ambiguous, and a mismatch would only show later as
  // "not a valid plan".
  StringRef outName(output);
  bool pbName = outName.ends_with(".pb");
  bool textName = outName == "-" || outName.ends_with(".mlir") ||
                  outName == "/dev/null";
  if (!emitArg.getNumOccurrences() && pbName)
    emitArg = "plan";
  else if (!emitArg.getNumOccurrences() && !textName)
    return reportError(kCommand,
                       "cannot tell what to write to '" + outName +
                           "': name it .pb for a plan (or pass --emit "
                           "plan), or .mlir for the module after a stage "
                           "(--emit annotated, propagated, ...)");
  if (emitArg != "plan" && pbName)
    return reportError(kCommand, "--emit " + emitArg +
                                     " writes MLIR text, but -o " + outName +
                                     " names a plan file: pass --emit plan, "
                                     "or name the output .mlir");
  SmallVector<CompileStage> stages = getCompileStages(options);
  std::optional<CompileStage> last = symbolizeCompileStage(emitArg);
  if (!last || !llvm::is_contained(stages, *last)) {
    SmallVector<StringRef> names =
        llvm::map_to_vector(stages, stringifyCompileStage);
    return reportError(kCommand, "unknown --emit '" + emitArg +
                                     "': expected " + join(names, " or "));
  }

  mlir::DialectRegistry registry;
  registerAllDialects(registry);
#ifdef PARTITA_DRIVER_TEST_DIALECT
  test::registerTestDialect(registry);
#endif
  mlir::MLIRContext context(registry);
  context.disableMultithreading();
  // Diagnostics show the source line; a dump of the op adds nothing.
  context.printOpOnDiagnostic(false);
  context.loadAllAvailableDialects();
  SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler printer(sourceMgr, &context);
  DiagnosticCap cap(context, sourceMgr, printer);
  // Registered last, so it sees each diagnostic first and passes it on.
  unsigned numErrors = 0;
  mlir::ScopedDiagnosticHandler counter(&context, [&](mlir::Diagnostic &diag) {
    if (diag.getSeverity() == mlir::DiagnosticSeverity::Error)
      ++numErrors;
    return failure();
  });

  Progress progress(kCommand, quiet);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      readModel(kCommand, inputFile, context, sourceMgr);
  if (!module)
    return 1;
  progress.done("read " + inputFile);
  // An empty input (a wrong file, an empty pipe) would otherwise "compile".
  if (module->getOps<mlir::func::FuncOp>().empty())
    return reportError(kCommand, inputFile + " defines no func.func to compile");

  if (automatic) {
    if (hasModelMesh(*module))
      return reportError(kCommand,
                         inputFile + " declares dist.mesh @" + kMeshName +
                             ", and --strategy auto chooses the mesh: remove "
                             "it, or give a strategy");
    if (chooseStrategy(*module, options, cost, progress))
      return 1;
  } else if (strategyArg != "none") {
    if (!axes.empty() && failed(checkModelMesh(*module, axes)))
      return 1;
    if (axes.empty() && !hasModelMesh(*module))
      return reportError(kCommand, "no --mesh given, and " + inputFile +
                                       " declares no dist.mesh @" + kMeshName);
  }

  CompileStage current = stages.front();
  unsigned errorsBefore = numErrors;
  CompileCallbacks callbacks;
  callbacks.beforeStage = [&](CompileStage stage,
                              const mlir::OpPassManager &pm) {
    current = stage;
    errorsBefore = numErrors;
    // The integer program may take a while: say so before it starts.
    if (stage == CompileStage::Annotated &&
        options.annotate.strategy == kILPStrategy && !quiet) {
      errs() << "partita plan: choosing every op's sharding on mesh "
             << options.annotate.mesh;
      if (options.autoShard.solver == "greedy")
        errs() << " by the greedy heuristic\n";
      else
        errs() << " by an integer program (CBC, up to "
               << format("%g", options.autoShard.timeLimit) << " s)...\n";
    }
    progress.start();
    if (printPipeline) {
      errs() << "partita plan: " << stringifyCompileStage(stage) << ": ";
      pm.printAsTextualPipeline(errs());
      errs() << "\n";
    }
  };
  callbacks.configurePassManager = [&](CompileStage,
                                       mlir::PassManager &pm) {
    if (mlirTiming)
      pm.enableTiming();
    if (mlirStatistics)
      pm.enableStatistics();
    if (mlirPrintBefore || mlirPrintAfter)
      pm.enableIRPrinting(
          [&](mlir::Pass *, mlir::Operation *) { return bool(mlirPrintBefore); },
          [&](mlir::Pass *, mlir::Operation *) { return bool(mlirPrintAfter); });
  };
  callbacks.afterStage = [&](CompileStage stage) {
    std::string what = describeStage(stage, options);
    if (stage == CompileStage::Annotated &&
        options.annotate.strategy == kILPStrategy)
      what += describeAutoShard(*module);
    progress.done(what);
  };
  partita::plan::Plan plan;
  if (failed(compileModule(*module, options, *last, callbacks, &plan))) {
    // A pass that fails says why; only a silent failure needs a word here.
    if (numErrors == errorsBefore)
      return reportError(kCommand, "stopped before the module was " +
                                       stringifyCompileStage(current) +
                                       ", without a diagnostic");
    return 1;
  }

  progress.start();
  if (*last == CompileStage::Plan && output == "-" &&
      sys::Process::StandardOutIsDisplayed())
    return reportError(kCommand, "refusing to write a binary plan to the "
                                 "terminal: pass -o FILE.pb (or redirect "
                                 "stdout)");
  if (*last == CompileStage::Plan) {
    if (int rc = writePlan(kCommand, plan, output))
      return rc;
  } else if (int rc = writeModule(kCommand, module->getOperation(), output))
    return rc;
  progress.done("wrote " + (output == "-" ? std::string("stdout")
                                          : std::string(output)));
  return 0;
}
} // namespace

Command getPlanCommand() { return {planCommand, runPlan}; }

} // namespace partita::driver
