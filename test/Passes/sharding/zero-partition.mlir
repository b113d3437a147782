// RUN: partita-opt %s --dist-annotate="strategy=dp mesh=dp=2" --dist-propagate --dist-partition \
// RUN:   | FileCheck %s --check-prefixes=CHECK,DP --implicit-check-not=dist.all_gather \
// RUN:     --implicit-check-not=dist.all_reduce --implicit-check-not=dist.reduce_scatter \
// RUN:     --implicit-check-not=dist.slice --implicit-check-not=dist.all_to_all
// RUN: partita-opt %s --dist-annotate="strategy=zero1 mesh=dp=2" --dist-propagate --dist-partition \
// RUN:   | FileCheck %s --check-prefixes=CHECK,Z1 --implicit-check-not=dist.all_gather \
// RUN:     --implicit-check-not=dist.all_reduce --implicit-check-not=dist.reduce_scatter \
// RUN:     --implicit-check-not=dist.slice --implicit-check-not=dist.all_to_all
// RUN: partita-opt %s --dist-annotate="strategy=zero2 mesh=dp=2" --dist-propagate --dist-partition \
// RUN:   | FileCheck %s --check-prefixes=CHECK,Z2 --implicit-check-not=dist.all_gather \
// RUN:     --implicit-check-not=dist.all_reduce --implicit-check-not=dist.reduce_scatter \
// RUN:     --implicit-check-not=dist.slice --implicit-check-not=dist.all_to_all
// RUN: partita-opt %s --dist-annotate="strategy=zero3 mesh=dp=2" --dist-propagate --dist-partition \
// RUN:   | FileCheck %s --check-prefixes=CHECK,Z3 --implicit-check-not=dist.all_gather \
// RUN:     --implicit-check-not=dist.all_reduce --implicit-check-not=dist.reduce_scatter \
// RUN:     --implicit-check-not=dist.slice --implicit-check-not=dist.all_to_all
// RUN: partita-opt %s --dist-annotate="strategy=fsdp mesh=dp=2" --dist-propagate --dist-partition \
// RUN:   | FileCheck %s --check-prefixes=CHECK,Z3 --implicit-check-not=dist.all_gather \
// RUN:     --implicit-check-not=dist.all_reduce --implicit-check-not=dist.reduce_scatter \
// RUN:     --implicit-check-not=dist.slice --implicit-check-not=dist.all_to_all

// Tests the textbook collectives of data parallelism and the ZeRO stages on a
// hand-written two-layer train step (dp=2, batch 8, w1 [16,32], w2 [32,16],
// SGD with momentum written elementwise, tagged nn.grad_kind = "update").
// The ZeRO dimension is each tensor's largest: w1's dim 1 (32), w2's dim 0.
// Derived by hand:
// - dp: one all_reduce per gradient, nothing else;
// - zero1: as ZeRO's P_os: per parameter, one reduce_scatter of the
//   gradient into the sharded update (not an all_reduce and a slice), the
//   parameter sliced (local), the updated parameter all_gathered: the
//   collectives of zero2 (the two differ in when the gradient is freed,
//   dist-optimize-comm's business);
// - zero2: per parameter, one reduce_scatter of the gradient and no
//   all_reduce, the parameter sliced, the updated parameter all_gathered;
// - zero3 / fsdp: parameters stored sharded: an all_gather before each
//   phase that reads them (w1: forward only; w2: forward and backward, so
//   two), one reduce_scatter per gradient, no slice and no final gather.
// The loss stays partial over dp (dist-partition keeps partial results).

