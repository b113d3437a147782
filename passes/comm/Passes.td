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
    In a function marked `dist.zero_stage = 1` (`dist-annotate`'s zero1
    recipes) the `dist.reduce_scatter`s whose results an optimizer update
    (`nn.grad_kind = "update"`) reads stay where they are, at the
    updates: ZeRO's P_os keeps the whole gradient until the optimizer step,
    which is what tells it apart from P_os+g, which frees each gradient as
    soon as its bucket is scattered (`partita explain` accounts for it so).
    Other collectives are not moved: hoisting a ZeRO-3 parameter all_gather
    would keep the gathered parameter alive longer and undo the sharding's
    memory saving.

    Then the gradient reductions that leave the backward (no op tagged
    `"B"` or `"W"` reads their results: a weight gradient's, which the
    optimizer reads) are bucketed, as PyTorch DDP does (Li et
    al., "PyTorch Distributed", VLDB 2020, section 3.2.3; its default cap is
    25 MiB). An activation gradient's reduction (a tensor-parallel
    backward's), which the next backward op waits for, stays a collective
    of its own: in a bucket it would hold back the weight gradients riding
    with it, and nothing could run behind it anyway. Walking the block in
    order, each reduction joins the open
    bucket when it has the same kind, mesh, axes, reduction and element
    type, and the bucket's bytes (the sum of its members' local operand
    bytes) stay within `bucket-bytes`; else it opens a new one. A bucket
    also closes at any op that reads one of its members' results (the
    bucket runs where its last member is, so no result may be read
    earlier). A reduction larger than the cap is a bucket of its own.
    Each bucket's members then move down to sit, in order, right before its
    last member, and carry `dist.bucket = N` (1, 2, ... per function). The
    plan keeps the id on each collective; the runtime packs a bucket into
    one communicator call (a reduce_scatter packs each rank's blocks),
    issued asynchronously where it stands and waited for only before the
    first instruction that reads one of its results. `bucket-bytes = 0`
    hoists without bucketing.

    Example (`partita-opt --dist-optimize-comm`): in
    `%g = nn.einsum ... {nn.grad_kind = "W"}; %x = nn.einsum ...;
    %r = dist.all_reduce %g ...` the all_reduce moves above `%x` and gets
    `dist.bucket = 1`.
  }];
  let options = [
    Option<"bucketBytes", "bucket-bytes", "int64_t",
           /*default=*/"26214400",
           "Cap on a gradient bucket's bytes per device (the sum of its "
           "members' local operand bytes); 0 disables bucketing">,
  ];
  let dependentDialects = ["::partita::dist::DistDialect"];
}

#endif // PARTITA_PASSES_COMM_PASSES
