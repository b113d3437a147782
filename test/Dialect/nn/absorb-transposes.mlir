// RUN: partita-opt %s -nn-absorb-transposes -split-input-file | FileCheck %s

// nn-absorb-transposes: einsums read transposes' inputs and write their
// results in the order a transpose of them asks for.

// Tests a linear layer as PyTorch writes it (x @ W.t()): the einsum reads W
// with its letters swapped, and the transpose, left without a use, goes.
// CHECK-LABEL: func.func @operand
// CHECK-NEXT: %[[Y:.*]] = nn.einsum "ij,kj->ik" %arg0, %arg1 {nn.grad_kind = "B"} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: return %[[Y]]
// CHECK-NOT: nn.transpose
func.func @operand(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>) -> tensor<4x16xf32> {
  %t = nn.transpose %w perm = [1, 0] : tensor<16x8xf32> -> tensor<8x16xf32>
  %y = nn.einsum "ij,jk->ik" %x, %t {nn.grad_kind = "B"} : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// Tests a rank-4 permutation on both operands of one einsum (one transpose
// read twice), and a transpose that another op still reads: it stays.
// CHECK-LABEL: func.func @both
// CHECK-NEXT: %[[T:.*]] = nn.transpose %arg0 perm = [0, 2, 1, 3]
// CHECK-NEXT: %[[S:.*]] = nn.einsum "bqnd,bknd->bnqk" %arg0, %arg0 :
// CHECK-NEXT: %[[N:.*]] = nn.neg %[[T]]
// CHECK-NEXT: return %[[S]], %[[N]]
func.func @both(%x: tensor<2x8x4x16xf32>) -> (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) {
  %t = nn.transpose %x perm = [0, 2, 1, 3] : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
  %s = nn.einsum "bnqd,bnkd->bnqk" %t, %t : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x8xf32>
  %n = nn.neg %t : tensor<2x4x8x16xf32>
  return %s, %n : tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>
}

// -----

// Tests a weight gradient in the transposed order turned back (what
// nn-autodiff writes for the layer above): one einsum writes it in the
// weight's order, with the einsum's attributes.
// CHECK-LABEL: func.func @result
// CHECK-NEXT: %[[G:.*]] = nn.einsum "ij,ik->kj" %arg0, %arg1 {nn.grad_kind = "W"} : (tensor<4x8xf32>, tensor<4x16xf32>) -> tensor<16x8xf32>
// CHECK-NEXT: return %[[G]]
func.func @result(%x: tensor<4x8xf32>, %dy: tensor<4x16xf32>) -> tensor<16x8xf32> {
  %g = nn.einsum "ij,ik->jk" %x, %dy {nn.grad_kind = "W"} : (tensor<4x8xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
  %t = nn.transpose %g perm = [1, 0] {nn.grad_kind = "W"} : tensor<8x16xf32> -> tensor<16x8xf32>
  return %t : tensor<16x8xf32>
}

// -----

// Tests that an einsum another op also reads keeps its order: the
// transpose of it stays.
// CHECK-LABEL: func.func @shared
// CHECK-NEXT: %[[G:.*]] = nn.einsum "ij,ik->jk"
// CHECK-NEXT: %[[T:.*]] = nn.transpose %[[G]]
// CHECK-NEXT: return %[[G]], %[[T]]
func.func @shared(%x: tensor<4x8xf32>, %dy: tensor<4x16xf32>) -> (tensor<8x16xf32>, tensor<16x8xf32>) {
  %g = nn.einsum "ij,ik->jk" %x, %dy : (tensor<4x8xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
  %t = nn.transpose %g perm = [1, 0] : tensor<8x16xf32> -> tensor<16x8xf32>
  return %g, %t : tensor<8x16xf32>, tensor<16x8xf32>
}
