//===- Passes.td - communication passes -------------------*- tablegen -*-===//
//
// Passes that reorder or merge the collectives of a partitioned program.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_COMM_PASSES
#define PARTITA_PASSES_COMM_PASSES

include "mlir/Pass/PassBase.td"

def DistOptimizeComm : Pass<"dist-optimize-comm", "::mlir::ModuleOp"> {
  let summary = "Issues each gradient reduction as soon as its gradient is ready.";
  let description = [{
    `dist-partition` places a resharding collective right before the op
    that needs it; in a train step the gradients' reductions then all sit
    at the end, before the optimizer, and nothing of the backward pass is
    left to overlap them with. This pass moves every `dist.all_reduce` and
    `dist.reduce_scatter` whose operand is produced by a backward op (one
    tagged `nn.grad_kind = "B"` or `"W"` by `nn-autodiff`) to right after
    that operand's definition, so the plan issues it while the rest of the
    backward pass is still to run.

    Only moves earlier, so every use stays dominated. The reductions' order
    changes (to the order their gradients are produced, the reverse of the
    parameters'), but every rank runs the same program, so all ranks still
    issue them in one order; reductions of one value keep theirs.
    Other collectives are not moved: hoisting a ZeRO-3 parameter all_gather
    would keep the gathered parameter alive longer and undo the sharding's
    memory saving. Bucketing (merging small reductions into one call) is not
    done yet.

    Example (`partita-opt --dist-optimize-comm`): in
    `%g = nn.einsum ... {nn.grad_kind = "W"}; %x = nn.einsum ...;
    %r = dist.all_reduce %g ...` the all_reduce moves above `%x`.
  }];
  let dependentDialects = ["::partita::dist::DistDialect"];
}

#endif // PARTITA_PASSES_COMM_PASSES
