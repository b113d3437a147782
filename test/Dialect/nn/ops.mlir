// RUN: partita-opt %s | partita-opt | FileCheck %s
// RUN: partita-opt %s -mlir-print-op-generic | partita-opt | FileCheck %s

// Tests that a two-operand einsum (a matmul) round-trips.
// CHECK-LABEL: func.func @einsum_matmul
// CHECK-SAME: (%[[X:.+]]: tensor<2x8x16xf32>, %[[W:.+]]: tensor<16x64xf32>)
// CHECK: %[[Y:.+]] = nn.einsum "bsh,hf->bsf" %[[X]], %[[W]] : (tensor<2x8x16xf32>, tensor<16x64xf32>) -> tensor<2x8x64xf32>
// CHECK: return %[[Y]]
func.func @einsum_matmul(%x: tensor<2x8x16xf32>, %w: tensor<16x64xf32>) -> tensor<2x8x64xf32> {
  %y = nn.einsum "bsh,hf->bsf" %x, %w : (tensor<2x8x16xf32>, tensor<16x64xf32>) -> tensor<2x8x64xf32>
  return %y : tensor<2x8x64xf32>
}

// Tests that the per-head projections of attention round-trip.
// CHECK-LABEL: func.func @einsum_heads
// CHECK: nn.einsum "bsh,hnd->bsnd" %{{.+}}, %{{.+}} : (tensor<2x8x16xf32>, tensor<16x4x4xf32>) -> tensor<2x8x4x4xf32>
// CHECK: nn.einsum "bsnd,ndh->bsh" %{{.+}}, %{{.+}} : (tensor<2x8x4x4xf32>, tensor<4x4x16xf32>) -> tensor<2x8x16xf32>
func.func @einsum_heads(%x: tensor<2x8x16xf32>, %wq: tensor<16x4x4xf32>, %wo: tensor<4x4x16xf32>) -> tensor<2x8x16xf32> {
  %q = nn.einsum "bsh,hnd->bsnd" %x, %wq : (tensor<2x8x16xf32>, tensor<16x4x4xf32>) -> tensor<2x8x4x4xf32>
  %o = nn.einsum "bsnd,ndh->bsh" %q, %wo : (tensor<2x8x4x4xf32>, tensor<4x4x16xf32>) -> tensor<2x8x16xf32>
  return %o : tensor<2x8x16xf32>
}

// Tests that one-operand einsums (a transpose, a full sum to rank 0) and an
// outer product round-trip.
// CHECK-LABEL: func.func @einsum_unary_and_outer
// CHECK: nn.einsum "ij->ji" %{{.+}} : (tensor<3x5xf16>) -> tensor<5x3xf16>
// CHECK: nn.einsum "ij->" %{{.+}} : (tensor<3x5xf16>) -> tensor<f16>
// CHECK: nn.einsum "i,j->ij" %{{.+}}, %{{.+}} : (tensor<3xf16>, tensor<5xf16>) -> tensor<3x5xf16>
func.func @einsum_unary_and_outer(%a: tensor<3x5xf16>, %u: tensor<3xf16>, %v: tensor<5xf16>) -> (tensor<5x3xf16>, tensor<f16>, tensor<3x5xf16>) {
  %t = nn.einsum "ij->ji" %a : (tensor<3x5xf16>) -> tensor<5x3xf16>
  %s = nn.einsum "ij->" %a : (tensor<3x5xf16>) -> tensor<f16>
  %o = nn.einsum "i,j->ij" %u, %v : (tensor<3xf16>, tensor<5xf16>) -> tensor<3x5xf16>
  return %t, %s, %o : tensor<5x3xf16>, tensor<f16>, tensor<3x5xf16>
}

