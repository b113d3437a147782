// RUN: partita-opt %s | partita-opt | FileCheck %s
// RUN: partita-opt %s -mlir-print-op-generic | partita-opt | FileCheck %s
// RUN: partita-opt %s -canonicalize | FileCheck %s --check-prefix=FOLD

// Round trips of the backward and optimizer ops (training spec, issue 6).

// Tests that the elementwise activation gradients and greater_equal
// round-trip, with gelu_grad's tanh form kept and its exact form unmarked.
// CHECK-LABEL: func.func @activation_grads
// CHECK-SAME: (%[[X:.+]]: tensor<2x8xf32>, %[[DY:.+]]: tensor<2x8xf32>)
// CHECK: nn.relu_grad %[[X]], %[[DY]] : tensor<2x8xf32>
// CHECK: nn.silu_grad %[[X]], %[[DY]] : tensor<2x8xf32>
// CHECK: nn.gelu_grad %[[X]], %[[DY]] : tensor<2x8xf32>
// CHECK: nn.gelu_grad %[[X]], %[[DY]] tanh : tensor<2x8xf32>
// CHECK: nn.greater_equal %[[X]], %[[DY]] : tensor<2x8xf32>
func.func @activation_grads(%x: tensor<2x8xf32>, %dy: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>) {
  %0 = nn.relu_grad %x, %dy : tensor<2x8xf32>
  %1 = nn.silu_grad %x, %dy : tensor<2x8xf32>
  %2 = nn.gelu_grad %x, %dy : tensor<2x8xf32>
  %3 = nn.gelu_grad %x, %dy tanh : tensor<2x8xf32>
  %4 = nn.greater_equal %x, %dy : tensor<2x8xf32>
  return %0, %1, %2, %3, %4 : tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>
}

// Tests that the norm gradients round-trip with operands in the order x,
// gamma, dy and their epsilon.
// CHECK-LABEL: func.func @norm_grads
// CHECK-SAME: (%[[X:.+]]: tensor<2x8x64xbf16>, %[[G:.+]]: tensor<64xbf16>, %[[DY:.+]]: tensor<2x8x64xbf16>)
// CHECK: nn.layer_norm_grad %[[X]], %[[G]], %[[DY]] eps = 1.000000e-05 : tensor<2x8x64xbf16>, tensor<64xbf16>
// CHECK: nn.rms_norm_grad %[[X]], %[[G]], %[[DY]] eps = 2.000000e-05 : tensor<2x8x64xbf16>, tensor<64xbf16>
func.func @norm_grads(%x: tensor<2x8x64xbf16>, %g: tensor<64xbf16>, %dy: tensor<2x8x64xbf16>) -> (tensor<2x8x64xbf16>, tensor<2x8x64xbf16>) {
  %0 = nn.layer_norm_grad %x, %g, %dy eps = 1.0e-05 : tensor<2x8x64xbf16>, tensor<64xbf16>
  %1 = nn.rms_norm_grad %x, %g, %dy eps = 2.0e-05 : tensor<2x8x64xbf16>, tensor<64xbf16>
  return %0, %1 : tensor<2x8x64xbf16>, tensor<2x8x64xbf16>
}

// Tests that layer_norm_gamma_grad round-trips: x, dy, epsilon and the
// [H] result type.
// CHECK-LABEL: func.func @layer_norm_gamma_grad
// CHECK-SAME: (%[[X:.+]]: tensor<2x8x64xf32>, %[[DY:.+]]: tensor<2x8x64xf32>)
// CHECK: nn.layer_norm_gamma_grad %[[X]], %[[DY]] eps = 1.000000e-05 : tensor<2x8x64xf32> -> tensor<64xf32>
func.func @layer_norm_gamma_grad(%x: tensor<2x8x64xf32>, %dy: tensor<2x8x64xf32>) -> tensor<64xf32> {
  %0 = nn.layer_norm_gamma_grad %x, %dy eps = 1.0e-05 : tensor<2x8x64xf32> -> tensor<64xf32>
  return %0 : tensor<64xf32>
}

