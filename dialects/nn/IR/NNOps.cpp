//===- NNOps.cpp - nn operations ------------------------------------------===//
//
// Verifiers and folders of the nn operations.
//
//===----------------------------------------------------------------------===//

#include "dialects/nn/IR/NNOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace partita::nn;

#define GET_OP_CLASSES
#include "dialects/nn/IR/NNOps.cpp.inc"

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

// TODO(nn): real verifiers.
#define PARTITA_VERIFY_STUB(Op)                                                \
  LogicalResult Op::verify() { return success(); }
PARTITA_VERIFY_STUB(EinsumOp)
PARTITA_VERIFY_STUB(AddOp)
PARTITA_VERIFY_STUB(SubOp)
PARTITA_VERIFY_STUB(MulOp)
PARTITA_VERIFY_STUB(DivOp)
PARTITA_VERIFY_STUB(MaxOp)
PARTITA_VERIFY_STUB(NegOp)
PARTITA_VERIFY_STUB(ExpOp)
PARTITA_VERIFY_STUB(LogOp)
PARTITA_VERIFY_STUB(TanhOp)
PARTITA_VERIFY_STUB(ReluOp)
PARTITA_VERIFY_STUB(SiluOp)
PARTITA_VERIFY_STUB(RsqrtOp)
PARTITA_VERIFY_STUB(SqrtOp)
PARTITA_VERIFY_STUB(GeluOp)
PARTITA_VERIFY_STUB(BroadcastOp)
PARTITA_VERIFY_STUB(ReduceOp)
PARTITA_VERIFY_STUB(TransposeOp)
PARTITA_VERIFY_STUB(ReshapeOp)
PARTITA_VERIFY_STUB(SoftmaxOp)
PARTITA_VERIFY_STUB(LayerNormOp)
PARTITA_VERIFY_STUB(RMSNormOp)
PARTITA_VERIFY_STUB(RotaryOp)
PARTITA_VERIFY_STUB(AttentionOp)
PARTITA_VERIFY_STUB(EmbeddingOp)
PARTITA_VERIFY_STUB(CrossEntropyOp)
PARTITA_VERIFY_STUB(ConstantOp)
