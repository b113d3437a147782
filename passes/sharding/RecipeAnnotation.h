//===- RecipeAnnotation.h - a recipe's shardings on a function -*- C++ -*-===//
//
// What dist-annotate does with a strategy (Strategies.h): the recipe's
// shardings on the arguments and results named by nn.param / nn.input /
// nn.state, and, for ZeRO, on the optimizer update and the parameters' uses.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_SHARDING_RECIPEANNOTATION_H
#define PARTITA_PASSES_SHARDING_RECIPEANNOTATION_H

#include "passes/sharding/Strategies.h"

#include "dialects/dist/IR/DistDialect.h"

#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>

namespace partita::sharding {

/// What `annotateFunction` needs to know about the mesh.
struct AnnotateOptions {
  llvm::StringRef meshName;
  dist::MeshAttr mesh;
  llvm::StringRef dataAxis;
  llvm::StringRef tensorAxis;
  llvm::StringRef contextAxis = "cp";
  /// Sequence parallelism: the backward gathers each norm's output again
  /// from its sequence shard (Megatron's), instead of keeping the forward's
  /// gathered output.
  bool regatherNormOutputs = true;
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

} // namespace partita::sharding

#endif // PARTITA_PASSES_SHARDING_RECIPEANNOTATION_H
