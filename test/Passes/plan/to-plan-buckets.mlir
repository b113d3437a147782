// RUN: partita-translate --to-plan --plan-text %s | FileCheck %s

// Tests that dist.bucket carries into the plan as Collective.bucket on each
// member (and that a reduction without it has none), in program order.

// (ALL_REDUCE, sum and input 0 are proto3 defaults, not printed.)
// CHECK:      name: "forward"
// CHECK:      collective {
// CHECK-NEXT:   axes: "dp"
// CHECK-NEXT:   output: 2
// CHECK-NEXT:   bucket: 3
// CHECK-NEXT: }
// CHECK:      collective {
// CHECK-NEXT:   axes: "dp"
// CHECK-NEXT:   input: 1
// CHECK-NEXT:   output: 3
// CHECK-NEXT:   bucket: 3
// CHECK-NEXT: }
// CHECK:      collective {
// CHECK-NEXT:   axes: "dp"
// CHECK-NEXT:   output: 4
// CHECK-NEXT: }
dist.mesh @mesh <["dp"=2]>
func.func @forward(
    %x: tensor<4xf32> {nn.input = "x", dist.global_type = tensor<4xf32>,
                       dist.global_sharding = #dist.sharding<@mesh, [{}]>},
    %y: tensor<2xf32> {nn.input = "y", dist.global_type = tensor<2xf32>,
                       dist.global_sharding = #dist.sharding<@mesh, [{}]>})
    -> (tensor<4xf32> {nn.output = "a", dist.global_type = tensor<4xf32>,
                       dist.global_sharding = #dist.sharding<@mesh, [{}]>},
        tensor<2xf32> {nn.output = "b", dist.global_type = tensor<2xf32>,
                       dist.global_sharding = #dist.sharding<@mesh, [{}]>},
        tensor<4xf32> {nn.output = "c", dist.global_type = tensor<4xf32>,
                       dist.global_sharding = #dist.sharding<@mesh, [{}]>})
    attributes {dist.mesh = @mesh} {
  %a = dist.all_reduce %x on @mesh axes = ["dp"] kind = sum {dist.bucket = 3 : i64} : tensor<4xf32>
  %b = dist.all_reduce %y on @mesh axes = ["dp"] kind = sum {dist.bucket = 3 : i64} : tensor<2xf32>
  %c = dist.all_reduce %x on @mesh axes = ["dp"] kind = sum : tensor<4xf32>
  return %a, %b, %c : tensor<4xf32>, tensor<2xf32>, tensor<4xf32>
}
