// RUN: partita-opt %s | FileCheck %s

// Tests that an einsum round-trips.
// CHECK-LABEL: func.func @matmul
// CHECK: nn.einsum "bsh,hf->bsf"
func.func @matmul(%x: tensor<2x8x16xf32>, %w: tensor<16x64xf32>) -> tensor<2x8x64xf32> {
  %y = nn.einsum "bsh,hf->bsf" %x, %w : (tensor<2x8x16xf32>, tensor<16x64xf32>) -> tensor<2x8x64xf32>
  return %y : tensor<2x8x64xf32>
}
