//===- Passes.td - microbatch and pipeline passes ---------*- tablegen -*-===//
//
// Passes that split a train step into microbatches (and, later, pipeline
// stages).
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_PIPELINE_PASSES
#define PARTITA_PASSES_PIPELINE_PASSES

include "mlir/Pass/PassBase.td"

def DistMicrobatchAnnotate : Pass<"dist-microbatch-annotate", "::mlir::ModuleOp"> {
  let summary = "Splits the batch of a train step over a microbatch mesh axis.";
  let description = [{
    Gradient accumulation is data parallelism in time: microbatch k of a
    step is the k-th block of every input's batch dimension, as dp rank k
    would hold it. This pass expresses it so: it adds a mesh axis
    `microbatch` of size `microbatches` (the minor-most axis; the function's
    mesh, or a new `@mesh` when the module has none) and appends it, minor
    to any axis already there, to dimension 0 of every `nn.input` argument's
    sharding. Propagation and partitioning then build the per-microbatch
    program as they build a data-parallel one: local batch B / (dp m), the
    loss normalized over the whole batch once (each microbatch's loss and
    loss gradient divided by the global count), and every gradient partial
    over `microbatch`, reduced by collectives over it that
    `dist-microbatch-split` turns into accumulation.

    Precondition: exactly one function has `nn.input` arguments (the step),
    each ranked with a batch dimension 0 divisible by `microbatches`, and
    no mesh axis named `microbatch`. Afterwards the function carries
    `dist.microbatches = m`. `microbatches = 1` changes nothing unless `always` is set.

    Diagnostics: a batch not divisible by the microbatch count (at the
    argument), a mesh with an explicit device order.
  }];
  let options = [
    Option<"microbatches", "microbatches", "int64_t", /*default=*/"1",
           "Microbatches per step (1: none)">,
    Option<"always", "always", "bool", /*default=*/"false",
           "Split even into 1 microbatch (a pipelined step runs its stages "
           "per microbatch)">,
  ];
  let dependentDialects = ["::partita::dist::DistDialect"];
}

def DistMicrobatchSplit : Pass<"dist-microbatch-split", "::mlir::ModuleOp"> {
  let summary = "Splits a partitioned microbatched step into a per-microbatch "
                "function and a once-per-step function.";
  let description = [{
    Takes the partitioned function marked `dist.microbatches = m` by
    `dist-microbatch-annotate`. Every collective over the `microbatch` axis
    must be a sum all_reduce; with the chain of single-use sum reductions
    over other axes that feeds it (a gradient's data-parallel
    reduce_scatter or all_reduce), it is a gradient reduction, and its
    chain's first input is an accumulation point. Every result partial over
    `microbatch` (the loss) is one too.

    The ops the accumulation points depend on (forward and backward) become
    `@<step>.microbatch`: it takes every argument of the step plus one
    state argument per accumulation point (`nn.state = "microbatch.acc.N"`,
    `dist.accumulator`), and returns each accumulator plus that
    microbatch's value, in microbatch order (the accumulators are zero at
    the start of a step, so one microbatch gives its own values exactly).
    Everything else (gradient reductions, clipping, the optimizer) stays in
    the step function, which reads the accumulators instead: its gradient
    collectives run once per step. The `microbatch` axis is then removed
    from the mesh, the collectives and every sharding; the per-microbatch
    function's inputs have the microbatch's global shape, the step's keep
    the whole batch (unused: the runtime feeds the per-microbatch function
    block k of them for microbatch k). The step function carries
    `dist.microbatch_step = @<step>.microbatch`; `dist-lower-to-plan`
    lowers both and the plan's pipeline schedule runs them.

    The sums and copies are built by the model dialect's
    `dist::TensorBuilderInterface` (nn: `nn.add`, an `nn.reshape` to the
    same type); the pass names no op of its own.

    Diagnostics: another collective over `microbatch`, a value other than an
    accumulation point used by both parts, an optimizer update in the
    per-microbatch part, accumulation points in a step whose dialects have no
    `dist::TensorBuilderInterface`.
  }];
  let dependentDialects = ["::partita::dist::DistDialect",
                           "::partita::nn::NNDialect"];
}