// CHECK-LABEL: func.func @train_step
// DP-SAME:  %[[W1:[^:]*]]: tensor<16x32xf32>
// DP-SAME:  %[[W2:[^:]*]]: tensor<32x16xf32>
// DP-SAME:  %[[M1:[^:]*]]: tensor<16x32xf32>
// DP-SAME:  %[[M2:[^:]*]]: tensor<32x16xf32>
// Z1-SAME:  %[[W1:[^:]*]]: tensor<16x32xf32>
// Z1-SAME:  %[[W2:[^:]*]]: tensor<32x16xf32>
// Z1-SAME:  %[[M1:[^:]*]]: tensor<16x16xf32> {dist.global_sharding = #dist.sharding<@mesh, [{}, {"dp"}]>
// Z1-SAME:  %[[M2:[^:]*]]: tensor<16x16xf32> {dist.global_sharding = #dist.sharding<@mesh, [{"dp"}, {}]>
// Z2-SAME:  %[[W1:[^:]*]]: tensor<16x32xf32>
// Z2-SAME:  %[[W2:[^:]*]]: tensor<32x16xf32>
// Z2-SAME:  %[[M1:[^:]*]]: tensor<16x16xf32>
// Z2-SAME:  %[[M2:[^:]*]]: tensor<16x16xf32>
// Z3-SAME:  %[[W1:[^:]*]]: tensor<16x16xf32> {dist.global_sharding = #dist.sharding<@mesh, [{}, {"dp"}]>
// Z3-SAME:  %[[W2:[^:]*]]: tensor<16x16xf32> {dist.global_sharding = #dist.sharding<@mesh, [{"dp"}, {}]>
// Z3-SAME:  %[[M1:[^:]*]]: tensor<16x16xf32>
// Z3-SAME:  %[[M2:[^:]*]]: tensor<16x16xf32>
// CHECK-SAME: %[[X:[^:]*]]: tensor<4x16xf32>
// DP-SAME:  -> (tensor<16x32xf32> {{.*}}, tensor<32x16xf32> {{.*}}, tensor<16x32xf32> {{.*}}, tensor<32x16xf32> {{.*}}, tensor<f32> {dist.global_sharding = #dist.sharding<@mesh, [], partial={"dp"}>
// Z1-SAME:  -> (tensor<16x32xf32> {{.*}}, tensor<32x16xf32> {{.*}}, tensor<16x16xf32> {{.*}}, tensor<16x16xf32> {{.*}}, tensor<f32>
// Z2-SAME:  -> (tensor<16x32xf32> {{.*}}, tensor<32x16xf32> {{.*}}, tensor<16x16xf32> {{.*}}, tensor<16x16xf32> {{.*}}, tensor<f32>
// Z3-SAME:  -> (tensor<16x16xf32> {{.*}}, tensor<16x16xf32> {{.*}}, tensor<16x16xf32> {{.*}}, tensor<16x16xf32> {{.*}}, tensor<f32>

// Z3:      %[[G1:.*]] = dist.all_gather %[[W1]] on @mesh axes = ["dp"] dim = 1 : tensor<16x16xf32> -> tensor<16x32xf32>
// Z3:      nn.einsum "bi,if->bf" %[[X]], %[[G1]]
// Z3:      %[[G2:.*]] = dist.all_gather %[[W2]] on @mesh axes = ["dp"] dim = 0 : tensor<16x16xf32> -> tensor<32x16xf32>
// Z3:      nn.einsum "bf,fo->bo" %{{.*}}, %[[G2]]
// CHECK:   %[[DW2:.*]] = nn.einsum "bf,bo->fo" {{.*}} -> tensor<32x16xf32>
// Z3:      %[[G2B:.*]] = dist.all_gather %[[W2]] on @mesh axes = ["dp"] dim = 0 : tensor<16x16xf32> -> tensor<32x16xf32>
// Z3:      nn.einsum "bo,fo->bf" %{{.*}}, %[[G2B]]
// CHECK:   %[[DW1:.*]] = nn.einsum "bi,bf->if" {{.*}} -> tensor<16x32xf32>

