// RUN: partita-translate --to-plan --plan-text %s | FileCheck %s

// Tests that dist.mask lowers to a MASK collective with its axes, dimension,
// real size and value, and that a padded argument and result keep their real
// global shape (6 rows: 2 per device on dp=4 hold 8, the last 2 padding).

// CHECK:      name: "forward"
// CHECK-NEXT: partitioned: true
// CHECK-NEXT: buffers {
// CHECK-NEXT:   local_shape: 2
// CHECK-NEXT:   local_shape: 16
// CHECK-NEXT:   global_shape: 6
// CHECK-NEXT:   global_shape: 16
// CHECK:      instructions {
// CHECK-NEXT:   collective {
// CHECK-NEXT:     kind: MASK
// CHECK-NEXT:     axes: "dp"
// CHECK-NEXT:     output: 1
// CHECK-NEXT:     size: 6
// CHECK-NEXT:     value: -inf
// CHECK-NEXT:   }
// CHECK:      instructions {
// CHECK-NEXT:   collective {
// CHECK-NEXT:     kind: MASK
// CHECK-NEXT:     dim: 1
// CHECK-NEXT:     input: 1
// CHECK-NEXT:     output: 2
// CHECK-NEXT:     size: 13
// CHECK-NEXT:     value: 2.5
dist.mesh @mesh <["dp"=4]>
func.func @forward(%x: tensor<2x16xf32> {nn.input = "x", dist.global_sharding = #dist.sharding<@mesh, [{"dp"}, {}]>, dist.global_type = tensor<6x16xf32>})
    -> (tensor<2x16xf32> {dist.global_sharding = #dist.sharding<@mesh, [{"dp"}, {}]>, dist.global_type = tensor<6x16xf32>}) attributes {dist.mesh = @mesh} {
  %0 = dist.mask %x on @mesh axes = ["dp"] dim = 0 size = 6 value = 0xFFF0000000000000 : tensor<2x16xf32>
  %1 = dist.mask %0 on @mesh axes = [] dim = 1 size = 13 value = 2.5 : tensor<2x16xf32>
  return %1 : tensor<2x16xf32>
}