def DistPipelineSplit : Pass<"dist-pipeline-split", "::mlir::ModuleOp"> {
  let summary = "Assigns every op of the step to a pipeline stage.";
  let description = [{
    A stage is a placement: this pass writes `dist.stage = s` (0 .. N-1) on
    every op of the step function (the one function with `nn.input`
    arguments) and `dist.pipeline_stages = N` on the function. Forward ops
    (no `nn.grad_kind`) get their stage by `by`:

    - `annotation`: the `dist.stage` the user wrote; an op without one takes
      the latest stage of its operands (0 when they are all arguments).
      `stages` = 0 means one more than the largest annotated stage.
    - `layers`: layer L (`nn.layer`) of K goes to stage floor(L * N / K);
      ops before the first layer (the embedding) go to stage 0, ops after
      the last (head, loss) to stage N - 1.
    - `cost`: the forward ops, in program order, are cut into N contiguous
      runs minimizing the largest run's cost (an exact linear-partition
      dynamic program); an op's cost is its `CostOpInterface` time as the
      searches price a kernel (flops / 100e12 + bytes / 2e12 seconds:
      `DeviceRates::kernelSeconds` at its defaults), times 3 for forward
      plus backward. Embedding, head and loss count like any op. Limits:
      no memory budget yet; the cut follows program order, so a value used
      far ahead (a skip connection) may cross several stages, which is
      allowed.

    Backward ops carry the stage of their forward op when `nn-autodiff`
    ran on a staged forward (it copies `dist.stage` to the ops it builds
    for an op): the B and W ops of a forward op share its stage. The rest
    (optimizer updates, constants) take the latest stage of their operands,
    or, with none, the earliest stage of their users. A parameter read on
    two stages (a tied embedding) has a gradient contribution from each;
    their sum lives on the stage of the later contribution's consumer, and
    `dist.shared_params` on the function lists such parameters by name.
    Values may skip stages.

    The function also gets `dist.stage_costs`: each stage's predicted
    seconds under the cost split's measure (its forward ops' time x 3),
    whichever way it was split, so that splits can be compared.

    Diagnostics: a forward op on an earlier stage than one of its operands
    (stages out of dataflow order); more stages than layers (`layers`) or
    than forward ops (`cost`); no annotation to split by (`annotation`).
  }];
  let options = [
    Option<"stages", "stages", "int64_t", /*default=*/"0",
           "Pipeline stages (0 with by=annotation: from the annotations)">,
    Option<"by", "by", "std::string", /*default=*/"\"annotation\"",
           "How to assign forward ops: annotation, layers or cost">,
  ];
  let statistics = [
    Statistic<"numCrossStageValues", "cross-stage-values",
              "Values produced on one stage and read on a later one">,
  ];
  let dependentDialects = ["::partita::dist::DistDialect"];
}

