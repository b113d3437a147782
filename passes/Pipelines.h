//===- Pipelines.h - compile stages and the module -> plan API -*- C++ -*-===//
//
// The compiler as a library. One options struct, `CompilerOptions`, holds
// every stage's options; one `build...PassPipeline` per stage adds that
// stage's passes to a pass manager anchored on builtin.module; and
// `compileModule` / `compileToPlan` run the stages in order and lower the
// result (with the unpartitioned program as the plan's "reference") to the
// runtime's plan. `partita plan` is a thin user of this file; so are the
// tests, and later the Python package.
//
// The stages, in order, and the IR form each takes and leaves:
//
//   differentiated  nn-autodiff                    (only with `train`)
//       takes: @forward of nn ops with a scalar loss, nn.param/nn.input args
//       leaves: @train_step (or @grads), still unannotated nn ops
//   annotated       dist-annotate                  (none for strategy "none";
//                                                   dist-auto-shard for "ilp")
//       takes: an unannotated (or user-annotated) module
//       leaves: the same, with the strategy's #dist.sharding on the step
//               function's arguments and a dist.mesh @<mesh-name>
//   propagated      dist-propagate
//       takes: a module with some values annotated
//       leaves: every value of every function carries a #dist.sharding
//   partitioned     dist-partition [+ dist-optimize-comm with `train`]
//       takes: a fully propagated global-shape module
//       leaves: per-device programs on local shapes with dist collectives
//               (gradient reductions bucketed and issued early)
//   plan            (no passes: plan lowering)
//       takes: the partitioned module and the module before annotation
//       leaves: a partita::plan::Plan (step program + "reference" program)
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_PIPELINES_H
#define PARTITA_PASSES_PIPELINES_H

#include "passes/autodiff/Passes.h"
#include "passes/autoshard/Passes.h"
#include "passes/comm/Passes.h"
#include "passes/partition/Passes.h"
#include "passes/pipeline/Passes.h"
#include "passes/sharding/Passes.h"
#include "passes/plan/PlanLowering.h"
#include "partita/runtime/PipelineSchedule.h"
#include "runtime/plan/plan.pb.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

namespace partita {

/// The `strategy` that chooses every op's sharding by dist-auto-shard's
/// integer program instead of a dist-annotate preset.
inline constexpr llvm::StringLiteral kILPStrategy = "ilp";

/// Every stage's options. The defaults compile @forward as the model
/// annotates it (no train step, strategy "none").
struct CompilerOptions {
  /// Differentiate @forward into a train step (nn-autodiff) first.
  bool train = false;
  /// nn-autodiff's options (optimizer adamw|sgd|none, lr, ..., recompute).
  autodiff::NNAutodiffOptions autodiff;
  /// dist-annotate's options; strategy "none" runs no annotation (the
  /// model's own annotations are kept).
  sharding::DistAnnotateOptions annotate = defaultAnnotateOptions();
  /// With annotate.strategy "ilp": dist-auto-shard's cost rates and limits
  /// (its mesh and mesh name are annotate's), in place of dist-annotate.
  autoshard::DistAutoShardOptions autoShard;
  sharding::DistPropagateOptions propagate;
  partition::DistPartitionOptions partition;
  /// With `train`: bucket the gradient reductions and issue them early
  /// (dist-optimize-comm) after partitioning.
  bool overlapComm = true;
  comm::DistOptimizeCommOptions optimizeComm;
  /// With `train`: microbatches per step (gradient accumulation), > 1 adds
  /// dist-microbatch-annotate after annotation and dist-microbatch-split
  /// after partitioning; the plan then has a per-microbatch program and a
  /// pipeline schedule.
  int64_t microbatches = 1;
  /// With `train`: pipeline stages (dist-pipeline-split before and after
  /// nn-autodiff, so backward ops take their forward op's stage), by
  /// "annotation", "layers" or "cost"; 0 with "annotation" takes the count
  /// from the annotations. `pipelineSplit` false: no split.
  /// The microbatch passes then run even at one microbatch, and
  /// dist-stage-split gives each stage its forward, backward and update
  /// functions, run by `schedule` ("gpipe", "1f1b", "interleaved", "zb-h1",
  /// or "file": `handSchedule`).
  bool pipelineSplit = false;
  int64_t pipelineStages = 0;
  std::string stagesBy = "annotation";
  std::string schedule = "1f1b";
  /// With schedule "file": the hand-written schedule (--schedule-file),
  /// validated by the caller, which plan lowering writes into the plan.
  std::shared_ptr<const runtime::pipeline::Schedule> handSchedule;
  /// Each stage's backward split into B and W programs (zb-h1 always; a
  /// hand-written schedule with BACKWARD_INPUT and BACKWARD_WEIGHT).
  bool splitBackward = false;
  /// The most activation bytes a pipeline stage may hold (plan lowering's
  /// LowerToPlanOptions::stageMemoryLimit: bytes,
  /// plan_lowering::kStageMemoryLimit1F1B or the default
  /// kStageMemoryLimitNone).
  int64_t stageMemoryLimit = plan_lowering::kStageMemoryLimitNone;
  /// Model chunks per pipeline rank (interleaved); the stages are
  /// pipelineStages x pipelineChunks.
  int64_t pipelineChunks = 1;
  /// Plan lowering: the parameter initializer's seed and weight std.
  uint64_t seed = 0;
  double initStd = 0.02;
  /// Plan lowering: fuse an einsum's bias or gradient add into it
  /// (LowerToPlanOptions::fuseAdds).
  bool fuseAdds = true;
  /// With `train`: each attention_grad reads its forward's output and lse
  /// instead of recomputing the softmax statistics
  /// (nn-keep-attention-stats).
  bool keepAttentionStats = true;

