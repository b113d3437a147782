// RUN: partita-opt %s -nn-autodiff="optimizer=adamw clip-norm=1.0" | FileCheck %s
// RUN: partita-opt %s -nn-autodiff="optimizer=adamw" | FileCheck %s --check-prefix=NOCLIP

// Tests that a train step that clips also returns the gradients' global
// norm before clipping as its last result, nn.output = "grad_norm" (what
// partita train reports each step), and that one without clipping does not.
func.func @forward(%w: tensor<4x2xf32> {nn.param = "w"},
                   %x: tensor<3x4xf32> {nn.input = "x"}, %l: tensor<3xi32> {nn.input = "labels"})
    -> (tensor<f32> {nn.output = "loss"}) {
  %y = nn.einsum "bh,hc->bc" %x, %w : (tensor<3x4xf32>, tensor<4x2xf32>) -> tensor<3x2xf32>
  %loss = nn.cross_entropy %y, %l : tensor<3x2xf32>, tensor<3xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: tensor<f32> {nn.output = "loss"}, tensor<f32> {nn.output = "grad_norm"})
// CHECK: %[[NORM:.+]] = nn.sqrt
// CHECK: return {{.*}}, %[[NORM]] :
// NOCLIP-LABEL: func.func @train_step
// NOCLIP-SAME: tensor<f32> {nn.output = "loss"})
// NOCLIP-NOT: grad_norm
