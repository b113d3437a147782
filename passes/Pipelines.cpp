//===- Pipelines.cpp - the compile stages and the module -> plan API ------===//

#include "passes/Pipelines.h"

#include "dialects/nn/Transforms/Passes.h"

#include "passes/plan/PlanLowering.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

namespace partita {

StringRef stringifyCompileStage(CompileStage stage) {
  switch (stage) {
  case CompileStage::Differentiated:
    return "differentiated";
  case CompileStage::Annotated:
    return "annotated";
  case CompileStage::Propagated:
    return "propagated";
  case CompileStage::Partitioned:
    return "partitioned";
  case CompileStage::Plan:
    return "plan";
  }
  llvm_unreachable("unknown compile stage");
}

std::optional<CompileStage> symbolizeCompileStage(StringRef name) {
  for (CompileStage stage : {CompileStage::Differentiated,
                             CompileStage::Annotated, CompileStage::Propagated,
                             CompileStage::Partitioned, CompileStage::Plan})
    if (stringifyCompileStage(stage) == name)
      return stage;
  return std::nullopt;
}

SmallVector<CompileStage> getCompileStages(const CompilerOptions &options) {
  SmallVector<CompileStage> stages;
  if (options.train)
    stages.push_back(CompileStage::Differentiated);
  stages.append({CompileStage::Annotated, CompileStage::Propagated,
                 CompileStage::Partitioned, CompileStage::Plan});
  return stages;
}

StringRef getStepFunctionName(const CompilerOptions &options) {
  if (!options.train)
    return "forward";
  return options.autodiff.optimizer == "none" ? "grads" : "train_step";
}

void buildTrainStepPassPipeline(OpPassManager &pm,
                                const CompilerOptions &options) {
  // Forward ops first, so nn-autodiff gives each backward op its forward
  // op's stage; then the updates and constants the train step adds.
  pipeline::DistPipelineSplitOptions split{
      options.pipelineStages * options.pipelineChunks, options.stagesBy};
  if (options.pipelineSplit)
    pm.addPass(pipeline::createDistPipelineSplit(split));
  pm.addPass(autodiff::createNNAutodiff(options.autodiff));
  if (options.pipelineSplit)
    pm.addPass(pipeline::createDistPipelineSplit(split));
}

void buildAnnotatePassPipeline(OpPassManager &pm,
                               const CompilerOptions &options) {
  // Before anything is annotated: an einsum reads its weight in place of a
  // transposed copy, and a tied weight's gradients meet before a reduction.
  pm.addPass(nn::createNNAbsorbTransposes());
  if (options.annotate.strategy == kILPStrategy) {
    autoshard::DistAutoShardOptions autoShard = options.autoShard;
    autoShard.mesh = options.annotate.mesh;
    autoShard.meshName = options.annotate.meshName;
    // The local forms the partitioner will build are the ones offered.
    autoShard.vocabParallelCrossEntropy =
        options.partition.vocabParallelCrossEntropy;
    autoShard.splitKeyAttention = options.partition.splitKeyAttention;
    autoShard.keepPartialResults = options.partition.keepPartialResults;
    // Gradient reductions overlap the backward only when dist-optimize-comm
    // issues them early.
    if (!options.train || !options.overlapComm)
      autoShard.overlapShare = 0;
    pm.addPass(autoshard::createDistAutoShard(autoShard));
  } else if (options.annotate.strategy != "none") {
    pm.addPass(sharding::createDistAnnotate(options.annotate));
  }
  if (options.train && (options.microbatches > 1 || options.pipelineSplit))
    pm.addPass(pipeline::createDistMicrobatchAnnotate(
        pipeline::DistMicrobatchAnnotateOptions{options.microbatches,
                                                options.pipelineSplit}));
}

void buildPropagatePassPipeline(OpPassManager &pm,
                                const CompilerOptions &options) {
  pm.addPass(sharding::createDistPropagate(options.propagate));
}

void buildPartitionPassPipeline(OpPassManager &pm,
                                const CompilerOptions &options) {
  pm.addPass(partition::createDistPartition(options.partition));
}

void buildOptimizeCommPassPipeline(OpPassManager &pm,
                                   const CompilerOptions &options) {
  // Only gradient reductions are moved; a forward program has none.
  if (options.train && options.overlapComm)
    pm.addPass(comm::createDistOptimizeComm(options.optimizeComm));
  // After the reductions are placed: each is then once per step.
  if (options.train && (options.microbatches > 1 || options.pipelineSplit))
    pm.addPass(pipeline::createDistMicrobatchSplit());
}

/// The rewrites of a train step's attention gradients that a per-device
/// program gets (and the unpartitioned reference, so that --check compares
/// the same kernels): one attention_grad computes dq, dk and dv, then
/// reads its forward's output and softmax statistics.
static void buildAttentionGradPassPipeline(OpPassManager &pm,
                                           const CompilerOptions &options) {
  if (!options.train)
    return;
  pm.addPass(nn::createNNFuseAttentionGrad());
  if (options.keepAttentionStats)
    pm.addPass(nn::createNNKeepAttentionStats());
}

void buildFusePassPipeline(OpPassManager &pm, const CompilerOptions &options) {
  buildAttentionGradPassPipeline(pm, options);
  // Last: each stage's functions from the fused per-microbatch program.
  if (options.train && options.pipelineSplit)
    pm.addPass(pipeline::createDistStageSplit(
        pipeline::DistStageSplitOptions{options.schedule,
                                        options.splitBackward,
                                        options.pipelineChunks}));
}

void buildStagePassPipeline(OpPassManager &pm, CompileStage stage,
                            const CompilerOptions &options) {
  switch (stage) {
  case CompileStage::Differentiated:
    buildTrainStepPassPipeline(pm, options);
    return;
  case CompileStage::Annotated:
    buildAnnotatePassPipeline(pm, options);
    return;
  case CompileStage::Propagated:
    buildPropagatePassPipeline(pm, options);
    return;
  case CompileStage::Partitioned:
    buildPartitionPassPipeline(pm, options);
    buildOptimizeCommPassPipeline(pm, options);
    buildFusePassPipeline(pm, options);
    return;
  case CompileStage::Plan:
    return;
  }
}

void buildCompilePassPipeline(OpPassManager &pm, const CompilerOptions &options,
                              CompileStage last) {
  for (CompileStage stage : getCompileStages(options)) {
    buildStagePassPipeline(pm, stage, options);
    if (stage == last)
      return;
  }
}

/// Lowers the step function of `module` to `plan`, with `reference`'s
/// function of the same name as program "reference".
static LogicalResult lowerWithReference(ModuleOp module, ModuleOp reference,
                                        const CompilerOptions &options,
                                        partita::plan::Plan &plan) {
  plan_lowering::LowerToPlanOptions lowering;
  lowering.function = getStepFunctionName(options).str();
  lowering.seed = options.seed;
  lowering.initStd = options.initStd;
  lowering.fuseAdds = options.fuseAdds;
  lowering.schedule = options.handSchedule.get();
  lowering.stageMemoryLimit = options.stageMemoryLimit;
  FailureOr<partita::plan::Plan> lowered =
      plan_lowering::lowerToPlan(module, lowering);
  if (failed(lowered))
    return failure();
  plan = std::move(*lowered);
  auto func = reference.lookupSymbol<func::FuncOp>(lowering.function);
  bool haveMesh = true;
  partita::plan::Program *program = plan.add_programs();
  if (!func || failed(plan_lowering::lowerFunction(
                   func, lowering, *plan.mutable_mesh(), haveMesh, *program)))
    return emitError(module.getLoc(), "cannot lower the model itself as the "
                                      "reference program");
  program->set_name("reference");
  partita::plan::sealPlan(plan);
  return success();
}

LogicalResult compileModule(ModuleOp module, const CompilerOptions &options,
                            CompileStage last,
                            const CompileCallbacks &callbacks,
                            partita::plan::Plan *plan) {
  assert((last != CompileStage::Plan || plan) &&
         "compiling to a plan needs a plan to fill");
  // The reference program is the module before annotation: the model, or
  // its train step (with the per-device attention-gradient rewrites).
  OwningOpRef<ModuleOp> reference;
  if (last == CompileStage::Plan && !options.train)
    reference = module.clone();
  for (CompileStage stage : getCompileStages(options)) {
    PassManager pm(module.getContext(), ModuleOp::getOperationName());
    buildStagePassPipeline(pm, stage, options);
    if (callbacks.configurePassManager)
      callbacks.configurePassManager(stage, pm);
    if (callbacks.beforeStage)
      callbacks.beforeStage(stage, pm);
    if (failed(pm.run(module)))
      return failure();
    if (stage == CompileStage::Plan &&
        failed(lowerWithReference(module, *reference, options, *plan)))
      return failure();
    if (callbacks.afterStage)
      callbacks.afterStage(stage);
    if (stage == CompileStage::Differentiated && last == CompileStage::Plan) {
      reference = module.clone();
      PassManager referencePm(module.getContext(),
                              ModuleOp::getOperationName());
      buildAttentionGradPassPipeline(referencePm, options);
      if (failed(referencePm.run(*reference)))
        return failure();
    }
    if (stage == last)
      return success();
  }
  return success();
}

FailureOr<partita::plan::Plan>
compileToPlan(ModuleOp module, const CompilerOptions &options,
              const CompileCallbacks &callbacks) {
  partita::plan::Plan plan;
  if (failed(
          compileModule(module, options, CompileStage::Plan, callbacks, &plan)))
    return failure();
  return plan;
}

FailureOr<OpPassManager> parseModulePipeline(StringRef text,
                                             raw_ostream &errorStream) {
  FailureOr<OpPassManager> pm = parsePassPipeline(text, errorStream);
  if (failed(pm))
    return failure();
  if (pm->getOpAnchorName() != ModuleOp::getOperationName()) {
    errorStream << "expected a pipeline anchored on builtin.module, got '"
                << pm->getOpAnchorName() << "'\n";
    return failure();
  }
  return pm;
}

namespace {
/// CompilerOptions as textual pipeline options, for partita-opt's
/// --partita-*-pipeline=... (each pipeline reads the options of its stages).
struct PipelineCLOptions : public PassPipelineOptions<PipelineCLOptions> {
  // Defaults come from the passes' own option structs.
  autodiff::NNAutodiffOptions autodiffDefaults;
  sharding::DistAnnotateOptions annotateDefaults;
  comm::DistOptimizeCommOptions commDefaults;
  partition::DistPartitionOptions partitionDefaults;

