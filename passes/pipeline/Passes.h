//===- Passes.h - microbatch and pipeline passes ----------------*- C++ -*-===//

#ifndef PARTITA_PASSES_PIPELINE_PASSES_H
#define PARTITA_PASSES_PIPELINE_PASSES_H

#include "dialects/dist/IR/DistDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Operation.h"
#include "mlir/Pass/Pass.h"

#include <optional>

namespace partita::pipeline {
/// The mesh axis a microbatched step is split along while it is compiled.
inline constexpr llvm::StringLiteral kMicrobatchAxis = "microbatch";
/// Function attributes: the microbatch count (i64) and, on the step after
/// dist-microbatch-split, the per-microbatch function (a symbol).
inline constexpr llvm::StringLiteral kMicrobatchesAttrName =
    "dist.microbatches";
inline constexpr llvm::StringLiteral kMicrobatchStepAttrName =
    "dist.microbatch_step";
/// Op attribute: the op's pipeline stage, an i64 >= 0 (written by the user
/// or dist-pipeline-split on forward ops; nn-autodiff copies it onto the
/// backward ops it builds for an op).
inline constexpr llvm::StringLiteral kStageAttrName =
    dist::DistDialect::kStageAttrName;
/// `op`'s pipeline stage (kStageAttrName), if it has one.
inline std::optional<int64_t> getStage(mlir::Operation *op) {
  if (auto a = op->getAttrOfType<mlir::IntegerAttr>(kStageAttrName))
    return a.getInt();
  return std::nullopt;
}
/// Argument attribute (unit): a gradient accumulator of a microbatched step.
inline constexpr llvm::StringLiteral kAccumulatorAttrName = "dist.accumulator";
/// Function attribute: the pipeline stage count (i64), written by
/// dist-pipeline-split on the step.
inline constexpr llvm::StringLiteral kPipelineStagesAttrName =
    "dist.pipeline_stages";
/// Function attribute: each stage's predicted seconds (f64 array; the
/// forward ops' CostOpInterface time x 3), written by
/// dist-pipeline-split.
inline constexpr llvm::StringLiteral kStageCostsAttrName = "dist.stage_costs";
/// On the step after dist-stage-split: per stage, a dictionary of the
/// functions it runs ({forward, backward, step} symbols), and the schedule
/// kind (a string) that runs them.
inline constexpr llvm::StringLiteral kStageProgramsAttrName =
    "dist.stage_programs";
inline constexpr llvm::StringLiteral kScheduleAttrName = "dist.schedule";
/// On the step after dist-stage-split: model chunks per pipeline rank (i64).
inline constexpr llvm::StringLiteral kPipelineChunksAttrName =
    "dist.pipeline_chunks";
/// The mesh axis the pipeline stages lie along (major-most).
inline constexpr llvm::StringLiteral kPipelineAxis = "pp";

#define GEN_PASS_DECL
#include "passes/pipeline/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/pipeline/Passes.h.inc"
} // namespace partita::pipeline

#endif // PARTITA_PASSES_PIPELINE_PASSES_H
