// RUN: partita-opt %s --dist-partition | FileCheck %s --check-prefix=KEEP \
// RUN:   --implicit-check-not=dist.all_reduce
// RUN: partita-opt %s --dist-partition=keep-partial-results=false \
// RUN:   | FileCheck %s --check-prefix=REDUCE

// Tests that a partial value returned where the function result is not
// partial stays partial by default (the runtime sums it when gathering), and
// is all-reduced in the program with keep-partial-results=false.
dist.mesh @mesh <["dp"=2]>
// KEEP-LABEL: func.func @loss
// KEEP-SAME: -> (tensor<f32> {dist.global_sharding = #dist.sharding<@mesh, [], partial={"dp"}>, dist.global_type = tensor<f32>})
// KEEP: %[[L:.*]] = nn.cross_entropy %{{.*}}, %{{.*}} : tensor<2x16xf32>, tensor<2xi32> -> tensor<f32>
// KEEP: %[[H:.*]] = nn.constant dense<5.000000e-01> : tensor<f32>
// KEEP: %[[S:.*]] = nn.mul %[[L]], %[[H]] : tensor<f32>
// KEEP: return %[[S]] : tensor<f32>
// REDUCE-LABEL: func.func @loss
// REDUCE-SAME: -> (tensor<f32> {dist.global_sharding = #dist.sharding<@mesh, []>, dist.global_type = tensor<f32>})
// REDUCE: %[[S:.*]] = nn.mul
// REDUCE: %[[A:.*]] = dist.all_reduce %[[S]] on @mesh axes = ["dp"] kind = sum : tensor<f32>
// REDUCE: return %[[A]] : tensor<f32>
func.func @loss(%logits: tensor<4x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>},
                %labels: tensor<4xi32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}]>})
    -> (tensor<f32> {dist.sharding = #dist.sharding<@mesh, []>}) {
  %l = nn.cross_entropy %logits, %labels {dist.sharding = [#dist.sharding<@mesh, [], partial={"dp"}>]} : tensor<4x16xf32>, tensor<4xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// Tests the same for a function result without a sharding of its own.
// KEEP-LABEL: func.func @unannotated_result
// KEEP-SAME: -> (tensor<f32> {dist.global_sharding = #dist.sharding<@mesh, [], partial={"dp"}>, dist.global_type = tensor<f32>})
// KEEP: return %{{.*}} : tensor<f32>
// REDUCE-LABEL: func.func @unannotated_result
// REDUCE-SAME: -> (tensor<f32> {dist.global_sharding = #dist.sharding<@mesh, []>, dist.global_type = tensor<f32>})
// REDUCE: %[[A:.*]] = dist.all_reduce %{{.*}} on @mesh axes = ["dp"] kind = sum : tensor<f32>
// REDUCE: return %[[A]] : tensor<f32>
func.func @unannotated_result(%logits: tensor<4x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>},
                              %labels: tensor<4xi32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}]>})
    -> tensor<f32> {
  %l = nn.cross_entropy %logits, %labels {dist.sharding = [#dist.sharding<@mesh, [], partial={"dp"}>]} : tensor<4x16xf32>, tensor<4xi32> -> tensor<f32>
  return %l : tensor<f32>
}
