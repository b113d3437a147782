// RUN: partita-opt %s -split-input-file --dist-partition | FileCheck %s \
// RUN:   --implicit-check-not=dist.all_gather --implicit-check-not=dist.all_reduce \
// RUN:   --implicit-check-not=dist.reduce_scatter --implicit-check-not=dist.all_to_all \
// RUN:   --implicit-check-not=dist.slice --implicit-check-not=dist.collective_permute \
// RUN:   --implicit-check-not=dist.axis_index --implicit-check-not=dist.mask

// Ops that read global positions along a split sequence (rotary, causal
// attention): the local forms of NNCollectiveLowerings.h, derived by hand.
// Rotary tables for theta = 1e4 and head_dim 4: pair 0 turns by p radians,
// pair 1 by p * 1e4^(-1/2) = p / 100 radians, so row p of the cosine table
// is [cos p, cos p, cos(p/100), cos(p/100)] (cos 1 = 0.5403023, cos 0.01 =
// 0.99995, cos 3 = -0.9899925) and of the sine table likewise (sin 1 =
// 0.8414710, sin 0.01 = 0.0099998, sin 3 = 0.1411200).

// Tests that rotary with its sequence split over sp slices global cosine and
// sine tables to the device's rows and rotates the pairs with an einsum.
dist.mesh @mesh <["sp"=2]>
// CHECK-LABEL: func.func @rotary_seq_split
// CHECK-SAME: (%[[X:.*]]: tensor<1x2x1x4xf32>
// CHECK: %[[COS:.*]] = nn.constant dense<{{\[}}[1.000000e+00, 1.000000e+00, 1.000000e+00, 1.000000e+00], [0.540302277, 0.540302277, 0.999949991, 0.999949991], [{{.*}}], [-0.989992499, -0.989992499, 0.999550044, 0.999550044]]> : tensor<4x4xf32>
// CHECK: %[[COSL:.*]] = dist.slice %[[COS]] on @mesh axes = ["sp"] dim = 0 : tensor<4x4xf32> -> tensor<2x4xf32>
// CHECK: %[[SIN:.*]] = nn.constant dense<{{\[}}[0.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00], [0.841470957, 0.841470957, 0.00999983306, 0.00999983306], [{{.*}}], [1.411200e-01, 1.411200e-01, 0.029995501, 0.029995501]]> : tensor<4x4xf32>
// CHECK: %[[SINL:.*]] = dist.slice %[[SIN]] on @mesh axes = ["sp"] dim = 0 : tensor<4x4xf32> -> tensor<2x4xf32>
// CHECK: %[[COSB:.*]] = nn.broadcast %[[COSL]] dims = [1, 3] : tensor<2x4xf32> -> tensor<1x2x1x4xf32>
// CHECK: %[[SINB:.*]] = nn.broadcast %[[SINL]] dims = [1, 3] : tensor<2x4xf32> -> tensor<1x2x1x4xf32>
// CHECK: %[[PAIRS:.*]] = nn.reshape %[[X]] : tensor<1x2x1x4xf32> -> tensor<1x2x1x2x2xf32>
// CHECK: %[[TURN:.*]] = nn.constant dense<{{\[}}[0.000000e+00, 1.000000e+00], [-1.000000e+00, 0.000000e+00]]> : tensor<2x2xf32>
// CHECK: %[[TURNED:.*]] = nn.einsum "bsnhi,ij->bsnhj" %[[PAIRS]], %[[TURN]]
// CHECK: %[[SWAPPED:.*]] = nn.reshape %[[TURNED]] : tensor<1x2x1x2x2xf32> -> tensor<1x2x1x4xf32>
// CHECK: %[[A:.*]] = nn.mul %[[X]], %[[COSB]] : tensor<1x2x1x4xf32>
// CHECK: %[[B:.*]] = nn.mul %[[SWAPPED]], %[[SINB]] : tensor<1x2x1x4xf32>
// CHECK: %[[Y:.*]] = nn.add %[[A]], %[[B]] : tensor<1x2x1x4xf32>
// CHECK: return %[[Y]]
// CHECK-NOT: nn.rotary
func.func @rotary_seq_split(%x: tensor<1x4x1x4xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>}) -> tensor<1x4x1x4xf32> {
  %0 = nn.rotary %x theta = 1.0e4 {dist.sharding = [#dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>]} : tensor<1x4x1x4xf32>
  return %0 : tensor<1x4x1x4xf32>
}

// -----

// Tests that a second rotary of the same theta, shape and split (a layer's
// key after its query) reuses the sliced tables and the turning matrix: two
// dist.slice and one 2x2 constant for both.
dist.mesh @mesh <["sp"=2]>
// CHECK-LABEL: func.func @rotary_tables_shared
// CHECK: %[[COSL:.*]] = dist.slice %{{.*}} on @mesh axes = ["sp"] dim = 0 : tensor<4x4xf32> -> tensor<2x4xf32>
// CHECK: %[[SINL:.*]] = dist.slice %{{.*}} on @mesh axes = ["sp"] dim = 0 : tensor<4x4xf32> -> tensor<2x4xf32>
// CHECK: %[[TURN:.*]] = nn.constant dense<{{\[}}[0.000000e+00, 1.000000e+00], [-1.000000e+00, 0.000000e+00]]> : tensor<2x2xf32>
// CHECK: nn.einsum "bsnhi,ij->bsnhj" %{{.*}}, %[[TURN]]
// CHECK: nn.broadcast %[[COSL]] dims = [1, 3]
// CHECK: nn.broadcast %[[SINL]] dims = [1, 3]
// CHECK-NOT: nn.constant
// CHECK: nn.einsum "bsnhi,ij->bsnhj" %{{.*}}, %[[TURN]]
// CHECK: return
func.func @rotary_tables_shared(%q: tensor<1x4x1x4xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>},
                                %k: tensor<1x4x1x4xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>}) -> (tensor<1x4x1x4xf32>, tensor<1x4x1x4xf32>) {
  %0 = nn.rotary %q theta = 1.0e4 {dist.sharding = [#dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>]} : tensor<1x4x1x4xf32>
  %1 = nn.rotary %k theta = 1.0e4 {dist.sharding = [#dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>]} : tensor<1x4x1x4xf32>
  return %0, %1 : tensor<1x4x1x4xf32>, tensor<1x4x1x4xf32>
}

// -----

// Tests that rotary_grad with its sequence split turns by minus the angle:
// the same cosine table, the sine table negated.
dist.mesh @mesh <["sp"=2]>
// CHECK-LABEL: func.func @rotary_grad_seq_split
// CHECK: nn.constant dense<{{\[}}[1.000000e+00, 1.000000e+00, 1.000000e+00, 1.000000e+00], [0.540302277, {{.*}}]]> : tensor<4x4xf32>
// CHECK: dist.slice
// CHECK: nn.constant dense<{{\[}}[-0.000000e+00, -0.000000e+00, -0.000000e+00, -0.000000e+00], [-0.841470957, -0.841470957, -0.00999983306, -0.00999983306], [{{.*}}], [-1.411200e-01, -1.411200e-01, -0.029995501, -0.029995501]]> : tensor<4x4xf32>
// CHECK: dist.slice
// CHECK: nn.einsum "bsnhi,ij->bsnhj"
// CHECK-NOT: nn.rotary_grad
func.func @rotary_grad_seq_split(%dy: tensor<1x4x1x4xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>}) -> tensor<1x4x1x4xf32> {
  %0 = nn.rotary_grad %dy theta = 1.0e4 {dist.sharding = [#dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>]} : tensor<1x4x1x4xf32>
  return %0 : tensor<1x4x1x4xf32>
}

// -----

// Tests that rotary split on heads (not on the sequence) stays the kernel.
dist.mesh @mesh <["sp"=2]>
// CHECK-LABEL: func.func @rotary_heads_split
// CHECK: nn.rotary %{{.*}} theta = 1.000000e+04 : tensor<1x4x1x4xf32>
func.func @rotary_heads_split(%x: tensor<1x4x2x4xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}, {"sp"}, {}]>}) -> tensor<1x4x2x4xf32> {
  %0 = nn.rotary %x theta = 1.0e4 {dist.sharding = [#dist.sharding<@mesh, [{}, {}, {"sp"}, {}]>]} : tensor<1x4x2x4xf32>
  return %0 : tensor<1x4x2x4xf32>
}

// -----

// Tests that causal grouped-query attention with its query sequence split
// over sp (context parallel) gathers the keys once, and masks with the
// global positions: query positions [0, 1] + axis_index(sp) * 2, key
// positions [0, 1, 2, 3]; bias row 1 (0 or -inf) where key > query.
dist.mesh @mesh <["sp"=2]>
// CHECK-LABEL: func.func @causal_attention_query_split
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x2x4xf32> {{.*}}, %[[K:.*]]: tensor<1x2x1x4xf32>
// CHECK: %[[KG:.*]] = dist.all_gather %[[K]] on @mesh axes = ["sp"] dim = 1 : tensor<1x2x1x4xf32> -> tensor<1x4x1x4xf32>
// CHECK: %[[QG:.*]] = nn.reshape %[[Q]] : tensor<1x2x2x4xf32> -> tensor<1x2x1x2x4xf32>
// CHECK: %[[S:.*]] = nn.einsum "bskgd,btkd->bkgst" %[[QG]], %[[KG]] : (tensor<1x2x1x2x4xf32>, tensor<1x4x1x4xf32>) -> tensor<1x1x2x2x4xf32>
// CHECK: %[[SCALE:.*]] = nn.constant dense<5.000000e-01> : tensor<1x1x2x2x4xf32>
// CHECK: %[[SS:.*]] = nn.mul %[[S]], %[[SCALE]]
// CHECK: %[[IOTA:.*]] = nn.constant dense<[0, 1]> : tensor<2xi32>
// CHECK: %[[IDX:.*]] = dist.axis_index on @mesh axes = ["sp"] : tensor<i32>
// CHECK: %[[LEN:.*]] = nn.constant dense<2> : tensor<i32>
// CHECK: %[[START:.*]] = nn.mul %[[IDX]], %[[LEN]] : tensor<i32>
// CHECK: %[[STARTB:.*]] = nn.broadcast %[[START]] dims = [] : tensor<i32> -> tensor<2xi32>
// CHECK: %[[QPOS:.*]] = nn.add %[[IOTA]], %[[STARTB]] : tensor<2xi32>
// CHECK: %[[KPOS:.*]] = nn.constant dense<[0, 1, 2, 3]> : tensor<4xi32>
// CHECK: %[[KB:.*]] = nn.broadcast %[[KPOS]] dims = [1] : tensor<4xi32> -> tensor<2x4xi32>
// CHECK: %[[QB:.*]] = nn.broadcast %[[QPOS]] dims = [0] : tensor<2xi32> -> tensor<2x4xi32>
// CHECK: %[[ZERO:.*]] = nn.constant dense<0> : tensor<2x4xi32>
// CHECK: %[[ONE:.*]] = nn.constant dense<1> : tensor<2x4xi32>
// CHECK: %[[DIFF:.*]] = nn.sub %[[KB]], %[[QB]]
// CHECK: %[[AHEAD:.*]] = nn.max %[[DIFF]], %[[ZERO]]
// CHECK: %[[BEHIND:.*]] = nn.sub %[[ONE]], %[[AHEAD]]
// CHECK: %[[M:.*]] = nn.max %[[BEHIND]], %[[ZERO]]
// CHECK: %[[AFTER:.*]] = nn.sub %[[ONE]], %[[M]]
// CHECK: %[[TABLE:.*]] = nn.constant dense<{{\[}}[0.000000e+00], [0xFF800000]]> : tensor<2x1xf32>
// CHECK: %[[PICK:.*]] = nn.embedding %[[TABLE]][%[[AFTER]]] : tensor<2x1xf32>, tensor<2x4xi32> -> tensor<2x4x1xf32>
// CHECK: %[[BIAS:.*]] = nn.reshape %[[PICK]] : tensor<2x4x1xf32> -> tensor<2x4xf32>
// CHECK: %[[BIASB:.*]] = nn.broadcast %[[BIAS]] dims = [3, 4] : tensor<2x4xf32> -> tensor<1x1x2x2x4xf32>
// CHECK: %[[MASKED:.*]] = nn.add %[[SS]], %[[BIASB]]
// CHECK: %[[P:.*]] = nn.softmax %[[MASKED]] dim = 4 : tensor<1x1x2x2x4xf32>
// CHECK: %[[O:.*]] = nn.einsum "bkgst,btkd->bskgd" %[[P]], %[[KG]] : (tensor<1x1x2x2x4xf32>, tensor<1x4x1x4xf32>) -> tensor<1x2x1x2x4xf32>
// CHECK: %[[OUT:.*]] = nn.reshape %[[O]] : tensor<1x2x1x2x4xf32> -> tensor<1x2x2x4xf32>
// CHECK: return %[[OUT]]
// CHECK-NOT: nn.attention
func.func @causal_attention_query_split(
    %q: tensor<1x4x2x4xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>},
    %k: tensor<1x4x1x4xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>}) -> tensor<1x4x2x4xf32> {
  %0 = nn.attention %q, %k, %k causal {dist.sharding = [#dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>]} : tensor<1x4x2x4xf32>, tensor<1x4x1x4xf32>
  return %0 : tensor<1x4x2x4xf32>
}

// -----

// Tests that two causal attentions with the same split and lengths (two
// layers) share one causal bias: one axis_index, one embedding lookup.
dist.mesh @mesh <["sp"=2]>
// CHECK-LABEL: func.func @causal_bias_shared
// CHECK: dist.all_gather
// CHECK: dist.axis_index on @mesh axes = ["sp"] : tensor<i32>
// CHECK: %[[BIAS:.*]] = nn.reshape %{{.*}} : tensor<2x4x1xf32> -> tensor<2x4xf32>
// CHECK: nn.broadcast %[[BIAS]] dims = [3, 4]
// CHECK: %[[A:.*]] = nn.reshape %{{.*}} : tensor<1x2x2x1x4xf32> -> tensor<1x2x2x4xf32>
// CHECK: dist.all_gather %[[A]]
// CHECK-NOT: nn.embedding
// CHECK: nn.broadcast %[[BIAS]] dims = [3, 4]
// CHECK: return
func.func @causal_bias_shared(%q: tensor<1x4x2x4xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>}) -> tensor<1x4x2x4xf32> {
  %0 = nn.attention %q, %q, %q causal {dist.sharding = [#dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>]} : tensor<1x4x2x4xf32>, tensor<1x4x2x4xf32>
  %1 = nn.attention %0, %0, %0 causal {dist.sharding = [#dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>]} : tensor<1x4x2x4xf32>, tensor<1x4x2x4xf32>
  return %1 : tensor<1x4x2x4xf32>
}

// -----

// Tests that a query sequence split over two axes takes its offset from the
// device's position in both (axis_index over ["dp", "sp"], blocks of 2 of
// 8), and that an explicit scale is kept.
dist.mesh @mesh <["dp"=2, "sp"=2]>
// CHECK-LABEL: func.func @causal_attention_two_axes
// CHECK: %[[KG:.*]] = dist.all_gather %{{.*}} on @mesh axes = ["dp", "sp"] dim = 1 : tensor<1x2x2x4xf32> -> tensor<1x8x2x4xf32>
// CHECK: nn.constant dense<2.500000e-01> : tensor<1x2x1x2x8xf32>
// CHECK: dist.axis_index on @mesh axes = ["dp", "sp"] : tensor<i32>
// CHECK: nn.constant dense<2> : tensor<i32>
// CHECK: nn.constant dense<[0, 1, 2, 3, 4, 5, 6, 7]> : tensor<8xi32>
// CHECK: nn.softmax %{{.*}} dim = 4 : tensor<1x2x1x2x8xf32>
// CHECK: nn.einsum "bkgst,btkd->bskgd" %{{.*}}, %[[KG]]
func.func @causal_attention_two_axes(%q: tensor<1x8x2x4xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"dp", "sp"}, {}, {}]>}) -> tensor<1x8x2x4xf32> {
  %0 = nn.attention %q, %q, %q causal scale = 0.25 {dist.sharding = [#dist.sharding<@mesh, [{}, {"dp", "sp"}, {}, {}]>]} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>
  return %0 : tensor<1x8x2x4xf32>
}

// -----

// Tests that non-causal attention with its query sequence split needs no
// offsets: the kernel runs on the local queries and the gathered keys (the
// same value as query and key, resharded once for each role).
dist.mesh @mesh <["sp"=2]>
// CHECK-LABEL: func.func @attention_query_split
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x2x4xf32>
// CHECK: %[[KG:.*]] = dist.all_gather %[[Q]] on @mesh axes = ["sp"] dim = 1 : tensor<1x2x2x4xf32> -> tensor<1x4x2x4xf32>
// CHECK: %[[O:.*]] = nn.attention %[[Q]], %[[KG]], %[[KG]] : tensor<1x2x2x4xf32>, tensor<1x4x2x4xf32>
// CHECK: return %[[O]]
func.func @attention_query_split(%q: tensor<1x4x2x4xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>}) -> tensor<1x4x2x4xf32> {
  %0 = nn.attention %q, %q, %q {dist.sharding = [#dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>]} : tensor<1x4x2x4xf32>, tensor<1x4x2x4xf32>
  return %0 : tensor<1x4x2x4xf32>
}

// -----

// Tests that causal attention over a padded sequence (6 on sp=4: blocks of
// 2, the last two positions padding) zeroes the gathered keys' and values'
// padding (dist.mask, no axes: positions 6 and 7 of the gathered 8) and
// masks with positions over the padded length: the padded keys sit past
// every real query, so the causal bias drops them.
dist.mesh @mesh <["sp"=4]>
// CHECK-LABEL: func.func @causal_attention_padded_seq
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x2x2x4xf32>
// CHECK: %[[KG:.*]] = dist.all_gather %[[Q]] on @mesh axes = ["sp"] dim = 1 : tensor<1x2x2x4xf32> -> tensor<1x8x2x4xf32>
// CHECK: %[[K:.*]] = dist.mask %[[KG]] on @mesh axes = [] dim = 1 size = 6 value = 0.000000e+00 : tensor<1x8x2x4xf32>
// CHECK: %[[V:.*]] = dist.mask %[[KG]] on @mesh axes = [] dim = 1 size = 6 value = 0.000000e+00 : tensor<1x8x2x4xf32>
// CHECK: nn.einsum "bskgd,btkd->bkgst" %{{.*}}, %[[K]] : (tensor<1x2x2x1x4xf32>, tensor<1x8x2x4xf32>) -> tensor<1x2x1x2x8xf32>
// CHECK: dist.axis_index on @mesh axes = ["sp"] : tensor<i32>
// CHECK: nn.constant dense<[0, 1, 2, 3, 4, 5, 6, 7]> : tensor<8xi32>
// CHECK: nn.softmax %{{.*}} dim = 4 : tensor<1x2x1x2x8xf32>
// CHECK: nn.einsum "bkgst,btkd->bskgd" %{{.*}}, %[[V]]
func.func @causal_attention_padded_seq(%q: tensor<1x6x2x4xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>}) -> tensor<1x6x2x4xf32> {
  %0 = nn.attention %q, %q, %q causal {dist.sharding = [#dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>]} : tensor<1x6x2x4xf32>, tensor<1x6x2x4xf32>
  return %0 : tensor<1x6x2x4xf32>
}
