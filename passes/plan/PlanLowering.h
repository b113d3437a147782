//===- PlanLowering.h - MLIR function -> plan protobuf ----------*- C++ -*-===//
//
// Lowers a function of nn ops (and, when partitioned, dist collectives on
// local tensors) to a program of the runtime's plan: numbered buffers,
// kernels and collectives, and a static memory plan.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_PLAN_PLANLOWERING_H
#define PARTITA_PASSES_PLAN_PLANLOWERING_H

#include "runtime/plan/PlanChecksum.h"
#include "runtime/plan/plan.pb.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"

#include <string>

namespace partita::runtime::pipeline {
struct Schedule;
} // namespace partita::runtime::pipeline

namespace partita::plan_lowering {

inline constexpr int64_t kStageMemoryLimit1F1B = -1;
inline constexpr int64_t kStageMemoryLimitNone = 0;

struct LowerToPlanOptions {
  /// The step program's function; empty: `train_step` (nn-autodiff's train
  /// step), else `grads`, else `forward`, else the module's only function.
  std::string function;
  /// An unpartitioned function to add as program "reference" (for
  /// `partita run --check`); empty: none.
  std::string reference;
  uint64_t seed = 0;
  /// Standard deviation of the normal initializer of weights.
  double initStd = 0.02;
  /// A pipelined step with `dist.schedule` "file": the hand-written
  /// schedule to write into the plan (validated by the caller).
  const partita::runtime::pipeline::Schedule *schedule = nullptr;
  /// A pipelined step: the most activation bytes a stage may hold (its
  /// microbatches' slots and its programs' shared arena, as the executor
  /// allocates them), kStageMemoryLimit1F1B (what 1f1b holds on its
  /// busiest stage) or kStageMemoryLimitNone (the default). zb-h1 defers
  /// fewer weight gradients on a rank to keep within it; a stage of
  /// another schedule over it is an error.
  int64_t stageMemoryLimit = kStageMemoryLimitNone;
  /// Fuse each `add` of a two-operand einsum's result (read by nothing
  /// else) into that einsum as its addend (the kernel copies the addend
  /// into its output and the GEMM accumulates onto it): the other operand,
  /// or, when that is a `broadcast` read by nothing else, the broadcast's
  /// input with its dims. A linear layer's bias add, or a gradient added to
  /// another, then costs no pass of its own.
  bool fuseAdds = true;
};

/// Byte alignment of every arena offset.
constexpr int64_t kArenaAlignment = 64;

/// Lowers `func` to `program`. A function is partitioned (per-device, local
/// shapes) when it carries `dist.mesh`, an argument carries
/// `dist.global_type`, or it contains a dist collective; `mesh` then receives
/// its mesh (it must agree with one already there). Anything that cannot be
/// lowered is a diagnostic at the op or value.
mlir::LogicalResult lowerFunction(mlir::func::FuncOp func,
                                  const LowerToPlanOptions &options,
                                  partita::plan::Mesh &mesh, bool &haveMesh,
                                  partita::plan::Program &program);

/// Lowers the module's functions named by `options` to a complete plan
/// (format version, mesh, programs, seed, checksum, trailer). A caller that
/// adds a program afterwards calls partita::plan::sealPlan again.
mlir::FailureOr<partita::plan::Plan>
lowerToPlan(mlir::ModuleOp module, const LowerToPlanOptions &options);

/// Marks `in_place` (plan.proto) every ACTIVATION result that replaces a
/// parameter or state buffer and may be written straight into it: no
/// instruction after the one writing it reads the replaced buffer, and that
/// instruction reads it only where it may write over it
/// (plan::writesOverOldValue: an sgd or adamw update, or an elementwise
/// `acc + g` of a gradient accumulator).
/// Needs first_use set and `replaces` checked; run before planMemory.
void donateUpdatedBuffers(partita::plan::Program &program);

/// Sets `reuses` (plan.proto) on the output of each instruction that may
/// write over an input (runtime/plan/PlanMemory.h) and reads, for the last
/// time, a plain activation of the output's size: a gradient added to
/// another, a sum reduced by its bucket's all_reduce. Each input is taken
/// over once. Needs first_use, last_use and in_place set; run before
/// planMemory.
void reuseDyingInputs(partita::plan::Program &program);

/// Greedy first-fit placement of the activation buffers of `program` by
/// their live ranges (first_use..last_use must be set); sets every offset
/// and the program's arena_bytes. `in_place` buffers get no arena bytes; a
/// buffer that `reuses` an input gets its offset (or, where something else
/// already lies there, a place of its own, and `reuses` is cleared).
void planMemory(partita::plan::Program &program);

} // namespace partita::plan_lowering

#endif // PARTITA_PASSES_PLAN_PLANLOWERING_H
