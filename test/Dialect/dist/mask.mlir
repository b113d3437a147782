// RUN: partita-opt %s -split-input-file | partita-opt -split-input-file | FileCheck %s
// RUN: partita-opt %s -split-input-file -mlir-print-op-generic | partita-opt -split-input-file | FileCheck %s

// Round trip of dist.mask, the op that writes a value into the padding of a
// padded dimension; its diagnostics are in mask-invalid.mlir.

dist.mesh @mesh <["dp"=4, "tp"=4]>
// Tests that dist.mask round-trips with axes, with no axes, with -inf and on integers.
// CHECK-LABEL: func.func @mask
// CHECK: dist.mask %{{.*}} on @mesh axes = ["dp"] dim = 0 size = 6 value = 0.000000e+00 : tensor<2x16xf32>
// CHECK: dist.mask %{{.*}} on @mesh axes = [] dim = 1 size = 50 value = 0xFFF0000000000000 : tensor<2x52xf32>
// CHECK: dist.mask %{{.*}} on @mesh axes = ["dp", "tp"] dim = 0 size = 30 value = -1.000000e+00 : tensor<2xi32>
func.func @mask(%x: tensor<2x16xf32>, %y: tensor<2x52xf32>, %l: tensor<2xi32>)
    -> (tensor<2x16xf32>, tensor<2x52xf32>, tensor<2xi32>) {
  %0 = dist.mask %x on @mesh axes = ["dp"] dim = 0 size = 6 value = 0.0 : tensor<2x16xf32>
  %1 = dist.mask %y on @mesh axes = [] dim = 1 size = 50 value = 0xFFF0000000000000 : tensor<2x52xf32>
  %2 = dist.mask %l on @mesh axes = ["dp", "tp"] dim = 0 size = 30 value = -1.0 : tensor<2xi32>
  return %0, %1, %2 : tensor<2x16xf32>, tensor<2x52xf32>, tensor<2xi32>
}

// -----

dist.mesh @mesh <["dp"=4, "tp"=4]>
// Tests that a sharding whose axes do not divide a dimension is valid (padded) when the dimension has at least one element per shard.
// CHECK-LABEL: func.func @padded_sharding
// CHECK-SAME: tensor<6x50xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {"tp"}]>}
func.func @padded_sharding(%x: tensor<6x50xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {"tp"}]>}) {
  return
}
