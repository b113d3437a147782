//===- ModelStateMemory.h - the ZeRO memory model of model state *- C++ -*-===//
//
// Per-device bytes of parameters, gradients and optimizer state under a
// precision recipe and ZeRO sharding (Rajbhandari et al. 2020), as
// `partita explain` reports them.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_SHARDING_MODELSTATEMEMORY_H
#define PARTITA_PASSES_SHARDING_MODELSTATEMEMORY_H

#include "passes/sharding/Strategies.h"

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>

namespace partita::sharding {

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

/// A parameter as `dist-annotate`'s ZeRO recipes lay it out: `globalShape`,
/// split `otherShards[d]` ways on dimension d by axes other than the data
/// axis (Megatron's tensor axis; 1 where whole). `elements` is then the
/// tensor-parallel share, ceil(size / shards) per dimension (the padded
/// local shape), and the data axis divides it only where the tensor has a
/// ZeRO dimension (chooseZeroDim: a free dimension the data axis divides);
/// a tensor without one stays whole over the data axis in every stage.
ModelStateTensor zeroShards(llvm::ArrayRef<int64_t> globalShape,
                            llvm::ArrayRef<int64_t> otherShards,
                            ZeroStage stage, int64_t dataSize);

} // namespace partita::sharding

#endif // PARTITA_PASSES_SHARDING_MODELSTATEMEMORY_H