def DistStageSplit : Pass<"dist-stage-split", "::mlir::ModuleOp"> {
  let summary = "Splits a staged, microbatched step into per-stage forward, "
                "backward and update functions.";
  let description = [{
    Takes the partitioned step that `dist-microbatch-split` left (the step
    function, marked `dist.pipeline_stages = P` by `dist-pipeline-split`,
    and the per-microbatch function it names), every op carrying
    `dist.stage` where the partitioner could carry it. A microbatch runs as
    the chain of segments F0 F1 .. F(P-1) B(P-1) .. B0: every op of the
    per-microbatch function gets one, its stage (or, without one, the
    latest segment of what it reads; ops reading only arguments run where
    they are read) and backward when nn-autodiff built it for a gradient
    (or a recomputation) or it reads a backward value. A value read in
    another segment travels:

    - forward, stage to stage, in the activation messages, up to the last
      stage that reads it (a skip connection passes through the stages in
      between);
    - kept from a stage's forward to its backward (the stash), on each
      stage whose backward reads it;
    - back, stage to stage, in the gradient messages, down to the lowest
      stage whose backward reads it.

    Each stage `s` gets `@<step>.s<s>.forward` (arguments: the parameters,
    inputs and accumulators it reads, then `nn.input = "pp.activation.k"`
    for what arrives; results: `nn.output = "pp.activation.k"` for what it
    sends, then `"pp.stash.k"`, then accumulators it updates) and
    `@<step>.s<s>.backward` (arguments: what it reads, `"pp.stash.k"`, then
    `"pp.gradient.k"` arriving from stage s+1; results: `"pp.gradient.k"`
    for stage s-1, then accumulators). With `schedule` = zb-h1 each
    backward is split in two: `@<step>.s<s>.backward_input` (B) holds what
    the gradients sent to stage s-1 need and every op nn-autodiff built
    for an input gradient (or recomputed), with the ops of the segment
    they read; `@<step>.s<s>.backward_weight` (W) holds the rest (the
    weight gradients and their accumulation). W reads what the forward
    keeps for it (`"pp.wstash.k"`, which B may read too, instead of
    `"pp.stash.k"`), what B keeps for it (B's results `"pp.deferred.k"`)
    and the gradients received from stage s+1. A split stage also gets
    `@<step>.s<s>.backward`, B and W as one function (reading the stash,
    the weight stash and the gradients; B's values for W stay inside),
    which plan lowering runs on a rank that defers no W and measures 1f1b's
    memory by. The once-per-step function (gradient
    reductions, the optimizer) is cut by the stage of what each op reads:
    an accumulator or a parameter belongs to the stage that reads it per
    microbatch; ops reading nothing staged (AdamW's step counter) are
    repeated on every stage that needs them. A parameter read on several
    stages (a tied embedding) is held by each of them: its gradient's
    contributions meet on the stage that sums them, which updates it, and
    every stage then runs an all_reduce over `pp` of the new value (that
    stage) or zeros (the others), which the readers take as their copy.
    A sum over stages (clipping's squared gradient norm) is computed on
    every stage, in the step's order, from its terms, which each stage
    receives exactly by an all_reduce over `pp` of the term or zeros.
    Stage 0's keeps the step's
    name (`@<step>.s<s>` for the others); every stage's takes all of the
    step's inputs (the whole batch). The step then carries
    `dist.stage_programs` (per stage `{forward, backward, step}`, split:
    `{forward, backward, backward_input, backward_weight, step}`) and
    `dist.schedule` (and `dist.pipeline_chunks`), and the mesh gains the
    major-most axis `pp` of size P / chunks: with `chunks` = v > 1
    (interleaved) stage s runs on pipeline rank s mod (P / v), as chunk
    s / (P / v) of it.

    Diagnostics: optimizer state read per microbatch on two stages; a
    parameter read on several stages that no stage updates; an update op
    reading values of two stages other than through a sum; a mesh that
    already has a `pp` axis or an explicit device order; a stage count that
    `chunks` does not divide; with `chunks` > 1, a shared parameter or a sum
    over stages (each chunk of a rank updates apart, so their collectives
    over `pp` would not meet); a step whose dialects have no
    `dist::TensorBuilderInterface`, which builds the zeros, copies and sums
    the pieces need (nn: `nn.constant`, `nn.reshape`, `nn.add`) and says
    which op is a sum.
  }];
  let options = [
    Option<"schedule", "schedule", "std::string", /*default=*/"\"1f1b\"",
           "The schedule that runs the stages: gpipe, 1f1b, interleaved "
           "or zb-h1 (which splits each backward into B and W)">,
    Option<"splitBackward", "split-backward", "bool", /*default=*/"false",
           "Split each backward into B and W as zb-h1 does, for another "
           "schedule (a hand-written one with BACKWARD_INPUT and "
           "BACKWARD_WEIGHT actions)">,
    Option<"chunks", "chunks", "int64_t", /*default=*/"1",
           "Model chunks per pipeline rank (interleaved): the stages are "
           "ranks x chunks, stage s on rank s % ranks">,
  ];
  let dependentDialects = ["::partita::dist::DistDialect",
                           "::partita::nn::NNDialect"];
}

#endif // PARTITA_PASSES_PIPELINE_PASSES
