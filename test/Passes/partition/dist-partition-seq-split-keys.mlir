// RUN: partita-opt %s --dist-partition=split-key-attention=true | FileCheck %s \
// RUN:   --implicit-check-not=dist.all_gather --implicit-check-not=dist.all_reduce \
// RUN:   --implicit-check-not=dist.reduce_scatter --implicit-check-not=dist.all_to_all \
// RUN:   --implicit-check-not=dist.slice --implicit-check-not=dist.collective_permute \
// RUN:   --implicit-check-not=dist.axis_index
// RUN: partita-opt %s --dist-partition | FileCheck %s --check-prefix=GATHER

// And on the runtime, against the unpartitioned functions (@whole*, which
// carry no sharding and are left alone): each partitioned function computes
// its reference; a reference with another scale fails the check.
// RUN: partita-opt %s --dist-partition=split-key-attention=true -o %t.mlir
// RUN: partita-translate --to-plan --plan-function causal_keys --plan-reference whole %t.mlir -o %t.causal.pb
// RUN: partita run %t.causal.pb --check | FileCheck %s --check-prefix=NUM
// RUN: partita-translate --to-plan --plan-function both_split --plan-reference whole_scaled %t.mlir -o %t.both.pb
// RUN: partita run %t.both.pb --check | FileCheck %s --check-prefix=NUM
// RUN: partita-translate --to-plan --plan-function noncausal_keys --plan-reference whole_noncausal %t.mlir -o %t.noncausal.pb
// RUN: partita run %t.noncausal.pb --check | FileCheck %s --check-prefix=NUM
// RUN: partita-translate --to-plan --plan-function both_split --plan-reference whole %t.mlir -o %t.wrong.pb
// RUN: not partita run %t.wrong.pb --check 2>&1 | FileCheck %s --check-prefix=WRONG
// NUM-NOT: FAILED
// NUM: check logits: max abs diff {{.*}} (ok, rtol 1e-05)
// WRONG: check logits: max abs diff {{.*}} (FAILED, rtol 1e-05)

// With split-key-attention, nn.attention whose keys are split (on axes the
// queries are not split on) merges per-shard partial outputs: the softmax
// numerators against the row max and sum all_reduced over the key axes,
// the output a partial sum over them. Derived by hand; GQA, 4 heads over 2
// kv heads (g = 2), sequence 8 split in 4 (sp=4) or 2 (sp=2 of dp x sp).

dist.mesh @mesh <["sp"=4]>
dist.mesh @mesh2 <["dp"=2, "sp"=2]>

