//===- DistDialect.td - the dist dialect ------------------*- tablegen -*-===//
//
// The dist dialect: how a computation is spread over a device mesh.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIST_DIALECT
#define PARTITA_DIST_DIALECT

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Dist_Dialect : Dialect {
  let name = "dist";
  let cppNamespace = "::partita::dist";
  let summary = "Device meshes, sharding annotations and collectives.";
  let description = [{
    The `dist` dialect says how a tensor program is spread over devices. It is
    independent of the `nn` dialect: any op that implements
    `ShardingRuleOpInterface` can be sharded.

    - `dist.mesh` declares a named logical device mesh.
    - `#dist.sharding` says, per tensor dimension, which mesh axes split it,
      over which axes the value is a partial sum, and which dimensions may
      still gain axes during propagation.
    - `dist.constraint` pins the sharding of a value in the middle of a function.
    - Collectives (`all_gather`, `reduce_scatter`, `all_reduce`, `all_to_all`,
      `collective_permute`, `send`, `recv`) act on *local* tensors in the
      partitioned, per-device program.

    Shardings are attached as the discardable attribute `dist.sharding`: a
    `#dist.sharding` on function arguments and results, and an array of
    `#dist.sharding` (one per result) on operations.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let extraClassDeclaration = [{
    /// The discardable attribute that carries shardings.
    static constexpr ::llvm::StringLiteral kShardingAttrName = "dist.sharding";
    /// The discardable attribute naming the annotation(s) a value's sharding
    /// came from: a string, or an array of strings.
    static constexpr ::llvm::StringLiteral kOriginAttrName = "dist.origin";
    /// The discardable attribute dist-optimize-comm puts on the gradient
    /// reductions of one bucket: a positive i64, equal on the members.
    static constexpr ::llvm::StringLiteral kBucketAttrName = "dist.bucket";
    /// The discardable attribute dist-annotate puts on a train step it
    /// shards as a ZeRO stage (1, 2 or 3, an i64): dist-optimize-comm keeps
    /// a stage-1 step's gradient reduce-scatters at their updates, and the
    /// plan records the stage for `partita explain`.
    static constexpr ::llvm::StringLiteral kZeroStageAttrName =
        "dist.zero_stage";
    /// The discardable attribute that places an op on a pipeline stage (an
    /// i64 >= 0): written by the user or dist-pipeline-split, copied by
    /// nn-autodiff onto the backward ops of an op and by dist-partition onto
    /// the local ops and collectives it builds for one.
    static constexpr ::llvm::StringLiteral kStageAttrName = "dist.stage";
    /// The discardable attribute dist-auto-shard puts on a function it
    /// chose the shardings of: a dictionary of what it solved and estimated
    /// (its AutoShardReport), for `partita plan` to print.
    static constexpr ::llvm::StringLiteral kAutoShardAttrName =
        "dist.auto_shard";
  private:
    void registerAttributes();
  public:
  }];
}

class Dist_Op<string mnemonic, list<Trait> traits = []>
    : Op<Dist_Dialect, mnemonic, traits>;

class Dist_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Dist_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

#endif // PARTITA_DIST_DIALECT
