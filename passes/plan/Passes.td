//===- Passes.td - plan passes ----------------------------*- tablegen -*-===//
//
// Passes that leave MLIR for the runtime's plan.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_PLAN_PASSES
#define PARTITA_PASSES_PLAN_PASSES

include "mlir/Pass/PassBase.td"

def DistLowerToPlan : Pass<"dist-lower-to-plan", "::mlir::ModuleOp"> {
  let summary = "Lowers a (partitioned or whole) function to the runtime's protobuf plan.";
  let description = [{
    Translates one function into a program of `runtime/plan/plan.proto` and
    writes the serialized plan to `output` (with no `output`, it only checks
    that the function can be lowered). The IR is not changed.

    Preconditions: a straight-line `func.func` (one block) of `nn` ops
    (non-splat `nn.constant`s of f32, f64, i32 or i64 only) and, in a
    partitioned function, `dist.all_reduce`,
    `dist.all_gather`, `dist.reduce_scatter`, `dist.all_to_all`,
    `dist.collective_permute`, `dist.slice` and `dist.axis_index` on
    statically shaped tensors of f32, f64, f16, bf16, i32 or i64. A function
    is *partitioned* (a per-device program on local shapes) when it has a
    `dist.mesh` attribute (the mesh symbol), an argument with
    `dist.global_type`, or a dist collective. Its arguments and results carry
    their sharding relative to the global type in `dist.global_sharding` (as
    `dist-partition` writes it; else `dist.sharding`; absent: replicated)
    and optionally `dist.global_type`, which must equal the local shape times
    the shard counts. A partial result
    (`partial={...}`) is reduced by the runtime when it gathers results.

    The plan: the mesh; per program, one buffer per argument (PARAMETER when
    it has `nn.param`, named after it, initialized counter-based: `*gamma`
    ones, `*beta` zeros, others normal(0, `init-std`); STATE when it has
    `nn.state`, named after it, zero before the first step; else INPUT,
    named after `nn.input`), one ACTIVATION buffer per op result, one
    instruction per op: a dist collective, or the kernel the op's
    `KernelOpInterface` names (a plan kernel kind, its attributes in
    `KernelAttrs`; any other name a CUSTOM kernel with the name and
    attributes, for a runtime kernel library), with one output per result
    (a splat constant is a `fill`; another dense constant is a CONSTANT
    buffer holding its bytes); live ranges from definition to last
    use (results to the end); and activation offsets in one arena by greedy
    first fit, aligned to 64 bytes, with the peak as the arena size.

    Fusion (`fuse-adds`, on by default): an `add` of a two-operand einsum's
    result that nothing else reads is lowered as that einsum with a third
    input, the addend: the add's other operand, or, when that is a
    `broadcast` nothing else reads, the broadcast's input with its `dims`.
    The kernel copies the addend into its output and the GEMM accumulates
    onto it, so a linear layer's bias add (and its broadcast), or a gradient
    added to another, costs no pass of its own; an addend read there for the
    last time lends the output its bytes.

    Training (`nn-autodiff`'s `@train_step`): a result with `nn.param` or
    `nn.state` records in `replaces` the argument it updates; the runtime
    copies it there when a step ends, so the next step reads the update. It
    must name an argument, once, with the same type and sharding. An
    `nn.mean_count` integer attribute on `nn.cross_entropy` or
    `nn.cross_entropy_grad` sets the kernel's `mean_count` (the global token
    count a shard divides by).

    Any op it cannot lower is an error at that op; nothing is written then.
    ```mlir
    func.func @forward(%w: tensor<4x2xf32> {nn.param = "w"},
                       %x: tensor<3x4xf32> {nn.input = "x"}) -> tensor<3x2xf32> {
      %y = nn.einsum "bh,hc->bc" %x, %w : (tensor<3x4xf32>, tensor<4x2xf32>) -> tensor<3x2xf32>
      return %y : tensor<3x2xf32>
    }
    ```
    becomes buffers `w` (PARAMETER), `x` (INPUT), one activation at offset 0
    (arena 24 bytes) and one `einsum "bh,hc->bc"` kernel.
  }];
  let options = [
    Option<"output", "output", "std::string", /*default=*/"\"\"",
           "File to write the serialized plan to (empty: check only)">,
    Option<"function", "function", "std::string", /*default=*/"\"\"",
           "Function to lower (default: @train_step, else @grads, else "
           "@forward, else the only function)">,
    Option<"reference", "reference", "std::string", /*default=*/"\"\"",
           "Unpartitioned function to add as program \"reference\"">,
    Option<"seed", "seed", "uint64_t", /*default=*/"0",
           "Seed of the parameter initializer">,
    Option<"initStd", "init-std", "double", /*default=*/"0.02",
           "Standard deviation of the normal initializer of weights">,
    Option<"fuseAdds", "fuse-adds", "bool", /*default=*/"true",
           "Fuse an add of an einsum's result (a bias, through its "
           "broadcast, or another gradient) into the einsum as its addend">,
  ];
}

#endif // PARTITA_PASSES_PLAN_PASSES
