// RUN: partita-opt %s --dist-partition | FileCheck %s \
// RUN:   --implicit-check-not=dist.all_gather --implicit-check-not=dist.all_reduce \
// RUN:   --implicit-check-not=dist.reduce_scatter --implicit-check-not=dist.all_to_all \
// RUN:   --implicit-check-not=dist.slice --implicit-check-not=dist.collective_permute \
// RUN:   --implicit-check-not=dist.axis_index --implicit-check-not=nn.attention_grad

// And on the runtime, each against its unpartitioned function (@whole_*,
// no shardings, left alone); a reference for another operand fails.
// RUN: partita-opt %s --dist-partition -o %t.mlir
// RUN: partita-translate --to-plan --plan-function grad_q --plan-reference whole_q %t.mlir -o %t.q.pb
// RUN: partita run %t.q.pb --check | FileCheck %s --check-prefix=NUM
// RUN: partita-translate --to-plan --plan-function grad_k --plan-reference whole_k %t.mlir -o %t.k.pb
// RUN: partita run %t.k.pb --check | FileCheck %s --check-prefix=NUM
// RUN: partita-translate --to-plan --plan-function grad_v --plan-reference whole_v %t.mlir -o %t.v.pb
// RUN: partita run %t.v.pb --check | FileCheck %s --check-prefix=NUM
// RUN: partita-translate --to-plan --plan-function grad_k --plan-reference whole_v %t.mlir -o %t.wrong.pb
// RUN: not partita run %t.wrong.pb --check 2>&1 | FileCheck %s --check-prefix=WRONG
// NUM: check logits: max abs diff {{.*}} (ok, rtol 1e-05)
// WRONG: check logits: max abs diff {{.*}} (FAILED, rtol 1e-05)

// Causal nn.attention_grad with its query sequence split over sp=4 (GQA:
// 4 heads over 2 kv heads, sequence 8, 2 rows per device): the keys and
// values are gathered (t is whole in its rule), P is recomputed with the
// causal bias of the queries' global positions (as for nn.attention), and
// with O = P V, in the grouped layout [b, k, g, s, t]:
//   dV = P^T dy;  dS = 0.5 * P * (dy V^T - rowsum(dy * O));  dK = dS^T Q;
//   dQ = dS K (scale 1/sqrt(4)). dQ keeps the query's split; dK and dV are
// partial sums over sp (the query sequence is a reduction for them).

// Tests the gradient with respect to the queries: local rows, no partial.
// CHECK-LABEL: func.func @grad_q
// CHECK-SAME: -> (tensor<2x2x4x4xf32> {dist.global_sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>
// CHECK: %[[K:.*]] = dist.all_gather %{{.*}} on @mesh axes = ["sp"] dim = 1 : tensor<2x2x2x4xf32> -> tensor<2x8x2x4xf32>
// CHECK: %[[V:.*]] = dist.all_gather %{{.*}} on @mesh axes = ["sp"] dim = 1 : tensor<2x2x2x4xf32> -> tensor<2x8x2x4xf32>
// CHECK: %[[QG:.*]] = nn.reshape %{{.*}} : tensor<2x2x4x4xf32> -> tensor<2x2x2x2x4xf32>
// CHECK: nn.einsum "bskgd,btkd->bkgst" %[[QG]], %[[K]] : (tensor<2x2x2x2x4xf32>, tensor<2x8x2x4xf32>) -> tensor<2x2x2x2x8xf32>
// CHECK: dist.axis_index on @mesh axes = ["sp"] : tensor<i32>
// CHECK: %[[P:.*]] = nn.softmax %{{.*}} dim = 4 : tensor<2x2x2x2x8xf32>
// CHECK: %[[DY:.*]] = nn.reshape %{{.*}} : tensor<2x2x4x4xf32> -> tensor<2x2x2x2x4xf32>
// CHECK: %[[O:.*]] = nn.einsum "bkgst,btkd->bskgd" %[[P]], %[[V]] : (tensor<2x2x2x2x8xf32>, tensor<2x8x2x4xf32>) -> tensor<2x2x2x2x4xf32>
// CHECK: %[[ROW:.*]] = nn.einsum "bskgd,bskgd->bkgs" %[[DY]], %[[O]] : (tensor<2x2x2x2x4xf32>, tensor<2x2x2x2x4xf32>) -> tensor<2x2x2x2xf32>
// CHECK: %[[DP:.*]] = nn.einsum "bskgd,btkd->bkgst" %[[DY]], %[[V]]
// CHECK: %[[ROWB:.*]] = nn.broadcast %[[ROW]] dims = [0, 1, 2, 3] : tensor<2x2x2x2xf32> -> tensor<2x2x2x2x8xf32>
// CHECK: %[[C:.*]] = nn.sub %[[DP]], %[[ROWB]]
// CHECK: %[[DS0:.*]] = nn.mul %[[P]], %[[C]]
// CHECK: %[[SC:.*]] = nn.constant dense<5.000000e-01> : tensor<2x2x2x2x8xf32>
// CHECK: %[[DS:.*]] = nn.mul %[[DS0]], %[[SC]]
// CHECK: %[[DQ:.*]] = nn.einsum "bkgst,btkd->bskgd" %[[DS]], %[[K]] : (tensor<2x2x2x2x8xf32>, tensor<2x8x2x4xf32>) -> tensor<2x2x2x2x4xf32>
// CHECK: %[[OUT:.*]] = nn.reshape %[[DQ]] : tensor<2x2x2x2x4xf32> -> tensor<2x2x4x4xf32>
// CHECK: return %[[OUT]]

