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

#endif // PARTITA_DIST_INTERFACES
