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

def NN_GradKind : I32EnumAttr<"GradKind",
    "what an op nn-autodiff emits computes (attribute nn.grad_kind)", [
    // Part of the gradient of a value that depends on an input (backward
    // through activations: zero-bubble schedules' "B").
    I32EnumAttrCase<"Input", 0, "B">,
    // Part of the gradient of a value that depends on parameters only (a
    // weight, a broadcast bias: zero-bubble schedules' "W").
    I32EnumAttrCase<"Weight", 1, "W">,
    // Clipping, step count and optimizer update.
    I32EnumAttrCase<"Update", 2, "update">,
  ]> {
  let cppNamespace = "::partita::nn";
  let genSpecializedAttr = 0;
}

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
  let extraClassDeclaration = [{
    /// The spec's operand terms, one per operand in order ("ij,jk->ik":
    /// "ij", "jk"); the verifier has checked their letters.
    ::llvm::SmallVector<::llvm::StringRef, 2> getOperandTerms() {
      ::llvm::SmallVector<::llvm::StringRef, 2> terms;
      getSpec().split("->").first.split(terms, ',');
      return terms;
    }
    /// The spec's result term ("ik").
    ::llvm::StringRef getResultTerm() { return getSpec().split("->").second; }
  }];
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

class NN_BinaryOp<string mnemonic, string what>
    : NN_ShardableOp<mnemonic, [AllTypesMatch<["lhs", "rhs", "result"]>]> {
  let hasVerifier = 0;
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
  let hasVerifier = 0;
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
  let hasVerifier = 0;
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

def NN_LayerNormOp : NN_ShardableOp<"layer_norm", [RowNormalization,
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

def NN_RMSNormOp : NN_ShardableOp<"rms_norm", [RowNormalization,
    AllTypesMatch<["input", "result"]>]> {
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

    An optional second result `lse` ([batch, heads, seq_q], the element
    type) holds each query row's log-sum-exp of its scaled, masked scores,
    what `nn.attention_grad` reads in place of recomputing the softmax
    statistics. `nn-keep-attention-stats` adds it to forward ops whose
    gradients are taken; it has no VJP rule (the loss must not depend on
    it), and while a split key sequence needs a merge of partial outputs,
    an op with `lse` keeps its keys (and, when causal, its queries) whole.
    ```mlir
    %o = nn.attention %q, %k, %v causal
        : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>
    %g = nn.attention %q, %k2, %v2 causal scale = 0.25
        : tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32>
    %o2, %lse = nn.attention %q, %k, %v causal
        : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32> -> tensor<2x4x8xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$query, NN_FloatTensor:$key,
                       NN_FloatTensor:$value, UnitAttr:$causal,
                       OptionalAttr<F64Attr>:$scale);
  let results = (outs NN_FloatTensor:$result, Optional<NN_FloatTensor>:$lse);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`causal` $causal^)? (`scale` `=` $scale^)?
    attr-dict
    `:` type($query) `,` type($key) (`->` type($lse)^)?
  }];
  let builders = [
    OpBuilder<(ins "::mlir::Type":$result, "::mlir::Value":$query,
                   "::mlir::Value":$key, "::mlir::Value":$value,
                   "bool":$causal, "::mlir::FloatAttr":$scale), [{
      build($_builder, $_state, result, /*lse=*/::mlir::Type(), query, key,
            value, causal, scale);
    }]>,
  ];
  let extraClassDeclaration = [{
    /// The type of the lse of attention with this query type: [batch,
    /// heads, seq_q] of its element type (the lse result, and the lse
    /// nn.attention_grad reads).
    static ::mlir::RankedTensorType
    getLseType(::mlir::RankedTensorType queryType);
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
  let hasVerifier = 0;
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

//===----------------------------------------------------------------------===//
// Gradients (emitted by nn-autodiff)
//===----------------------------------------------------------------------===//

def NN_AttentionGradWrt : I32BitEnumAttr<"AttentionGradWrt",
    "the nn.attention operands differentiated: any of q, k and v", [
    I32BitEnumAttrCaseBit<"Query", 0, "q">,
    I32BitEnumAttrCaseBit<"Key", 1, "k">,
    I32BitEnumAttrCaseBit<"Value", 2, "v">,
  ]> {
  let cppNamespace = "::partita::nn";
  let separator = "|";
}

class NN_ActivationGradOp<string mnemonic, string forward, string formula,
                          string note = "">
    : NN_ShardableOp<mnemonic, [AllTypesMatch<["input", "dy", "result"]>]> {
  let hasVerifier = 0;
  let summary = "Input gradient of `nn." # forward # "`.";
  let description = [{
    Given the forward op's input `x` and the gradient `dy` of its result,
    returns, elementwise, `dx = }] # formula # [{`.}] # note # [{
    `x`, `dy` and `dx` have one float type.
    ```mlir
    %dx = nn.}] # mnemonic # [{ %x, %dy : tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$dy);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input `,` $dy attr-dict `:` type($result)";
}

def NN_ReluGradOp : NN_ActivationGradOp<"relu_grad", "relu",
    "dy * (x > 0 ? 1 : 0)", " The derivative at x = 0 is taken as 0, as in PyTorch.">;
def NN_SiluGradOp : NN_ActivationGradOp<"silu_grad", "silu",
    "dy * s * (1 + x * (1 - s))", " Here `s = sigmoid(x)`.">;

def NN_GeluGradOp : NN_ShardableOp<"gelu_grad", [
    AllTypesMatch<["input", "dy", "result"]>]> {
  let hasVerifier = 0;
  let summary = "Input gradient of `nn.gelu` (exact or tanh form).";
  let description = [{
    dx = dy * gelu'(x), elementwise, with the same form as `nn.gelu`:
    exact, gelu'(x) = Phi(x) + x * phi(x) (Phi, phi the standard normal CDF
    and density); with `tanh`, u = sqrt(2/pi) * (x + 0.044715 x^3) and
    gelu'(x) = 0.5 * (1 + tanh(u)) + 0.5 * x * (1 - tanh(u)^2) *
    sqrt(2/pi) * (1 + 3 * 0.044715 x^2).
    ```mlir
    %dx = nn.gelu_grad %x, %dy tanh : tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$dy,
                       UnitAttr:$tanh);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input `,` $dy (`tanh` $tanh^)? attr-dict `:` type($result)";
}

