//===- Strategies.h - classic parallelism recipes as data -------*- C++ -*-===//
//
// The strategy presets of `dist-annotate` (dp, zero1/2/3, fsdp, megatron and
// their combinations): a table from parameter-name patterns to the mesh-axis
// role of each dimension, the parsing of a mesh spec such as "dp=2,tp=4", the
// function that writes a recipe's shardings onto a function's arguments and
// results (and, for ZeRO, onto the optimizer update and the parameters'
// uses), and the ZeRO memory model of model state that `partita explain`
// uses. docs/strategies.md lists every recipe and the paper it comes from.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_SHARDING_STRATEGIES_H
#define PARTITA_PASSES_SHARDING_STRATEGIES_H

#include "dialects/dist/IR/DistDialect.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>

namespace partita::sharding {

/// What a tensor dimension is split over in a recipe. Every dimension not
/// split is written as a closed, replicated dimension.
enum class AxisRole : uint8_t {
  /// Whole on every device.
  Replicated,
  /// Split over the data-parallel axis (the batch).
  Data,
  /// Split over the tensor-parallel axis (Megatron).
  Tensor,
  /// Split over the context-parallel axis (the sequence).
  Context,
};

/// How one family of parameters is laid out by a recipe.
struct ParamRecipe {
  /// The parameter name; `{i}` matches a layer index (one or more digits).
  llvm::StringLiteral pattern;
  /// The dimension names of the convention, for diagnostics ("H,n,d").
  llvm::StringLiteral dimNames;
  /// One role per dimension, so the rank is roles.size().
  llvm::ArrayRef<AxisRole> roles;
};

/// How much of the model state a recipe shards over the data axis
/// (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
/// Trillion Parameter Models", stages P_os, P_os+g, P_os+g+p).
enum class ZeroStage : uint8_t {
  /// Everything replicated over the data axis (plain data parallelism).
  None = 0,
  /// Optimizer state and the update sharded; gradients all-reduced whole.
  OptimizerState = 1,
  /// Also gradients: reduce-scattered straight into the sharded update.
  Gradients = 2,
  /// Also parameters: stored sharded, all-gathered before each use (FSDP).
  Parameters = 3,
};

/// A named recipe.
struct Strategy {
  llvm::StringLiteral name;
  /// Splits dimension 0 (the batch) of every `nn.input` over the data axis;
  /// otherwise inputs are annotated fully replicated.
  bool splitsBatch = false;
  /// Annotates every parameter fully replicated, whatever its name (pure data
  /// parallelism). Otherwise only parameters matching `params` are annotated.
  bool replicatesAllParams = false;
  /// Per-parameter layouts, matched against `nn.param` names in order.
  llvm::ArrayRef<ParamRecipe> params;
  /// The ZeRO stage over the data axis (needs splitsBatch).
  ZeroStage zero = ZeroStage::None;
  /// Splits dimension 1 (the sequence) of every `nn.input` over the context
  /// axis (context parallelism: each device holds a contiguous chunk of
  /// every sequence; attention gathers the keys and values).
  bool splitsSequence = false;

