// RUN: partita-opt %s -split-input-file --dist-propagate --dist-partition | FileCheck %s \
// RUN:   --implicit-check-not=dist.all_gather --implicit-check-not=dist.all_reduce \
// RUN:   --implicit-check-not=dist.reduce_scatter --implicit-check-not=dist.all_to_all \
// RUN:   --implicit-check-not=dist.slice --implicit-check-not=dist.collective_permute
// RUN: partita-opt %s -split-input-file -test-print-op-costs 2>&1 | FileCheck %s --check-prefix=COST

// ptest.sum_normalize (test/lib/TestDialect.cpp) is an op outside the nn
// dialect with its own sharding rule ("ij->ij", j collective), partition
// hook and cost: dist-propagate and dist-partition run it through its
// interfaces alone (no code under passes/ names it).

// Tests that with its columns split the hook's local form runs: local row
// sums all-reduced over the column axis, no gather of the input.
dist.mesh @mesh <["dp"=2, "tp"=4]>
// CHECK-LABEL: func.func @split_columns
// CHECK-SAME: (%[[X:.*]]: tensor<4x4xf32>
// CHECK: %[[S:.*]] = nn.reduce sum %[[X]] dims = [1] : tensor<4x4xf32> -> tensor<4xf32>
// CHECK: %[[G:.*]] = dist.all_reduce %[[S]] on @mesh axes = ["tp"] kind = sum : tensor<4xf32>
// CHECK: %[[B:.*]] = nn.broadcast %[[G]] dims = [0] : tensor<4xf32> -> tensor<4x4xf32>
// CHECK: %[[Y:.*]] = nn.div %[[X]], %[[B]] : tensor<4x4xf32>
// CHECK: return %[[Y]] : tensor<4x4xf32>
// COST: remark: ptest.sum_normalize: flops=256 transcendentals=0 read=512 written=512
func.func @split_columns(%x: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {"tp"}]>})
    -> tensor<8x16xf32> {
  %y = "ptest.sum_normalize"(%x) : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}

// -----

// Tests that with only its rows split the op is cloned on the local rows
// (the default hook, dist::partitionByClone), with no communication.
dist.mesh @mesh <["dp"=2, "tp"=4]>
// CHECK-LABEL: func.func @split_rows
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>
// CHECK: %[[Y:.*]] = "ptest.sum_normalize"(%[[X]]) : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK: return %[[Y]] : tensor<4x8xf32>
// COST: remark: ptest.sum_normalize: flops=128 transcendentals=0 read=256 written=256
func.func @split_rows(%x: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>})
    -> tensor<8x8xf32> {
  %y = "ptest.sum_normalize"(%x) : (tensor<8x8xf32>) -> tensor<8x8xf32>
  return %y : tensor<8x8xf32>
}

// -----

// Tests that a hook that reduces over its split collective factor itself
// (ptest.row_max: local maxima, then dist.all_reduce max) leaves the result
// whole, not partial: it says so (leavesResultsPartial), so the returned
// value needs no further reduction and the input is never gathered.
dist.mesh @mesh <["dp"=2, "tp"=4]>
// CHECK-LABEL: func.func @row_max_split_columns
// CHECK-SAME: (%[[X:.*]]: tensor<4x4xf32>
// CHECK-SAME: -> (tensor<4xf32> {dist.global_sharding = #dist.sharding<@mesh, [{"dp"}]>
// CHECK: %[[M:.*]] = "ptest.row_max"(%[[X]]) : (tensor<4x4xf32>) -> tensor<4xf32>
// CHECK: %[[G:.*]] = dist.all_reduce %[[M]] on @mesh axes = ["tp"] kind = max : tensor<4xf32>
// CHECK: return %[[G]] : tensor<4xf32>
// COST: remark: ptest.row_max: flops=128 transcendentals=0 read=512 written=32
func.func @row_max_split_columns(%x: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {"tp"}]>})
    -> tensor<8xf32> {
  %y = "ptest.row_max"(%x) : (tensor<8x16xf32>) -> tensor<8xf32>
  return %y : tensor<8xf32>
}