def NN_GreaterEqualOp : NN_ShardableOp<"greater_equal", [
    AllTypesMatch<["lhs", "rhs", "result"]>]> {
  let hasVerifier = 0;
  let summary = "Elementwise comparison a >= b as a 1.0 / 0.0 float mask.";
  let description = [{
    c = 1.0 where a >= b, else 0.0 (NaN compares false). Operands and
    result have one float type; nn-autodiff uses the mask to route the
    gradient of `nn.max` and of `nn.reduce max` to the maxima.
    ```mlir
    %mask = nn.greater_equal %a, %b : tensor<2x8xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$lhs, NN_FloatTensor:$rhs);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def NN_LayerNormGradOp : NN_ShardableOp<"layer_norm_grad", [
    AllTypesMatch<["input", "dy", "result"]>]> {
  let summary = "Input gradient of `nn.layer_norm`.";
  let description = [{
    With statistics over the last dimension (size H) of x:
    mu = mean(x), r = 1 / sqrt(var(x) + epsilon), xhat = (x - mu) * r and
    g = dy * gamma,
    dx = r * (g - mean(g) - xhat * mean(g * xhat)), means over H.
    `beta` does not enter; the gradients of gamma and beta are built by
    nn-autodiff from other ops. `gamma` is 1-D of size H and of the input's
    element type; `dy` and the result have the input's type; `epsilon` is
    positive and finite (the forward op's).
    ```mlir
    %dx = nn.layer_norm_grad %x, %g, %dy eps = 1.0e-05
        : tensor<2x8x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$gamma,
                       NN_FloatTensor:$dy,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $gamma `,` $dy `eps` `=` $epsilon attr-dict
    `:` type($input) `,` type($gamma)
  }];
}

