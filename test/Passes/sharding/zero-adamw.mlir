// RUN: partita-opt %s --dist-annotate="strategy=zero1 mesh=dp=2" | FileCheck %s --check-prefixes=CHECK,Z1
// RUN: partita-opt %s --dist-annotate="strategy=zero2 mesh=dp=2" | FileCheck %s --check-prefixes=CHECK,Z2
// RUN: partita-opt %s --dist-annotate="strategy=zero3 mesh=dp=2" | FileCheck %s --check-prefixes=CHECK,Z3
// RUN: partita-opt %s --dist-annotate="strategy=zero2 mesh=dp=2" --dist-propagate --dist-partition \
// RUN:   | FileCheck %s --check-prefix=PART --implicit-check-not=dist.all_gather \
// RUN:     --implicit-check-not=dist.all_reduce --implicit-check-not=dist.reduce_scatter \
// RUN:     --implicit-check-not=dist.slice --implicit-check-not=dist.all_to_all

// Tests what dist-annotate writes for the ZeRO stages on a train step in the
// form nn-autodiff emits (nn.adamw tagged "update", m and v per parameter,
// the rank-0 "step" last of the state): m and v sharded on w1's largest
// dimension (dim 1, 32) over dp, "step" replicated, the update op's three
// results pinned sharded; zero1 and zero2 constrain w1 to its shard and the
// gradient partial over dp before the update (reduce-scattered into it);
// zero3 stores w1 sharded and gathers it before the forward use. The train
// step is marked with its stage (dist.zero_stage).
// Partitioned under zero2: one reduce_scatter (the gradient), one slice (w1
// into the update), one all_gather (the updated w1), nothing else.

// CHECK-LABEL: func.func @train_step
// Z1-SAME:  %[[W:[^:]*]]: tensor<16x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "layers.0.w1"}
// Z2-SAME:  %[[W:[^:]*]]: tensor<16x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "layers.0.w1"}
// Z3-SAME:  %[[W:[^:]*]]: tensor<16x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"dp"}p0]>, nn.param = "layers.0.w1"}
// CHECK-SAME: tensor<16x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"dp"}p0]>, nn.state = "layers.0.w1.m"}
// CHECK-SAME: tensor<16x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"dp"}p0]>, nn.state = "layers.0.w1.v"}
// CHECK-SAME: tensor<f32> {dist.sharding = #dist.sharding<@mesh, []>, nn.state = "step"}
// CHECK-SAME: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}p0, {}p0]>, nn.input = "x"}
// Z1-SAME:  -> (tensor<16x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "layers.0.w1"}
// Z2-SAME:  -> (tensor<16x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "layers.0.w1"}
// Z3-SAME:  -> (tensor<16x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"dp"}p0]>, nn.param = "layers.0.w1"}
// CHECK-SAME: tensor<16x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"dp"}p0]>, nn.state = "layers.0.w1.m"}
// CHECK-SAME: tensor<16x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"dp"}p0]>, nn.state = "layers.0.w1.v"}
// CHECK-SAME: tensor<f32> {dist.sharding = #dist.sharding<@mesh, []>, nn.state = "step"}
// CHECK-SAME: tensor<f32> {nn.output = "loss"}
// Z3:       %[[G:.*]] = dist.constraint %[[W]] <@mesh, [{}p0, {}p0]> : tensor<16x32xf32>
// Z3-NEXT:  nn.einsum "bi,if->bf" %{{.*}}, %[[G]]
// CHECK:    %[[DW:.*]] = nn.einsum "bi,bf->if"
// Z1:       %[[WS:.*]] = dist.constraint %[[W]] <@mesh, [{}p0, {"dp"}p0]> : tensor<16x32xf32>
// Z1-NEXT:  %[[DWC:.*]] = dist.constraint %[[DW]] <@mesh, [{}p0, {}p0], partial={"dp"}> : tensor<16x32xf32>
// Z1-NEXT:  nn.adamw %[[WS]], %[[DWC]],
// Z2:       %[[WS:.*]] = dist.constraint %[[W]] <@mesh, [{}p0, {"dp"}p0]> : tensor<16x32xf32>
// Z2-NEXT:  %[[DWC:.*]] = dist.constraint %[[DW]] <@mesh, [{}p0, {}p0], partial={"dp"}> : tensor<16x32xf32>
// Z2-NEXT:  nn.adamw %[[WS]], %[[DWC]],
// Z3:       %[[DWC:.*]] = dist.constraint %[[DW]] <@mesh, [{}p0, {}p0], partial={"dp"}> : tensor<16x32xf32>
// Z3-NEXT:  nn.adamw %[[W]], %[[DWC]],
// CHECK-SAME: {dist.sharding = [#dist.sharding<@mesh, [{}p0, {"dp"}p0]>, #dist.sharding<@mesh, [{}p0, {"dp"}p0]>, #dist.sharding<@mesh, [{}p0, {"dp"}p0]>], nn.grad_kind = "update"}

