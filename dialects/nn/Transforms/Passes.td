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

def NNKeepAttentionStats : Pass<"nn-keep-attention-stats"> {
  let summary = "Gives each attention gradient the forward's output and lse.";
  let description = [{
    `nn.attention_grad` needs each query row's softmax statistics: the
    log-sum-exp of its scores, and rowsum(dy * O) with O the forward's
    output. Without them a kernel recomputes them with a pass over the
    keys (a flash-style kernel: a whole forward, Q K^T and P V, before the
    gradients). The forward computed both already: O is its result, which
    the output projection's gradient keeps alive anyway, and the
    log-sum-exp is its running max and sum, [batch, heads, seq_q] numbers.

    In each block, for every `nn.attention_grad` without `saved`, this pass
    looks for an `nn.attention` before it with the same query, key, value,
    `causal` and `scale`; it gives that op its `lse` result (replacing it
    by an op with both results, its attributes kept) and the gradient
    `saved(%result, %lse)`. Gradients without such a forward (in another
    block, or reading other values) keep recomputing, and so do 16-bit
    attentions: an lse in 16 bits loses too much.

    Run it on per-device programs, after `nn-fuse-attention-grad`: an op
    with `lse` keeps its key sequence (and a causal query sequence) whole
    under partitioning.
  }];
  let dependentDialects = ["::partita::nn::NNDialect"];
}

def NNAbsorbTransposes : Pass<"nn-absorb-transposes"> {
  let summary = "Folds nn.transpose into the nn.einsum that reads or writes it.";
  let description = [{
    An einsum reads and writes any dimension order: its spec names each
    dimension. Frontends write a linear layer as a transpose of the weight
    and a matmul (PyTorch's `x @ W.t()`, `jnp.dot(x, w.T)`), so the step
    copies the weight every time, keeps the copy for the backward, and
    differentiates into a gradient in the transposed order that a second
    transpose turns back. For a weight tied to an embedding the two halves
    of its gradient then meet only after each was reduced on its own
    (the head's through its transpose), which moves the table twice per
    step under data parallelism.

    This pass makes every einsum operand that is an `nn.transpose` read the
    transpose's input, its letters moved by the permutation
    (`"ij,jk->ik"` of `x` and `transpose(w, [1, 0])` becomes `"ij,kj->ik"`
    of `x` and `w`), and every `nn.transpose` whose input is an einsum that
    nothing else reads into that einsum with its result letters permuted.
    Transposes left without a use are erased. The einsums keep their
    attributes and locations.
  }];
  let dependentDialects = ["::partita::nn::NNDialect"];
}

#endif // PARTITA_DIALECTS_NN_TRANSFORMS_PASSES
