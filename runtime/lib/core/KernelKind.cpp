//===- KernelKind.cpp - kernel kinds by name ------------------------------===//
//
// The names of the kernel kinds, as plans spell them. They belong to no
// backend: a plan names its kernels without knowing which backend runs them.
//
//===----------------------------------------------------------------------===//

#include "PlanInternal.h"
#include "partita/runtime/Backend.h"

namespace partita::runtime {

namespace {
struct KindName {
  KernelKind kind;
  const char *name;
};
// The nn dialect's mnemonics; nn.reduce's kinds are separate kernels.
constexpr KindName kKindNames[] = {
    {KernelKind::Einsum, "einsum"},
    {KernelKind::Add, "add"},
    {KernelKind::Sub, "sub"},
    {KernelKind::Mul, "mul"},
    {KernelKind::Div, "div"},
    {KernelKind::Max, "max"},
    {KernelKind::Neg, "neg"},
    {KernelKind::Exp, "exp"},
    {KernelKind::Log, "log"},
    {KernelKind::Tanh, "tanh"},
    {KernelKind::Relu, "relu"},
    {KernelKind::Silu, "silu"},
    {KernelKind::Rsqrt, "rsqrt"},
    {KernelKind::Sqrt, "sqrt"},
    {KernelKind::Gelu, "gelu"},
    {KernelKind::Broadcast, "broadcast"},
    {KernelKind::ReduceSum, "reduce_sum"},
    {KernelKind::ReduceMax, "reduce_max"},
    {KernelKind::ReduceMean, "reduce_mean"},
    {KernelKind::Transpose, "transpose"},
    {KernelKind::Reshape, "reshape"},
    {KernelKind::Softmax, "softmax"},
    {KernelKind::LayerNorm, "layer_norm"},
    {KernelKind::RMSNorm, "rms_norm"},
    {KernelKind::Rotary, "rotary"},
    {KernelKind::Attention, "attention"},
    {KernelKind::Embedding, "embedding"},
    {KernelKind::CrossEntropy, "cross_entropy"},
    {KernelKind::Fill, "fill"},
    {KernelKind::ReluGrad, "relu_grad"},
    {KernelKind::SiluGrad, "silu_grad"},
    {KernelKind::GeluGrad, "gelu_grad"},
    {KernelKind::GreaterEqual, "greater_equal"},
    {KernelKind::LayerNormGrad, "layer_norm_grad"},
    {KernelKind::RMSNormGrad, "rms_norm_grad"},
    {KernelKind::RotaryGrad, "rotary_grad"},
    {KernelKind::AttentionGrad, "attention_grad"},
    {KernelKind::EmbeddingGrad, "embedding_grad"},
    {KernelKind::CrossEntropyGrad, "cross_entropy_grad"},
    {KernelKind::Convert, "convert"},
    {KernelKind::SGD, "sgd"},
    {KernelKind::AdamW, "adamw"},
    {KernelKind::Custom, "custom"},
    {KernelKind::LayerNormGammaGrad, "layer_norm_gamma_grad"},
};
// plan::Kernel::Kind numbers the kinds in KernelKind's order from 1 (0 is
// unspecified); KernelKindTest checks every name against the enum's.
static_assert(plan::Kernel::EINSUM == int(KernelKind::Einsum) + 1);
static_assert(plan::Kernel::ADAMW == int(KernelKind::AdamW) + 1);
static_assert(plan::Kernel::CUSTOM == int(KernelKind::Custom) + 1);
static_assert(plan::Kernel::LAYER_NORM_GAMMA_GRAD ==
              int(KernelKind::LayerNormGammaGrad) + 1);
static_assert(plan::Kernel::Kind_MAX == plan::Kernel::LAYER_NORM_GAMMA_GRAD);
} // namespace

std::optional<KernelKind> kernelKindFromPlan(int kind) {
  if (kind < plan::Kernel::EINSUM || kind > plan::Kernel::Kind_MAX)
    return std::nullopt;
  return static_cast<KernelKind>(kind - 1);
}

const char *kernelKindName(int kind) {
  std::optional<KernelKind> k = kernelKindFromPlan(kind);
  return k ? toString(*k) : "?";
}

const char *toString(KernelKind kind) {
  for (const KindName &entry : kKindNames)
    if (entry.kind == kind)
      return entry.name;
  return "unknown kernel";
}

std::optional<KernelKind> kernelKindFromString(const std::string &name) {
  for (const KindName &entry : kKindNames)
    if (name == entry.name)
      return entry.kind;
  return std::nullopt;
}

} // namespace partita::runtime
