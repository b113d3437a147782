// RUN: partita-opt %s -split-input-file -verify-diagnostics --dist-microbatch-split

// Tests that the microbatch count must be positive.
dist.mesh @mesh <["microbatch"=2]>
// expected-error @+1 {{'dist.microbatches' must be a positive integer}}
func.func @step(%x: tensor<4xf32> {nn.input = "x"}) -> tensor<4xf32>
    attributes {dist.mesh = @mesh, dist.microbatches = 0 : i64} {
  %y = nn.mul %x, %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// Tests that a collective over the microbatch axis other than a sum
// all_reduce is rejected: it needs the whole batch at once.
dist.mesh @mesh <["microbatch"=2]>
func.func @step(%x: tensor<4xf32> {nn.input = "x"}) -> tensor<4xf32>
    attributes {dist.mesh = @mesh, dist.microbatches = 2 : i64} {
  %y = nn.mul %x, %x : tensor<4xf32>
  // expected-error @+1 {{microbatches: only a sum all_reduce over the 'microbatch' axis (a gradient reduction) can become accumulation; this op needs the whole batch at once}}
  %m = dist.all_reduce %y on @mesh axes = ["microbatch"] kind = max : tensor<4xf32>
  return %m : tensor<4xf32>
}

// -----

// Tests that a sum over microbatches of a function argument is rejected.
dist.mesh @mesh <["microbatch"=2]>
func.func @step(%x: tensor<4xf32> {nn.input = "x"}) -> tensor<4xf32>
    attributes {dist.mesh = @mesh, dist.microbatches = 2 : i64} {
  // expected-error @+1 {{microbatches: reduces a function argument, not a per-microbatch value}}
  %m = dist.all_reduce %x on @mesh axes = ["microbatch"] kind = sum : tensor<4xf32>
  return %m : tensor<4xf32>
}

// -----

// Tests that a result partial over microbatches must be computed.
dist.mesh @mesh <["microbatch"=2]>
// expected-error @+1 {{microbatches: result #0 is an argument partial over microbatches}}
func.func @step(%x: tensor<4xf32> {nn.input = "x"})
    -> (tensor<4xf32> {dist.global_sharding = #dist.sharding<@mesh, [{}], partial={"microbatch"}>})
    attributes {dist.mesh = @mesh, dist.microbatches = 2 : i64} {
  return %x : tensor<4xf32>
}

// -----

// Tests that a gradient reduction may not feed a per-microbatch value.
dist.mesh @mesh <["microbatch"=2]>
func.func @step(%x: tensor<4xf32> {nn.input = "x"}) -> (tensor<4xf32>, tensor<4xf32>)
    attributes {dist.mesh = @mesh, dist.microbatches = 2 : i64} {
  %y = nn.mul %x, %x : tensor<4xf32>
  // expected-error @+1 {{microbatches: a gradient reduction feeds the per-microbatch part}}
  %g = dist.all_reduce %y on @mesh axes = ["microbatch"] kind = sum : tensor<4xf32>
  %z = nn.mul %g, %x : tensor<4xf32>
  %h = dist.all_reduce %z on @mesh axes = ["microbatch"] kind = sum : tensor<4xf32>
  return %g, %h : tensor<4xf32>, tensor<4xf32>
}

// -----

// Tests that an optimizer update may not feed a per-microbatch value.
dist.mesh @mesh <["microbatch"=2]>
func.func @step(%x: tensor<4xf32> {nn.input = "x"}, %w: tensor<4xf32> {nn.param = "w"})
    -> tensor<4xf32>
    attributes {dist.mesh = @mesh, dist.microbatches = 2 : i64} {
  // expected-error @+1 {{microbatches: an optimizer update feeds a per-microbatch value}}
  %u = nn.mul %w, %w {nn.grad_kind = "update"} : tensor<4xf32>
  %y = nn.mul %x, %u : tensor<4xf32>
  %g = dist.all_reduce %y on @mesh axes = ["microbatch"] kind = sum : tensor<4xf32>
  return %g : tensor<4xf32>
}

// -----

// Tests that the once-per-step part may read only the accumulated values of
// the per-microbatch part.
dist.mesh @mesh <["microbatch"=2]>
func.func @step(%x: tensor<4xf32> {nn.input = "x"}) -> (tensor<4xf32>, tensor<4xf32>)
    attributes {dist.mesh = @mesh, dist.microbatches = 2 : i64} {
  %y = nn.mul %x, %x : tensor<4xf32>
  %z = nn.mul %y, %x : tensor<4xf32>
  %g = dist.all_reduce %z on @mesh axes = ["microbatch"] kind = sum : tensor<4xf32>
  // expected-error @+1 {{microbatches: uses a per-microbatch value that is not a gradient or the loss (operand #1)}}
  %s = nn.add %g, %y : tensor<4xf32>
  return %g, %s : tensor<4xf32>, tensor<4xf32>
}

// -----

// Tests that the mesh must have the microbatch axis.
dist.mesh @mesh <["dp"=2]>
// expected-error @+1 {{microbatches: no mesh has the 'microbatch' axis}}
func.func @step(%x: tensor<4xf32> {nn.input = "x"}) -> tensor<4xf32>
    attributes {dist.mesh = @mesh, dist.microbatches = 2 : i64} {
  %y = nn.mul %x, %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// Tests that a step whose ops come from a dialect without
// dist::TensorBuilderInterface (ptest, test/lib) cannot be split: its
// microbatches' gradients are added in the model's dialect.
dist.mesh @mesh <["microbatch"=2]>
// expected-error @+1 {{microbatches: no dialect of the step's ops builds the sums that accumulate microbatches (dist::TensorBuilderInterface)}}
func.func @step(%x: tensor<8x16xf32> {nn.input = "x"}) -> tensor<8x16xf32>
    attributes {dist.mesh = @mesh, dist.microbatches = 2 : i64} {
  %y = "ptest.sum_normalize"(%x) : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %g = dist.all_reduce %y on @mesh axes = ["microbatch"] kind = sum : tensor<8x16xf32>
  return %g : tensor<8x16xf32>
}