// Tests that the binary elementwise ops round-trip, on floats and integers.
// CHECK-LABEL: func.func @binary
// CHECK-SAME: (%[[A:.+]]: tensor<4x8xf32>, %[[B:.+]]: tensor<4x8xf32>, %[[I:.+]]: tensor<4xi32>)
// CHECK: %[[ADD:.+]] = nn.add %[[A]], %[[B]] : tensor<4x8xf32>
// CHECK: %[[SUB:.+]] = nn.sub %[[ADD]], %[[B]] : tensor<4x8xf32>
// CHECK: %[[MUL:.+]] = nn.mul %[[SUB]], %[[A]] : tensor<4x8xf32>
// CHECK: %[[DIV:.+]] = nn.div %[[MUL]], %[[B]] : tensor<4x8xf32>
// CHECK: %[[MAX:.+]] = nn.max %[[DIV]], %[[A]] : tensor<4x8xf32>
// CHECK: %[[IADD:.+]] = nn.add %[[I]], %[[I]] : tensor<4xi32>
// CHECK: return %[[MAX]], %[[IADD]]
func.func @binary(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %i: tensor<4xi32>) -> (tensor<4x8xf32>, tensor<4xi32>) {
  %0 = nn.add %a, %b : tensor<4x8xf32>
  %1 = nn.sub %0, %b : tensor<4x8xf32>
  %2 = nn.mul %1, %a : tensor<4x8xf32>
  %3 = nn.div %2, %b : tensor<4x8xf32>
  %4 = nn.max %3, %a : tensor<4x8xf32>
  %5 = nn.add %i, %i : tensor<4xi32>
  return %4, %5 : tensor<4x8xf32>, tensor<4xi32>
}

// Tests that the unary elementwise ops round-trip, GELU in both variants.
// CHECK-LABEL: func.func @unary
// CHECK-SAME: (%[[X:.+]]: tensor<4x8xbf16>)
// CHECK: %[[NEG:.+]] = nn.neg %[[X]] : tensor<4x8xbf16>
// CHECK: %[[EXP:.+]] = nn.exp %[[NEG]] : tensor<4x8xbf16>
// CHECK: %[[LOG:.+]] = nn.log %[[EXP]] : tensor<4x8xbf16>
// CHECK: %[[TANH:.+]] = nn.tanh %[[LOG]] : tensor<4x8xbf16>
// CHECK: %[[RELU:.+]] = nn.relu %[[TANH]] : tensor<4x8xbf16>
// CHECK: %[[SILU:.+]] = nn.silu %[[RELU]] : tensor<4x8xbf16>
// CHECK: %[[RSQRT:.+]] = nn.rsqrt %[[SILU]] : tensor<4x8xbf16>
// CHECK: %[[SQRT:.+]] = nn.sqrt %[[RSQRT]] : tensor<4x8xbf16>
// CHECK: %[[GELU:.+]] = nn.gelu %[[SQRT]] : tensor<4x8xbf16>
// CHECK: %[[GELU_TANH:.+]] = nn.gelu %[[GELU]] tanh : tensor<4x8xbf16>
// CHECK: return %[[GELU_TANH]]
func.func @unary(%x: tensor<4x8xbf16>) -> tensor<4x8xbf16> {
  %0 = nn.neg %x : tensor<4x8xbf16>
  %1 = nn.exp %0 : tensor<4x8xbf16>
  %2 = nn.log %1 : tensor<4x8xbf16>
  %3 = nn.tanh %2 : tensor<4x8xbf16>
  %4 = nn.relu %3 : tensor<4x8xbf16>
  %5 = nn.silu %4 : tensor<4x8xbf16>
  %6 = nn.rsqrt %5 : tensor<4x8xbf16>
  %7 = nn.sqrt %6 : tensor<4x8xbf16>
  %8 = nn.gelu %7 : tensor<4x8xbf16>
  %9 = nn.gelu %8 tanh : tensor<4x8xbf16>
  return %9 : tensor<4x8xbf16>
}

// Tests that broadcast round-trips: a bias to a new leading shape, a size-1
// dimension repeated, and an integer tensor.
// CHECK-LABEL: func.func @broadcast
// CHECK: nn.broadcast %{{.+}} dims = [2] : tensor<64xf32> -> tensor<2x8x64xf32>
// CHECK: nn.broadcast %{{.+}} dims = [0, 1] : tensor<2x1xf32> -> tensor<2x8x64xf32>
// CHECK: nn.broadcast %{{.+}} dims = [1] : tensor<8xi32> -> tensor<2x8xi32>
func.func @broadcast(%b: tensor<64xf32>, %m: tensor<2x1xf32>, %ids: tensor<8xi32>) -> (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8xi32>) {
  %0 = nn.broadcast %b dims = [2] : tensor<64xf32> -> tensor<2x8x64xf32>
  %1 = nn.broadcast %m dims = [0, 1] : tensor<2x1xf32> -> tensor<2x8x64xf32>
  %2 = nn.broadcast %ids dims = [1] : tensor<8xi32> -> tensor<2x8xi32>
  return %0, %1, %2 : tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8xi32>
}

