// RUN: partita-opt %s --dist-annotate="strategy=megatron mesh=tp=4 sequence-parallel=true" | FileCheck %s --check-prefixes=CHECK,TP
// RUN: partita-opt %s --dist-annotate="strategy=dp+megatron mesh=dp=2,tp=4 sequence-parallel=true" | FileCheck %s --check-prefixes=CHECK,DPTP
// RUN: partita-opt %s --dist-annotate="strategy=megatron mesh=tp=4" | FileCheck %s --check-prefix=OFF

// Tests that sequence-parallel pins the residual stream (the norm's input,
// here the embedding output) to a seq split over tp, and the outputs of the
// vocabulary-parallel embedding and of the row-parallel einsum (w2 split on
// the contracted f) to partial over tp with the sequence whole; the
// column-parallel einsum (w1 split on the kept f) gets nothing. Under
// dp+megatron dimension 0 is also split over dp. Without the option no
// constraint is written.
// CHECK-LABEL: func.func @forward
// CHECK: %[[E:.*]] = nn.embedding
// TP: %[[EP:.*]] = dist.constraint %[[E]] <@mesh, [{}p0, {}p0, {}p0], partial={"tp"}> : tensor<4x16x8xf32>
// DPTP: %[[EP:.*]] = dist.constraint %[[E]] <@mesh, [{"dp"}p0, {}p0, {}p0], partial={"tp"}> : tensor<4x16x8xf32>
// TP: %[[ES:.*]] = dist.constraint %[[EP]] <@mesh, [{}p0, {"tp"}p0, {}p0]> : tensor<4x16x8xf32>
// DPTP: %[[ES:.*]] = dist.constraint %[[EP]] <@mesh, [{"dp"}p0, {"tp"}p0, {}p0]> : tensor<4x16x8xf32>
// CHECK: %[[LN:.*]] = nn.layer_norm %[[ES]],
// CHECK: %[[H:.*]] = nn.einsum "bsh,hf->bsf" %[[LN]],
// CHECK-NOT: dist.constraint
// CHECK: %[[P:.*]] = nn.einsum "bsf,fh->bsh" %[[H]],
// TP: %[[PP:.*]] = dist.constraint %[[P]] <@mesh, [{}p0, {}p0, {}p0], partial={"tp"}> : tensor<4x16x8xf32>
// DPTP: %[[PP:.*]] = dist.constraint %[[P]] <@mesh, [{"dp"}p0, {}p0, {}p0], partial={"tp"}> : tensor<4x16x8xf32>
// CHECK: %[[R:.*]] = nn.add %[[EP]], %[[PP]]
// CHECK: return %[[R]]
// OFF-LABEL: func.func @forward
// OFF-NOT: dist.constraint
// OFF: return
func.func @forward(%wte: tensor<64x8xf32> {nn.param = "wte"},
                   %g: tensor<8xf32> {nn.param = "layers.0.ln2.gamma"},
                   %b: tensor<8xf32> {nn.param = "layers.0.ln2.beta"},
                   %w1: tensor<8x32xf32> {nn.param = "layers.0.mlp.w1"},
                   %w2: tensor<32x8xf32> {nn.param = "layers.0.mlp.w2"},
                   %ids: tensor<4x16xi32> {nn.input = "ids"}) -> tensor<4x16x8xf32> {
  %e = nn.embedding %wte[%ids] : tensor<64x8xf32>, tensor<4x16xi32> -> tensor<4x16x8xf32>
  %ln = nn.layer_norm %e, %g, %b eps = 1.0e-5 : tensor<4x16x8xf32>, tensor<8xf32>
  %h = nn.einsum "bsh,hf->bsf" %ln, %w1 : (tensor<4x16x8xf32>, tensor<8x32xf32>) -> tensor<4x16x32xf32>
  %p = nn.einsum "bsf,fh->bsh" %h, %w2 : (tensor<4x16x32xf32>, tensor<32x8xf32>) -> tensor<4x16x8xf32>
  %r = nn.add %e, %p : tensor<4x16x8xf32>
  return %r : tensor<4x16x8xf32>
}