  bool needsDataAxis() const { return splitsBatch; }
  bool needsTensorAxis() const { return !params.empty(); }
  bool needsContextAxis() const { return splitsSequence; }
};

/// All known strategies, in the order the documentation lists them.
llvm::ArrayRef<Strategy> getStrategies();

/// The strategy called `name`, or null.
const Strategy *lookupStrategy(llvm::StringRef name);

/// Whether `name` matches `pattern`, where `{i}` in the pattern stands for a
/// non-empty run of decimal digits and every other character for itself.
bool matchesParamPattern(llvm::StringRef pattern, llvm::StringRef name);

/// The recipe entry for the parameter called `name`, or null.
const ParamRecipe *lookupParamRecipe(const Strategy &strategy,
                                     llvm::StringRef name);

/// Parses a mesh spec "dp=2,tp=4" into axes, major to minor. Reports bad
/// syntax, sizes below 1 and repeated axis names through `emitError`.
mlir::FailureOr<llvm::SmallVector<dist::MeshAxisAttr>>
parseMeshSpec(llvm::StringRef spec, mlir::MLIRContext *ctx,
              llvm::function_ref<mlir::InFlightDiagnostic()> emitError);

/// Prints axes in the mesh-spec syntax, "dp=2,tp=4".
std::string printMeshSpec(llvm::ArrayRef<dist::MeshAxisAttr> axes);

/// What `annotateFunction` needs to know about the mesh.
struct AnnotateOptions {
  llvm::StringRef meshName;
  dist::MeshAttr mesh;
  llvm::StringRef dataAxis;
  llvm::StringRef tensorAxis;
  llvm::StringRef contextAxis = "cp";
};

/// The dimension a ZeRO stage splits over the data axis of size `dataSize`:
/// the largest dimension that `taken` does not mark (already split by another
/// axis) and that `dataSize` divides, the first of equal ones; std::nullopt
/// when there is none (the tensor then stays whole over the data axis).
std::optional<unsigned> chooseZeroDim(llvm::ArrayRef<int64_t> shape,
                                      llvm::ArrayRef<bool> taken,
                                      int64_t dataSize);

/// Writes `strategy`'s shardings onto the arguments of `func` named by
/// `nn.param` / `nn.input` / `nn.state`, and onto its results named by
/// `nn.param` / `nn.state` (a train step's updated parameters and state):
/// every dimension closed, priority p0. A state "<name>.<x>" follows
/// parameter <name>; the rank-0 "step" is replicated. Arguments that already
/// carry `dist.sharding`, and parameters the strategy does not know, are
/// left as they are (with their state and results). Fails, with an error at
/// the argument, when an annotated argument is not a ranked tensor, has the
/// wrong rank, or has a dimension that the mesh axis splitting it does not
/// divide, or when a state's type differs from its parameter's. The mesh
/// must hold the axes the strategy needs (the caller checks).
///
/// With a ZeRO stage, each parameter P with a ZeRO dimension (chooseZeroDim)
/// has a "base" sharding (the recipe's) and a "sharded" one (base plus the
/// data axis on that dimension); its state is sharded, and:
/// - its update chain (the ops tagged `nn.grad_kind = "update"` with
///   P-shaped results, found backwards from P's updated result) gets the
///   sharded sharding on every result (`dist.sharding`, closed p0);
/// - stages 1 and 2: P enters the chain through a `dist.constraint` to the
///   sharded sharding (a local slice) and the updated result is annotated
///   with the base (all-gathered); stage 1 also constrains every other
///   P-shaped operand entering the chain from a non-constant op (the
///   gradient) to the base, so it is all-reduced whole, then sliced;
///   stage 2 leaves it, so a gradient partial over the data axis is
///   reduce-scattered;
/// - stage 3: P and its updated result are annotated sharded, and each
///   phase of P's other uses (forward: no `nn.grad_kind`; backward: "B" or
///   "W"; any other) reads it through its own `dist.constraint` chain to the
///   base, inserted before the phase's first use, so P is all-gathered once
///   per phase (forward and backward) and no gathered copy lives across.
mlir::LogicalResult annotateFunction(mlir::FunctionOpInterface func,
                                     const Strategy &strategy,
                                     const AnnotateOptions &options);

/// Bytes per parameter element of each part of the model state.
struct PrecisionRecipe {
  int64_t paramBytes;
  int64_t gradBytes;
  int64_t optimizerBytes;
  /// fp32 Adam: fp32 parameters and gradients, fp32 m and v (4 + 4 + 8).
  static constexpr PrecisionRecipe fp32Adam() { return {4, 4, 8}; }
  /// Mixed-precision Adam (ZeRO paper, K = 12): fp16 parameters and
  /// gradients, fp32 master parameters, m and v (2 + 2 + 12).
  static constexpr PrecisionRecipe mixedPrecisionAdam() { return {2, 2, 12}; }
};

/// One parameter tensor: its element count and into how many shards its
/// parameter, gradient and optimizer state are split on each device (1:
/// whole; the data axis size under the ZeRO stage that shards it, times
/// any tensor-parallel split).
struct ModelStateTensor {
  int64_t elements = 0;
  int64_t paramShards = 1;
  int64_t gradShards = 1;
  int64_t stateShards = 1;
};

/// Per-device bytes of model state.
struct ModelStateBytes {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t optimizerState = 0;
  int64_t total() const { return params + grads + optimizerState; }
};

/// The ZeRO paper's model-state accounting (section 3.1 and 5): per tensor
/// and part, ceil(elements / shards) x bytes per element, summed. The one
/// function behind `partita explain`'s model-state lines.
ModelStateBytes computeModelStateBytes(llvm::ArrayRef<ModelStateTensor> tensors,
                                       const PrecisionRecipe &recipe);

/// The shard counts of a tensor under ZeRO stage `stage` on a data axis of
/// `dataSize` devices (each part divided where the stage shards it).
ModelStateTensor zeroShards(int64_t elements, ZeroStage stage,
                            int64_t dataSize);

/// Megatron sequence parallelism (Korthikanti et al. 2022) on a function
/// already annotated by a Megatron strategy: pins the residual stream to be
/// split on the sequence over the tensor axis, so that the partitioner turns
/// each row-parallel all-reduce into a reduce-scatter and gathers the
/// sequence before each column-parallel linear. Found structurally:
/// - every operand #0 of `nn.layer_norm` / `nn.rms_norm` of rank 3
///   ([batch, seq, hidden]) gets a `dist.constraint` to
///   [{data?}, {tensor}, {}] at p0 (the residual stream, embedding output
///   included);
/// - every result of an `nn.embedding` whose table, and of an `nn.einsum`
///   whose second operand, is a function argument split over the tensor axis
///   on a dimension the einsum contracts (a row-parallel linear, or the
///   vocabulary-parallel lookup) gets a constraint to [{data?}, {}, {}]
///   partial over the tensor axis, so the seq split cannot flow back into it.
/// Fails, with an error at the op, when a norm's sequence dimension is not
/// divisible by the tensor axis, and at the function when it has no such
/// norm. `dataAxis` is used only when `strategy.splitsBatch`.
mlir::LogicalResult applySequenceParallel(mlir::FunctionOpInterface func,
                                          const Strategy &strategy,
                                          const AnnotateOptions &options);

} // namespace partita::sharding

#endif // PARTITA_PASSES_SHARDING_STRATEGIES_H
