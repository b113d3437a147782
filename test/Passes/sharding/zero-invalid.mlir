// RUN: partita-opt %s -split-input-file --dist-annotate="strategy=zero1 mesh=dp=2" -verify-diagnostics

// Tests that a state whose type differs from its parameter's is an error
// naming both types (state is laid out like its parameter).
func.func @f(
    %w: tensor<4x8xf32> {nn.param = "w"},
    // expected-error @+1 {{state 'w.m' has type 'tensor<8x4xf32>' but its parameter 'w' has type 'tensor<4x8xf32>'; strategy 'zero1' lays state out like its parameter}}
    %m: tensor<8x4xf32> {nn.state = "w.m"}) {
  return
}

// -----

// Tests that an nn.state that is not a string is an error.
func.func @f(
    // expected-error @+1 {{nn.state of argument #0 of @f must be a string, not 3 : i64}}
    %m: tensor<8x4xf32> {nn.state = 3}) {
  return
}

// -----

// Tests that an updated-parameter result whose type differs from the
// parameter argument's is an error.
// expected-error @+1 {{result #0 (parameter 'w') has type 'tensor<8x4xf32>' but the parameter argument has type 'tensor<4x8xf32>'}}
func.func @f(%w: tensor<4x8xf32> {nn.param = "w"}, %n: tensor<8x4xf32>)
    -> (tensor<8x4xf32> {nn.param = "w"}) {
  return %n : tensor<8x4xf32>
}

// -----

// Tests that a state result whose type differs from its parameter's is an
// error at the function.
// expected-error @+1 {{state 'w.m' has type 'tensor<2x2xf32>' but its parameter 'w' has type 'tensor<4x8xf32>'}}
func.func @f(%w: tensor<4x8xf32> {nn.param = "w"}, %n: tensor<2x2xf32>)
    -> (tensor<2x2xf32> {nn.state = "w.m"}) {
  return %n : tensor<2x2xf32>
}
