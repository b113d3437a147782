//===- NNOps.td - nn operations ---------------------------*- tablegen -*-===//
//
// The nn op set: enough for MLP, GPT-2-style and Llama-style models.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_NN_OPS
#define PARTITA_NN_OPS

include "dialects/nn/IR/NNDialect.td"
include "dialects/dist/IR/DistInterfaces.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"

//===----------------------------------------------------------------------===//
// Types and enums
//===----------------------------------------------------------------------===//

def NN_FloatTensor : StaticShapeTensorOf<[AnyFloat]>;
def NN_IndexTensor : StaticShapeTensorOf<[AnySignlessInteger]>;
def NN_AnyTensor : StaticShapeTensorOf<[AnyFloat, AnySignlessInteger]>;

def NN_ReduceKind : I32EnumAttr<"ReduceKind", "reduction applied by nn.reduce", [
    I32EnumAttrCase<"Sum", 0, "sum">,
    I32EnumAttrCase<"Max", 1, "max">,
    I32EnumAttrCase<"Mean", 2, "mean">,
  ]> {
  let cppNamespace = "::partita::nn";
  let genSpecializedAttr = 0;
}
def NN_ReduceKindAttr : EnumAttr<NN_Dialect, NN_ReduceKind, "reduce_kind">;

class NN_ShardableOp<string mnemonic, list<Trait> traits = []>
    : NN_Op<mnemonic, !listconcat(traits, [
        Pure, DeclareOpInterfaceMethods<ShardingRuleOpInterface>])> {
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Contraction
//===----------------------------------------------------------------------===//

def NN_EinsumOp : NN_ShardableOp<"einsum"> {
  let summary = "Einstein-summation contraction of one or two tensors.";
  let description = [{
    `spec` gives one letter per dimension of each operand and of the result:
    ```mlir
    %y = nn.einsum "bsh,hf->bsf" %x, %w
        : (tensor<2x8x16xf32>, tensor<16x64xf32>) -> tensor<2x8x64xf32>
    ```
    Letters missing from the result are summed over. A letter names one size
    everywhere it appears. Matmul, batched matmul, outer products and
    per-head projections (`"bsh,hnd->bsnd"`) are all cases of it.

    The verifier requires: one or two operands, all of one element type (the
    result's too); a spec of ASCII letters, `,` between operand terms and one
    `->`, with no spaces and no ellipsis; one term per operand with one letter
    per dimension; no letter twice in one term (no diagonals) or in the
    result; every result letter present in some operand.
  }];
  let arguments = (ins StrAttr:$spec, Variadic<NN_FloatTensor>:$inputs);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $spec $inputs attr-dict `:` functional-type($inputs, $result)
  }];
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

class NN_BinaryOp<string mnemonic, string what>
    : NN_ShardableOp<mnemonic, [AllTypesMatch<["lhs", "rhs", "result"]>]> {
  let summary = "Elementwise " # what # " of two tensors of one type.";
  let description = [{
    Operands and result have the same type; broadcast explicitly with
    `nn.broadcast` first.
  }];
  let arguments = (ins NN_AnyTensor:$lhs, NN_AnyTensor:$rhs);
  let results = (outs NN_AnyTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def NN_AddOp : NN_BinaryOp<"add", "sum">;
def NN_SubOp : NN_BinaryOp<"sub", "difference">;
def NN_MulOp : NN_BinaryOp<"mul", "product">;
def NN_DivOp : NN_BinaryOp<"div", "quotient">;
def NN_MaxOp : NN_BinaryOp<"max", "maximum">;

class NN_UnaryOp<string mnemonic, string what>
    : NN_ShardableOp<mnemonic, [AllTypesMatch<["input", "result"]>]> {
  let summary = "Elementwise " # what # ".";
  let arguments = (ins NN_FloatTensor:$input);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def NN_NegOp : NN_UnaryOp<"neg", "negation">;
def NN_ExpOp : NN_UnaryOp<"exp", "exponential">;
def NN_LogOp : NN_UnaryOp<"log", "natural logarithm">;
def NN_TanhOp : NN_UnaryOp<"tanh", "hyperbolic tangent">;
def NN_ReluOp : NN_UnaryOp<"relu", "max(x, 0)">;
def NN_SiluOp : NN_UnaryOp<"silu", "x * sigmoid(x)">;
def NN_RsqrtOp : NN_UnaryOp<"rsqrt", "reciprocal square root">;
def NN_SqrtOp : NN_UnaryOp<"sqrt", "square root">;

def NN_GeluOp : NN_ShardableOp<"gelu", [AllTypesMatch<["input", "result"]>]> {
  let summary = "Elementwise GELU, exact (erf) or with the tanh approximation.";
  let description = [{
    `nn.gelu %x : T` is x * Phi(x); `nn.gelu %x tanh : T` uses GPT-2's
    0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))).
  }];
  let arguments = (ins NN_FloatTensor:$input, UnitAttr:$tanh);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input (`tanh` $tanh^)? attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Shape
//===----------------------------------------------------------------------===//

def NN_BroadcastOp : NN_ShardableOp<"broadcast"> {
  let summary = "Broadcasts a tensor into a larger shape.";
  let description = [{
    Operand dimension i becomes result dimension `dims[i]` (one entry per
    operand dimension, strictly increasing, in range of the result's rank);
    its size must equal the result's or be 1 (then it is repeated). Other
    result dimensions are new. Element types match.
    ```mlir
    %y = nn.broadcast %b dims = [2] : tensor<64xf32> -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins NN_AnyTensor:$input, DenseI64ArrayAttr:$dims);
  let results = (outs NN_AnyTensor:$result);
  let assemblyFormat = [{
    $input `dims` `=` $dims attr-dict `:` type($input) `->` type($result)
  }];
}

def NN_ReduceOp : NN_ShardableOp<"reduce"> {
  let summary = "Reduces (sum, max or mean) over some dimensions, dropping them.";
  let description = [{
    `dims` names each reduced input dimension once, in any order; the result
    is the input's shape without them, of the same element type (rank 0 when
    every dimension is reduced). `mean` divides the sum by the product of the
    reduced sizes.
    ```mlir
    %y = nn.reduce sum %x dims = [2] : tensor<2x8x64xf32> -> tensor<2x8xf32>
    ```
  }];
  let arguments = (ins NN_ReduceKindAttr:$kind, NN_FloatTensor:$input,
                       DenseI64ArrayAttr:$dims);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    custom<ReduceKind>($kind) $input `dims` `=` $dims attr-dict
    `:` type($input) `->` type($result)
  }];
}

def NN_TransposeOp : NN_ShardableOp<"transpose"> {
  let summary = "Permutes dimensions: result dimension i is input dimension perm[i].";
  let description = [{
    ```mlir
    %y = nn.transpose %x perm = [0, 2, 1, 3]
        : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
    ```
  }];
  let arguments = (ins NN_AnyTensor:$input, DenseI64ArrayAttr:$perm);
  let results = (outs NN_AnyTensor:$result);
  let assemblyFormat = [{
    $input `perm` `=` $perm attr-dict `:` type($input) `->` type($result)
  }];
}

def NN_ReshapeOp : NN_ShardableOp<"reshape"> {
  let summary = "Reinterprets a tensor's row-major elements in another shape.";
  let description = [{
    Same element type and element count.
    ```mlir
    %y = nn.reshape %x : tensor<2x4x8x16xf32> -> tensor<8x128xf32>
    ```
  }];
  let arguments = (ins NN_AnyTensor:$input);
  let results = (outs NN_AnyTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

//===----------------------------------------------------------------------===//
// Normalization and activation over a dimension
//===----------------------------------------------------------------------===//

def NN_SoftmaxOp : NN_ShardableOp<"softmax", [AllTypesMatch<["input", "result"]>]> {
  let summary = "Softmax along one dimension.";
  let description = [{
    y = exp(x - max(x)) / sum(exp(x - max(x))) along `dim`. `dim` is an index
    in [0, rank): negative (Python-style) indices are rejected, so that every
    consumer sees one canonical index.
    ```mlir
    %p = nn.softmax %s dim = 3 : tensor<2x4x8x8xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, I64Attr:$dim);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input `dim` `=` $dim attr-dict `:` type($result)";
}

def NN_LayerNormOp : NN_ShardableOp<"layer_norm", [
    AllTypesMatch<["input", "result"]>, AllTypesMatch<["gamma", "beta"]>]> {
  let summary = "Layer normalization over the last dimension, with scale and shift.";
  let description = [{
    y = (x - mean) / sqrt(var + epsilon) * gamma + beta, statistics over the
    last dimension; `gamma` and `beta` are 1-D of that size and of the
    input's element type; `epsilon` is positive and finite.
    ```mlir
    %y = nn.layer_norm %x, %g, %b eps = 1.0e-05 : tensor<2x8x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$gamma,
                       NN_FloatTensor:$beta,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $gamma `,` $beta `eps` `=` $epsilon attr-dict
    `:` type($input) `,` type($gamma)
  }];
}

def NN_RMSNormOp : NN_ShardableOp<"rms_norm", [AllTypesMatch<["input", "result"]>]> {
  let summary = "RMS normalization over the last dimension, with scale.";
  let description = [{
    y = x / sqrt(mean(x^2) + epsilon) * gamma, over the last dimension;
    `gamma` is 1-D of that size and of the input's element type; `epsilon`
    is positive and finite.
    ```mlir
    %y = nn.rms_norm %x, %g eps = 1.0e-05 : tensor<2x8x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$gamma,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $gamma `eps` `=` $epsilon attr-dict `:` type($input) `,` type($gamma)
  }];
}

//===----------------------------------------------------------------------===//
// Transformer blocks
//===----------------------------------------------------------------------===//

def NN_RotaryOp : NN_ShardableOp<"rotary", [AllTypesMatch<["input", "result"]>]> {
  let summary = "Rotary position embedding of a [batch, seq, heads, head_dim] tensor.";
  let description = [{
    Rotates each pair (x[2i], x[2i+1]) of the head dimension at position p by
    the angle p * theta^(-2i/head_dim); positions count from 0 along dimension
    1. `head_dim` must be even and `theta` positive and finite.
    ```mlir
    %q2 = nn.rotary %q theta = 10000.0 : tensor<2x8x4x16xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input,
                       DefaultValuedAttr<F64Attr, "10000.0">:$theta);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input `theta` `=` $theta attr-dict `:` type($result)";
}

def NN_AttentionOp : NN_ShardableOp<"attention", [
    AllTypesMatch<["query", "result"]>, AllTypesMatch<["key", "value"]>]> {
  let summary = "Multi-head scaled dot-product attention, optionally causal.";
  let description = [{
    `query` is [batch, seq_q, heads, head_dim]; `key` and `value` are
    [batch, seq_kv, kv_heads, head_dim], with `heads` a multiple of
    `kv_heads` (grouped-query attention when they differ). The result has the
    query's type; batch, head_dim and element type are shared by all three.
    Scores are scaled by `scale` (positive; default 1/sqrt(head_dim)); with
    `causal`, query i attends to keys 0..i (seq_q must equal seq_kv).
    ```mlir
    %o = nn.attention %q, %k, %v causal
        : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>
    %g = nn.attention %q, %k2, %v2 causal scale = 0.25
        : tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$query, NN_FloatTensor:$key,
                       NN_FloatTensor:$value, UnitAttr:$causal,
                       OptionalAttr<F64Attr>:$scale);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`causal` $causal^)? (`scale` `=` $scale^)?
    attr-dict
    `:` type($query) `,` type($key)
  }];
}

def NN_EmbeddingOp : NN_ShardableOp<"embedding"> {
  let summary = "Looks up rows of a [vocab, hidden] table by integer ids.";
  let description = [{
    ```mlir
    %x = nn.embedding %table[%ids]
        : tensor<512x64xf32>, tensor<2x8xi32> -> tensor<2x8x64xf32>
    ```
    The result is ids.shape + [hidden], of the table's element type. Ids
    outside [0, vocab) give zeros.
  }];
  let arguments = (ins NN_FloatTensor:$table, NN_IndexTensor:$ids);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $table `[` $ids `]` attr-dict `:` type($table) `,` type($ids) `->` type($result)
  }];
}

def NN_CrossEntropyOp : NN_ShardableOp<"cross_entropy"> {
  let summary = "Softmax cross-entropy of logits against integer labels, mean over tokens.";
  let description = [{
    `logits` is [..., vocab] and `labels` its leading dimensions; the result
    is the 0-d mean over all tokens of logsumexp(logits) - logits[label],
    of the logits' element type.
    ```mlir
    %l = nn.cross_entropy %logits, %labels
        : tensor<2x8x512xf32>, tensor<2x8xi32> -> tensor<f32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$logits, NN_IndexTensor:$labels);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $logits `,` $labels attr-dict `:` type($logits) `,` type($labels) `->` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Constants
//===----------------------------------------------------------------------===//

def NN_ConstantOp : NN_ShardableOp<"constant", [ConstantLike,
    AllTypesMatch<["value", "result"]>]> {
  let summary = "A constant tensor.";
  let description = [{
    The value's type is the result type.
    ```mlir
    %c = nn.constant dense<1.0> : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs NN_AnyTensor:$result);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
}

#endif // PARTITA_NN_OPS
