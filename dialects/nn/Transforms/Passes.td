//===- Passes.td - nn dialect transforms ------------------*- tablegen -*-===//
//
// Rewrites of nn ops that no generic pass could know: they use what one op
// computes for another.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_NN_TRANSFORMS_PASSES
#define PARTITA_DIALECTS_NN_TRANSFORMS_PASSES

include "mlir/Pass/PassBase.td"

def NNFuseAttentionGrad : Pass<"nn-fuse-attention-grad"> {
  let summary = "Merges the attention gradients that read the same operands.";
  let description = [{
    `nn-autodiff` differentiates `nn.attention` into one `nn.attention_grad`
    per operand (`wrt = q`, `k`, `v`), so that the partitioner can give
    each gradient its own rule: with the query sequence split, dq stays
    split while dk and dv become partial sums. Each of the three recomputes
    the probabilities P = softmax(scale Q K^T), and dq and dk each
    recompute dP and dS: five products of the scores' size where two would
    do.

    After partitioning this pass merges, in each block, the
    `nn.attention_grad` ops that read the same query, key, value and dy
    with the same attributes (but `wrt`) into one op whose `wrt` is the
    union (`q|k|v`) and whose results are theirs, in the order q, k, v. The
    merged op sits where the first of them was (every operand is defined
    there, and every use of a later one comes after it), so their results
    are computed earlier, never later.

    Run it on per-device programs: before partitioning, a merged op holding
    dq beside dk or dv keeps its query sequence and group factors whole
    (one rule cannot leave one result split and another partial), which
    would stop context parallelism from splitting the sequence.
  }];
  let dependentDialects = ["::partita::nn::NNDialect"];
}

#endif // PARTITA_DIALECTS_NN_TRANSFORMS_PASSES
