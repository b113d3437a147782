// RUN: partita-opt %s -nn-autodiff=clip-norm=1.0 -verify-diagnostics

// Tests that clipping parameters of two element types is an error (the
// global norm is summed in one type).
// expected-error @+1 {{nn-autodiff: clip-norm needs parameters of one element type; 'a' is 'f32' and 'b' is 'bf16'}}
func.func @forward(%a: tensor<4xf32> {nn.param = "a"}, %b: tensor<4xbf16> {nn.param = "b"}) -> (tensor<f32> {nn.output = "loss"}) {
  %l = nn.reduce sum %a dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
