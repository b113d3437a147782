// RUN: partita-opt %s -split-input-file -nn-autodiff -verify-diagnostics

// Tests that a module without @forward is an error.
// expected-error @+1 {{nn-autodiff: the module has no func.func @forward}}
module {
  func.func @other(%x: tensor<4xf32> {nn.param = "x"}) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}

// -----

// Tests that a module that already has the function to build is an error.
// expected-error @+1 {{nn-autodiff: the module already has a @train_step}}
module {
  func.func @forward(%x: tensor<4xf32> {nn.param = "x"}) -> (tensor<f32> {nn.output = "loss"}) {
    %l = nn.reduce sum %x dims = [0] : tensor<4xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
  func.func @train_step() {
    return
  }
}

// -----

// Tests that a declaration without a body is an error.
// expected-error @+1 {{nn-autodiff: @forward must have a body of one block}}
func.func private @forward(tensor<4xf32> {nn.param = "x"}) -> (tensor<f32> {nn.output = "loss"})

// -----

// Tests that an argument that is neither a parameter nor an input is an error.
// expected-error @+1 {{nn-autodiff: argument #1 of @forward is neither a parameter (nn.param) nor an input (nn.input)}}
func.func @forward(%x: tensor<4xf32> {nn.param = "x"}, %y: tensor<4xf32>) -> (tensor<f32> {nn.output = "loss"}) {
  %s = nn.add %x, %y : tensor<4xf32>
  %l = nn.reduce sum %s dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that an integer parameter is an error.
// expected-error @+1 {{nn-autodiff: parameter 'n' must be a float tensor, got 'tensor<4xi32>'}}
func.func @forward(%n: tensor<4xi32> {nn.param = "n"}, %x: tensor<4xf32> {nn.param = "x"}) -> (tensor<f32> {nn.output = "loss"}) {
  %l = nn.reduce sum %x dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that two parameters of one name are an error (their state and
// gradients would be indistinguishable).
// expected-error @+1 {{nn-autodiff: two parameters are named 'x'}}
func.func @forward(%x: tensor<4xf32> {nn.param = "x"}, %y: tensor<4xf32> {nn.param = "x"}) -> (tensor<f32> {nn.output = "loss"}) {
  %s = nn.add %x, %y : tensor<4xf32>
  %l = nn.reduce sum %s dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that a function without parameters is an error.
// expected-error @+1 {{nn-autodiff: @forward has no parameter (nn.param) to train}}
func.func @forward(%x: tensor<4xf32> {nn.input = "x"}) -> (tensor<f32> {nn.output = "loss"}) {
  %l = nn.reduce sum %x dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that a function without a loss result is an error.
// expected-error @+1 {{nn-autodiff: @forward has no result marked nn.output = "loss"}}
func.func @forward(%x: tensor<4xf32> {nn.param = "x"}) -> (tensor<f32> {nn.output = "logits"}) {
  %l = nn.reduce sum %x dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that two results marked as the loss are an error.
// expected-error @+1 {{nn-autodiff: results #0 and #1 of @forward are both marked nn.output = "loss"}}
func.func @forward(%x: tensor<4xf32> {nn.param = "x"}) -> (tensor<f32> {nn.output = "loss"}, tensor<f32> {nn.output = "loss"}) {
  %l = nn.reduce sum %x dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l, %l : tensor<f32>, tensor<f32>
}

// -----

// Tests that a module still calling @forward is an error at the call (the
// pass replaces @forward).
func.func @forward(%x: tensor<4xf32> {nn.param = "x"}) -> (tensor<f32> {nn.output = "loss"}) {
  %l = nn.reduce sum %x dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
func.func @caller(%x: tensor<4xf32>) -> tensor<f32> {
  // expected-error @+1 {{nn-autodiff: @forward is replaced by the step function, but this op refers to it}}
  %l = func.call @forward(%x) : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that a loss that is not rank 0 is an error.
// expected-error @+1 {{nn-autodiff: the loss must be a rank-0 float tensor, got 'tensor<4xf32>'}}
func.func @forward(%x: tensor<4xf32> {nn.param = "x"}) -> (tensor<4xf32> {nn.output = "loss"}) {
  return %x : tensor<4xf32>
}

// -----

// Tests that an integer loss is an error.
// expected-error @+1 {{nn-autodiff: the loss must be a rank-0 float tensor, got 'tensor<i32>'}}
func.func @forward(%x: tensor<4xf32> {nn.param = "x"}, %n: tensor<i32> {nn.input = "n"}) -> (tensor<i32> {nn.output = "loss"}) {
  return %n : tensor<i32>
}

// -----

// Tests that an op on the path from a parameter to the loss without a VJP
// rule is an error at that op.
func.func private @helper(tensor<4xf32>) -> tensor<4xf32>
func.func @forward(%x: tensor<4xf32> {nn.param = "x"}) -> (tensor<f32> {nn.output = "loss"}) {
  // expected-error @+1 {{nn-autodiff: 'func.call' has no VJP rule (VJPOpInterface), but the loss depends on a parameter through it}}
  %y = func.call @helper(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %l = nn.reduce sum %y dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that a loss that depends on attention's lse result is an error (it
// has no VJP rule).
func.func @forward(%q: tensor<1x4x2x8xf32> {nn.param = "q"}) -> (tensor<f32> {nn.output = "loss"}) {
  // expected-error @+1 {{nn-autodiff: the loss depends on result #1 of 'nn.attention', which has no VJP rule (only result #0 has one)}}
  %o, %lse = nn.attention %q, %q, %q causal : tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32> -> tensor<1x2x4xf32>
  %l = nn.reduce sum %lse dims = [0, 1, 2] : tensor<1x2x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that an lse result the loss does not read leaves the attention
// differentiable.
func.func @forward(%q: tensor<1x4x2x8xf32> {nn.param = "q"}) -> (tensor<f32> {nn.output = "loss"}, tensor<1x2x4xf32> {nn.output = "lse"}) {
  %o, %lse = nn.attention %q, %q, %q causal : tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32> -> tensor<1x2x4xf32>
  %l = nn.reduce sum %o dims = [0, 1, 2, 3] : tensor<1x4x2x8xf32> -> tensor<f32>
  return %l, %lse : tensor<f32>, tensor<1x2x4xf32>
}
