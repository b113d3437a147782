//===- ModelStateMemory.cpp - the ZeRO memory model of model state --------===//

#include "passes/sharding/ModelStateMemory.h"

#include "passes/sharding/RecipeAnnotation.h"

#include "mlir/Support/LLVM.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <algorithm>

using namespace mlir;
using namespace partita;
using namespace partita::sharding;

static int64_t shardBytes(int64_t elements, int64_t shards,
                          int64_t bytesPerElement) {
  shards = std::max<int64_t>(shards, 1);
  return (elements + shards - 1) / shards * bytesPerElement;
}

ModelStateBytes
sharding::computeModelStateBytes(ArrayRef<ModelStateTensor> tensors,
                                 const PrecisionRecipe &recipe) {
  ModelStateBytes bytes;
  for (const ModelStateTensor &t : tensors) {
    bytes.params += shardBytes(t.elements, t.paramShards, recipe.paramBytes);
    bytes.grads += shardBytes(t.elements, t.gradShards, recipe.gradBytes);
    bytes.optimizerState +=
        shardBytes(t.elements, t.stateShards, recipe.optimizerBytes);
  }
  return bytes;
}

ModelStateTensor sharding::zeroShards(int64_t elements, ZeroStage stage,
                                      int64_t dataSize) {
  ModelStateTensor t;
  t.elements = elements;
  if (stage >= ZeroStage::OptimizerState)
    t.stateShards = dataSize;
  if (stage >= ZeroStage::Gradients)
    t.gradShards = dataSize;
  if (stage >= ZeroStage::Parameters)
    t.paramShards = dataSize;
  return t;
}

ModelStateTensor sharding::zeroShards(ArrayRef<int64_t> globalShape,
                                      ArrayRef<int64_t> otherShards,
                                      ZeroStage stage, int64_t dataSize) {
  int64_t elements = 1;
  SmallVector<bool> taken;
  for (auto [d, size] : llvm::enumerate(globalShape)) {
    int64_t shards = d < otherShards.size() ? otherShards[d] : 1;
    shards = std::max<int64_t>(shards, 1);
    elements *= (size + shards - 1) / shards;
    taken.push_back(shards > 1);
  }
  bool divisible =
      dataSize > 1 && chooseZeroDim(globalShape, taken, dataSize).has_value();
  return zeroShards(elements, stage, divisible ? dataSize : 1);
}
