//===- PlanCommand.cpp - `partita plan`: compile a model for a mesh -------===//
//
// Reads a model, then runs the compilation stages in order (with --train,
// differentiate into a train step; annotate with a strategy, propagate
// shardings, partition) and prints the module after the stage that --emit
// names, or writes the plan. Each stage is a row in `buildStages`.
//
//===----------------------------------------------------------------------===//

#include "dialects/InitAllDialects.h"
#include "passes/comm/Passes.h"
#include "passes/InitAllPasses.h"
#include "passes/partition/Passes.h"
#include "passes/plan/PlanLowering.h"
#include "passes/sharding/Passes.h"
#include "passes/sharding/Strategies.h"
#include "tools/partita/Driver.h"
#include "tools/partita/MeshSpec.h"
#include "tools/partita/ModelInput.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <functional>
#include <limits>

using namespace llvm;

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
             "megatron, dp+megatron, ...), or none (keep the model's own "
             "annotations)"));
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
cl::opt<bool> recordOrigins(
    "record-origins", cl::sub(planCommand),
    cl::desc("Attach dist.origin to every value, naming the annotation its "
             "sharding came from"));
cl::opt<bool> sequenceParallel(
    "sequence-parallel", cl::sub(planCommand),
    cl::desc("With megatron or dp+megatron: also split the residual stream on "
             "the sequence over tp (Megatron sequence parallelism)"));
cl::opt<bool> overlapComm(
    "overlap-comm", cl::sub(planCommand), cl::init(true),
    cl::desc("--train: after partitioning, issue each gradient all_reduce / "
             "reduce_scatter right after its gradient is produced, in "
             "buckets of --bucket-bytes (dist-optimize-comm), so it overlaps "
             "the rest of backward (on by default; =false keeps every "
             "reduction where the partitioner put it)"));
cl::opt<std::string> bucketBytesArg(
    "bucket-bytes", cl::sub(planCommand), cl::value_desc("n[KiB|MiB]"),
    cl::desc("--train: cap on a gradient bucket's bytes per device (default "
             "25MiB, PyTorch DDP's bucket_cap_mb; 0: one reduction per "
             "gradient)"));
cl::opt<std::string> output("o", cl::sub(planCommand), cl::init("-"),
                            cl::value_desc("file"),
                            cl::desc("Output file (default: stdout)"));
cl::opt<bool> quiet("quiet", cl::sub(planCommand),
                    cl::desc("No progress lines on stderr"));
cl::opt<bool> printPipeline(
    "print-pipeline", cl::sub(planCommand),
    cl::desc("Print each stage's pass pipeline on stderr, as partita-opt "
             "--pass-pipeline takes it"));

constexpr StringLiteral kCommand = "plan";
constexpr StringLiteral kMeshName = "mesh";

/// One step of compilation: the passes it runs, and the --emit value that
/// stops after it.
struct Stage {
  StringRef emitName;
  std::string progress;
  std::function<void(mlir::PassManager &)> addPasses;
};

