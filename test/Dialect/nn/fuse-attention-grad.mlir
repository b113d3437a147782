// RUN: partita-opt %s -nn-fuse-attention-grad -split-input-file | FileCheck %s

// nn-fuse-attention-grad: the attention_grad ops of one attention (same
// operands, same attributes but wrt) become one op at the first one's place.

// Tests that dq, dk and dv of one causal grouped attention become one op
// whose results replace theirs, in the order q, k, v, at dq's place (before
// the op that reads dq, which sat between dq and dk).
// CHECK-LABEL: func.func @qkv
// CHECK-NEXT: %[[G:.*]]:3 = nn.attention_grad %arg0, %arg1, %arg2, %arg3 wrt = q|k|v causal scale = 2.500000e-01 {nn.grad_kind = "B"} : tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32>
// CHECK-NEXT: %[[N:.*]] = nn.neg %[[G]]#0
// CHECK-NEXT: return %[[N]], %[[G]]#1, %[[G]]#2
// CHECK-NOT: nn.attention_grad
func.func @qkv(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x2x16xf32>, %v: tensor<2x8x2x16xf32>, %dy: tensor<2x8x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32>) {
  %dq = nn.attention_grad %q, %k, %v, %dy wrt = q causal scale = 0.25 {nn.grad_kind = "B"} : tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x4x16xf32>
  %n = nn.neg %dq : tensor<2x8x4x16xf32>
  %dv = nn.attention_grad %q, %k, %v, %dy wrt = v causal scale = 0.25 {nn.grad_kind = "B"} : tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x2x16xf32>
  %dk = nn.attention_grad %q, %k, %v, %dy wrt = k causal scale = 0.25 {nn.grad_kind = "B"} : tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x2x16xf32>
  return %n, %dk, %dv : tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32>
}

// -----

// Tests that two members merge (k and v here), and that gradients of
// another attention (another dy, another causal, another scale) or a
// second dk of the same one are left as they are.
// CHECK-LABEL: func.func @apart
// CHECK-NEXT: nn.attention_grad %arg0, %arg1, %arg1, %arg2 wrt = k|v causal :
// CHECK-NEXT: nn.attention_grad %arg0, %arg1, %arg1, %arg3 wrt = k causal :
// CHECK-NEXT: nn.attention_grad %arg0, %arg1, %arg1, %arg2 wrt = q :
// CHECK-NEXT: nn.attention_grad %arg0, %arg1, %arg1, %arg2 wrt = k causal scale = 5.000000e-01 :
// CHECK-NEXT: nn.attention_grad %arg0, %arg1, %arg1, %arg2 wrt = k causal :
// CHECK-NEXT: return
func.func @apart(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x4x16xf32>, %dy: tensor<2x8x4x16xf32>, %dy2: tensor<2x8x4x16xf32>) {
  %dk = nn.attention_grad %q, %k, %k, %dy wrt = k causal : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32> -> tensor<2x8x4x16xf32>
  %dk2 = nn.attention_grad %q, %k, %k, %dy2 wrt = k causal : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32> -> tensor<2x8x4x16xf32>
  %dv = nn.attention_grad %q, %k, %k, %dy wrt = v causal : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32> -> tensor<2x8x4x16xf32>
  %dq = nn.attention_grad %q, %k, %k, %dy wrt = q : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32> -> tensor<2x8x4x16xf32>
  %dk3 = nn.attention_grad %q, %k, %k, %dy wrt = k causal scale = 0.5 : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32> -> tensor<2x8x4x16xf32>
  %dk4 = nn.attention_grad %q, %k, %k, %dy wrt = k causal : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32> -> tensor<2x8x4x16xf32>
  return
}