// Tests that reduce round-trips with each kind, unsorted dims and all dims.
// CHECK-LABEL: func.func @reduce
// CHECK: nn.reduce sum %{{.+}} dims = [2] : tensor<2x8x64xf32> -> tensor<2x8xf32>
// CHECK: nn.reduce max %{{.+}} dims = [2, 0] : tensor<2x8x64xf32> -> tensor<8xf32>
// CHECK: nn.reduce mean %{{.+}} dims = [0, 1, 2] : tensor<2x8x64xf32> -> tensor<f32>
func.func @reduce(%x: tensor<2x8x64xf32>) -> (tensor<2x8xf32>, tensor<8xf32>, tensor<f32>) {
  %0 = nn.reduce sum %x dims = [2] : tensor<2x8x64xf32> -> tensor<2x8xf32>
  %1 = nn.reduce max %x dims = [2, 0] : tensor<2x8x64xf32> -> tensor<8xf32>
  %2 = nn.reduce mean %x dims = [0, 1, 2] : tensor<2x8x64xf32> -> tensor<f32>
  return %0, %1, %2 : tensor<2x8xf32>, tensor<8xf32>, tensor<f32>
}

// Tests that transpose and reshape round-trip.
// CHECK-LABEL: func.func @transpose_reshape
// CHECK: %[[T:.+]] = nn.transpose %{{.+}} perm = [0, 2, 1, 3] : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
// CHECK: nn.reshape %[[T]] : tensor<2x4x8x16xf32> -> tensor<8x128xf32>
// CHECK: nn.reshape %{{.+}} : tensor<2x8xi32> -> tensor<16xi32>
func.func @transpose_reshape(%x: tensor<2x8x4x16xf32>, %ids: tensor<2x8xi32>) -> (tensor<8x128xf32>, tensor<16xi32>) {
  %0 = nn.transpose %x perm = [0, 2, 1, 3] : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
  %1 = nn.reshape %0 : tensor<2x4x8x16xf32> -> tensor<8x128xf32>
  %2 = nn.reshape %ids : tensor<2x8xi32> -> tensor<16xi32>
  return %1, %2 : tensor<8x128xf32>, tensor<16xi32>
}

// Tests that softmax, layer_norm and rms_norm round-trip with their attributes.
// CHECK-LABEL: func.func @normalizations
// CHECK-SAME: (%[[X:.+]]: tensor<2x8x64xf32>, %[[G:.+]]: tensor<64xf32>, %[[B:.+]]: tensor<64xf32>)
// CHECK: nn.softmax %[[X]] dim = 2 : tensor<2x8x64xf32>
// CHECK: nn.softmax %[[X]] dim = 0 : tensor<2x8x64xf32>
// CHECK: nn.layer_norm %[[X]], %[[G]], %[[B]] eps = 1.000000e-05 : tensor<2x8x64xf32>, tensor<64xf32>
// CHECK: nn.layer_norm %[[X]], %[[G]], %[[B]] eps = 9.9999999999999995E-7 : tensor<2x8x64xf32>, tensor<64xf32>
// CHECK: nn.rms_norm %[[X]], %[[G]] eps = 1.000000e-05 : tensor<2x8x64xf32>, tensor<64xf32>
// CHECK: nn.rms_norm %[[X]], %[[G]] eps = 2.500000e-01 : tensor<2x8x64xf32>, tensor<64xf32>
func.func @normalizations(%x: tensor<2x8x64xf32>, %g: tensor<64xf32>, %b: tensor<64xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>) {
  %0 = nn.softmax %x dim = 2 : tensor<2x8x64xf32>
  %1 = nn.softmax %x dim = 0 : tensor<2x8x64xf32>
  %2 = nn.layer_norm %x, %g, %b eps = 1.0e-05 : tensor<2x8x64xf32>, tensor<64xf32>
  %3 = nn.layer_norm %x, %g, %b eps = 1.0e-06 : tensor<2x8x64xf32>, tensor<64xf32>
  %4 = nn.rms_norm %x, %g eps = 1.0e-05 : tensor<2x8x64xf32>, tensor<64xf32>
  %5 = nn.rms_norm %x, %g eps = 0.25 : tensor<2x8x64xf32>, tensor<64xf32>
  return %0, %1, %2, %3, %4, %5 : tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>
}