// The update of w1.
// DP:      %[[R1:.*]] = dist.all_reduce %[[DW1]] on @mesh axes = ["dp"] kind = sum : tensor<16x32xf32>
// DP:      nn.add %{{.*}}, %[[R1]] {{.*}}: tensor<16x32xf32>
// DP:      %[[P1:.*]] = nn.sub %[[W1]], %{{.*}} : tensor<16x32xf32>
// Z1:      %[[S1:.*]] = dist.reduce_scatter %[[DW1]] on @mesh axes = ["dp"] dim = 1 kind = sum : tensor<16x32xf32> -> tensor<16x16xf32>
// Z1:      nn.add %{{.*}}, %[[S1]] {{.*}}: tensor<16x16xf32>
// Z1:      %[[L1:.*]] = dist.slice %[[W1]] on @mesh axes = ["dp"] dim = 1 : tensor<16x32xf32> -> tensor<16x16xf32>
// Z1:      %[[U1:.*]] = nn.sub %[[L1]], %{{.*}} : tensor<16x16xf32>
// Z2:      %[[S1:.*]] = dist.reduce_scatter %[[DW1]] on @mesh axes = ["dp"] dim = 1 kind = sum : tensor<16x32xf32> -> tensor<16x16xf32>
// Z2:      nn.add %{{.*}}, %[[S1]] {{.*}}: tensor<16x16xf32>
// Z2:      %[[L1:.*]] = dist.slice %[[W1]] on @mesh axes = ["dp"] dim = 1 : tensor<16x32xf32> -> tensor<16x16xf32>
// Z2:      %[[U1:.*]] = nn.sub %[[L1]], %{{.*}} : tensor<16x16xf32>
// Z3:      %[[S1:.*]] = dist.reduce_scatter %[[DW1]] on @mesh axes = ["dp"] dim = 1 kind = sum : tensor<16x32xf32> -> tensor<16x16xf32>
// Z3:      nn.add %{{.*}}, %[[S1]] {{.*}}: tensor<16x16xf32>
// Z3:      %[[P1:.*]] = nn.sub %[[W1]], %{{.*}} : tensor<16x16xf32>

// The update of w2.
// DP:      %[[R2:.*]] = dist.all_reduce %[[DW2]] on @mesh axes = ["dp"] kind = sum : tensor<32x16xf32>
// DP:      %[[P2:.*]] = nn.sub %[[W2]], %{{.*}} : tensor<32x16xf32>
// Z1:      dist.reduce_scatter %[[DW2]] on @mesh axes = ["dp"] dim = 0 kind = sum : tensor<32x16xf32> -> tensor<16x16xf32>
// Z1:      %[[L2:.*]] = dist.slice %[[W2]] on @mesh axes = ["dp"] dim = 0 : tensor<32x16xf32> -> tensor<16x16xf32>
// Z1:      %[[U2:.*]] = nn.sub %[[L2]], %{{.*}} : tensor<16x16xf32>
// Z2:      dist.reduce_scatter %[[DW2]] on @mesh axes = ["dp"] dim = 0 kind = sum : tensor<32x16xf32> -> tensor<16x16xf32>
// Z2:      %[[L2:.*]] = dist.slice %[[W2]] on @mesh axes = ["dp"] dim = 0 : tensor<32x16xf32> -> tensor<16x16xf32>
// Z2:      %[[U2:.*]] = nn.sub %[[L2]], %{{.*}} : tensor<16x16xf32>
// Z3:      dist.reduce_scatter %[[DW2]] on @mesh axes = ["dp"] dim = 0 kind = sum : tensor<32x16xf32> -> tensor<16x16xf32>
// Z3:      %[[P2:.*]] = nn.sub %[[W2]], %{{.*}} : tensor<16x16xf32>

