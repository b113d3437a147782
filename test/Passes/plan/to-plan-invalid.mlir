// RUN: partita-translate --to-plan %s -split-input-file -verify-diagnostics -o /dev/null

// Tests that an op without a kernel or collective is rejected at the op.
dist.mesh @mesh <["tp"=2]>
func.func @forward(%x: tensor<4xf32> {nn.input = "x"}) -> tensor<4xf32> {
  // expected-error @+1 {{cannot be lowered to a plan: the runtime has no kernel or collective for it}}
  dist.send %x on @mesh axis = "tp" to 1 : tensor<4xf32>
  return %x : tensor<4xf32>
}

// -----

// Tests that a non-splat f16 constant is lowered (no error): bf16 and f16
// constants are stored since mixed precision; every runtime dtype is.
func.func @forward() -> tensor<2xf16> {
  %c = nn.constant dense<[1.0, 2.0]> : tensor<2xf16>
  return %c : tensor<2xf16>
}

// -----

// Tests that a dynamically shaped argument is rejected.
// expected-error @+1 {{argument #0 has type 'tensor<?xf32>'; the plan needs statically shaped tensors}}
func.func @forward(%x: tensor<?xf32>) -> tensor<?xf32> {
  return %x : tensor<?xf32>
}

// -----

// Tests that an element type without a runtime dtype is rejected.
// expected-error @+1 {{argument #0 element type 'i8' has no runtime dtype (f32, f64, f16, bf16, i32 or i64)}}
func.func @forward(%x: tensor<4xi8> {nn.input = "x"}) -> tensor<4xi8> {
  return %x : tensor<4xi8>
}

// -----

// Tests that an integer parameter is rejected: the runtime initializes
// floating-point parameters only.
// expected-error @+1 {{argument #0 ('n') is a parameter of element type 'i32'; the runtime initializes f32, f64, bf16 and f16 parameters}}
func.func @forward(%n: tensor<4xi32> {nn.param = "n"}) -> tensor<4xi32> {
  return %n : tensor<4xi32>
}

// -----

// Tests that a declared global type is at most the local shape times the
// shard counts (smaller where a dimension is padded).
dist.mesh @mesh <["tp"=2]>
// expected-error @+1 {{argument #0 ('w') declares global type 'tensor<4x6xf32>', but its local shape and sharding hold at most [4x4]}}
func.func @forward(%w: tensor<4x2xf32> {nn.param = "w", dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>, dist.global_type = tensor<4x6xf32>}) -> tensor<4x2xf32> {
  return %w : tensor<4x2xf32>
}

// -----

// Tests that a declared global type cannot be smaller than its shard: a
// padding (local size times shard count minus global size) of the mesh's
// device count or more is no partition's.
dist.mesh @mesh <["dp"=2, "tp"=2]>
// expected-error @+1 {{argument #0 ('w') declares global type 'tensor<8x8xf32>', but its local shape and sharding hold [8x32]: a padding of 4 or more elements in a dimension, which no partition of a mesh of 4 devices makes}}
func.func @forward(%w: tensor<8x16xf32> {nn.param = "w", dist.global_sharding = #dist.sharding<@mesh, [{}, {"tp"}]>, dist.global_type = tensor<8x8xf32>}) -> tensor<8x16xf32> attributes {dist.mesh = @mesh} {
  return %w : tensor<8x16xf32>
}

// -----

// Tests that a mesh whose size changed after partitioning is caught by the
// shards it no longer matches (tp was 2 when w's local type was made).
dist.mesh @mesh <["dp"=2, "tp"=4]>
// expected-error @+1 {{argument #0 ('w') declares global type 'tensor<8x32xf32>', but its local shape and sharding hold [8x64]: a padding of 8 or more elements in a dimension, which no partition of a mesh of 8 devices makes}}
func.func @forward(%w: tensor<8x16xf32> {nn.param = "w", dist.global_sharding = #dist.sharding<@mesh, [{}, {"tp"}]>, dist.global_type = tensor<8x32xf32>}) -> tensor<8x16xf32> attributes {dist.mesh = @mesh} {
  return %w : tensor<8x16xf32>
}

// -----

// Tests that a padded dimension within the bound is accepted: 6 split over
// tp=4 is padded to 8, two local elements each.
dist.mesh @mesh <["tp"=4]>
func.func @forward(%w: tensor<2xf32> {nn.param = "w", dist.global_sharding = #dist.sharding<@mesh, [{"tp"}]>, dist.global_type = tensor<6xf32>}) -> tensor<2xf32> attributes {dist.mesh = @mesh} {
  return %w : tensor<2xf32>
}

// -----

// Tests that a collective over an axis the mesh lacks is rejected at the op
// (the dist dialect's verifier, which partita-translate runs on its input).
dist.mesh @mesh <["dp"=2, "tp"=2]>
func.func @forward(%x: tensor<2x8xf32> {nn.input = "x", dist.global_sharding = #dist.sharding<@mesh, [{"dp"}, {}]>, dist.global_type = tensor<4x8xf32>}) -> tensor<2x8xf32> attributes {dist.mesh = @mesh} {
  // expected-error @+1 {{'dist.all_reduce' op axis "pp" is not an axis of mesh @mesh}}
  %y = dist.all_reduce %x on @mesh axes = ["pp"] kind = sum : tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// Tests that sub-axes are rejected until the runtime supports them.
dist.mesh @mesh <["tp"=4]>
// expected-error @+1 {{argument #0 ('w') uses sub-axis #dist.axis<"tp":(1)2>, which the plan lowering does not support yet}}
func.func @forward(%w: tensor<4x2xf32> {nn.param = "w", dist.sharding = #dist.sharding<@mesh, [{}, {"tp":(1)2}]>}) -> tensor<4x2xf32> attributes {dist.mesh = @mesh} {
  return %w : tensor<4x2xf32>
}

// -----

// Tests that a partial minimum result is rejected: gathering reduces sums
// and maxima only.
dist.mesh @mesh <["tp"=2]>
func.func @forward(%x: tensor<4xf32> {nn.input = "x"}) -> (tensor<4xf32> {dist.sharding = #dist.sharding<@mesh, [{}], partial=min{"tp"}>}) attributes {dist.mesh = @mesh} {
  %y = nn.relu %x : tensor<4xf32>
  // expected-error @+1 {{result #0 is a partial minimum, which the runtime cannot gather}}
  return %y : tensor<4xf32>
}

// -----

// Tests that collectives must use the function's one mesh.
dist.mesh @a <["tp"=2]>
dist.mesh @b <["tp"=2]>
func.func @forward(%x: tensor<4xf32> {nn.input = "x"}) -> tensor<4xf32> attributes {dist.mesh = @a} {
  // expected-error @+1 {{uses mesh @b, but the function uses @a (a plan has one mesh)}}
  %y = dist.all_reduce %x on @b axes = ["tp"] kind = sum : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// Tests that a module without @train_step, @grads or @forward and with
// several functions names no function to lower.
// expected-error @+1 {{has no function @train_step, @grads or @forward (and not exactly one function) to lower}}
module {
  func.func @a() {
    return
  }
  func.func @b() {
    return
  }
}
