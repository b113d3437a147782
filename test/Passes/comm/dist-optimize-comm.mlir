// RUN: partita-opt %s --dist-optimize-comm -split-input-file | FileCheck %s

// Tests that a gradient all_reduce moves to right after the backward op that
// produces its operand (above the unrelated einsum), that a reduce_scatter of
// a gradient moves likewise, and that two reductions of one gradient keep
// their order.
dist.mesh @mesh <["dp"=2]>
// CHECK-LABEL: func.func @hoist
// CHECK:      %[[G1:.*]] = nn.einsum "bi,bj->ij" {{.*}}nn.grad_kind = "W"
// CHECK-NEXT: %[[R1:.*]] = dist.all_reduce %[[G1]] on @mesh axes = ["dp"] kind = sum
// CHECK-NEXT: %[[R1B:.*]] = dist.all_reduce %[[G1]] on @mesh axes = ["dp"] kind = max
// CHECK-NEXT: %[[G2:.*]] = nn.einsum "bi,bj->ij" {{.*}}nn.grad_kind = "W"
// CHECK-NEXT: %[[R2:.*]] = dist.reduce_scatter %[[G2]] on @mesh axes = ["dp"] dim = 0
// CHECK-NEXT: %[[X:.*]] = nn.einsum "bi,ij->bj"
// CHECK-NEXT: %[[S:.*]] = nn.add %[[R1]], %[[R1B]]
// CHECK-NEXT: return %[[S]], %[[R2]], %[[X]]
func.func @hoist(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %w: tensor<8x8xf32>)
    -> (tensor<8x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %g1 = nn.einsum "bi,bj->ij" %a, %b {nn.grad_kind = "W"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %g2 = nn.einsum "bi,bj->ij" %b, %a {nn.grad_kind = "W"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %x = nn.einsum "bi,ij->bj" %a, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r1 = dist.all_reduce %g1 on @mesh axes = ["dp"] kind = sum : tensor<8x8xf32>
  %r1b = dist.all_reduce %g1 on @mesh axes = ["dp"] kind = max : tensor<8x8xf32>
  %r2 = dist.reduce_scatter %g2 on @mesh axes = ["dp"] dim = 0 kind = sum : tensor<8x8xf32> -> tensor<4x8xf32>
  %s = nn.add %r1, %r1b : tensor<8x8xf32>
  return %s, %r2, %x : tensor<8x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Tests that collectives on values no backward op produced stay where they
// are: an all_gather of a parameter (ZeRO-3: hoisting it would keep the
// gathered copy alive longer) and an all_reduce of a forward value.
dist.mesh @mesh <["dp"=2]>
// CHECK-LABEL: func.func @stay
// CHECK:      nn.einsum "bi,ij->bj"
// CHECK-NEXT: dist.all_gather
// CHECK-NEXT: nn.relu
// CHECK-NEXT: dist.all_reduce
func.func @stay(%a: tensor<4x8xf32>, %w: tensor<4x8xf32>, %v: tensor<8x8xf32>)
    -> (tensor<8x8xf32>, tensor<4x8xf32>) {
  %x = nn.einsum "bi,ij->bj" %a, %v : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %full = dist.all_gather %w on @mesh axes = ["dp"] dim = 0 : tensor<4x8xf32> -> tensor<8x8xf32>
  %y = nn.relu %x : tensor<4x8xf32>
  %r = dist.all_reduce %y on @mesh axes = ["dp"] kind = sum : tensor<4x8xf32>
  return %full, %r : tensor<8x8xf32>, tensor<4x8xf32>
}

// -----

// Tests that in a ZeRO stage-1 step (dist.zero_stage = 1) a gradient's
// reduce_scatter into an update stays at the update (P_os holds the whole
// gradient until the optimizer step), while an all_reduce of a gradient is
// still issued early.
dist.mesh @mesh <["dp"=2]>
// CHECK-LABEL: func.func @zero1
// CHECK:      %[[G1:.*]] = nn.einsum "bi,bj->ij" {{.*}}nn.grad_kind = "W"
// CHECK-NEXT: dist.all_reduce %[[G1]]
// CHECK-NEXT: %[[G2:.*]] = nn.einsum "bi,bj->ij" {{.*}}nn.grad_kind = "W"
// CHECK-NEXT: %[[X:.*]] = nn.einsum "bi,ij->bj"
// CHECK-NEXT: %[[R1:.*]] = dist.reduce_scatter %[[G1]]
// CHECK-NEXT: nn.neg %[[R1]] {nn.grad_kind = "update"}
func.func @zero1(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %w: tensor<8x8xf32>)
    -> (tensor<8x8xf32>, tensor<4x8xf32>, tensor<8x8xf32>, tensor<4x8xf32>)
    attributes {dist.zero_stage = 1 : i64} {
  %g1 = nn.einsum "bi,bj->ij" %a, %b {nn.grad_kind = "W"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %g2 = nn.einsum "bi,bj->ij" %b, %a {nn.grad_kind = "W"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %x = nn.einsum "bi,ij->bj" %a, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r = dist.all_reduce %g1 on @mesh axes = ["dp"] kind = sum : tensor<8x8xf32>
  %s1 = dist.reduce_scatter %g1 on @mesh axes = ["dp"] dim = 0 kind = sum : tensor<8x8xf32> -> tensor<4x8xf32>
  %u = nn.neg %s1 {nn.grad_kind = "update"} : tensor<4x8xf32>
  return %r, %u, %g2, %x : tensor<8x8xf32>, tensor<4x8xf32>, tensor<8x8xf32>, tensor<4x8xf32>
}