/// The stages in order. Strategy `none` has no annotation stage of its own
/// but still answers to --emit annotated (the module as given).
SmallVector<Stage> buildStages(StringRef strategy, StringRef mesh,
                               StringRef autodiffPipeline,
                               int64_t bucketBytes) {
  SmallVector<Stage> stages;
  if (!autodiffPipeline.empty()) {
    std::string pipeline = autodiffPipeline.str();
    stages.push_back(
        {"differentiated",
         trainArg == "none"
             ? std::string("differentiated into @grads")
             : "differentiated into @train_step with " + trainArg,
         [=](mlir::PassManager &pm) {
           // Parsed twice (here and in checkTrainOptions, which reports):
           // only a pipeline that parsed gets here.
           (void)mlir::parsePassPipeline(pipeline, pm, nulls());
         }});
  }
  sharding::DistAnnotateOptions annotate;
  annotate.strategy = strategy.str();
  annotate.mesh = mesh.str();
  annotate.meshName = kMeshName.str();
  annotate.sequenceParallel = sequenceParallel;
  stages.push_back(
      {"annotated",
       strategy == "none"
           ? std::string("kept the model's annotations")
           : ("annotated with strategy " + strategy +
              (mesh.empty() ? Twine("") : " on mesh " + mesh))
                 .str() +
               (sequenceParallel ? " and sequence parallelism" : ""),
       [=](mlir::PassManager &pm) {
         if (strategy != "none")
           pm.addPass(sharding::createDistAnnotate(annotate));
       }});
  sharding::DistPropagateOptions propagate;
  propagate.recordOrigins = recordOrigins;
  stages.push_back({"propagated", "propagated shardings",
                    [=](mlir::PassManager &pm) {
                      pm.addPass(sharding::createDistPropagate(propagate));
                    }});
  bool overlap = overlapComm && !autodiffPipeline.empty();
  comm::DistOptimizeCommOptions optimizeComm;
  optimizeComm.bucketBytes = bucketBytes;
  std::string buckets =
      bucketBytes ? "in buckets of up to " + std::to_string(bucketBytes) +
                        " bytes"
                  : "one per gradient";
  stages.push_back({"partitioned",
                    overlap ? "partitioned into per-device programs, "
                              "gradient reductions issued early " +
                                  buckets
                            : "partitioned into per-device programs",
                    [=](mlir::PassManager &pm) {
                      pm.addPass(partition::createDistPartition());
                      if (overlap)
                        pm.addPass(
                            comm::createDistOptimizeComm(optimizeComm));
                    }});
  // Lowered after the passes, with the model as read as its reference.
  stages.push_back({"plan", "lowered to a plan", [](mlir::PassManager &) {}});
  return stages;
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

/// "dp, megatron, dp+megatron or none": every strategy --strategy takes.
std::string knownStrategies() {
  std::string known;
  for (const sharding::Strategy &strategy : sharding::getStrategies())
    known += strategy.name.str() + ", ";
  if (!known.empty())
    known.resize(known.size() - 2);
  return known + (known.empty() ? "" : " or ") + "none";
}

/// "4096", "64KiB" or "25MiB" as bytes (at least 0).
Expected<int64_t> parseByteCount(StringRef text) {
  StringRef digits = text.trim();
  int64_t unit = 1;
  if (digits.consume_back("KiB"))
    unit = 1 << 10;
  else if (digits.consume_back("MiB"))
    unit = 1 << 20;
  int64_t value;
  if (digits.getAsInteger(10, value) || value < 0 ||
      value > std::numeric_limits<int64_t>::max() / unit)
    return createStringError(
        "expected a byte count of at least 0, optionally with KiB or MiB "
        "(e.g. 65536, 64KiB, 25MiB), got '" +
        text + "'");
  return value * unit;
}

/// Checks the training flags and builds nn-autodiff's textual pipeline
/// (empty without --train). Returns 1 after reporting a bad value, a flag
/// that needs --train, or one that the chosen optimizer does not use.
int checkTrainOptions(std::string &pipeline) {
  struct NumberFlag {
    const cl::opt<std::string> &option;
    StringRef passOption;
    /// Optimizers the flag applies to; empty: all but none.
    SmallVector<StringRef, 2> optimizers;
    double min;
    bool minExclusive;
    double max; // exclusive
  };
  const double inf = INFINITY;
  NumberFlag numbers[] = {
      {lrArg, "lr", {}, 0, false, inf},
      {momentumArg, "momentum", {"sgd"}, 0, false, inf},
      {beta1Arg, "beta1", {"adamw"}, 0, false, 1},
      {beta2Arg, "beta2", {"adamw"}, 0, false, 1},
      {epsArg, "eps", {"adamw"}, 0, true, inf},
      {weightDecayArg, "weight-decay", {}, 0, false, inf},
      {clipNormArg, "clip-norm", {}, 0, true, inf},
  };
  if (!trainArg.getNumOccurrences()) {
    for (const NumberFlag &flag : numbers)
      if (flag.option.getNumOccurrences())
        return reportError(kCommand, "--" + flag.option.ArgStr +
                                         " needs --train adamw or sgd");
    if (recomputeArg.getNumOccurrences())
      return reportError(kCommand, "--recompute needs --train");
    return 0;
  }
  if (trainArg != "adamw" && trainArg != "sgd" && trainArg != "none")
    return reportError(kCommand, "unknown --train '" + trainArg +
                                     "': expected adamw, sgd or none");
  pipeline = "nn-autodiff{optimizer=" + trainArg;
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
    pipeline += (" " + flag.passOption + "=" + StringRef(flag.option).trim())
                    .str();
  }
  if (recomputeArg.getNumOccurrences()) {
    if (recomputeArg != "none" && recomputeArg != "full" &&
        recomputeArg != "selective")
      return reportError(kCommand, "unknown --recompute '" + recomputeArg +
                                       "': expected none, full or selective");
    pipeline += " recompute=" + recomputeArg;
  }
  pipeline += "}";
  // Parsing needs the pass registered; a build without it says so here,
  // before the model is read.
  mlir::OpPassManager probe("builtin.module");
  std::string message;
  raw_string_ostream os(message);
  if (failed(mlir::parsePassPipeline(pipeline, probe, os))) {
    // The parser's message is "<source>:1:1: error: <why>\n<pipeline>...".
    StringRef why = StringRef(message).split('\n').first;
    if (size_t at = why.find("error: "); at != StringRef::npos)
      why = why.drop_front(at + 7);
    return reportError(kCommand, "cannot build the training pipeline '" +
                                     pipeline + "': " + why);
  }
  return 0;
}