// Tests that rotary round-trips with the default and another theta.
// CHECK-LABEL: func.func @rotary
// CHECK: nn.rotary %{{.+}} theta = 1.000000e+04 : tensor<2x8x4x16xf32>
// CHECK: nn.rotary %{{.+}} theta = 5.000000e+05 : tensor<2x8x4x16xf32>
func.func @rotary(%q: tensor<2x8x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) {
  %0 = nn.rotary %q theta = 10000.0 : tensor<2x8x4x16xf32>
  %1 = nn.rotary %q theta = 500000.0 : tensor<2x8x4x16xf32>
  return %0, %1 : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>
}

// Tests that attention round-trips plain, causal, with an explicit scale
// (also accepted in the attribute dictionary), with cross-attention lengths,
// and grouped-query (8 heads over 2 kv heads).
// CHECK-LABEL: func.func @attention
// CHECK-SAME: (%[[Q:.+]]: tensor<2x8x4x16xf32>, %[[K:.+]]: tensor<2x8x4x16xf32>, %[[V:.+]]: tensor<2x8x4x16xf32>, %[[KL:.+]]: tensor<2x12x4x16xf32>, %[[QG:.+]]: tensor<2x8x8x16xf32>, %[[KG:.+]]: tensor<2x8x2x16xf32>)
// CHECK: nn.attention %[[Q]], %[[K]], %[[V]] : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>
// CHECK: nn.attention %[[Q]], %[[K]], %[[V]] causal : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>
// CHECK: nn.attention %[[Q]], %[[K]], %[[V]] causal scale = 1.250000e-01 : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>
// CHECK: nn.attention %[[Q]], %[[KL]], %[[KL]] scale = 5.000000e-01 : tensor<2x8x4x16xf32>, tensor<2x12x4x16xf32>
// CHECK: nn.attention %[[QG]], %[[KG]], %[[KG]] causal : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32>
func.func @attention(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x4x16xf32>, %v: tensor<2x8x4x16xf32>,
                     %kl: tensor<2x12x4x16xf32>, %qg: tensor<2x8x8x16xf32>, %kg: tensor<2x8x2x16xf32>)
    -> (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x8x16xf32>) {
  %0 = nn.attention %q, %k, %v : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>
  %1 = nn.attention %q, %k, %v causal : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>
  %2 = nn.attention %q, %k, %v causal scale = 0.125 : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>
  %3 = nn.attention %q, %kl, %kl {scale = 0.5 : f64} : tensor<2x8x4x16xf32>, tensor<2x12x4x16xf32>
  %4 = nn.attention %qg, %kg, %kg causal : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32>
  return %0, %1, %2, %3, %4 : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x8x16xf32>
}

// Tests that embedding and cross_entropy round-trip, with i32 and i64 ids.
// CHECK-LABEL: func.func @embedding_loss
// CHECK-SAME: (%[[TABLE:.+]]: tensor<512x64xf32>, %[[IDS:.+]]: tensor<2x8xi32>, %[[LOGITS:.+]]: tensor<2x8x512xf32>, %[[LABELS:.+]]: tensor<2x8xi64>)
// CHECK: nn.embedding %[[TABLE]][%[[IDS]]] : tensor<512x64xf32>, tensor<2x8xi32> -> tensor<2x8x64xf32>
// CHECK: nn.cross_entropy %[[LOGITS]], %[[LABELS]] : tensor<2x8x512xf32>, tensor<2x8xi64> -> tensor<f32>
func.func @embedding_loss(%table: tensor<512x64xf32>, %ids: tensor<2x8xi32>, %logits: tensor<2x8x512xf32>, %labels: tensor<2x8xi64>) -> (tensor<2x8x64xf32>, tensor<f32>) {
  %x = nn.embedding %table[%ids] : tensor<512x64xf32>, tensor<2x8xi32> -> tensor<2x8x64xf32>
  %l = nn.cross_entropy %logits, %labels : tensor<2x8x512xf32>, tensor<2x8xi64> -> tensor<f32>
  return %x, %l : tensor<2x8x64xf32>, tensor<f32>
}

