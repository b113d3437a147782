// RUN: partita-opt %s --dist-annotate="strategy=megatron mesh=tp=4 sequence-parallel=true" | FileCheck %s

// Tests that in a train step the backward reads a forward norm's output
// through two constraints placed before its first backward reader: the
// sequence shard, then the whole sequence (so the backward gathers it
// again instead of the forward's gather staying live); forward readers keep
// the norm's output itself. A backward op whose weight operand is split on
// the contracted dimension (the column-parallel input gradient) is pinned
// partial, found by its rule like the forward's row-parallel linear.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[X:.*]] = dist.constraint %arg5 <@mesh, [{}p0, {"tp"}p0, {}p0]>
// CHECK: %[[LN:.*]] = nn.layer_norm %[[X]],
// CHECK: %[[H:.*]] = nn.einsum "bsh,hf->bsf" %[[LN]], %arg3
// CHECK: %[[DX:.*]] = nn.einsum "bsf,hf->bsh" %arg6, %arg3 {nn.grad_kind = "B"}
// CHECK: dist.constraint %[[DX]] <@mesh, [{}p0, {}p0, {}p0], partial={"tp"}>
// CHECK: %[[SH:.*]] = dist.constraint %[[LN]] <@mesh, [{}p0, {"tp"}p0, {}p0]>
// CHECK: %[[WH:.*]] = dist.constraint %[[SH]] <@mesh, [{}p0, {}p0, {}p0]>
// CHECK: nn.einsum "bsf,bsh->hf" %arg6, %[[WH]] {nn.grad_kind = "W"}
func.func @train_step(%wte: tensor<64x8xf32> {nn.param = "wte"},
                      %g: tensor<8xf32> {nn.param = "layers.0.ln2.gamma"},
                      %b: tensor<8xf32> {nn.param = "layers.0.ln2.beta"},
                      %w1: tensor<8x32xf32> {nn.param = "layers.0.mlp.w1"},
                      %w2: tensor<32x8xf32> {nn.param = "layers.0.mlp.w2"},
                      %x: tensor<4x16x8xf32> {nn.input = "x"},
                      %dh: tensor<4x16x32xf32> {nn.input = "dh"})
    -> (tensor<4x16x32xf32>, tensor<4x16x8xf32>, tensor<8x32xf32>) {
  %ln = nn.layer_norm %x, %g, %b eps = 1.0e-5 : tensor<4x16x8xf32>, tensor<8xf32>
  %h = nn.einsum "bsh,hf->bsf" %ln, %w1 : (tensor<4x16x8xf32>, tensor<8x32xf32>) -> tensor<4x16x32xf32>
  %dx = nn.einsum "bsf,hf->bsh" %dh, %w1 {nn.grad_kind = "B"} : (tensor<4x16x32xf32>, tensor<8x32xf32>) -> tensor<4x16x8xf32>
  %dw = nn.einsum "bsf,bsh->hf" %dh, %ln {nn.grad_kind = "W"} : (tensor<4x16x32xf32>, tensor<4x16x8xf32>) -> tensor<8x32xf32>
  return %h, %dx, %dw : tensor<4x16x32xf32>, tensor<4x16x8xf32>, tensor<8x32xf32>
}