// Tests the gradient with respect to the keys: dS^T Q, partial over sp.
// CHECK-LABEL: func.func @grad_k
// CHECK-SAME: -> (tensor<2x8x2x4xf32> {dist.global_sharding = #dist.sharding<@mesh, [{}, {}, {}, {}], partial={"sp"}>
// CHECK: dist.all_gather
// CHECK: dist.all_gather
// CHECK: %[[QG:.*]] = nn.reshape %{{.*}} : tensor<2x2x4x4xf32> -> tensor<2x2x2x2x4xf32>
// CHECK: dist.axis_index on @mesh axes = ["sp"] : tensor<i32>
// CHECK: nn.einsum "bskgd,bskgd->bkgs"
// CHECK: %[[SC:.*]] = nn.constant dense<5.000000e-01> : tensor<2x2x2x2x8xf32>
// CHECK-NEXT: %[[DS:.*]] = nn.mul %{{.*}}, %[[SC]] : tensor<2x2x2x2x8xf32>
// CHECK-NEXT: %[[DK:.*]] = nn.einsum "bkgst,bskgd->btkd" %[[DS]], %[[QG]] : (tensor<2x2x2x2x8xf32>, tensor<2x2x2x2x4xf32>) -> tensor<2x8x2x4xf32>
// CHECK-NEXT: return %[[DK]]

// Tests the gradient with respect to the values: P^T dy, partial over sp,
// with no dS.
// CHECK-LABEL: func.func @grad_v
// CHECK-SAME: -> (tensor<2x8x2x4xf32> {dist.global_sharding = #dist.sharding<@mesh, [{}, {}, {}, {}], partial={"sp"}>
// CHECK: dist.all_gather
// CHECK: dist.all_gather
// CHECK: dist.axis_index on @mesh axes = ["sp"] : tensor<i32>
// CHECK: %[[P:.*]] = nn.softmax %{{.*}} dim = 4 : tensor<2x2x2x2x8xf32>
// CHECK-NEXT: %[[DY:.*]] = nn.reshape %{{.*}} : tensor<2x2x4x4xf32> -> tensor<2x2x2x2x4xf32>
// CHECK-NEXT: %[[DV:.*]] = nn.einsum "bkgst,bskgd->btkd" %[[P]], %[[DY]] : (tensor<2x2x2x2x8xf32>, tensor<2x2x2x2x4xf32>) -> tensor<2x8x2x4xf32>
// CHECK-NEXT: return %[[DV]]

// The unpartitioned references keep their kernels.
// CHECK-LABEL: func.func @whole_q
// CHECK: nn.attention_grad {{.*}} wrt = q causal
// CHECK-LABEL: func.func @whole_k
// CHECK: nn.attention_grad {{.*}} wrt = k causal
// CHECK-LABEL: func.func @whole_v
// CHECK: nn.attention_grad {{.*}} wrt = v causal

dist.mesh @mesh <["sp"=4]>