// Stages 1 and 2 gather the updated parameters back whole.
// Z1:      %[[P1:.*]] = dist.all_gather %[[U1]] on @mesh axes = ["dp"] dim = 1 : tensor<16x16xf32> -> tensor<16x32xf32>
// Z1:      %[[P2:.*]] = dist.all_gather %[[U2]] on @mesh axes = ["dp"] dim = 0 : tensor<16x16xf32> -> tensor<32x16xf32>
// Z2:      %[[P1:.*]] = dist.all_gather %[[U1]] on @mesh axes = ["dp"] dim = 1 : tensor<16x16xf32> -> tensor<16x32xf32>
// Z2:      %[[P2:.*]] = dist.all_gather %[[U2]] on @mesh axes = ["dp"] dim = 0 : tensor<16x16xf32> -> tensor<32x16xf32>
// CHECK:   return %[[P1]], %[[P2]],
func.func @train_step(
    %w1: tensor<16x32xf32> {nn.param = "layers.0.w1"},
    %w2: tensor<32x16xf32> {nn.param = "layers.0.w2"},
    %m1: tensor<16x32xf32> {nn.state = "layers.0.w1.momentum"},
    %m2: tensor<32x16xf32> {nn.state = "layers.0.w2.momentum"},
    %x: tensor<8x16xf32> {nn.input = "x"})
    -> (tensor<16x32xf32> {nn.param = "layers.0.w1"},
        tensor<32x16xf32> {nn.param = "layers.0.w2"},
        tensor<16x32xf32> {nn.state = "layers.0.w1.momentum"},
        tensor<32x16xf32> {nn.state = "layers.0.w2.momentum"},
        tensor<f32> {nn.output = "loss"}) {
  // Forward: y = (x w1) w2, loss = sum(y * y).
  %h = nn.einsum "bi,if->bf" %x, %w1 : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %y = nn.einsum "bf,fo->bo" %h, %w2 : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
  %sq = nn.mul %y, %y : tensor<8x16xf32>
  %loss = nn.reduce sum %sq dims = [0, 1] : tensor<8x16xf32> -> tensor<f32>
  // Backward (w1 is the first layer: no input gradient, so no backward use).
  %dy = nn.add %y, %y {nn.grad_kind = "B"} : tensor<8x16xf32>
  %dw2 = nn.einsum "bf,bo->fo" %h, %dy {nn.grad_kind = "W"} : (tensor<8x32xf32>, tensor<8x16xf32>) -> tensor<32x16xf32>
  %dh = nn.einsum "bo,fo->bf" %dy, %w2 {nn.grad_kind = "B"} : (tensor<8x16xf32>, tensor<32x16xf32>) -> tensor<8x32xf32>
  %dw1 = nn.einsum "bi,bf->if" %x, %dh {nn.grad_kind = "W"} : (tensor<8x16xf32>, tensor<8x32xf32>) -> tensor<16x32xf32>
  // SGD with momentum, written elementwise: buf' = 0.9 buf + g; p' = p - 0.1 buf'.
  %mu1 = nn.constant dense<0.9> : tensor<16x32xf32>
  %lr1 = nn.constant dense<0.1> : tensor<16x32xf32>
  %mb1 = nn.mul %mu1, %m1 {nn.grad_kind = "update"} : tensor<16x32xf32>
  %n1 = nn.add %mb1, %dw1 {nn.grad_kind = "update"} : tensor<16x32xf32>
  %s1 = nn.mul %lr1, %n1 {nn.grad_kind = "update"} : tensor<16x32xf32>
  %p1 = nn.sub %w1, %s1 {nn.grad_kind = "update"} : tensor<16x32xf32>
  %mu2 = nn.constant dense<0.9> : tensor<32x16xf32>
  %lr2 = nn.constant dense<0.1> : tensor<32x16xf32>
  %mb2 = nn.mul %mu2, %m2 {nn.grad_kind = "update"} : tensor<32x16xf32>
  %n2 = nn.add %mb2, %dw2 {nn.grad_kind = "update"} : tensor<32x16xf32>
  %s2 = nn.mul %lr2, %n2 {nn.grad_kind = "update"} : tensor<32x16xf32>
  %p2 = nn.sub %w2, %s2 {nn.grad_kind = "update"} : tensor<32x16xf32>
  return %p1, %p2, %n1, %n2, %loss : tensor<16x32xf32>, tensor<32x16xf32>, tensor<16x32xf32>, tensor<32x16xf32>, tensor<f32>
}
