//===- Passes.td - the per-op sharding search -------------*- tablegen -*-===//

#ifndef PARTITA_PASSES_AUTOSHARD_PASSES
#define PARTITA_PASSES_AUTOSHARD_PASSES

include "mlir/Pass/PassBase.td"

def DistAutoShard : Pass<"dist-auto-shard", "::mlir::ModuleOp"> {
  let summary = "Chooses every op's sharding on a mesh by an integer program (Alpa's intra-operator search).";
  let description = [{
    For each function with a body, chooses how every op splits its factors
    (its `ShardingRuleOpInterface` rule) over the axes of the mesh, and how
    every argument is laid out, so that the estimated step time is least:
    each op's compute at its local shapes (`CostOpInterface`: FLOPs at
    `device-tflops`, bytes at `memory-gbytes`) plus, for each value read in
    another layout than it was written in, the cheapest reshard between
    them (the partitioner's planner: bytes over `link-gbytes`, or
    `node-link-gbytes` for an axis whose groups span nodes of
    `devices-per-node`, plus `call-us` a collective). A train step's updated
    parameters and optimizer state (results named by `nn.param` /
    `nn.state`) must come back in their argument's layout. The integer
    program (Zheng et al. 2022, "Alpa", section 4.2) is solved by CBC; with
    `memory-per-device-gib`, the arguments' bytes per device are capped.
    When CBC's `time-limit` stops it, the answer is the best of its best, a
    greedy heuristic's (each op its cheapest choice against its neighbours,
    repeated until none moves), and on a mesh of several axes the optimum on
    its devices as one axis (a much smaller program) mapped back and
    improved by single moves. `solver=greedy` runs only the heuristic;
    `solver=one-axis` only the last.

    Afterwards every argument, op result and function result carries a
    closed `dist.sharding` (p0), a `dist.constraint` stands before each op
    that reads a value in another layout, and the function carries
    `dist.auto_shard`, the search's size and estimate. Arguments, op results
    and function results annotated beforehand keep their annotation (an op
    keeps the choices that write it), so a propagated program is priced as
    it is; a `dist.constraint` is an error. A function result may be read
    partial for free, as dist-partition returns it with
    `keep-partial-results`.

    A factor that needs a collective-aware local form (softmax's and the
    norms' reduced dimension, the embedding's vocabulary) is offered split
    when the op's partition hook builds that form under dist-partition's
    options: such a choice is priced by the form the hook builds (its ops'
    costs, and its all-reduces by the reshard planner).

    A train step's gradient reductions into its optimizer updates, which
    dist-optimize-comm sends in buckets as the backward makes them, may run
    behind `overlap-share` of the step's compute (the backward's share, as
    the strategy search prices it): the estimate is less min(their time,
    that share of the compute). That term ties every op together, so it is
    priced by weighting (a Lagrangian relaxation): programs in which the
    reductions cost a weight w in [0, 1] of their time and each op w times
    its share less, whose optima bound the step's from below, with the
    weight moved to where the answers' reductions and covering compute
    cross (at most 8 programs). When the weighting cannot close the gap,
    the method is `bounded` and `dist.auto_shard` gives the gap.
  }];
  let options = [
    Option<"mesh", "mesh", "std::string", /*default=*/"\"\"",
           "Create the mesh when the module has none, e.g. \"dp=2,tp=4\"">,
    Option<"meshName", "mesh-name", "std::string", /*default=*/"\"mesh\"",
           "Symbol name of the mesh to shard over">,
    Option<"deviceTflops", "device-tflops", "double", /*default=*/"100",
           "FLOP/s of a device, in TFLOP/s">,
    Option<"memoryGbytes", "memory-gbytes", "double", /*default=*/"2000",
           "Memory bandwidth of a device, in GB/s">,
    Option<"linkGbytes", "link-gbytes", "double", /*default=*/"100",
           "Bytes a second a device sends inside its node, in GB/s">,
    Option<"nodeLinkGbytes", "node-link-gbytes", "double", /*default=*/"25",
           "Bytes a second a device sends to another node, in GB/s">,
    Option<"devicesPerNode", "devices-per-node", "int64_t", /*default=*/"0",
           "Devices a node holds (0: one node)">,
    Option<"callUs", "call-us", "double", /*default=*/"20",
           "Fixed cost of a collective call, in microseconds">,
    Option<"memoryPerDeviceGib", "memory-per-device-gib", "double",
           /*default=*/"0",
           "Most argument bytes (parameters, optimizer state, inputs) a "
           "device may hold, in GiB (0: no limit)">,
    Option<"timeLimit", "time-limit", "double", /*default=*/"60",
           "Seconds CBC may search; it keeps its best solution when it stops">,
    Option<"solver", "solver", "std::string", /*default=*/"\"cbc\"",
           "cbc (the integer program, with the greedy heuristic and the "
           "one-axis answer as fallbacks), greedy (the heuristic alone: "
           "fast, not optimal) or one-axis (the program on the mesh's "
           "devices as one axis, mapped back and improved by single moves)">,
    Option<"vocabParallelCrossEntropy", "vocab-parallel-cross-entropy",
           "bool", /*default=*/"false",
           "Offer cross_entropy over a split vocabulary (dist-partition's "
           "option of the same name must be on too)">,
    Option<"keepPartialResults", "keep-partial-results", "bool",
           /*default=*/"true",
           "Price a partial value returned partial as free, as "
           "dist-partition's option of the same name returns it">,
    Option<"splitKeyAttention", "split-key-attention", "bool",
           /*default=*/"false",
           "Offer attention over split keys (dist-partition's option of the "
           "same name must be on too)">,
    Option<"overlapShare", "overlap-share", "double",
           /*default=*/"0.6666666666666666",
           "Share of a train step's compute (its backward) that bucketed "
           "gradient reductions may run behind, between 0 (no overlap, as "
           "with the pipeline's overlap-comm off) and 1">,
  ];
  let dependentDialects = ["::partita::dist::DistDialect"];
}

#endif // PARTITA_PASSES_AUTOSHARD_PASSES
