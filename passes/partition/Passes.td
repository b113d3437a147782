//===- Passes.td - partitioning passes --------------------*- tablegen -*-===//
//
// Passes that turn global-shape IR with shardings into per-device programs.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_PARTITION_PASSES
#define PARTITA_PASSES_PARTITION_PASSES

include "mlir/Pass/PassBase.td"

def DistPartition : Pass<"dist-partition", "::mlir::ModuleOp"> {
  let summary = "Turns a sharded global-shape program into the program each device runs.";
  let description = [{
    SPMD partitioning in the manner of GSPMD: every function whose values
    carry `dist.sharding` annotations becomes the program one device runs,
    on local shapes, with explicit `dist` ops for all communication.

    Preconditions (each violation is a diagnostic at the value or op, and the
    function is left unchanged): the function body is one block without
    nested regions; every argument and op result is a statically shaped
    tensor with a `dist.sharding` (run `dist-propagate` first); all shardings
    name one `dist.mesh`; no sub-axes; every op other than `func.return` and
    `dist.constraint` implements `ShardingRuleOpInterface`. Functions with no
    sharding anywhere are left unchanged.

    Per op, one generic path driven by the op's factor rule: the results'
    shardings are projected onto the factors (a dimension's axes go to its
    factors major to minor; a factor is split only when every factor before
    it in the dimension is split completely); a reduction factor is split
    where its operand is split and the propagated result is partial over
    those axes. Operands are resharded to what the factors need by the
    resharding planner (cheapest sequence of `dist.slice`, `all_gather`,
    `all_to_all`, `reduce_scatter`, `all_reduce`, `collective_permute`,
    each collective priced as the bytes a device sends plus 1 MiB for the
    call, so a plan of more collectives must save that much traffic per
    extra one),
    the op builds its local form (its `dist::PartitionOpInterface` hook;
    without one it is cloned on local types), and its results are partial
    over the axes of its split reduction factors and of its split collective
    factors that no result carries. The pass names no op of any dialect:
    the `nn` forms below are the `nn` ops' hooks
    (`dialects/nn/IR/NNPartition.cpp`). Partial values stay partial until a
    consumer needs them whole; then they become an `all_reduce`, or a
    `reduce_scatter` when the consumer wants them split. One value resharded
    to one target is emitted once.

    Global meanings: a mean over split dimensions (`nn.reduce` mean,
    `nn.cross_entropy`) is multiplied by `1/k` (`k` shards of the reduced
    dimensions) so that the partial values sum to the global mean; a
    non-splat `nn.constant` is computed whole; `nn.rotary` with a split
    sequence and causal `nn.attention` with a split query sequence read
    global positions (see below). Whole factors are never split: an
    operand split on one is gathered first.

    Collective-aware forms: `nn.softmax` over a split dimension becomes local
    max and sum reductions with an `all_reduce` (max, then sum) of each;
    `nn.layer_norm` and `nn.rms_norm` over a split hidden dimension become
    local sums with `all_reduce`s of the mean and the variance (layer norm:
    two, rms norm: one), with `gamma` and `beta` split alike;
    `nn.embedding` with its table split on the vocabulary (Megatron-LM's
    vocabulary-parallel embedding) looks up its own rows at the ids shifted
    by the shard's first row (`dist.axis_index`), clamped, with the rows of
    ids outside the shard masked to zero (integer `nn.max`/`nn.sub`, and a
    lookup in `[[0], [1]]` for the float mask), leaving the result partial
    (sum) over those axes. With `vocab-parallel-cross-entropy`,
    `nn.cross_entropy` with its logits split on the vocabulary computes the
    log-sum-exp with `all_reduce`s (max, then sum) and picks the label's
    logit by a lookup in the logits flattened to `[tokens * rows, 1]`
    (masked like the embedding), leaving the loss partial over those axes;
    off by default, since the plan lowering bounds generated labels by the
    largest embedding table, which that lookup enlarges. Otherwise the split
    operand is gathered first, which is exact but moves more bytes.
    With `split-key-attention`, `nn.attention` whose keys are split (on
    axes its queries are not split on) computes each shard's softmax
    numerators against the global row max and sum (`all_reduce` max and
    sum) and leaves the output partial over the key axes, the exact merge
    of Flash / Ring Attention; off by default, the keys are gathered.
    `nn.rotary` / `nn.rotary_grad` with a split sequence, and causal
    `nn.attention` with a split query or key sequence and causal
    `nn.attention_grad` with a split query sequence, compute global
    positions (sliced global rotary tables; masks from `dist.axis_index`).

    Output contract (what the runtime reads): the function gets
    `dist.mesh = @mesh`; each argument and result gets
    `dist.global_type = tensor<...>` (the global type) and
    `dist.global_sharding = #dist.sharding<...>` (its sharding, relative to
    the global type), and its type becomes the local type; `dist.sharding`
    annotations are removed (they are checked against the value's own type,
    which is now local). A result may be partial (`partial={...}` in its
    `dist.global_sharding`): with `keep-partial-results` (the default), a
    partial value returned where the function result's sharding differs only
    by not being partial (or that has no sharding of its own) stays
    partial, and the runtime reduces the partial values (with the given
    kind) when it gathers the output; with `keep-partial-results=false`
    every result is reduced in the program. So a program
    sharded only on a batch axis has no collective: its mean loss is
    returned partial over that axis.
  }];
  let options = [
    Option<"keepPartialResults", "keep-partial-results", "bool",
           /*default=*/"true",
           "Return partial values partial (the runtime reduces them) instead "
           "of all-reducing them in the program">,
    Option<"vocabParallelCrossEntropy", "vocab-parallel-cross-entropy",
           "bool", /*default=*/"false",
           "Run cross_entropy over a split vocabulary in its "
           "vocabulary-parallel form instead of gathering the logits">,
    Option<"splitKeyAttention", "split-key-attention", "bool",
           /*default=*/"false",
           "Run attention over split keys as per-shard partial outputs "
           "merged by log-sum-exp (max and sum all_reduces, the output "
           "partial over the key axes) instead of gathering the keys">,
  ];
  // No op dialect: the ops' partition hooks build their local forms with
  // ops of their own dialects, which are loaded with the input.
  let dependentDialects = ["::partita::dist::DistDialect"];
}

#endif // PARTITA_PASSES_PARTITION_PASSES
