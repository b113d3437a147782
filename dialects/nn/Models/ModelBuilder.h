//===- ModelBuilder.h - write MLP, GPT and Llama models as nn IR -*- C++ -*-===//
//
// Builds the forward function of a reference model in the nn dialect, with
// the parameter and input naming conventions that sharding presets match on
// (`nn.param = "layers.3.attn.wq"`, `nn.input = "ids"`), and every op of
// repeated block i declared part of layer i (`nn.layer = i`, how passes find
// layers). `partita model` is a thin command-line front end for this
// library.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_NN_MODELS_MODELBUILDER_H
#define PARTITA_DIALECTS_NN_MODELS_MODELBUILDER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Support/LLVM.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>

namespace partita::models {

enum class ModelKind { MLP, GPT, Llama };

/// Element type of parameters, activations and the loss (nn.cross_entropy
/// returns the logits' element type).
enum class DType { F32, BF16, F16 };

std::optional<ModelKind> parseModelKind(llvm::StringRef name);
llvm::StringRef stringifyModelKind(ModelKind kind);
std::optional<DType> parseDType(llvm::StringRef name);

/// The shape of a model. Fields that do not apply to a kind are ignored
/// (an MLP has no heads or sequence); `verifyModelConfig` rejects only
/// settings that contradict each other.
struct ModelConfig {
  ModelKind kind = ModelKind::GPT;
  int64_t layers = 2;
  int64_t hidden = 64;
  int64_t heads = 4;
  /// Key/value heads (grouped-query attention, Llama only); default `heads`.
  std::optional<int64_t> kvHeads;
  int64_t seq = 16;
  /// Vocabulary size; the number of classes for an MLP.
  int64_t vocab = 256;
  int64_t batch = 2;
  /// Feed-forward width; default 4 * hidden.
  std::optional<int64_t> ffn;
  DType dtype = DType::F32;
  /// GPT only: the logits reuse `wte` instead of a separate `lm_head`.
  bool tied = false;

  int64_t getKvHeads() const { return kvHeads.value_or(heads); }
  int64_t getFfn() const { return ffn.value_or(4 * hidden); }
  int64_t getHeadDim() const { return hidden / heads; }
};

/// Largest size accepted for any one dimension.
constexpr int64_t kMaxDimSize = (int64_t{1} << 31) - 1;

/// Most layers accepted. Each layer adds its ops to the IR (a 1,000-layer
/// gpt takes `partita plan` about 2 GB), so depth, unlike a dimension (a
/// number in a type), costs memory; the deepest published models have a
/// few hundred layers.
constexpr int64_t kMaxLayers = 1024;

/// Checks that `config` describes a well-formed model: every size at least 1
/// and at most kMaxDimSize (layers at most kMaxLayers), heads dividing
/// hidden, kv-heads dividing heads,
/// an even head dimension for Llama (rotary pairs), no tensor with more than
/// 2^63 - 1 elements. Messages name the `partita model` option at fault.
llvm::Error verifyModelConfig(const ModelConfig &config);

/// Builds `module { func.func @forward(params..., inputs...) -> (loss,
/// logits) }`. Every argument has a NameLoc with its name and every op a
/// NameLoc saying where in the model it is (e.g. "layers.3.attn.q").
/// Returns failure, with diagnostics emitted on `context`, when the config
/// fails verifyModelConfig or the built module does not verify.
mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
buildModel(mlir::MLIRContext &context, const ModelConfig &config);

} // namespace partita::models

#endif // PARTITA_DIALECTS_NN_MODELS_MODELBUILDER_H