// Tests that a classifier's cross_entropy (labels of rank 1) round-trips.
// CHECK-LABEL: func.func @cross_entropy_classifier
// CHECK: nn.cross_entropy %{{.+}}, %{{.+}} : tensor<4x10xf32>, tensor<4xi32> -> tensor<f32>
func.func @cross_entropy_classifier(%logits: tensor<4x10xf32>, %labels: tensor<4xi32>) -> tensor<f32> {
  %l = nn.cross_entropy %logits, %labels : tensor<4x10xf32>, tensor<4xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// Tests that cross_entropy of bf16 logits gives a bf16 loss.
// CHECK-LABEL: func.func @cross_entropy_bf16
// CHECK: nn.cross_entropy %{{.+}}, %{{.+}} : tensor<2x8x512xbf16>, tensor<2x8xi32> -> tensor<bf16>
func.func @cross_entropy_bf16(%logits: tensor<2x8x512xbf16>, %labels: tensor<2x8xi32>) -> tensor<bf16> {
  %0 = nn.cross_entropy %logits, %labels : tensor<2x8x512xbf16>, tensor<2x8xi32> -> tensor<bf16>
  return %0 : tensor<bf16>
}

// Tests that constants round-trip: a splat, a dense float and an integer one.
// CHECK-LABEL: func.func @constants
// CHECK: nn.constant dense<1.000000e+00> : tensor<4x8xf32>
// CHECK: nn.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
// CHECK: nn.constant dense<[0, 7]> : tensor<2xi32>
func.func @constants() -> (tensor<4x8xf32>, tensor<2xf32>, tensor<2xi32>) {
  %0 = nn.constant dense<1.0> : tensor<4x8xf32>
  %1 = nn.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %2 = nn.constant dense<[0, 7]> : tensor<2xi32>
  return %0, %1, %2 : tensor<4x8xf32>, tensor<2xf32>, tensor<2xi32>
}

// Tests that the model's argument and result attributes survive a round trip.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: %{{.+}}: tensor<16x4xf32> {nn.param = "head.w"}
// CHECK-SAME: %{{.+}}: tensor<2x16xf32> {nn.input = "x"}
// CHECK-SAME: tensor<2x4xf32> {nn.output = "logits"}
func.func @forward(%w: tensor<16x4xf32> {nn.param = "head.w"}, %x: tensor<2x16xf32> {nn.input = "x"}) -> (tensor<2x4xf32> {nn.output = "logits"}) {
  %y = nn.einsum "bh,hv->bv" %x, %w : (tensor<2x16xf32>, tensor<16x4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// Tests that the declared nn attributes round-trip on arguments, results
// and ops.
// CHECK-LABEL: func.func @declared_attributes
// CHECK-SAME: {nn.param = "w"}
// CHECK-SAME: {nn.state = "w.m"}
// CHECK-SAME: {nn.input = "x"}
// CHECK-SAME: -> (tensor<4xf32> {nn.param = "w"}, tensor<4xf32> {nn.grad = "w"}, tensor<4xf32> {nn.output = "y"})
// CHECK: nn.relu %{{.*}} {nn.layer = 3 : i64} :
// CHECK: nn.relu %{{.*}} {nn.grad_kind = "B", nn.recompute} :
// CHECK: nn.cross_entropy_grad %{{.*}} {nn.grad_kind = "W", nn.mean_count = 8 : i64} :
func.func @declared_attributes(%w: tensor<4xf32> {nn.param = "w"}, %m: tensor<4xf32> {nn.state = "w.m"},
                               %x: tensor<4xf32> {nn.input = "x"}, %l: tensor<2x4xf32>, %y: tensor<2xi32>, %d: tensor<f32>)
    -> (tensor<4xf32> {nn.param = "w"}, tensor<4xf32> {nn.grad = "w"}, tensor<4xf32> {nn.output = "y"}) {
  %0 = nn.relu %x {nn.layer = 3 : i64} : tensor<4xf32>
  %1 = nn.relu %0 {nn.grad_kind = "B", nn.recompute} : tensor<4xf32>
  %2 = nn.cross_entropy_grad %l, %y, %d {nn.grad_kind = "W", nn.mean_count = 8 : i64} : tensor<2x4xf32>, tensor<2xi32>, tensor<f32>
  return %w, %1, %x : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