// Tests that causal attention over keys split on sp takes its key positions
// from axis_index(sp) * 2 and its query positions from a constant iota (the
// queries are whole), and that the output is partial over sp.
// CHECK-LABEL: func.func @causal_keys
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<2x8x4x4xf32> {{[^%]*}}%[[K:[^:]*]]: tensor<2x2x2x4xf32> {{[^%]*}}%[[V:[^:]*]]: tensor<2x2x2x4xf32>
// CHECK-SAME: -> (tensor<2x8x4x4xf32> {dist.global_sharding = #dist.sharding<@mesh, [{}, {}, {}, {}], partial={"sp"}>
// CHECK: %[[QG:.*]] = nn.reshape %[[Q]] : tensor<2x8x4x4xf32> -> tensor<2x8x2x2x4xf32>
// CHECK: %[[S:.*]] = nn.einsum "bskgd,btkd->bkgst" %[[QG]], %[[K]] : (tensor<2x8x2x2x4xf32>, tensor<2x2x2x4xf32>) -> tensor<2x2x2x8x2xf32>
// CHECK: nn.constant dense<5.000000e-01> : tensor<2x2x2x8x2xf32>
// CHECK: %[[QPOS:.*]] = nn.constant dense<[0, 1, 2, 3, 4, 5, 6, 7]> : tensor<8xi32>
// CHECK: %[[IOTA:.*]] = nn.constant dense<[0, 1]> : tensor<2xi32>
// CHECK: %[[IDX:.*]] = dist.axis_index on @mesh axes = ["sp"] : tensor<i32>
// CHECK: %[[LEN:.*]] = nn.constant dense<2> : tensor<i32>
// CHECK: %[[START:.*]] = nn.mul %[[IDX]], %[[LEN]]
// CHECK: %[[STARTB:.*]] = nn.broadcast %[[START]] dims = [] : tensor<i32> -> tensor<2xi32>
// CHECK: %[[KPOS:.*]] = nn.add %[[IOTA]], %[[STARTB]] : tensor<2xi32>
// CHECK: nn.broadcast %[[KPOS]] dims = [1] : tensor<2xi32> -> tensor<8x2xi32>
// CHECK: nn.broadcast %[[QPOS]] dims = [0] : tensor<8xi32> -> tensor<8x2xi32>
// CHECK: nn.embedding {{.*}} : tensor<2x1xf32>, tensor<8x2xi32> -> tensor<8x2x1xf32>
// CHECK: %[[MASKED:.*]] = nn.add {{.*}} : tensor<2x2x2x8x2xf32>
// CHECK: %[[MAX:.*]] = nn.reduce max %[[MASKED]] dims = [4] : tensor<2x2x2x8x2xf32> -> tensor<2x2x2x8xf32>
// CHECK: %[[GMAX:.*]] = dist.all_reduce %[[MAX]] on @mesh axes = ["sp"] kind = max : tensor<2x2x2x8xf32>
// CHECK: %[[GMAXB:.*]] = nn.broadcast %[[GMAX]] dims = [0, 1, 2, 3]
// CHECK: %[[SHIFT:.*]] = nn.sub %[[MASKED]], %[[GMAXB]]
// CHECK: %[[E:.*]] = nn.exp %[[SHIFT]]
// CHECK: %[[SUM:.*]] = nn.reduce sum %[[E]] dims = [4]
// CHECK: %[[GSUM:.*]] = dist.all_reduce %[[SUM]] on @mesh axes = ["sp"] kind = sum : tensor<2x2x2x8xf32>
// CHECK: %[[GSUMB:.*]] = nn.broadcast %[[GSUM]] dims = [0, 1, 2, 3]
// CHECK: %[[P:.*]] = nn.div %[[E]], %[[GSUMB]] : tensor<2x2x2x8x2xf32>
// CHECK: %[[O:.*]] = nn.einsum "bkgst,btkd->bskgd" %[[P]], %[[V]] : (tensor<2x2x2x8x2xf32>, tensor<2x2x2x4xf32>) -> tensor<2x8x2x2x4xf32>
// CHECK: %[[OUT:.*]] = nn.reshape %[[O]] : tensor<2x8x2x2x4xf32> -> tensor<2x8x4x4xf32>
// CHECK: return %[[OUT]]
// GATHER-LABEL: func.func @causal_keys
// GATHER: dist.all_gather %{{.*}} on @mesh axes = ["sp"] dim = 1 : tensor<2x2x2x4xf32> -> tensor<2x8x2x4xf32>
// GATHER: dist.all_gather %{{.*}} on @mesh axes = ["sp"] dim = 1 : tensor<2x2x2x4xf32> -> tensor<2x8x2x4xf32>
// GATHER: nn.attention {{.*}} causal : tensor<2x8x4x4xf32>, tensor<2x8x2x4xf32>
// GATHER-NOT: dist.all_reduce
func.func @causal_keys(
    %q: tensor<2x8x4x4xf32> {nn.input = "q", dist.sharding = #dist.sharding<@mesh, [{}, {}, {}, {}]>},
    %k: tensor<2x8x2x4xf32> {nn.input = "k", dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>},
    %v: tensor<2x8x2x4xf32> {nn.input = "v", dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>})
    -> (tensor<2x8x4x4xf32> {nn.output = "logits"}) {
  %o = nn.attention %q, %k, %v causal {dist.sharding = [#dist.sharding<@mesh, [{}, {}, {}, {}]>]} : tensor<2x8x4x4xf32>, tensor<2x8x2x4xf32>
  return %o : tensor<2x8x4x4xf32>
}

// Tests that queries split on dp and keys split on sp take both offsets
// (query rows 4 * axis_index(dp) + [0, 4), key rows 4 * axis_index(sp) +
// [0, 4)) and merge over sp only.
// CHECK-LABEL: func.func @both_split
// CHECK-SAME: -> (tensor<2x4x4x4xf32> {dist.global_sharding = #dist.sharding<@mesh2, [{}, {"dp"}, {}, {}], partial={"sp"}>
// CHECK: nn.einsum "bskgd,btkd->bkgst" {{.*}} -> tensor<2x2x2x4x4xf32>
// CHECK: nn.constant dense<3.000000e-01> : tensor<2x2x2x4x4xf32>
// CHECK: dist.axis_index on @mesh2 axes = ["dp"] : tensor<i32>
// CHECK: nn.constant dense<4> : tensor<i32>
// CHECK: dist.axis_index on @mesh2 axes = ["sp"] : tensor<i32>
// CHECK: nn.constant dense<4> : tensor<i32>
// CHECK: dist.all_reduce %{{.*}} on @mesh2 axes = ["sp"] kind = max : tensor<2x2x2x4xf32>
// CHECK: dist.all_reduce %{{.*}} on @mesh2 axes = ["sp"] kind = sum : tensor<2x2x2x4xf32>
// CHECK: nn.einsum "bkgst,btkd->bskgd" {{.*}} -> tensor<2x4x2x2x4xf32>
func.func @both_split(
    %q: tensor<2x8x4x4xf32> {nn.input = "q", dist.sharding = #dist.sharding<@mesh2, [{}, {"dp"}, {}, {}]>},
    %k: tensor<2x8x2x4xf32> {nn.input = "k", dist.sharding = #dist.sharding<@mesh2, [{}, {"sp"}, {}, {}]>},
    %v: tensor<2x8x2x4xf32> {nn.input = "v", dist.sharding = #dist.sharding<@mesh2, [{}, {"sp"}, {}, {}]>})
    -> (tensor<2x8x4x4xf32> {nn.output = "logits"}) {
  %o = nn.attention %q, %k, %v causal scale = 0.3 {dist.sharding = [#dist.sharding<@mesh2, [{}, {"dp"}, {}, {}]>]} : tensor<2x8x4x4xf32>, tensor<2x8x2x4xf32>
  return %o : tensor<2x8x4x4xf32>
}

// Tests that non-causal attention over split keys needs no positions (no
// axis_index, no bias), only the merge.
// CHECK-LABEL: func.func @noncausal_keys
// CHECK: nn.einsum "bskgd,btkd->bkgst" {{.*}} -> tensor<2x4x1x8x2xf32>
// CHECK: nn.mul
// CHECK-NEXT: nn.reduce max
// CHECK: dist.all_reduce %{{.*}} on @mesh axes = ["sp"] kind = max : tensor<2x4x1x8xf32>
// CHECK: dist.all_reduce %{{.*}} on @mesh axes = ["sp"] kind = sum : tensor<2x4x1x8xf32>
// CHECK: nn.einsum "bkgst,btkd->bskgd"
func.func @noncausal_keys(
    %q: tensor<2x8x4x4xf32> {nn.input = "q", dist.sharding = #dist.sharding<@mesh, [{}, {}, {}, {}]>},
    %k: tensor<2x8x4x4xf32> {nn.input = "k", dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>})
    -> (tensor<2x8x4x4xf32> {nn.output = "logits"}) {
  %o = nn.attention %q, %k, %k {dist.sharding = [#dist.sharding<@mesh, [{}, {}, {}, {}]>]} : tensor<2x8x4x4xf32>, tensor<2x8x4x4xf32>
  return %o : tensor<2x8x4x4xf32>
}

// CHECK-LABEL: func.func @whole
func.func @whole(
    %q: tensor<2x8x4x4xf32> {nn.input = "q"}, %k: tensor<2x8x2x4xf32> {nn.input = "k"}, %v: tensor<2x8x2x4xf32> {nn.input = "v"})
    -> (tensor<2x8x4x4xf32> {nn.output = "logits"}) {
  %o = nn.attention %q, %k, %v causal : tensor<2x8x4x4xf32>, tensor<2x8x2x4xf32>
  return %o : tensor<2x8x4x4xf32>
}

// CHECK-LABEL: func.func @whole_scaled
func.func @whole_scaled(
    %q: tensor<2x8x4x4xf32> {nn.input = "q"}, %k: tensor<2x8x2x4xf32> {nn.input = "k"}, %v: tensor<2x8x2x4xf32> {nn.input = "v"})
    -> (tensor<2x8x4x4xf32> {nn.output = "logits"}) {
  %o = nn.attention %q, %k, %v causal scale = 0.3 : tensor<2x8x4x4xf32>, tensor<2x8x2x4xf32>
  return %o : tensor<2x8x4x4xf32>
}

// CHECK-LABEL: func.func @whole_noncausal
func.func @whole_noncausal(
    %q: tensor<2x8x4x4xf32> {nn.input = "q"}, %k: tensor<2x8x4x4xf32> {nn.input = "k"})
    -> (tensor<2x8x4x4xf32> {nn.output = "logits"}) {
  %o = nn.attention %q, %k, %k : tensor<2x8x4x4xf32>, tensor<2x8x4x4xf32>
  return %o : tensor<2x8x4x4xf32>
}