  Option<bool> train{*this, "train",
                     llvm::cl::desc("partita-compile-pipeline: differentiate "
                                    "@forward into a train step first"),
                     llvm::cl::init(false)};
  Option<std::string> optimizer{
      *this, "optimizer",
      llvm::cl::desc("Train step update rule: adamw, sgd, or none (@grads)"),
      llvm::cl::init(autodiffDefaults.optimizer)};
  Option<double> lr{*this, "lr", llvm::cl::desc("Learning rate"),
                    llvm::cl::init(autodiffDefaults.lr)};
  Option<double> momentum{*this, "momentum", llvm::cl::desc("SGD momentum"),
                          llvm::cl::init(autodiffDefaults.momentum)};
  Option<double> beta1{*this, "beta1", llvm::cl::desc("AdamW beta1"),
                       llvm::cl::init(autodiffDefaults.beta1)};
  Option<double> beta2{*this, "beta2", llvm::cl::desc("AdamW beta2"),
                       llvm::cl::init(autodiffDefaults.beta2)};
  Option<double> eps{*this, "eps", llvm::cl::desc("AdamW epsilon"),
                     llvm::cl::init(autodiffDefaults.eps)};
  Option<double> weightDecay{*this, "weight-decay",
                             llvm::cl::desc("Weight decay"),
                             llvm::cl::init(autodiffDefaults.weightDecay)};
  Option<double> clipNorm{*this, "clip-norm",
                          llvm::cl::desc("Gradient clipping norm (0: off)"),
                          llvm::cl::init(autodiffDefaults.clipNorm)};
  Option<std::string> recompute{
      *this, "recompute",
      llvm::cl::desc("Activation recomputation: none, full or selective"),
      llvm::cl::init(autodiffDefaults.recompute)};
  Option<std::string> strategy{
      *this, "strategy",
      llvm::cl::desc("dist-annotate's strategy, or none (keep the module's "
                     "annotations)"),
      llvm::cl::init(std::string("none"))};
  Option<std::string> mesh{*this, "mesh",
                           llvm::cl::desc("Mesh for the strategy, e.g. "
                                          "dp=2,tp=2 (default: the module's)"),
                           llvm::cl::init(annotateDefaults.mesh)};
  Option<std::string> meshName{*this, "mesh-name",
                               llvm::cl::desc("Symbol of the mesh"),
                               llvm::cl::init(annotateDefaults.meshName)};
  Option<bool> sequenceParallel{
      *this, "sequence-parallel",
      llvm::cl::desc("With megatron: Megatron sequence parallelism"),
      llvm::cl::init(annotateDefaults.sequenceParallel)};
  Option<bool> recordOrigins{
      *this, "record-origins",
      llvm::cl::desc("Attach dist.origin to every propagated value"),
      llvm::cl::init(false)};
  Option<bool> overlapComm{
      *this, "overlap-comm",
      llvm::cl::desc("With train: bucket gradient reductions and issue them "
                     "early (dist-optimize-comm)"),
      llvm::cl::init(true)};
  Option<int64_t> microbatches{
      *this, "microbatches",
      llvm::cl::desc("With train: microbatches per step (gradient "
                     "accumulation)"),
      llvm::cl::init(1)};
  Option<int64_t> bucketBytes{*this, "bucket-bytes",
                              llvm::cl::desc("Cap on a gradient bucket's "
                                             "bytes per device"),
                              llvm::cl::init(commDefaults.bucketBytes)};

