// RUN: partita-translate --to-plan %s -split-input-file -verify-diagnostics -o /dev/null

// Tests that an argument cannot be both a parameter and optimizer state.
// expected-error @+1 {{argument #0 ('w') has both nn.param and nn.state; an argument is a parameter or optimizer state, not both}}
func.func @train_step(%w: tensor<4xf32> {nn.param = "w", nn.state = "w.m"}) -> tensor<4xf32> {
  return %w : tensor<4xf32>
}

// -----

// Tests that a result cannot update both a parameter and state.
func.func @train_step(%w: tensor<4xf32> {nn.param = "w"}) -> (tensor<4xf32> {nn.param = "w", nn.state = "w"}) {
  %y = nn.neg %w : tensor<4xf32>
  // expected-error @+1 {{result #0 has both nn.param and nn.state}}
  return %y : tensor<4xf32>
}

// -----

// Tests that one value cannot update two different arguments (the runtime
// copies each result into one buffer).
func.func @train_step(%w: tensor<4xf32> {nn.param = "w"}, %u: tensor<4xf32> {nn.param = "u"}) -> (tensor<4xf32> {nn.param = "w"}, tensor<4xf32> {nn.param = "u"}) {
  %y = nn.neg %w : tensor<4xf32>
  // expected-error @+1 {{result #1 replaces 'u', but its value is also returned as 'w' (each update needs its own value)}}
  return %y, %y : tensor<4xf32>, tensor<4xf32>
}

// -----

// Tests that a result cannot update a parameter that no argument carries.
func.func @train_step(%w: tensor<4xf32> {nn.param = "w"}) -> (tensor<4xf32> {nn.state = "w.m"}) {
  %y = nn.neg %w : tensor<4xf32>
  // expected-error @+1 {{result #0 ('w.m') updates a parameter or state that no argument carries (nn.param / nn.state)}}
  return %y : tensor<4xf32>
}

// -----

// Tests that two results cannot update the same parameter.
func.func @train_step(%w: tensor<4xf32> {nn.param = "w"}) -> (tensor<4xf32> {nn.param = "w"}, tensor<4xf32> {nn.param = "w"}) {
  %y = nn.neg %w : tensor<4xf32>
  %z = nn.exp %w : tensor<4xf32>
  // expected-error @+1 {{result #1 ('w') updates what result #0 already updates}}
  return %y, %z : tensor<4xf32>, tensor<4xf32>
}

// -----

// Tests that an update must have the type of what it updates.
func.func @train_step(%w: tensor<4xf32> {nn.param = "w"}) -> (tensor<2x2xf32> {nn.param = "w"}) {
  %y = nn.reshape %w : tensor<4xf32> -> tensor<2x2xf32>
  // expected-error @+1 {{result #0 ('w') has a different type or sharding than argument 'w', which it updates}}
  return %y : tensor<2x2xf32>
}

// -----

// Tests that an update must have the sharding of what it updates.
dist.mesh @mesh <["dp"=2]>
func.func @train_step(%w: tensor<2xf32> {nn.param = "w", dist.sharding = #dist.sharding<@mesh, [{"dp"}]>}) -> (tensor<2xf32> {nn.param = "w", dist.sharding = #dist.sharding<@mesh, [{}]>}) attributes {dist.mesh = @mesh} {
  %y = nn.neg %w : tensor<2xf32>
  // expected-error @+1 {{result #0 ('w') has a different type or sharding than argument 'w', which it updates}}
  return %y : tensor<2xf32>
}

// -----

// Tests that an update cannot be a partial sum: the copy into the
// parameter would keep each device's unreduced part.
dist.mesh @mesh <["dp"=2]>
func.func @train_step(%w: tensor<4xf32> {nn.param = "w", dist.sharding = #dist.sharding<@mesh, [{}]>}) -> (tensor<4xf32> {nn.param = "w", dist.sharding = #dist.sharding<@mesh, [{}], partial={"dp"}>}) attributes {dist.mesh = @mesh} {
  %y = nn.neg %w : tensor<4xf32>
  // expected-error @+1 {{result #0 ('w') is a partial value; reduce it before it updates argument 'w'}}
  return %y : tensor<4xf32>
}

// -----

// Tests that parameter and state names are unique (the runtime finds them
// by name).
// expected-error @+1 {{has two arguments named 'w' (nn.param and nn.state names must be unique)}}
func.func @train_step(%w: tensor<4xf32> {nn.param = "w"}, %m: tensor<4xf32> {nn.state = "w"}) -> tensor<4xf32> {
  return %w : tensor<4xf32>
}

// -----

// Tests that nn.mean_count must be a positive count.
func.func @grads(%logits: tensor<2x4xf32> {nn.input = "logits"}, %labels: tensor<2xi32> {nn.input = "labels"}, %dloss: tensor<f32> {nn.input = "dloss"}) -> tensor<2x4xf32> {
  // expected-error @+1 {{has nn.mean_count 0; a token count is at least 1}}
  %d = nn.cross_entropy_grad %logits, %labels, %dloss {nn.mean_count = 0 : i64} : tensor<2x4xf32>, tensor<2xi32>, tensor<f32>
  return %d : tensor<2x4xf32>
}

// -----

// Tests that a conversion the runtime has no kernel for is rejected at the
// op (f64 to bf16 would round twice through f32).
func.func @grads(%x: tensor<4xf64> {nn.input = "x"}) -> tensor<4xbf16> {
  // expected-error @+1 {{converts 'f64' to 'bf16', which the runtime cannot (it converts f32 <-> f64, f32 <-> f16, f32 <-> bf16, and f16 or bf16 to f64)}}
  %y = nn.convert %x : tensor<4xf64> to tensor<4xbf16>
  return %y : tensor<4xbf16>
}