func.func @grad_q(
    %q: tensor<2x8x4x4xf32> {nn.input = "q", dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>}, %k: tensor<2x8x2x4xf32> {nn.input = "k", dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>},
    %v: tensor<2x8x2x4xf32> {nn.input = "v", dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>}, %dy: tensor<2x8x4x4xf32> {nn.input = "dy", dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>})
    -> (tensor<2x8x4x4xf32> {nn.output = "logits"}) {
  %g = nn.attention_grad %q, %k, %v, %dy wrt = q causal {dist.sharding = [#dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>]} : tensor<2x8x4x4xf32>, tensor<2x8x2x4xf32> -> tensor<2x8x4x4xf32>
  return %g : tensor<2x8x4x4xf32>
}

func.func @grad_k(
    %q: tensor<2x8x4x4xf32> {nn.input = "q", dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>}, %k: tensor<2x8x2x4xf32> {nn.input = "k", dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>},
    %v: tensor<2x8x2x4xf32> {nn.input = "v", dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>}, %dy: tensor<2x8x4x4xf32> {nn.input = "dy", dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>})
    -> (tensor<2x8x2x4xf32> {nn.output = "logits"}) {
  %g = nn.attention_grad %q, %k, %v, %dy wrt = k causal {dist.sharding = [#dist.sharding<@mesh, [{}, {}, {}, {}], partial={"sp"}>]} : tensor<2x8x4x4xf32>, tensor<2x8x2x4xf32> -> tensor<2x8x2x4xf32>
  return %g : tensor<2x8x2x4xf32>
}

func.func @grad_v(
    %q: tensor<2x8x4x4xf32> {nn.input = "q", dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>}, %k: tensor<2x8x2x4xf32> {nn.input = "k", dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>},
    %v: tensor<2x8x2x4xf32> {nn.input = "v", dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>}, %dy: tensor<2x8x4x4xf32> {nn.input = "dy", dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>})
    -> (tensor<2x8x2x4xf32> {nn.output = "logits"}) {
  %g = nn.attention_grad %q, %k, %v, %dy wrt = v causal {dist.sharding = [#dist.sharding<@mesh, [{}, {}, {}, {}], partial={"sp"}>]} : tensor<2x8x4x4xf32>, tensor<2x8x2x4xf32> -> tensor<2x8x2x4xf32>
  return %g : tensor<2x8x2x4xf32>
}

func.func @whole_q(
    %q: tensor<2x8x4x4xf32> {nn.input = "q"}, %k: tensor<2x8x2x4xf32> {nn.input = "k"},
    %v: tensor<2x8x2x4xf32> {nn.input = "v"}, %dy: tensor<2x8x4x4xf32> {nn.input = "dy"})
    -> (tensor<2x8x4x4xf32> {nn.output = "logits"}) {
  %g = nn.attention_grad %q, %k, %v, %dy wrt = q causal : tensor<2x8x4x4xf32>, tensor<2x8x2x4xf32> -> tensor<2x8x4x4xf32>
  return %g : tensor<2x8x4x4xf32>
}

func.func @whole_k(
    %q: tensor<2x8x4x4xf32> {nn.input = "q"}, %k: tensor<2x8x2x4xf32> {nn.input = "k"},
    %v: tensor<2x8x2x4xf32> {nn.input = "v"}, %dy: tensor<2x8x4x4xf32> {nn.input = "dy"})
    -> (tensor<2x8x2x4xf32> {nn.output = "logits"}) {
  %g = nn.attention_grad %q, %k, %v, %dy wrt = k causal : tensor<2x8x4x4xf32>, tensor<2x8x2x4xf32> -> tensor<2x8x2x4xf32>
  return %g : tensor<2x8x2x4xf32>
}

func.func @whole_v(
    %q: tensor<2x8x4x4xf32> {nn.input = "q"}, %k: tensor<2x8x2x4xf32> {nn.input = "k"},
    %v: tensor<2x8x2x4xf32> {nn.input = "v"}, %dy: tensor<2x8x4x4xf32> {nn.input = "dy"})
    -> (tensor<2x8x2x4xf32> {nn.output = "logits"}) {
  %g = nn.attention_grad %q, %k, %v, %dy wrt = v causal : tensor<2x8x4x4xf32>, tensor<2x8x2x4xf32> -> tensor<2x8x2x4xf32>
  return %g : tensor<2x8x2x4xf32>
}
