// RUN: partita-opt %s -nn-keep-attention-stats -split-input-file | FileCheck %s
// RUN: partita-opt %s -nn-keep-attention-stats -split-input-file | partita-opt -split-input-file | FileCheck %s

// nn-keep-attention-stats: each attention_grad reads the output and the
// log-sum-exp of the attention it differentiates.

// Tests that the forward gains its lse result (attributes kept, its users
// reading the new op) and the fused gradient reads it with the output.
// CHECK-LABEL: func.func @gqa
// CHECK-NEXT: %[[O:.*]], %[[L:.*]] = nn.attention %arg0, %arg1, %arg2 causal scale = 2.500000e-01 {nn.layer = 1 : i64} : tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[N:.*]] = nn.neg %[[O]]
// CHECK-NEXT: %[[G:.*]]:3 = nn.attention_grad %arg0, %arg1, %arg2, %arg3 saved(%[[O]], %[[L]] : tensor<2x8x4x16xf32>, tensor<2x4x8xf32>) wrt = q|k|v causal scale = 2.500000e-01 {nn.grad_kind = "B"} :
// CHECK-NEXT: return %[[N]], %[[G]]#0, %[[G]]#1, %[[G]]#2
func.func @gqa(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x2x16xf32>, %v: tensor<2x8x2x16xf32>, %dy: tensor<2x8x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32>) {
  %o = nn.attention %q, %k, %v causal scale = 0.25 {nn.layer = 1 : i64} : tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32>
  %n = nn.neg %o : tensor<2x8x4x16xf32>
  %dq, %dk, %dv = nn.attention_grad %q, %k, %v, %dy wrt = q|k|v causal scale = 0.25 {nn.grad_kind = "B"} : tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32>
  return %n, %dq, %dk, %dv : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32>
}

// -----

// Tests that two gradients of one forward (unfused: another dy) share its
// one lse, and that f64 is kept too.
// CHECK-LABEL: func.func @two_grads
// CHECK-NEXT: %[[O:.*]], %[[L:.*]] = nn.attention %arg0, %arg1, %arg1 : tensor<1x4x2x8xf64>, tensor<1x4x2x8xf64> -> tensor<1x2x4xf64>
// CHECK-NEXT: nn.attention_grad %arg0, %arg1, %arg1, %arg2 saved(%[[O]], %[[L]] : {{.*}}) wrt = q :
// CHECK-NEXT: nn.attention_grad %arg0, %arg1, %arg1, %arg3 saved(%[[O]], %[[L]] : {{.*}}) wrt = k :
// CHECK-NOT: nn.attention %
func.func @two_grads(%q: tensor<1x4x2x8xf64>, %k: tensor<1x4x2x8xf64>, %dy: tensor<1x4x2x8xf64>, %dy2: tensor<1x4x2x8xf64>) -> (tensor<1x4x2x8xf64>, tensor<1x4x2x8xf64>, tensor<1x4x2x8xf64>) {
  %o = nn.attention %q, %k, %k : tensor<1x4x2x8xf64>, tensor<1x4x2x8xf64>
  %dq = nn.attention_grad %q, %k, %k, %dy wrt = q : tensor<1x4x2x8xf64>, tensor<1x4x2x8xf64> -> tensor<1x4x2x8xf64>
  %dk = nn.attention_grad %q, %k, %k, %dy2 wrt = k : tensor<1x4x2x8xf64>, tensor<1x4x2x8xf64> -> tensor<1x4x2x8xf64>
  return %o, %dq, %dk : tensor<1x4x2x8xf64>, tensor<1x4x2x8xf64>, tensor<1x4x2x8xf64>
}

// -----

// Tests what keeps recomputing: a gradient of another attention (other
// attributes, other operands), one before its forward, and a 16-bit
// attention.
// CHECK-LABEL: func.func @apart
// CHECK: nn.attention_grad %arg0, %arg1, %arg1, %arg2 wrt = q :
// CHECK: nn.attention %arg0, %arg1, %arg1 causal :
// CHECK-NOT: saved
// CHECK: nn.attention_grad %arg0, %arg1, %arg1, %arg2 wrt = q scale
// CHECK: nn.attention_grad %arg1, %arg0, %arg0, %arg2 wrt = q :
// CHECK: nn.attention_grad %arg3, %arg3, %arg3, %arg3 wrt = q :
// CHECK-NOT: saved
// CHECK: return
func.func @apart(%q: tensor<1x4x2x8xf32>, %k: tensor<1x4x2x8xf32>, %dy: tensor<1x4x2x8xf32>, %h: tensor<1x4x2x8xf16>) {
  %early = nn.attention_grad %q, %k, %k, %dy wrt = q : tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32> -> tensor<1x4x2x8xf32>
  %o = nn.attention %q, %k, %k : tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>
  %oc = nn.attention %q, %k, %k causal : tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>
  %scaled = nn.attention_grad %q, %k, %k, %dy wrt = q scale = 0.5 : tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32> -> tensor<1x4x2x8xf32>
  %swapped = nn.attention_grad %k, %q, %q, %dy wrt = q : tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32> -> tensor<1x4x2x8xf32>
  %oh = nn.attention %h, %h, %h : tensor<1x4x2x8xf16>, tensor<1x4x2x8xf16>
  %gh = nn.attention_grad %h, %h, %h, %h wrt = q : tensor<1x4x2x8xf16>, tensor<1x4x2x8xf16> -> tensor<1x4x2x8xf16>
  return
}

// -----

// Tests that of two forwards (the original and a recompute copy, as
// selective recompute leaves them), the last one before the gradient is
// kept: the original's output and lse need not live through the backward.
// CHECK-LABEL: func.func @recomputed
// CHECK-NEXT: %[[O1:.*]] = nn.attention %arg0, %arg1, %arg1 causal : tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>{{$}}
// CHECK-NEXT: nn.neg %[[O1]]
// CHECK-NEXT: %[[O2:.*]], %[[L:.*]] = nn.attention %arg0, %arg1, %arg1 causal {nn.recompute} : tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32> -> tensor<1x2x4xf32>
// CHECK-NEXT: nn.attention_grad %arg0, %arg1, %arg1, %arg2 saved(%[[O2]], %[[L]] : {{.*}}) wrt = q causal :
func.func @recomputed(%q: tensor<1x4x2x8xf32>, %k: tensor<1x4x2x8xf32>, %dy: tensor<1x4x2x8xf32>) -> (tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>) {
  %o = nn.attention %q, %k, %k causal : tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>
  %n = nn.neg %o : tensor<1x4x2x8xf32>
  %o2 = nn.attention %q, %k, %k causal {nn.recompute} : tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>
  %dq = nn.attention_grad %q, %k, %k, %dy wrt = q causal : tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32> -> tensor<1x4x2x8xf32>
  return %n, %o2, %dq : tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>
}