/// The function the plan runs: what nn-autodiff made, or the model's.
StringRef stepFunction() {
  if (!trainArg.getNumOccurrences())
    return "forward";
  return trainArg == "none" ? "grads" : "train_step";
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

/// Writes the plan of `module`'s step function (@forward, or with --train
/// @train_step or @grads), with `original`'s function of that name (the
/// module before annotation: the model, differentiated with --train) as the
/// "reference" program for `partita run --check`. Returns 1 after
/// reporting on failure.
int writePlan(StringRef command, mlir::ModuleOp module, mlir::ModuleOp original,
              StringRef filename) {
  plan_lowering::LowerToPlanOptions options;
  options.function = stepFunction().str();
  FailureOr<partita::plan::Plan> plan =
      plan_lowering::lowerToPlan(module, options);
  if (failed(plan))
    return 1;
  auto reference =
      original.lookupSymbol<mlir::func::FuncOp>(options.function);
  bool haveMesh = true;
  partita::plan::Program *program = plan->add_programs();
  if (!reference || failed(plan_lowering::lowerFunction(
                        reference, options, *plan->mutable_mesh(), haveMesh,
                        *program)))
    return reportError(command, "cannot lower the model itself as the "
                                "reference program");
  program->set_name("reference");
  std::string message;
  std::unique_ptr<ToolOutputFile> file =
      mlir::openOutputFile(filename, &message);
  if (!file)
    return reportError(command, "cannot write '" + filename + "': " + message);
  file->os() << plan->SerializeAsString();
  file->keep();
  return 0;
}

int runPlan() {
  // Everything that can be checked without the model is checked first.
  if (inputFile.empty())
    return reportError(kCommand, "missing the model file (partita plan "
                                 "MODEL.mlir --mesh ... --strategy ...)");
  if (strategyArg.getNumOccurrences() == 0)
    return reportError(kCommand, "missing --strategy: " + knownStrategies());
  if (strategyArg != "none" && !sharding::lookupStrategy(strategyArg))
    return reportError(kCommand, "unknown --strategy '" + strategyArg +
                                     "': expected " + knownStrategies());
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
  // nn-autodiff is found by name in the pass registry.
  registerAllPasses();
  std::string autodiffPipeline;
  if (checkTrainOptions(autodiffPipeline))
    return 1;
  int64_t bucketBytes = 25 << 20;
  if (bucketBytesArg.getNumOccurrences()) {
    if (autodiffPipeline.empty())
      return reportError(kCommand, "--bucket-bytes needs --train (only "
                                   "gradient reductions are bucketed)");
    if (!overlapComm)
      return reportError(kCommand, "--bucket-bytes has no effect with "
                                   "--overlap-comm=false");
    Expected<int64_t> parsed = parseByteCount(bucketBytesArg);
    if (!parsed)
      return reportError(kCommand,
                         "--bucket-bytes: " + toString(parsed.takeError()));
    bucketBytes = *parsed;
  }
  if (!emitArg.getNumOccurrences() && StringRef(output).ends_with(".pb"))
    emitArg = "plan";
  SmallVector<Stage> stages =
      buildStages(strategyArg, mesh, autodiffPipeline, bucketBytes);
  auto last = llvm::find_if(
      stages, [](const Stage &stage) { return stage.emitName == emitArg; });
  if (last == stages.end()) {
    SmallVector<StringRef> names = llvm::map_to_vector(
        stages, [](const Stage &stage) { return stage.emitName; });
    return reportError(kCommand, "unknown --emit '" + emitArg +
                                     "': expected " + join(names, " or "));
  }

  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  context.disableMultithreading();
  // Diagnostics show the source line; a dump of the op adds nothing.
  context.printOpOnDiagnostic(false);
  context.loadAllAvailableDialects();
  SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler printer(sourceMgr, &context);
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

  // The reference program of a plan is the module before annotation (the
  // model, or its train step): cloned when that stage has run.
  mlir::OwningOpRef<mlir::ModuleOp> original;
  if (emitArg == "plan" && autodiffPipeline.empty())
    original = module->clone();

  if (strategyArg != "none") {
    if (!axes.empty() && failed(checkModelMesh(*module, axes)))
      return 1;
    if (axes.empty() && !hasModelMesh(*module))
      return reportError(kCommand, "no --mesh given, and " + inputFile +
                                       " declares no dist.mesh @" + kMeshName);
  }

  for (Stage &stage : llvm::make_range(stages.begin(), std::next(last))) {
    progress.start();
    mlir::PassManager pm(&context, mlir::ModuleOp::getOperationName());
    stage.addPasses(pm);
    if (printPipeline) {
      errs() << "partita plan: " << stage.emitName << ": ";
      pm.printAsTextualPipeline(errs());
      errs() << "\n";
    }
    unsigned errorsBefore = numErrors;
    if (failed(pm.run(*module))) {
      // A pass that fails says why; only a silent failure needs a word here.
      if (numErrors == errorsBefore)
        return reportError(kCommand, "stopped before the module was " +
                                         stage.emitName +
                                         ", without a diagnostic");
      return 1;
    }
    progress.done(stage.progress);
    if (stage.emitName == "differentiated" && emitArg == "plan")
      original = module->clone();
  }

  progress.start();
  if (emitArg == "plan") {
    if (int rc = writePlan(kCommand, *module, *original, output))
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
