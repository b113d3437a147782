// RUN: partita-opt %s --dist-partition -split-input-file | FileCheck %s \
// RUN:   --implicit-check-not=dist.all_gather --implicit-check-not=dist.all_reduce \
// RUN:   --implicit-check-not=dist.reduce_scatter --implicit-check-not=dist.slice

// Tests that nn.cross_entropy_grad with its tokens split over dp=2 divides by
// the global token count: the local op sees [2, 8] labels (16 positions) but
// carries nn.mean_count = 32, the 4 x 8 positions of the global labels, so
// the shards' gradients are those of the unpartitioned mean (not twice them).
dist.mesh @mesh <["dp"=2]>
// CHECK-LABEL: func.func @ce_grad_dp
// CHECK: nn.cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}} {nn.mean_count = 32 : i64} : tensor<2x8x64xf32>, tensor<2x8xi32>, tensor<f32>
func.func @ce_grad_dp(
    %logits: tensor<4x8x64xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}, {}]>},
    %labels: tensor<4x8xi32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>},
    %dloss: tensor<f32> {dist.sharding = #dist.sharding<@mesh, []>})
    -> (tensor<4x8x64xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}, {}]>}) {
  %g = nn.cross_entropy_grad %logits, %labels, %dloss {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {}, {}]>]} : tensor<4x8x64xf32>, tensor<4x8xi32>, tensor<f32>
  return %g : tensor<4x8x64xf32>
}

// -----

// Tests that a replicated nn.cross_entropy_grad keeps dividing by its own
// (global) count: nn.mean_count equals the 4 x 8 local positions.
dist.mesh @mesh <["dp"=2]>
// CHECK-LABEL: func.func @ce_grad_replicated
// CHECK: nn.cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}} {nn.mean_count = 32 : i64} : tensor<4x8x64xf32>, tensor<4x8xi32>, tensor<f32>
func.func @ce_grad_replicated(
    %logits: tensor<4x8x64xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}, {}]>},
    %labels: tensor<4x8xi32> {dist.sharding = #dist.sharding<@mesh, [{}, {}]>},
    %dloss: tensor<f32> {dist.sharding = #dist.sharding<@mesh, []>})
    -> (tensor<4x8x64xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}, {}]>}) {
  %g = nn.cross_entropy_grad %logits, %labels, %dloss {dist.sharding = [#dist.sharding<@mesh, [{}, {}, {}]>]} : tensor<4x8x64xf32>, tensor<4x8xi32>, tensor<f32>
  return %g : tensor<4x8x64xf32>
}
