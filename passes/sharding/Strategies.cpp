//===- Strategies.cpp - classic parallelism recipes as data ---------------===//
//
// The recipes are tables, not code: a recipe is a list of parameter-name
// patterns, each with the axis role of every dimension. Adding a model family
// or a recipe means adding rows; docs/strategies.md must list the same rows.
//
// Known limits: a Megatron split needs the split dimension to be divisible by
// the tensor axis (grouped-query attention with fewer kv heads than the
// tensor axis is an error, not a replication of kv heads); sub-axes are never
// written.
//
//===----------------------------------------------------------------------===//

#include "passes/sharding/Strategies.h"

#include "mlir/Support/LLVM.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir;
using namespace partita;
using namespace partita::sharding;

namespace {
constexpr AxisRole R = AxisRole::Replicated;
constexpr AxisRole T = AxisRole::Tensor;

// Dimension layouts, named after the weight shapes of the model convention.
constexpr AxisRole kVec[] = {R};            // [H] norms, row-parallel biases
constexpr AxisRole kVecSplit[] = {T};       // [F] column-parallel bias
constexpr AxisRole kMat[] = {R, R};         // replicated matrix
constexpr AxisRole kSplitRows[] = {T, R};   // [V,H] vocab, [F,H] row parallel
constexpr AxisRole kSplitCols[] = {R, T};   // [H,F] column parallel
constexpr AxisRole kHeadsIn[] = {R, T, R};  // [H,n,d] q/k/v projections
constexpr AxisRole kHeadsOut[] = {T, R, R}; // [n,d,H] output projection
} // namespace

/// Megatron-LM (Shoeybi et al. 2019): in each block, the first matmul is
/// split on its output columns and the second on its input rows, so the
/// block needs one all-reduce forward; attention is split by heads; the
/// embedding and LM head are split by vocabulary. Rows are for the GPT,
/// Llama and MLP models of `partita model` (names in docs/strategies.md).
static const ParamRecipe kMegatronParams[] = {
    // Embeddings and head (GPT, Llama).
    {"wte", "V,H", kSplitRows},
    {"lm_head", "V,H", kSplitRows},
    {"wpe", "S,H", kMat},
    // Attention (GPT; Llama's wk/wv are [H,k,d] with k kv heads).
    {"layers.{i}.attn.wq", "H,heads,d", kHeadsIn},
    {"layers.{i}.attn.wk", "H,heads,d", kHeadsIn},
    {"layers.{i}.attn.wv", "H,heads,d", kHeadsIn},
    {"layers.{i}.attn.bq", "heads,d", kSplitRows},
    {"layers.{i}.attn.bk", "heads,d", kSplitRows},
    {"layers.{i}.attn.bv", "heads,d", kSplitRows},
    {"layers.{i}.attn.wo", "heads,d,H", kHeadsOut},
    {"layers.{i}.attn.bo", "H", kVec},
    // MLP block (GPT; Llama's w1 is the gate, w3 the up projection).
    {"layers.{i}.mlp.w1", "H,F", kSplitCols},
    {"layers.{i}.mlp.w3", "H,F", kSplitCols},
    {"layers.{i}.mlp.b1", "F", kVecSplit},
    {"layers.{i}.mlp.w2", "F,H", kSplitRows},
    {"layers.{i}.mlp.b2", "H", kVec},
    // Norms (GPT layer norms, Llama RMS norms).
    {"layers.{i}.ln1.gamma", "H", kVec},
    {"layers.{i}.ln1.beta", "H", kVec},
    {"layers.{i}.ln2.gamma", "H", kVec},
    {"layers.{i}.ln2.beta", "H", kVec},
    {"ln_f.gamma", "H", kVec},
    {"ln_f.beta", "H", kVec},
    {"layers.{i}.attn_norm.gamma", "H", kVec},
    {"layers.{i}.mlp_norm.gamma", "H", kVec},
    {"norm_f.gamma", "H", kVec},
    // MLP model: residual blocks, then a classifier head. The head stays
    // replicated: its V is a class count, usually too small to split.
    {"layers.{i}.w1", "H,F", kSplitCols},
    {"layers.{i}.b1", "F", kVecSplit},
    {"layers.{i}.w2", "F,H", kSplitRows},
    {"layers.{i}.b2", "H", kVec},
    {"head.w", "H,V", kMat},
    {"head.b", "V", kVec},
};

static const Strategy kStrategies[] = {
    {"dp", /*splitsBatch=*/true, /*replicatesAllParams=*/true, {}},
    {"zero1", true, true, {}, ZeroStage::OptimizerState},
    {"zero2", true, true, {}, ZeroStage::Gradients},
    {"zero3", true, true, {}, ZeroStage::Parameters},
    // PyTorch FSDP's FULL_SHARD (Zhao et al. 2023) is ZeRO-3's layout.
    {"fsdp", true, true, {}, ZeroStage::Parameters},
    {"megatron", /*splitsBatch=*/false, /*replicatesAllParams=*/false,
     kMegatronParams},
    {"dp+megatron", /*splitsBatch=*/true, /*replicatesAllParams=*/false,
     kMegatronParams},
    {"zero1+megatron", true, false, kMegatronParams,
     ZeroStage::OptimizerState},
    {"zero2+megatron", true, false, kMegatronParams, ZeroStage::Gradients},
    {"zero3+megatron", true, false, kMegatronParams, ZeroStage::Parameters},
    {"fsdp+megatron", true, false, kMegatronParams, ZeroStage::Parameters},
    // Context parallelism (Megatron-LM's context parallel, Korthikanti et
    // al.; ring attention, Liu et al. 2023): the sequence of every input is
    // split, parameters are replicated, attention gathers keys and values.
    {"cp", /*splitsBatch=*/false, /*replicatesAllParams=*/true, {},
     ZeroStage::None, /*splitsSequence=*/true},
    {"dp+cp", true, true, {}, ZeroStage::None, true},
};

ArrayRef<Strategy> sharding::getStrategies() { return kStrategies; }

const Strategy *sharding::lookupStrategy(StringRef name) {
  for (const Strategy &strategy : kStrategies)
    if (strategy.name == name)
      return &strategy;
  return nullptr;
}

bool sharding::matchesParamPattern(StringRef pattern, StringRef name) {
  constexpr StringLiteral kIndex = "{i}";
  while (!pattern.empty()) {
    if (pattern.consume_front(kIndex)) {
      size_t digits = 0;
      while (digits < name.size() && llvm::isDigit(name[digits]))
        ++digits;
      if (digits == 0)
        return false;
      name = name.drop_front(digits);
      continue;
    }
    if (name.empty() || name.front() != pattern.front())
      return false;
    pattern = pattern.drop_front();
    name = name.drop_front();
  }
  return name.empty();
}

const ParamRecipe *sharding::lookupParamRecipe(const Strategy &strategy,
                                               StringRef name) {
  for (const ParamRecipe &recipe : strategy.params)
    if (matchesParamPattern(recipe.pattern, name))
      return &recipe;
  return nullptr;
}
