//===- NNKernels.cpp - the runtime kernel of each nn op -------------------===//
//
// Every nn op names its runtime kernel through dist::KernelOpInterface: its
// mnemonic (nn.reduce's kinds are separate kernels: reduce_sum, reduce_max,
// reduce_mean; a splat nn.constant is `fill`) and its attributes under the
// names of the plan's KernelAttrs fields (runtime/plan/plan.proto), so the
// plan lowering writes them without knowing any nn op. What the runtime's
// kernel cannot take (a conversion it has no code for, a mean over no
// tokens) is diagnosed here, at the op.
//
//===----------------------------------------------------------------------===//

#include "dialects/nn/IR/NNKernels.h"

#include "dialects/dist/IR/KernelInterface.h"
#include "dialects/nn/IR/NNAttributes.h"
#include "dialects/nn/IR/NNOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;
using partita::dist::KernelDescription;
using Kernel = FailureOr<KernelDescription>;

namespace partita::nn {
namespace {

/// The op's mnemonic ("add" for nn.add): the kernel of every op whose
/// kernel takes no attributes.
KernelDescription byName(Operation *op) {
  return KernelDescription(op->getName().stripDialect());
}

/// A mean over no tokens (`nn.mean_count` below 1) has no kernel.
LogicalResult checkMeanCount(Operation *op) {
  std::optional<int64_t> count = getMeanCount(op);
  if (count && *count < 1)
    return op->emitError() << "has nn.mean_count " << *count
                           << "; a token count is at least 1";
  return success();
}

/// `nn.mean_count`, the global token count a cross-entropy mean divides by
/// when the local count is a shard's, as the kernel's mean_count.
Kernel withMeanCount(Operation *op, KernelDescription kernel) {
  if (std::optional<int64_t> count = getMeanCount(op))
    kernel.setInt("mean_count", *count);
  return kernel;
}

void setScale(KernelDescription &kernel, FloatAttr scale) {
  if (!scale)
    return;
  kernel.setBool("has_scale", true);
  kernel.setFloat("scale", scale.getValueAsDouble());
}

Kernel describe(Operation *op) { return byName(op); }
Kernel describe(CrossEntropyOp op) { return withMeanCount(op, byName(op)); }
Kernel describe(CrossEntropyGradOp op) {
  return withMeanCount(op, byName(op));
}

Kernel describe(EinsumOp op) {
  return byName(op).setString("spec", op.getSpec());
}
Kernel describe(GeluOp op) { return byName(op).setBool("tanh", op.getTanh()); }
Kernel describe(GeluGradOp op) {
  return byName(op).setBool("tanh", op.getTanh());
}
Kernel describe(BroadcastOp op) {
  return byName(op).setInts("dims", op.getDims());
}
Kernel describe(ReduceOp op) {
  KernelDescription kernel(
      ("reduce_" + stringifyReduceKind(op.getKind())).str());
  kernel.setInts("dims", op.getDims());
  return kernel;
}
Kernel describe(TransposeOp op) {
  return byName(op).setInts("dims", op.getPerm());
}
Kernel describe(SoftmaxOp op) {
  return byName(op).setInt("dim", int64_t(op.getDim()));
}
template <typename NormOp> Kernel describeNorm(NormOp op) {
  return byName(op).setFloat("epsilon",
                             op.getEpsilonAttr().getValueAsDouble());
}
Kernel describe(LayerNormOp op) { return describeNorm(op); }
Kernel describe(RMSNormOp op) { return describeNorm(op); }
Kernel describe(LayerNormGradOp op) { return describeNorm(op); }
Kernel describe(RMSNormGradOp op) { return describeNorm(op); }
Kernel describe(LayerNormGammaGradOp op) { return describeNorm(op); }
Kernel describe(RotaryOp op) {
  return byName(op).setFloat("theta", op.getThetaAttr().getValueAsDouble());
}
Kernel describe(RotaryGradOp op) {
  return byName(op).setFloat("theta", op.getThetaAttr().getValueAsDouble());
}
Kernel describe(AttentionOp op) {
  KernelDescription kernel = byName(op);
  kernel.setBool("causal", op.getCausal());
  setScale(kernel, op.getScaleAttr());
  return kernel;
}
Kernel describe(AttentionGradOp op) {
  KernelDescription kernel = byName(op);
  // The plan's form: the members' letters in result order ("q", "kv", ...).
  std::string wrt;
  for (AttentionGradWrt member : op.getWrtMembers())
    wrt += stringifyAttentionGradWrt(member);
  kernel.setString("wrt", wrt);
  kernel.setBool("causal", op.getCausal());
  setScale(kernel, op.getScaleAttr());
  return kernel;
}
Kernel describe(SGDOp op) {
  return byName(op)
      .setFloat("lr", op.getLrAttr().getValueAsDouble())
      .setFloat("momentum", op.getMomentumAttr().getValueAsDouble())
      .setFloat("weight_decay", op.getWeightDecayAttr().getValueAsDouble());
}
Kernel describe(AdamWOp op) {
  return byName(op)
      .setFloat("lr", op.getLrAttr().getValueAsDouble())
      .setFloat("beta1", op.getBeta1Attr().getValueAsDouble())
      .setFloat("beta2", op.getBeta2Attr().getValueAsDouble())
      .setFloat("eps", op.getEpsilonAttr().getValueAsDouble())
      .setFloat("weight_decay", op.getWeightDecayAttr().getValueAsDouble());
}

/// A splat constant is a `fill` kernel. (The plan lowering stores a
/// non-splat dense constant as a CONSTANT buffer and never asks for its
/// kernel.)
Kernel describe(ConstantOp op) {
  auto dense = dyn_cast<DenseElementsAttr>(op.getValue());
  if (!dense)
    return op->emitError() << "has a value that is not dense elements; the "
                              "plan lowering takes dense constants only";
  if (!dense.isSplat())
    return op->emitError() << "is a non-splat constant, which has no kernel "
                              "(the plan holds its value as data)";
  double value =
      isa<FloatType>(dense.getElementType())
          ? dense.getSplatValue<APFloat>().convertToDouble()
          : double(dense.getSplatValue<APInt>().getSExtValue());
  return KernelDescription("fill").setFloat("fill_value", value);
}

/// The pairs the runtime's convert kernel has (f64 narrows to f16 or bf16
/// only through f32, which rounds twice; see the runtime's Backend.h).
Kernel describe(ConvertOp op) {
  Type from = op.getInput().getType().getElementType();
  Type to = op.getResult().getType().getElementType();
  bool fromF32 = from.isF32(), toF32 = to.isF32();
  bool ok = from == to ||
            (fromF32 && (to.isF64() || to.isF16() || to.isBF16())) ||
            (toF32 && (from.isF64() || from.isF16() || from.isBF16())) ||
            (to.isF64() && (from.isF16() || from.isBF16()));
  if (!ok)
    return op->emitError()
           << "converts " << from << " to " << to
           << ", which the runtime cannot (it converts f32 <-> f64, f32 "
              "<-> f16, f32 <-> bf16, and f16 or bf16 to f64)";
  return byName(op);
}

using IndexOperands = SmallVector<dist::IndexOperand>;

IndexOperands indexOperands(Operation *) { return {}; }

IndexOperands indexOperands(EmbeddingOp op) {
  return {{op.getIdsMutable().getOperandNumber(),
           op.getTableMutable().getOperandNumber(), 0}};
}

IndexOperands indexOperands(CrossEntropyOp op) {
  return {{op.getLabelsMutable().getOperandNumber(),
           op.getLogitsMutable().getOperandNumber(), -1}};
}

template <typename OpT>
struct NNKernelModel
    : public dist::KernelOpInterface::ExternalModel<NNKernelModel<OpT>, OpT> {
  Kernel getKernel(Operation *op) const {
    if (failed(checkMeanCount(op)))
      return failure();
    // The most specific describe() overload; ops without one take the
    // Operation * overload (the mnemonic, no attributes).
    return describe(cast<OpT>(op));
  }
  IndexOperands getIndexOperands(Operation *op) const {
    return indexOperands(cast<OpT>(op));
  }
};

template <typename... OpTs> void attach(MLIRContext &context) {
  (OpTs::template attachInterface<NNKernelModel<OpTs>>(context), ...);
}

} // namespace

void attachNNKernelModels(MLIRContext &context) {
  attach<EinsumOp, AddOp, SubOp, MulOp, DivOp, MaxOp, NegOp, ExpOp, LogOp,
         TanhOp, ReluOp, SiluOp, RsqrtOp, SqrtOp, GeluOp, BroadcastOp, ReduceOp,
         TransposeOp, ReshapeOp, SoftmaxOp, LayerNormOp, RMSNormOp, RotaryOp,
         AttentionOp, EmbeddingOp, CrossEntropyOp, ConstantOp, ReluGradOp,
         SiluGradOp, GeluGradOp, GreaterEqualOp, LayerNormGradOp, RMSNormGradOp,
         LayerNormGammaGradOp, RotaryGradOp, AttentionGradOp, EmbeddingGradOp,
         CrossEntropyGradOp, ConvertOp, SGDOp, AdamWOp>(context);
}

} // namespace partita::nn
