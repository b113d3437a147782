//===- Strategies.h - classic parallelism recipes as data -------*- C++ -*-===//
//
// The strategy presets of `dist-annotate` (dp, zero1/2/3, fsdp, megatron and
// their combinations): a table from parameter-name patterns to the mesh-axis
// role of each dimension, with the ZeRO stage and the axes each recipe uses.
// docs/strategies.md lists every recipe and the paper it comes from. Applying
// a recipe is RecipeAnnotation.h; sequence parallelism SequenceParallel.h;
// mesh specs MeshSpec.h; the ZeRO memory model ModelStateMemory.h.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_SHARDING_STRATEGIES_H
#define PARTITA_PASSES_SHARDING_STRATEGIES_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>

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

} // namespace partita::sharding

#endif // PARTITA_PASSES_SHARDING_STRATEGIES_H
