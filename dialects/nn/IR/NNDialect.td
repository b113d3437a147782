//===- NNDialect.td - the nn dialect ----------------------*- tablegen -*-===//
//
// The nn dialect: what a model computes, as tensor ops with value semantics.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_NN_DIALECT
#define PARTITA_NN_DIALECT

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def NN_Dialect : Dialect {
  let name = "nn";
  let cppNamespace = "::partita::nn";
  let summary = "Tensor-level neural network ops with value semantics.";
  let description = [{
    The `nn` dialect describes what a model computes: contractions,
    elementwise math, reductions, normalizations, attention, embedding and
    loss, on builtin `tensor` types with static shapes. Every op implements
    `ShardingRuleOpInterface` (from `dist`), so every op can be sharded.

    Parameters and inputs are function arguments; `partita model` names them
    with the argument attributes `nn.param = "layers.3.attn.wq"` and
    `nn.input = "ids"`.

    Declared attributes (accessors in `dialects/nn/IR/NNAttributes.h`,
    checked by the dialect's verifier):
    - on function arguments: `nn.param`, `nn.state`, `nn.input` (a
      non-empty string: the value's name);
    - on function results: `nn.param`, `nn.state`, `nn.output`, `nn.grad`
      (a non-empty string);
    - on ops: `nn.layer` (the index, an integer >= 0, of the model layer the
      op belongs to, written by `partita model`), `nn.grad_kind` (`"B"`,
      `"W"` or `"update"`, written by `nn-autodiff`), `nn.recompute` (unit:
      a forward op cloned into the backward) and `nn.mean_count` (an
      integer > 0: the global number of rows a partitioned
      `nn.cross_entropy_grad` averages over).
    Any other `nn.` attribute is an error.
  }];
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let hasOperationAttrVerify = 1;
  let useDefaultAttributePrinterParser = 1;
  let dependentDialects = ["::partita::dist::DistDialect"];
}

class NN_Op<string mnemonic, list<Trait> traits = []>
    : Op<NN_Dialect, mnemonic, traits>;

#endif // PARTITA_NN_DIALECT
