//===- Passes.td - sharding passes ------------------------*- tablegen -*-===//
//
// Passes that write and complete sharding annotations on global-shape IR.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_SHARDING_PASSES
#define PARTITA_PASSES_SHARDING_PASSES

include "mlir/Pass/PassBase.td"

def DistAnnotate : Pass<"dist-annotate", "::mlir::ModuleOp"> {
  let summary = "Writes the sharding annotations that a classic parallelism recipe amounts to.";
  let description = [{
    Reads the parameter and input names that `partita model` writes
    (`nn.param` / `nn.input` argument attributes) and annotates the
    arguments of every function with the shardings of a named strategy:

    - `dp`: the batch dimension of every input over the data axis.
    - `megatron`: column-parallel then row-parallel weights in the MLP and in
      attention (heads over the tensor axis), vocab-parallel embedding and
      LM head (Megatron-LM, Shoeybi et al. 2019).
    - `dp+megatron`: both, on a 2-D mesh.
    - `zero1`, `zero2`, `zero3` (and `fsdp`, the same layout as `zero3`):
      `dp` plus the ZeRO stages of Rajbhandari et al. 2020 on a train step
      (`@train_step` of `nn-autodiff`), written as shardings over the data
      axis of each parameter's largest dimension that the data axis divides
      and that the tensor axis does not split: optimizer state and the
      update (`nn.grad_kind = "update"` ops) sharded, the gradient
      constrained whole before it (zero1: all-reduce, then slice) or not
      (zero2: the partial gradient is reduce-scattered into the update);
      zero3 also stores parameters sharded and gathers them through a
      `dist.constraint` before the forward uses and another before the
      backward uses. `zero1+megatron` ... `fsdp+megatron`: the same over the
      data axis, with Megatron's tensor-axis splits.

    On a train step, `nn.state` arguments and results ("<param>.m", ...)
    take their parameter's layout (sharded under ZeRO), the rank-0 "step" is
    replicated, and updated-parameter results (`nn.param` on a result) get
    the parameter's layout as stored (whole over the data axis unless zero3).

    With `sequence-parallel` (megatron and dp+megatron only), Megatron
    sequence parallelism (Korthikanti et al. 2022): the residual stream is
    split on the sequence over the tensor axis. The pass finds it
    structurally, not by name: operand #0 of every rank-3 `nn.layer_norm` /
    `nn.rms_norm` gets a `dist.constraint` splitting dimension 1 (the
    sequence) over the tensor axis (and dimension 0 over the data axis under
    dp+megatron; closed, p0), and
    the result of every row-parallel `nn.einsum` (second operand an argument
    split over the tensor axis on a contracted dimension) and of every
    vocabulary-parallel `nn.embedding` gets one keeping the sequence whole
    and the value partial over the tensor axis. After `dist-propagate` and `dist-partition`, each
    block's two all-reduces become reduce-scatter + all-gather pairs. A
    sequence length the tensor axis does not divide is an error at the norm.
    The backward reads each norm's output from its sequence shard and
    gathers it again (Korthikanti et al. 2022, 4.2.2) unless
    `regather-norm-outputs` is false.

    Preconditions: the module holds a mesh named `mesh-name` with the axes the
    strategy needs, or `mesh` says how to create it. Afterwards the arguments
    it recognises carry closed `dist.sharding` annotations with priority p0
    and every other argument is left unannotated, for `dist-propagate` to
    complete.
  }];
  let options = [
    Option<"strategy", "strategy", "std::string", /*default=*/"\"dp\"",
           "Recipe to apply: dp, zero1, zero2, zero3, fsdp, megatron, "
           "dp+megatron, zero1+megatron, zero2+megatron, zero3+megatron, "
           "fsdp+megatron, cp or dp+cp">,
    Option<"mesh", "mesh", "std::string", /*default=*/"\"\"",
           "Create the mesh when the module has none, e.g. \"dp=2,tp=4\"">,
    Option<"meshName", "mesh-name", "std::string", /*default=*/"\"mesh\"",
           "Symbol name of the mesh to annotate for">,
    Option<"dataAxis", "data-axis", "std::string", /*default=*/"\"dp\"",
           "Mesh axis that splits the batch">,
    Option<"tensorAxis", "tensor-axis", "std::string", /*default=*/"\"tp\"",
           "Mesh axis that splits weights (Megatron tensor parallelism)">,
    Option<"contextAxis", "context-axis", "std::string", /*default=*/"\"cp\"",
           "Mesh axis that splits the sequence (context parallelism)">,
    Option<"sequenceParallel", "sequence-parallel", "bool", /*default=*/"false",
           "Also split the residual stream on the sequence over the tensor "
           "axis (Megatron sequence parallelism; megatron strategies only)">,
    Option<"regatherNormOutputs", "regather-norm-outputs", "bool",
           /*default=*/"true",
           "With sequence-parallel: the backward gathers each norm's output "
           "again from its sequence shard, as Megatron does; false keeps the "
           "forward's gathered output for the backward (two all-gathers per "
           "layer fewer, the whole sequence of each norm's output live "
           "between forward and backward)">,
  ];
  let dependentDialects = ["::partita::dist::DistDialect"];
}

def DistPropagate : Pass<"dist-propagate", "::mlir::ModuleOp"> {
  let summary = "Completes the sharding of every value from the annotations it has.";
  let description = [{
    Propagates shardings through each op's factor rule
    (`ShardingRuleOpInterface`), forward and backward, to a fixed point, in
    the manner of GSPMD and Shardy. Annotations come from `dist.sharding` on
    function arguments and results, `dist.constraint` ops, and op results.

    - A tensor's sharding is projected onto the op's factors; compatible
      axes flow along each factor to every operand and result carrying it;
      a sharded reduction factor makes the results partial over its axes.
    - Closed dimensions never change; open ones may gain axes.
    - Conflicts are settled by priority (p0 strongest, unprioritised last),
      then by the choice that moves fewer bytes, then by a fixed order of
      values; never by the order of ops in the file.
    - Calls propagate through the callee's signature.
    - Ops without a rule stay replicated and are named in a warning.

    Afterwards every tensor value (arguments, op results, function results)
    carries a closed `dist.sharding`. With `record-origins`, each also carries
    `dist.origin`, naming the annotation its sharding came from.
  }];
  let options = [
    Option<"recordOrigins", "record-origins", "bool", /*default=*/"false",
           "Attach dist.origin to every value, naming where its sharding came from">,
  ];
  let statistics = [
    Statistic<"numIterations", "iterations", "Sweeps until the fixed point">,
  ];
  let dependentDialects = ["::partita::dist::DistDialect"];
}

#endif // PARTITA_PASSES_SHARDING_PASSES
