//===- SequenceParallel.h - Megatron sequence parallelism ------*- C++ -*-===//
//
// Sequence parallelism is applied after a Megatron recipe: constraints that
// split the residual stream on the sequence over the tensor axis.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_SHARDING_SEQUENCEPARALLEL_H
#define PARTITA_PASSES_SHARDING_SEQUENCEPARALLEL_H

#include "passes/sharding/RecipeAnnotation.h"
#include "passes/sharding/Strategies.h"

#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Support/LLVM.h"

namespace partita::sharding {

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

#endif // PARTITA_PASSES_SHARDING_SEQUENCEPARALLEL_H