  static sharding::DistAnnotateOptions defaultAnnotateOptions() {
    sharding::DistAnnotateOptions options;
    options.strategy = "none";
    return options;
  }
};

/// The compile stages, in the order they run.
enum class CompileStage {
  Differentiated,
  Annotated,
  Propagated,
  Partitioned,
  Plan
};

/// "differentiated", "annotated", "propagated", "partitioned" or "plan" (the
/// names `partita plan --emit` takes).
llvm::StringRef stringifyCompileStage(CompileStage stage);
std::optional<CompileStage> symbolizeCompileStage(llvm::StringRef name);

/// The stages `options` runs, in order: Differentiated only with `train`;
/// Annotated always (without passes for strategy "none").
llvm::SmallVector<CompileStage>
getCompileStages(const CompilerOptions &options);

/// The function the plan runs: @train_step, @grads (optimizer none) or
/// @forward.
llvm::StringRef getStepFunctionName(const CompilerOptions &options);

/// nn forward (@forward) -> @train_step / @grads: nn-autodiff, whether or
/// not `options.train` is set.
void buildTrainStepPassPipeline(mlir::OpPassManager &pm,
                                const CompilerOptions &options);
/// Unannotated -> annotated by `options.annotate.strategy` (nothing for
/// "none"; every op's sharding chosen by dist-auto-shard for "ilp").
void buildAnnotatePassPipeline(mlir::OpPassManager &pm,
                               const CompilerOptions &options);
/// Partly annotated -> every value sharded.
void buildPropagatePassPipeline(mlir::OpPassManager &pm,
                                const CompilerOptions &options);
/// Fully sharded global program -> per-device program with collectives.
void buildPartitionPassPipeline(mlir::OpPassManager &pm,
                                const CompilerOptions &options);
/// Partitioned train step -> gradient reductions bucketed and issued early
/// (nothing without `train` and `overlapComm`).
void buildOptimizeCommPassPipeline(mlir::OpPassManager &pm,
                                   const CompilerOptions &options);
/// Partitioned train step -> the attention gradients of one attention merged
/// into one op (nn-fuse-attention-grad; nothing without `train`).
void buildFusePassPipeline(mlir::OpPassManager &pm,
                           const CompilerOptions &options);
/// One stage's passes (partitioned: partition, optimize-comm, then fuse;
/// plan: no passes).
void buildStagePassPipeline(mlir::OpPassManager &pm, CompileStage stage,
                            const CompilerOptions &options);
/// Every stage through `last`, in order, in one pipeline: what
/// `partita-opt --partita-compile-pipeline` runs.
void buildCompilePassPipeline(mlir::OpPassManager &pm,
                              const CompilerOptions &options,
                              CompileStage last = CompileStage::Partitioned);

/// Hooks around each stage of compileModule (for progress lines, printing
/// the pipeline, counting diagnostics). Both may be empty.
struct CompileCallbacks {
  /// Before `stage` runs, with the passes it will run.
  std::function<void(CompileStage stage, const mlir::OpPassManager &pm)>
      beforeStage;
  /// After `stage` succeeded (for Plan: after lowering).
  std::function<void(CompileStage stage)> afterStage;
  /// Before `stage` runs, with its pass manager to configure (timing, IR
  /// printing: what `partita plan --mlir-timing` and friends set).
  std::function<void(CompileStage stage, mlir::PassManager &pm)>
      configurePassManager;
};

/// Runs the stages through `last` on `module` in place. With `last` Plan,
/// `plan` must be given and receives the plan of the step function, with the
/// same function of the module before annotation (the model, or its train
/// step) as program "reference" (for `partita run --check`). Failures are
/// reported as diagnostics on the module's context.
mlir::LogicalResult compileModule(mlir::ModuleOp module,
                                  const CompilerOptions &options,
                                  CompileStage last,
                                  const CompileCallbacks &callbacks = {},
                                  partita::plan::Plan *plan = nullptr);

/// compileModule through Plan: the module compiled to a plan (the module is
/// left partitioned).
mlir::FailureOr<partita::plan::Plan>
compileToPlan(mlir::ModuleOp module, const CompilerOptions &options,
              const CompileCallbacks &callbacks = {});

/// Parses a pipeline as `partita plan --print-pipeline` prints it and
/// `partita-opt --pass-pipeline` takes it: anchored, "builtin.module(...)".
/// (Parsing it into an existing module PassManager with
/// `mlir::parsePassPipeline(text, pm)` would nest a second builtin.module
/// pass manager that runs on nested modules only, that is on nothing.)
mlir::FailureOr<mlir::OpPassManager>
parseModulePipeline(llvm::StringRef text, llvm::raw_ostream &errorStream);

/// Registers the stage pipelines with the pass registry, as
/// partita-train-step-pipeline, partita-annotate-pipeline,
/// partita-propagate-pipeline, partita-partition-pipeline and
/// partita-compile-pipeline, each taking the options of CompilerOptions.
void registerPipelines();

} // namespace partita

#endif // PARTITA_PASSES_PIPELINES_H
