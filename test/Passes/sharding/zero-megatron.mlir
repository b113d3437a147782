// RUN: partita-opt %s --dist-annotate="strategy=zero1+megatron mesh=dp=2,tp=2" --dist-propagate --dist-partition \
// RUN:   | FileCheck %s --check-prefixes=CHECK,Z12 --implicit-check-not=dist.all_gather \
// RUN:     --implicit-check-not=dist.all_reduce --implicit-check-not=dist.reduce_scatter \
// RUN:     --implicit-check-not=dist.slice --implicit-check-not=dist.all_to_all
// RUN: partita-opt %s --dist-annotate="strategy=zero2+megatron mesh=dp=2,tp=2" --dist-propagate --dist-partition \
// RUN:   | FileCheck %s --check-prefixes=CHECK,Z12 --implicit-check-not=dist.all_gather \
// RUN:     --implicit-check-not=dist.all_reduce --implicit-check-not=dist.reduce_scatter \
// RUN:     --implicit-check-not=dist.slice --implicit-check-not=dist.all_to_all
// RUN: partita-opt %s --dist-annotate="strategy=zero3+megatron mesh=dp=2,tp=2" --dist-propagate --dist-partition \
// RUN:   | FileCheck %s --check-prefixes=CHECK,Z3 --implicit-check-not=dist.all_gather \
// RUN:     --implicit-check-not=dist.all_reduce --implicit-check-not=dist.reduce_scatter \
// RUN:     --implicit-check-not=dist.slice --implicit-check-not=dist.all_to_all
// RUN: partita-opt %s --dist-annotate="strategy=fsdp+megatron mesh=dp=2,tp=2" --dist-propagate --dist-partition \
// RUN:   | FileCheck %s --check-prefixes=CHECK,Z3 --implicit-check-not=dist.all_gather \
// RUN:     --implicit-check-not=dist.all_reduce --implicit-check-not=dist.reduce_scatter \
// RUN:     --implicit-check-not=dist.slice --implicit-check-not=dist.all_to_all

// Tests ZeRO combined with Megatron on a dp=2 x tp=2 mesh: the same
// two-layer train step as zero-partition.mlir, its parameters named as the
// MLP model's (w1 [H,F] column parallel, w2 [F,H] row parallel). The ZeRO
// dimension is the one tp does not split: w1's dim 0 (16 over dp, local
// 8x16), w2's dim 1 (local 16x8); state follows. Derived by hand: the
// forward's row-parallel einsum leaves y partial over tp, one all_reduce
// over tp (Megatron's); every collective of the update is over dp alone,
// with the counts of the stage as in zero-partition.mlir (zero1 and zero2
// alike: one reduce_scatter per gradient, as ZeRO's P_os).

// CHECK-LABEL: func.func @train_step
// Z12-SAME: %[[W1:[^:]*]]: tensor<16x16xf32> {dist.global_sharding = #dist.sharding<@mesh, [{}, {"tp"}]>
// Z12-SAME: %[[W2:[^:]*]]: tensor<16x16xf32> {dist.global_sharding = #dist.sharding<@mesh, [{"tp"}, {}]>
// Z3-SAME:  %[[W1:[^:]*]]: tensor<8x16xf32> {dist.global_sharding = #dist.sharding<@mesh, [{"dp"}, {"tp"}]>
// Z3-SAME:  %[[W2:[^:]*]]: tensor<16x8xf32> {dist.global_sharding = #dist.sharding<@mesh, [{"tp"}, {"dp"}]>
// CHECK-SAME: tensor<8x16xf32> {dist.global_sharding = #dist.sharding<@mesh, [{"dp"}, {"tp"}]>, dist.global_type = tensor<16x32xf32>, nn.state = "layers.0.w1.momentum"}
// CHECK-SAME: tensor<16x8xf32> {dist.global_sharding = #dist.sharding<@mesh, [{"tp"}, {"dp"}]>, dist.global_type = tensor<32x16xf32>, nn.state = "layers.0.w2.momentum"}
// Z3:      %[[G1:.*]] = dist.all_gather %[[W1]] on @mesh axes = ["dp"] dim = 0 : tensor<8x16xf32> -> tensor<16x16xf32>
// Z3:      %[[G2:.*]] = dist.all_gather %[[W2]] on @mesh axes = ["dp"] dim = 1 : tensor<16x8xf32> -> tensor<16x16xf32>
// CHECK:   dist.all_reduce %{{.*}} on @mesh axes = ["tp"] kind = sum : tensor<4x16xf32>
// CHECK:   %[[DW2:.*]] = nn.einsum "bf,bo->fo" {{.*}} -> tensor<16x16xf32>
// Z3:      %[[G2B:.*]] = dist.all_gather %[[W2]] on @mesh axes = ["dp"] dim = 1 : tensor<16x8xf32> -> tensor<16x16xf32>
// CHECK:   %[[DW1:.*]] = nn.einsum "bi,bf->if" {{.*}} -> tensor<16x16xf32>
// Z12:     dist.reduce_scatter %[[DW1]] on @mesh axes = ["dp"] dim = 0 kind = sum : tensor<16x16xf32> -> tensor<8x16xf32>
// Z12:     dist.slice %[[W1]] on @mesh axes = ["dp"] dim = 0 : tensor<16x16xf32> -> tensor<8x16xf32>
// Z3:      dist.reduce_scatter %[[DW1]] on @mesh axes = ["dp"] dim = 0 kind = sum : tensor<16x16xf32> -> tensor<8x16xf32>
// CHECK:   %[[U1:.*]] = nn.sub {{.*}} : tensor<8x16xf32>
// Z12:     dist.reduce_scatter %[[DW2]] on @mesh axes = ["dp"] dim = 1 kind = sum : tensor<16x16xf32> -> tensor<16x8xf32>
// Z12:     dist.slice %[[W2]] on @mesh axes = ["dp"] dim = 1 : tensor<16x16xf32> -> tensor<16x8xf32>
// Z3:      dist.reduce_scatter %[[DW2]] on @mesh axes = ["dp"] dim = 1 kind = sum : tensor<16x16xf32> -> tensor<16x8xf32>
// CHECK:   %[[U2:.*]] = nn.sub {{.*}} : tensor<16x8xf32>
// Z12:     %[[P1:.*]] = dist.all_gather %[[U1]] on @mesh axes = ["dp"] dim = 0 : tensor<8x16xf32> -> tensor<16x16xf32>
// Z12:     %[[P2:.*]] = dist.all_gather %[[U2]] on @mesh axes = ["dp"] dim = 1 : tensor<16x8xf32> -> tensor<16x16xf32>
// Z12:     return %[[P1]], %[[P2]],
// Z3:      return %[[U1]], %[[U2]],
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
