//===- NNShardingRules.cpp - sharding rules of the nn ops -----------------===//
//
// Each nn op's ShardingRuleOpInterface implementation.
//
//===----------------------------------------------------------------------===//

#include "dialects/nn/IR/NNOps.h"

using namespace mlir;
using namespace partita;
using namespace partita::nn;

// TODO(rules): real rules.
#define PARTITA_RULE_STUB(Op)                                                  \
  FailureOr<dist::ShardingRule> Op::getShardingRule() { return failure(); }
PARTITA_RULE_STUB(EinsumOp)
PARTITA_RULE_STUB(AddOp)
PARTITA_RULE_STUB(SubOp)
PARTITA_RULE_STUB(MulOp)
PARTITA_RULE_STUB(DivOp)
PARTITA_RULE_STUB(MaxOp)
PARTITA_RULE_STUB(NegOp)
PARTITA_RULE_STUB(ExpOp)
PARTITA_RULE_STUB(LogOp)
PARTITA_RULE_STUB(TanhOp)
PARTITA_RULE_STUB(ReluOp)
PARTITA_RULE_STUB(SiluOp)
PARTITA_RULE_STUB(RsqrtOp)
PARTITA_RULE_STUB(SqrtOp)
PARTITA_RULE_STUB(GeluOp)
PARTITA_RULE_STUB(BroadcastOp)
PARTITA_RULE_STUB(ReduceOp)
PARTITA_RULE_STUB(TransposeOp)
PARTITA_RULE_STUB(ReshapeOp)
PARTITA_RULE_STUB(SoftmaxOp)
PARTITA_RULE_STUB(LayerNormOp)
PARTITA_RULE_STUB(RMSNormOp)
PARTITA_RULE_STUB(RotaryOp)
PARTITA_RULE_STUB(AttentionOp)
PARTITA_RULE_STUB(EmbeddingOp)
PARTITA_RULE_STUB(CrossEntropyOp)
PARTITA_RULE_STUB(ConstantOp)
