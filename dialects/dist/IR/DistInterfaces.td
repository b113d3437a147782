//===- DistInterfaces.td - sharding interfaces ------------*- tablegen -*-===//
//
// The interface through which any op tells the sharding passes how its
// operand and result dimensions relate.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIST_INTERFACES
#define PARTITA_DIST_INTERFACES

include "mlir/IR/OpBase.td"

def ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let cppNamespace = "::partita::dist";
  let description = [{
    An op that can be sharded describes itself as a set of *factors*: each
    operand and result dimension is the product of one or more factors (major
    to minor). Splitting a factor over mesh axes splits every dimension that
    carries it. A factor is
    - parallel: every operand and result carrying it is split alike;
    - reduction: it appears in operands only, and splitting it leaves the
      results partial (sum or max, as the factor says);
    - whole: it must stay whole for the op to run locally;
    - collective: like whole, but the op has an exact collective-aware
      lowering (softmax or cross entropy over a split dimension), so the
      partitioner may split it at the price of extra communication.
    A factor may also carry a role (dist::FactorRole: sequence, key
    sequence, value head dimension, vocabulary) that says what it is to the
    op's collective-aware lowering; passes find factors by role, never by
    their printed names.
  }];
  let methods = [
    InterfaceMethod<
      "Returns the op's sharding rule, or failure when it has none for these "
      "types (the op is then kept replicated).",
      "::mlir::FailureOr<::partita::dist::ShardingRule>", "getShardingRule">,
  ];
}

// A separate interface rather than a method of ShardingRuleOpInterface:
// propagation, the strategies and the cost model read rules and never build
// IR, and most ops with a rule need no hook (the partitioner runs
// partitionByClone, the generic local form, for an op without this
// interface), so only ops with a local form of their own implement it.
def PartitionOpInterface : OpInterface<"PartitionOpInterface"> {
  let cppNamespace = "::partita::dist";
  let description = [{
    How an op with a sharding rule runs on its local shards (upstream MLIR's
    `ShardingInterface::partition` plays this part). The partitioner projects
    the op's shardings onto its rule's factors, reshards the operands to what
    the factors ask, then calls `partition`, which builds the op's local form
    (plain ops and the dist collectives it needs: all_reduce for a softmax
    over a split dimension, axis_index for global positions). The results
    get the sharding the factors give: per dimension the axes of its
    factors, partial over the split reduction factors and the split
    collective factors that leave them partial (by default those that no
    result carries).
  }];
  let methods = [
    InterfaceMethod<
      "Whether the collective factor `factor` of the op's rule may be split: "
      "`fromOperand` asks whether as an operand is split (whether the "
      "results are then partial: leavesResultsPartial), otherwise as the "
      "result's sharding asks. Only ops whose `partition` builds the form "
      "that splitting needs say yes.",
      "bool", "canSplitCollectiveFactor",
      (ins "int64_t":$factor, "bool":$fromOperand,
           "const ::partita::dist::PartitionHookOptions &":$options),
      /*methodBody=*/"", /*defaultImplementation=*/"return false;">,
    InterfaceMethod<
      "Whether splitting the collective factor `factor` of `rule` leaves the "
      "results partial sums over its axes (the partitioner then records them "
      "so). The default: when no result carries the factor; a hook that "
      "reduces over the factor itself says no.",
      "bool", "leavesResultsPartial",
      (ins "const ::partita::dist::ShardingRule &":$rule, "int64_t":$factor),
      /*methodBody=*/"",
      /*defaultImplementation=*/
      "return ::partita::dist::carriedByNoResult(rule, factor);">,
    InterfaceMethod<
      "Whether the op must run on whole values although it has a rule (a "
      "constant whose elements cannot be cut without computing them).",
      "bool", "runsWhole", (ins), /*methodBody=*/"",
      /*defaultImplementation=*/"return false;">,
    InterfaceMethod<
      "What to do with the padding of a dimension that factor `factor` of "
      "`rule` (not parallel) makes up alone; `collectiveSplit` says whether "
      "a collective factor of the op is split.",
      "::partita::dist::PaddingMask", "getPaddingMask",
      (ins "const ::partita::dist::ShardingRule &":$rule, "int64_t":$factor,
           "bool":$collectiveSplit),
      /*methodBody=*/"",
      /*defaultImplementation=*/
      "return ::partita::dist::defaultPaddingMask(rule.getFactor(factor));">,
    InterfaceMethod<
      "Builds the op's local form at `state.builder` and returns its results "
      "(one per op result, of `state.resultTypes`), or failure after a "
      "diagnostic at the op.",
      "::mlir::FailureOr<::llvm::SmallVector<::mlir::Value>>", "partition",
      (ins "::partita::dist::PartitionState &":$state), /*methodBody=*/"",
      /*defaultImplementation=*/
      "return ::partita::dist::partitionByClone($_op, state);">,
  ];
}

// Normalizes each row (the last dimension) of its first operand on its own,
// so the rows may be split over devices: Megatron sequence parallelism splits
// the sequence of the [batch, seq, hidden] activations entering one. The C++
// class is in DistTraits.h.
def RowNormalization : NativeOpTrait<"RowNormalization"> {
  let cppNamespace = "::partita::dist";
}

#endif // PARTITA_DIST_INTERFACES