// PART-LABEL: func.func @train_step
// PART-SAME: %[[W:[^:]*]]: tensor<16x32xf32>
// PART:      %[[DW:.*]] = nn.einsum "bi,bf->if"
// PART:      %[[WS:.*]] = dist.slice %[[W]] on @mesh axes = ["dp"] dim = 1 : tensor<16x32xf32> -> tensor<16x16xf32>
// PART:      %[[G:.*]] = dist.reduce_scatter %[[DW]] on @mesh axes = ["dp"] dim = 1 kind = sum : tensor<16x32xf32> -> tensor<16x16xf32>
// PART:      %[[P:.*]], %[[M:.*]], %[[V:.*]] = nn.adamw %[[WS]], %[[G]], %{{.*}}, %{{.*}}, %{{.*}} lr
// PART:      %[[PG:.*]] = dist.all_gather %[[P]] on @mesh axes = ["dp"] dim = 1 : tensor<16x16xf32> -> tensor<16x32xf32>
// PART:      return %[[PG]], %[[M]], %[[V]],
func.func @train_step(
    %w1: tensor<16x32xf32> {nn.param = "layers.0.w1"},
    %m1: tensor<16x32xf32> {nn.state = "layers.0.w1.m"},
    %v1: tensor<16x32xf32> {nn.state = "layers.0.w1.v"},
    %step: tensor<f32> {nn.state = "step"},
    %x: tensor<8x16xf32> {nn.input = "x"})
    -> (tensor<16x32xf32> {nn.param = "layers.0.w1"},
        tensor<16x32xf32> {nn.state = "layers.0.w1.m"},
        tensor<16x32xf32> {nn.state = "layers.0.w1.v"},
        tensor<f32> {nn.state = "step"},
        tensor<f32> {nn.output = "loss"}) {
  %h = nn.einsum "bi,if->bf" %x, %w1 : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %sq = nn.mul %h, %h : tensor<8x32xf32>
  %loss = nn.reduce sum %sq dims = [0, 1] : tensor<8x32xf32> -> tensor<f32>
  %dh = nn.add %h, %h {nn.grad_kind = "B"} : tensor<8x32xf32>
  %dw1 = nn.einsum "bi,bf->if" %x, %dh {nn.grad_kind = "W"} : (tensor<8x16xf32>, tensor<8x32xf32>) -> tensor<16x32xf32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %t = nn.add %step, %one {nn.grad_kind = "update"} : tensor<f32>
  %p, %m, %v = nn.adamw %w1, %dw1, %m1, %v1, %t lr = 1.0e-03 beta1 = 0.9 beta2 = 0.999 eps = 1.0e-08 weight_decay = 0.0 {nn.grad_kind = "update"} : tensor<16x32xf32>, tensor<f32>
  return %p, %m, %v, %t, %loss : tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>, tensor<f32>, tensor<f32>
}