def NN_LayerNormGammaGradOp : NN_ShardableOp<"layer_norm_gamma_grad", [
    AllTypesMatch<["input", "dy"]>]> {
  let summary = "Gradient of `nn.layer_norm`'s gamma.";
  let description = [{
    With the statistics of `nn.layer_norm` over the last dimension (size H)
    of x, xhat = (x - mean(x)) / sqrt(var(x) + epsilon), the result is the
    sum of dy * xhat over every leading dimension: the gradient of gamma,
    of size H. It is `nn.reduce sum` of `nn.mul %dy, (nn.layer_norm %x, 1,
    0)` in one pass over x and dy, without the normalized copy and the
    product (nn-autodiff emits it). `dy` has the input's type; the result
    is 1-D of size H with the input's element type; `epsilon` is positive
    and finite (the forward op's).
    ```mlir
    %dgamma = nn.layer_norm_gamma_grad %x, %dy eps = 1.0e-05
        : tensor<2x8x64xf32> -> tensor<64xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$dy,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $dy `eps` `=` $epsilon attr-dict `:` type($input) `->`
    type($result)
  }];
}

def NN_RMSNormGradOp : NN_ShardableOp<"rms_norm_grad", [
    AllTypesMatch<["input", "dy", "result"]>]> {
  let summary = "Input gradient of `nn.rms_norm`.";
  let description = [{
    With r = 1 / sqrt(mean(x^2) + epsilon) over the last dimension (size H)
    and g = dy * gamma: dx = r * (g - x * r^2 * mean(g * x)), mean over H.
    `gamma` is 1-D of size H and of the input's element type; `dy` and the
    result have the input's type; `epsilon` is positive and finite.
    ```mlir
    %dx = nn.rms_norm_grad %x, %g, %dy eps = 1.0e-05
        : tensor<2x8x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$gamma,
                       NN_FloatTensor:$dy,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $gamma `,` $dy `eps` `=` $epsilon attr-dict
    `:` type($input) `,` type($gamma)
  }];
}

def NN_RotaryGradOp : NN_ShardableOp<"rotary_grad", [
    AllTypesMatch<["dy", "result"]>]> {
  let summary = "Input gradient of `nn.rotary`: the rotation by minus the angle.";
  let description = [{
    `nn.rotary` is linear and orthogonal, so its vector-Jacobian product is
    its transpose: each pair (dy[2i], dy[2i+1]) at position p is rotated by
    -p * theta^(-2i/head_dim). Same constraints as `nn.rotary`:
    [batch, seq, heads, head_dim] with head_dim even, theta positive and
    finite (the forward op's).
    ```mlir
    %dx = nn.rotary_grad %dy theta = 10000.0 : tensor<2x8x4x16xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$dy,
                       DefaultValuedAttr<F64Attr, "10000.0">:$theta);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$dy `theta` `=` $theta attr-dict `:` type($result)";
}

def NN_AttentionGradOp : NN_ShardableOp<"attention_grad", [
    AllTypesMatch<["query", "dy"]>, AllTypesMatch<["key", "value"]>,
    AttrSizedOperandSegments]> {
  let summary = "Gradients of `nn.attention`'s result with respect to its operands.";
  let description = [{
    Operands, `causal` and `scale` are those of the forward
    `nn.attention %query, %key, %value`; `dy` is the gradient of its result
    (the query's type). The op recomputes the probabilities
    P = softmax(scale * Q K^T (+ causal mask)) per batch and head (query
    head h reads kv head h / (heads / kv_heads)), then with O = P V,
    dP = dy V^T and dS = P * (dP - rowsum(dy * O)) returns one result per
    member of `wrt`, in the order q, k, v:
    - `q`: dQ = scale * dS K, of the query's type;
    - `k`: dK = scale * dS^T Q, of the key's type (summed over the query
      heads of a kv-head group);
    - `v`: dV = P^T dy, of the key's type (summed likewise).

    nn-autodiff emits one op per operand (so that each gradient partitions
    by its own rule: a split query sequence leaves dq split but dk and dv
    partial sums); after partitioning, `nn-fuse-attention-grad` merges the
    ops that read the same operands into one, which computes P, dP and dS
    once for all its results.

    `saved(%o, %lse : types)` passes the forward's result O (dy's type) and
    its `lse` result ([batch, heads, seq_q]): then P = exp(scale * Q K^T -
    lse) and rowsum(dy * O) need no pass over the keys of their own
    (`nn-keep-attention-stats` adds them). Both or neither.
    ```mlir
    %dq = nn.attention_grad %q, %k, %v, %dy wrt = q causal
        : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x8x16xf32>
    %dk = nn.attention_grad %q, %k, %v, %dy wrt = k causal scale = 0.25
        : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x2x16xf32>
    %dq2, %dk2, %dv2 = nn.attention_grad %q, %k, %v, %dy wrt = q|k|v causal
        : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32>
        -> tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32>
    %dq3 = nn.attention_grad %q, %k, %v, %dy
        saved(%o, %lse : tensor<2x8x8x16xf32>, tensor<2x8x8xf32>) wrt = q causal
        : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x8x16xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$query, NN_FloatTensor:$key,
                       NN_FloatTensor:$value, NN_FloatTensor:$dy,
                       Optional<NN_FloatTensor>:$out,
                       Optional<NN_FloatTensor>:$lse,
                       NN_AttentionGradWrt:$wrt, UnitAttr:$causal,
                       OptionalAttr<F64Attr>:$scale);
  let results = (outs Variadic<NN_FloatTensor>:$results);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $dy
    (`saved` `(` $out^ `,` $lse `:` type($out) `,` type($lse) `)`)?
    `wrt` `=` custom<AttentionGradWrt>($wrt)
    (`causal` $causal^)? (`scale` `=` $scale^)? attr-dict
    `:` type($query) `,` type($key) `->` type($results)
  }];
  let builders = [
    OpBuilder<(ins "::mlir::TypeRange":$results, "::mlir::Value":$query,
                   "::mlir::Value":$key, "::mlir::Value":$value,
                   "::mlir::Value":$dy, "AttentionGradWrt":$wrt,
                   "bool":$causal, "::mlir::FloatAttr":$scale), [{
      build($_builder, $_state, results, query, key, value, dy,
            /*out=*/::mlir::Value(), /*lse=*/::mlir::Value(), wrt, causal,
            scale);
    }]>,
  ];
  let extraClassDeclaration = [{
    /// The single members of `wrt`, in result order (q, k, v).
    static ::llvm::SmallVector<AttentionGradWrt, 3>
    membersOf(AttentionGradWrt wrt);
    /// The members of this op's `wrt`, in result order (q, k, v).
    ::llvm::SmallVector<AttentionGradWrt, 3> getWrtMembers() {
      return membersOf(getWrt());
    }
    /// The type of the gradient with respect to `member`: the query's for q,
    /// the key's (which the value shares) for k and v.
    ::mlir::Type getGradientType(AttentionGradWrt member) {
      return member == AttentionGradWrt::Query ? getQuery().getType()
                                               : getKey().getType();
    }
    /// The result holding the gradient with respect to `member`, or null.
    ::mlir::Value getGradient(AttentionGradWrt member);
  }];
}

def NN_EmbeddingGradOp : NN_ShardableOp<"embedding_grad"> {
  let summary = "Gradient of `nn.embedding` with respect to its table: a scatter-add.";
  let description = [{
    `dy` is ids.shape + [hidden] (the gradient of the embedding's result);
    the result is the [vocab, hidden] table gradient, zero except that each
    row dy[i...] is added to row ids[i...]. Ids outside [0, vocab) add
    nothing (as the forward op reads zeros for them). The result has dy's
    element type; vocab is read from the result type.
    ```mlir
    %dtable = nn.embedding_grad %dy, %ids
        : tensor<2x8x64xf32>, tensor<2x8xi32> -> tensor<512x64xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$dy, NN_IndexTensor:$ids);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $dy `,` $ids attr-dict `:` type($dy) `,` type($ids) `->` type($result)
  }];
}

def NN_CrossEntropyGradOp : NN_ShardableOp<"cross_entropy_grad", [
    AllTypesMatch<["logits", "result"]>]> {
  let summary = "Gradient of `nn.cross_entropy` with respect to the logits.";
  let description = [{
    dlogits = (softmax(logits) - onehot(labels)) * dloss / N along the last
    (vocab) dimension, where N is the number of label positions (the
    product of the labels' shape: the global count, as the forward mean
    divides by it) and `dloss` the 0-d gradient of the loss. A negative
    label marks a skipped (padding) token, whose row is 0, as the forward
    adds nothing for it; a label >= vocab is a run-time error. `labels` has the
    logits' leading dimensions; `dloss` is rank 0 of the logits' element
    type; the result has the logits' type.
    ```mlir
    %dlogits = nn.cross_entropy_grad %logits, %labels, %dloss
        : tensor<2x8x512xf32>, tensor<2x8xi32>, tensor<f32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$logits, NN_IndexTensor:$labels,
                       NN_FloatTensor:$dloss);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $logits `,` $labels `,` $dloss attr-dict
    `:` type($logits) `,` type($labels) `,` type($dloss)
  }];
}

//===----------------------------------------------------------------------===//
// Precision
//===----------------------------------------------------------------------===//

def NN_ConvertOp : NN_ShardableOp<"convert"> {
  let summary = "Converts a float tensor to another float element type.";
  let description = [{
    Same shape; each element is rounded to the nearest value of the result
    element type, ties to even (widening is exact). Converting to the same
    type is allowed and folds away.
    ```mlir
    %h = nn.convert %x : tensor<2x8xf32> to tensor<2x8xbf16>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($result)";
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Optimizers (emitted by nn-autodiff)
//===----------------------------------------------------------------------===//

def NN_SGDOp : NN_ShardableOp<"sgd", [
    AllTypesMatch<["param", "grad", "buffer", "new_param", "new_buffer"]>]> {
  let summary = "One SGD step with momentum and weight decay (PyTorch, dampening 0).";
  let description = [{
    For parameter p, its gradient g and momentum buffer buf (all one type):
    ```
    g2   = g + weight_decay * p
    buf' = momentum * buf + g2
    p'   = p - lr * buf'
    ```
    and returns (p', buf'). With momentum 0 this is plain SGD (buf' = g2;
    a zero-initialised buffer gives PyTorch's first step, which copies g2).
    `lr`, `momentum` and `weight_decay` are finite and >= 0.
    ```mlir
    %p2, %buf2 = nn.sgd %p, %g, %buf lr = 0.1 momentum = 0.9 weight_decay = 0.0
        : tensor<64x256xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$param, NN_FloatTensor:$grad,
                       NN_FloatTensor:$buffer, F64Attr:$lr, F64Attr:$momentum,
                       F64Attr:$weight_decay);
  let results = (outs NN_FloatTensor:$new_param, NN_FloatTensor:$new_buffer);
  let assemblyFormat = [{
    $param `,` $grad `,` $buffer `lr` `=` $lr `momentum` `=` $momentum
    `weight_decay` `=` $weight_decay attr-dict `:` type($param)
  }];
}

def NN_AdamWOp : NN_ShardableOp<"adamw", [
    AllTypesMatch<["param", "grad", "m", "v", "new_param", "new_m", "new_v"]>]> {
  let summary = "One AdamW step (PyTorch's torch.optim.AdamW, amsgrad off).";
  let description = [{
    For parameter p, gradient g, first and second moments m and v (all one
    type) and `step`, a 0-d tensor of p's element type holding the NEW step
    number t >= 1 (the caller increments it before the op):
    ```
    p1 = p * (1 - lr * weight_decay)
    m' = beta1 * m + (1 - beta1) * g
    v' = beta2 * v + (1 - beta2) * g^2
    p' = p1 - lr * (m' / (1 - beta1^t)) / (sqrt(v' / (1 - beta2^t)) + epsilon)
    ```
    and returns (p', m', v'). `lr` and `weight_decay` are finite and >= 0,
    `beta1` and `beta2` in [0, 1), `epsilon` positive and finite.
    ```mlir
    %p2, %m2, %v2 = nn.adamw %p, %g, %m, %v, %t lr = 1.0e-03 beta1 = 0.9
        beta2 = 0.999 eps = 1.0e-08 weight_decay = 0.01
        : tensor<64x256xf32>, tensor<f32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$param, NN_FloatTensor:$grad,
                       NN_FloatTensor:$m, NN_FloatTensor:$v,
                       NN_FloatTensor:$step, F64Attr:$lr, F64Attr:$beta1,
                       F64Attr:$beta2, F64Attr:$epsilon, F64Attr:$weight_decay);
  let results = (outs NN_FloatTensor:$new_param, NN_FloatTensor:$new_m,
                      NN_FloatTensor:$new_v);
  let assemblyFormat = [{
    $param `,` $grad `,` $m `,` $v `,` $step `lr` `=` $lr `beta1` `=` $beta1
    `beta2` `=` $beta2 `eps` `=` $epsilon `weight_decay` `=` $weight_decay
    attr-dict `:` type($param) `,` type($step)
  }];
}

#endif // PARTITA_NN_OPS