// Tests that rotary_grad round-trips with its theta.
// CHECK-LABEL: func.func @rotary_grad
// CHECK: nn.rotary_grad %{{.+}} theta = 5.000000e+05 : tensor<2x8x4x16xf32>
func.func @rotary_grad(%dy: tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32> {
  %0 = nn.rotary_grad %dy theta = 500000.0 : tensor<2x8x4x16xf32>
  return %0 : tensor<2x8x4x16xf32>
}

// Tests that attention_grad round-trips for each wrt, with and without
// causal and scale, the result typed like the query (wrt q) or the key
// (wrt k and v) under grouped-query attention.
// CHECK-LABEL: func.func @attention_grads
// CHECK-SAME: (%[[Q:.+]]: tensor<2x8x8x16xf32>, %[[K:.+]]: tensor<2x8x2x16xf32>, %[[V:.+]]: tensor<2x8x2x16xf32>, %[[DY:.+]]: tensor<2x8x8x16xf32>)
// CHECK: nn.attention_grad %[[Q]], %[[K]], %[[V]], %[[DY]] wrt = q causal : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x8x16xf32>
// CHECK: nn.attention_grad %[[Q]], %[[K]], %[[V]], %[[DY]] wrt = k causal scale = 2.500000e-01 : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x2x16xf32>
// CHECK: nn.attention_grad %[[Q]], %[[K]], %[[V]], %[[DY]] wrt = v : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x2x16xf32>
func.func @attention_grads(%q: tensor<2x8x8x16xf32>, %k: tensor<2x8x2x16xf32>, %v: tensor<2x8x2x16xf32>, %dy: tensor<2x8x8x16xf32>) -> (tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32>) {
  %dq = nn.attention_grad %q, %k, %v, %dy wrt = q causal : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x8x16xf32>
  %dk = nn.attention_grad %q, %k, %v, %dy wrt = k causal scale = 0.25 : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x2x16xf32>
  %dv = nn.attention_grad %q, %k, %v, %dy wrt = v : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x2x16xf32>
  return %dq, %dk, %dv : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32>
}

// Tests that attention_grad with several members round-trips, one result
// per member in the order q, k, v (written in any order).
// CHECK-LABEL: func.func @attention_grad_members
// CHECK: %{{.*}}:3 = nn.attention_grad %{{.*}} wrt = q|k|v causal : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32>
// CHECK: %{{.*}}:2 = nn.attention_grad %{{.*}} wrt = q|v : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32>
func.func @attention_grad_members(%q: tensor<2x8x8x16xf32>, %k: tensor<2x8x2x16xf32>, %v: tensor<2x8x2x16xf32>, %dy: tensor<2x8x8x16xf32>) -> (tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32>) {
  %g:3 = nn.attention_grad %q, %k, %v, %dy wrt = v|q|k causal : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32>
  %h:2 = nn.attention_grad %q, %k, %v, %dy wrt = q | v : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32>
  return %g#0, %h#1 : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32>
}

// Tests that embedding_grad and cross_entropy_grad round-trip.
// CHECK-LABEL: func.func @embedding_and_loss_grads
// CHECK-SAME: (%[[DY:.+]]: tensor<2x8x64xf32>, %[[IDS:.+]]: tensor<2x8xi32>, %[[L:.+]]: tensor<2x8x512xf32>, %[[DL:.+]]: tensor<f32>)
// CHECK: nn.embedding_grad %[[DY]], %[[IDS]] : tensor<2x8x64xf32>, tensor<2x8xi32> -> tensor<512x64xf32>
// CHECK: nn.cross_entropy_grad %[[L]], %[[IDS]], %[[DL]] : tensor<2x8x512xf32>, tensor<2x8xi32>, tensor<f32>
func.func @embedding_and_loss_grads(%dy: tensor<2x8x64xf32>, %ids: tensor<2x8xi32>, %logits: tensor<2x8x512xf32>, %dloss: tensor<f32>) -> (tensor<512x64xf32>, tensor<2x8x512xf32>) {
  %0 = nn.embedding_grad %dy, %ids : tensor<2x8x64xf32>, tensor<2x8xi32> -> tensor<512x64xf32>
  %1 = nn.cross_entropy_grad %logits, %ids, %dloss : tensor<2x8x512xf32>, tensor<2x8xi32>, tensor<f32>
  return %0, %1 : tensor<512x64xf32>, tensor<2x8x512xf32>
}

// Tests that convert round-trips between float types.
// CHECK-LABEL: func.func @convert
// CHECK: %[[H:.+]] = nn.convert %{{.+}} : tensor<4x8xf32> to tensor<4x8xbf16>
// CHECK: nn.convert %[[H]] : tensor<4x8xbf16> to tensor<4x8xf16>
func.func @convert(%x: tensor<4x8xf32>) -> tensor<4x8xf16> {
  %0 = nn.convert %x : tensor<4x8xf32> to tensor<4x8xbf16>
  %1 = nn.convert %0 : tensor<4x8xbf16> to tensor<4x8xf16>
  return %1 : tensor<4x8xf16>
}

// Tests that a convert to the input's own type folds to the input, and a
// real conversion stays.
// FOLD-LABEL: func.func @convert_same_type
// FOLD-SAME: (%[[X:.+]]: tensor<4xf32>)
// FOLD: %[[H:.+]] = nn.convert %[[X]] : tensor<4xf32> to tensor<4xbf16>
// FOLD: return %[[X]], %[[H]]
func.func @convert_same_type(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xbf16>) {
  %0 = nn.convert %x : tensor<4xf32> to tensor<4xf32>
  %1 = nn.convert %x : tensor<4xf32> to tensor<4xbf16>
  return %0, %1 : tensor<4xf32>, tensor<4xbf16>
}

// Tests that sgd round-trips with its two results and its attributes.
// CHECK-LABEL: func.func @sgd
// CHECK-SAME: (%[[P:.+]]: tensor<64x256xf32>, %[[G:.+]]: tensor<64x256xf32>, %[[B:.+]]: tensor<64x256xf32>)
// CHECK: %[[P2:.+]], %[[B2:.+]] = nn.sgd %[[P]], %[[G]], %[[B]] lr = 1.000000e-01 momentum = 9.000000e-01 weight_decay = 0.000000e+00 : tensor<64x256xf32>
// CHECK: return %[[P2]], %[[B2]] :
func.func @sgd(%p: tensor<64x256xf32>, %g: tensor<64x256xf32>, %buf: tensor<64x256xf32>) -> (tensor<64x256xf32>, tensor<64x256xf32>) {
  %p2, %buf2 = nn.sgd %p, %g, %buf lr = 0.1 momentum = 0.9 weight_decay = 0.0 : tensor<64x256xf32>
  return %p2, %buf2 : tensor<64x256xf32>, tensor<64x256xf32>
}

// Tests that adamw round-trips with its three results, the rank-0 step and
// its attributes.
// CHECK-LABEL: func.func @adamw
// CHECK-SAME: (%[[P:.+]]: tensor<64xf32>, %[[G:.+]]: tensor<64xf32>, %[[M:.+]]: tensor<64xf32>, %[[V:.+]]: tensor<64xf32>, %[[T:.+]]: tensor<f32>)
// CHECK: %[[P2:.+]], %[[M2:.+]], %[[V2:.+]] = nn.adamw %[[P]], %[[G]], %[[M]], %[[V]], %[[T]] lr = 1.000000e-03 beta1 = 9.000000e-01 beta2 = 5.000000e-01 eps = 1.000000e-08 weight_decay = 1.000000e-02 : tensor<64xf32>, tensor<f32>
// CHECK: return %[[P2]], %[[M2]], %[[V2]] :
func.func @adamw(%p: tensor<64xf32>, %g: tensor<64xf32>, %m: tensor<64xf32>, %v: tensor<64xf32>, %t: tensor<f32>) -> (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>) {
  %p2, %m2, %v2 = nn.adamw %p, %g, %m, %v, %t lr = 1.0e-03 beta1 = 0.9 beta2 = 0.5 eps = 1.0e-08 weight_decay = 0.01 : tensor<64xf32>, tensor<f32>
  return %p2, %m2, %v2 : tensor<64xf32>, tensor<64xf32>, tensor<64xf32>
}
