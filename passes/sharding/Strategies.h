//===- Strategies.h - classic parallelism recipes as data -------*- C++ -*-===//
//
// The strategy presets of `dist-annotate` (dp, megatron, dp+megatron): a table
// from parameter-name patterns to the mesh-axis role of each dimension, the
// parsing of a mesh spec such as "dp=2,tp=4", and the function that writes a
// recipe's shardings onto a function's arguments. docs/strategies.md lists
// every recipe and the paper it comes from.
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
#include <string>

namespace partita::sharding {

/// The argument attributes that `partita model` writes to name arguments.
inline constexpr llvm::StringLiteral kParamAttrName = "nn.param";
inline constexpr llvm::StringLiteral kInputAttrName = "nn.input";

/// What a tensor dimension is split over in a recipe. Every dimension not
/// split is written as a closed, replicated dimension.
enum class AxisRole : uint8_t {
  /// Whole on every device.
  Replicated,
  /// Split over the data-parallel axis (the batch).
  Data,
  /// Split over the tensor-parallel axis (Megatron).
  Tensor,
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

  bool needsDataAxis() const { return splitsBatch; }
  bool needsTensorAxis() const { return !params.empty(); }
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
};

/// Writes `strategy`'s shardings onto the arguments of `func` named by
/// `nn.param` / `nn.input`: every dimension closed, priority p0. Arguments
/// that already carry `dist.sharding`, and parameters the strategy does not
/// know, are left as they are. Fails, with an error at the argument, when an
/// annotated argument is not a ranked tensor, has the wrong rank, or has a
/// dimension that the mesh axis splitting it does not divide. The mesh must
/// hold the axes the strategy needs (the caller checks).
mlir::LogicalResult annotateFunction(mlir::FunctionOpInterface func,
                                     const Strategy &strategy,
                                     const AnnotateOptions &options);

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
