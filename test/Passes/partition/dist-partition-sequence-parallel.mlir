// RUN: partita-opt %s --dist-partition | FileCheck %s \
// RUN:   --implicit-check-not=dist.all_gather --implicit-check-not=dist.all_reduce \
// RUN:   --implicit-check-not=dist.reduce_scatter --implicit-check-not=dist.all_to_all \
// RUN:   --implicit-check-not=dist.slice --implicit-check-not=dist.collective_permute

// Tests Megatron's sequence parallelism (Korthikanti et al. 2022) on an MLP
// block: with the residual stream split on seq over tp, the all_reduce after
// the row-parallel projection becomes a reduce_scatter (the partial sum meets
// a consumer split on seq), and the column-parallel projection's input is
// all-gathered on seq: one reduce_scatter + all_gather pair per block, and
// the layer norm runs on the local sequence shard. Shapes by hand: seq 16
// over tp=4 is 4, ffn 256 over tp is 64.
dist.mesh @mesh <["tp"=4]>
// CHECK-LABEL: func.func @sp_mlp_block
// CHECK-SAME: (%[[X:.*]]: tensor<2x4x64xf32> {{.*}}, %[[G:.*]]: tensor<64xf32> {{.*}}, %[[B:.*]]: tensor<64xf32> {{.*}}, %[[W1:.*]]: tensor<64x64xf32> {{.*}}, %[[W2:.*]]: tensor<64x64xf32> {{.*}})
// CHECK: %[[LN:.*]] = nn.layer_norm %[[X]], %[[G]], %[[B]] {{.*}} : tensor<2x4x64xf32>, tensor<64xf32>
// CHECK: %[[AG:.*]] = dist.all_gather %[[LN]] on @mesh axes = ["tp"] dim = 1 : tensor<2x4x64xf32> -> tensor<2x16x64xf32>
// CHECK: %[[H:.*]] = nn.einsum "bsh,hf->bsf" %[[AG]], %[[W1]] : (tensor<2x16x64xf32>, tensor<64x64xf32>) -> tensor<2x16x64xf32>
// CHECK: %[[A:.*]] = nn.gelu %[[H]]
// CHECK: %[[P:.*]] = nn.einsum "bsf,fh->bsh" %[[A]], %[[W2]] : (tensor<2x16x64xf32>, tensor<64x64xf32>) -> tensor<2x16x64xf32>
// CHECK: %[[RS:.*]] = dist.reduce_scatter %[[P]] on @mesh axes = ["tp"] dim = 1 kind = sum : tensor<2x16x64xf32> -> tensor<2x4x64xf32>
// CHECK: %[[R:.*]] = nn.add %[[X]], %[[RS]] : tensor<2x4x64xf32>
// CHECK: return %[[R]] : tensor<2x4x64xf32>
func.func @sp_mlp_block(
    %x: tensor<2x16x64xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}, {}]>},
    %gamma: tensor<64xf32> {dist.sharding = #dist.sharding<@mesh, [{}]>},
    %beta: tensor<64xf32> {dist.sharding = #dist.sharding<@mesh, [{}]>},
    %w1: tensor<64x256xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>},
    %w2: tensor<256x64xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>})
    -> (tensor<2x16x64xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}, {}]>}) {
  %ln = nn.layer_norm %x, %gamma, %beta eps = 1.0e-5 {dist.sharding = [#dist.sharding<@mesh, [{}, {"tp"}, {}]>]} : tensor<2x16x64xf32>, tensor<64xf32>
  %h = nn.einsum "bsh,hf->bsf" %ln, %w1 {dist.sharding = [#dist.sharding<@mesh, [{}, {}, {"tp"}]>]} : (tensor<2x16x64xf32>, tensor<64x256xf32>) -> tensor<2x16x256xf32>
  %a = nn.gelu %h tanh {dist.sharding = [#dist.sharding<@mesh, [{}, {}, {"tp"}]>]} : tensor<2x16x256xf32>
  %p = nn.einsum "bsf,fh->bsh" %a, %w2 {dist.sharding = [#dist.sharding<@mesh, [{}, {}, {}], partial={"tp"}>]} : (tensor<2x16x256xf32>, tensor<256x64xf32>) -> tensor<2x16x64xf32>
  %r = nn.add %x, %p {dist.sharding = [#dist.sharding<@mesh, [{}, {"tp"}, {}]>]} : tensor<2x16x64xf32>
  return %r : tensor<2x16x64xf32>
}
