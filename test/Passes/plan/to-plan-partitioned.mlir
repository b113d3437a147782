// RUN: partita-translate --to-plan --plan-text %s | FileCheck %s

// Tests that a per-device function (dist-partition's output form) lowers
// with the mesh, each argument's and result's sharding and global shape
// (from dist.global_sharding), the partial axes of a result, and its
// collectives with their axes and dimensions.

// CHECK:      mesh {
// CHECK-NEXT:   axes {
// CHECK-NEXT:     name: "dp"
// CHECK-NEXT:     size: 2
// CHECK-NEXT:   }
// CHECK-NEXT:   axes {
// CHECK-NEXT:     name: "tp"
// CHECK-NEXT:     size: 2
// CHECK-NEXT:   }
// CHECK-NEXT:   devices: 3
// CHECK-NEXT:   devices: 2
// CHECK-NEXT:   devices: 1
// CHECK-NEXT:   devices: 0
// CHECK-NEXT: }
// CHECK:      name: "forward"
// CHECK-NEXT: partitioned: true
// CHECK-NEXT: buffers {
// CHECK-NEXT:   local_shape: 4
// CHECK-NEXT:   local_shape: 4
// CHECK-NEXT:   global_shape: 8
// CHECK-NEXT:   global_shape: 4
// CHECK-NEXT:   sharding {
// CHECK-NEXT:     axes: "dp"
// CHECK-NEXT:   }
// CHECK-NEXT:   sharding {
// CHECK-NEXT:   }
// CHECK-NEXT:   role: INPUT
// CHECK-NEXT:   name: "x"
// The slice and the all_gather write buffers 1 and 2; the returned sum is
// partial over tp, with global shape 8x4.
// CHECK:        id: 3
// CHECK-NEXT:   local_shape: 4
// CHECK-NEXT:   local_shape: 4
// CHECK-NEXT:   global_shape: 8
// CHECK-NEXT:   global_shape: 4
// CHECK-NEXT:   sharding {
// CHECK-NEXT:     axes: "dp"
// CHECK-NEXT:   }
// CHECK-NEXT:   sharding {
// CHECK-NEXT:   }
// CHECK-NEXT:   partial_axes: "tp"
// CHECK-NEXT:   name: "y"
// CHECK:      instructions {
// CHECK-NEXT:   collective {
// CHECK-NEXT:     kind: SLICE
// CHECK-NEXT:     axes: "tp"
// CHECK-NEXT:     dim: 1
// CHECK-NEXT:     output: 1
// CHECK-NEXT:   }
// CHECK:        collective {
// CHECK-NEXT:     kind: ALL_GATHER
// CHECK-NEXT:     axes: "tp"
// CHECK-NEXT:     dim: 1
// CHECK-NEXT:     input: 1
// CHECK-NEXT:     output: 2
// CHECK-NEXT:   }
// CHECK:          kind: ADD
dist.mesh @mesh <["dp"=2, "tp"=2], devices=[3, 2, 1, 0]>
func.func @forward(
    %x: tensor<4x4xf32> {nn.input = "x", dist.global_type = tensor<8x4xf32>,
                         dist.global_sharding = #dist.sharding<@mesh, [{"dp"}, {}]>})
    -> (tensor<4x4xf32> {nn.output = "y", dist.global_type = tensor<8x4xf32>,
                         dist.global_sharding = #dist.sharding<@mesh, [{"dp"}, {}], partial={"tp"}>})
    attributes {dist.mesh = @mesh} {
  %s = dist.slice %x on @mesh axes = ["tp"] dim = 1 : tensor<4x4xf32> -> tensor<4x2xf32>
  %g = dist.all_gather %s on @mesh axes = ["tp"] dim = 1 : tensor<4x2xf32> -> tensor<4x4xf32>
  %y = nn.add %g, %g : tensor<4x4xf32>
  return %y : tensor<4x4xf32>
}