  CompilerOptions toCompilerOptions() const {
    CompilerOptions options;
    options.train = train;
    options.autodiff.optimizer = optimizer;
    options.autodiff.lr = lr;
    options.autodiff.momentum = momentum;
    options.autodiff.beta1 = beta1;
    options.autodiff.beta2 = beta2;
    options.autodiff.eps = eps;
    options.autodiff.weightDecay = weightDecay;
    options.autodiff.clipNorm = clipNorm;
    options.autodiff.recompute = recompute;
    options.annotate.strategy = strategy;
    options.annotate.mesh = mesh;
    options.annotate.meshName = meshName;
    options.annotate.sequenceParallel = sequenceParallel;
    options.propagate.recordOrigins = recordOrigins;
    options.overlapComm = overlapComm;
    options.optimizeComm.bucketBytes = bucketBytes;
    options.microbatches = microbatches;
    return options;
  }
};

template <void (*build)(OpPassManager &, const CompilerOptions &)>
void buildFromCL(OpPassManager &pm, const PipelineCLOptions &options) {
  build(pm, options.toCompilerOptions());
}

void buildCompileFromCL(OpPassManager &pm, const PipelineCLOptions &options) {
  buildCompilePassPipeline(pm, options.toCompilerOptions());
}

void buildPartitionStageFromCL(OpPassManager &pm,
                               const PipelineCLOptions &options) {
  buildStagePassPipeline(pm, CompileStage::Partitioned,
                         options.toCompilerOptions());
}
} // namespace

void registerPipelines() {
  PassPipelineRegistration<PipelineCLOptions>(
      "partita-train-step-pipeline",
      "Stage 'differentiated': @forward (nn ops, scalar loss) -> @train_step "
      "or @grads (nn-autodiff)",
      buildFromCL<buildTrainStepPassPipeline>);
  PassPipelineRegistration<PipelineCLOptions>(
      "partita-annotate-pipeline",
      "Stage 'annotated': shardings of a strategy on the step function's "
      "arguments (dist-annotate; nothing for strategy none)",
      buildFromCL<buildAnnotatePassPipeline>);
  PassPipelineRegistration<PipelineCLOptions>(
      "partita-propagate-pipeline",
      "Stage 'propagated': partly annotated -> every value sharded "
      "(dist-propagate)",
      buildFromCL<buildPropagatePassPipeline>);
  PassPipelineRegistration<PipelineCLOptions>(
      "partita-partition-pipeline",
      "Stage 'partitioned': sharded global program -> per-device programs "
      "with collectives (dist-partition, then with train dist-optimize-comm and "
      "nn-fuse-attention-grad)",
      buildPartitionStageFromCL);
  PassPipelineRegistration<PipelineCLOptions>(
      "partita-compile-pipeline",
      "Every stage through 'partitioned', as partita plan --emit partitioned "
      "runs them",
      buildCompileFromCL);
}

} // namespace partita
