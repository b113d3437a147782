// RUN: partita-opt %s -split-input-file --dist-partition -verify-diagnostics

// Everything dist-partition cannot do is a diagnostic at the value or op.

dist.mesh @mesh <["dp"=2, "tp"=4]>
// Tests that an argument without a sharding is rejected at the function.
// expected-error @+1 {{cannot partition argument #0: it has no 'dist.sharding' (run dist-propagate first)}}
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = nn.exp %x {dist.sharding = [#dist.sharding<@mesh, [{}]>]} : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{}]>}) -> tensor<8xf32> {
  // Tests that an op result without a sharding is rejected at the op.
  // expected-error @+1 {{cannot partition result #0 of 'nn.exp': it has no 'dist.sharding' (run dist-propagate first)}}
  %0 = nn.exp %x : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
dist.mesh @other <["x"=2]>
func.func @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{}]>}) -> tensor<8xf32> {
  // Tests that shardings on two meshes in one function are rejected.
  // expected-error @+1 {{result #0 of 'nn.exp' is sharded on mesh @other, but the function is already partitioned for @mesh; dist-partition supports one mesh per function}}
  %0 = nn.exp %x {dist.sharding = [#dist.sharding<@other, [{}]>]} : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func private @g(tensor<8xf32>) -> tensor<8xf32>
func.func @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{}]>}) -> tensor<8xf32> {
  // Tests that an op without a sharding rule is rejected.
  // expected-error @+1 {{cannot partition 'func.call': it has no sharding rule}}
  %0 = func.call @g(%x) : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
// Tests that a tensor of dynamic shape is rejected.
// expected-error @+1 {{cannot partition argument #0 of type 'tensor<?x8xf32>': only statically shaped tensors are supported}}
func.func @f(%x: tensor<?x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}]>}) -> tensor<?x8xf32> {
  return %x : tensor<?x8xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
// Tests that sub-axes are rejected with the planner's reason.
// expected-error @+1 {{cannot partition argument #0: sub-axis of 'tp' is not supported by the resharding planner}}
func.func @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp":(2)2}]>}) -> tensor<8xf32> {
  return %x : tensor<8xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{}]>}) -> tensor<8xf32> {
  // Tests that a constraint that would make a whole value partial is rejected: no plan creates a partial sum.
  // expected-error @+1 {{cannot reshard the constrained value from [{}] to [{}] partial=sum{tp}: target is partial over axis 'tp' where the source is not; the planner does not make values partial}}
  %0 = dist.constraint %x <@mesh, [{}], partial={"tp"}> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
// Tests that a function body of several blocks is rejected.
// expected-error @+1 {{dist-partition expects a function body of one block, 'f' has 2}}
func.func @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{}]>}) -> tensor<8xf32> {
  return %x : tensor<8xf32>
^bb1:
  return %x : tensor<8xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
// Tests that a sub-axis, which the sharding model holds but the resharding
// planner does not support yet, is rejected by name.
// expected-error @+1 {{cannot partition argument #0: sub-axis of 'tp' is not supported by the resharding planner}}
func.func @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp":(1)2}]>}) -> tensor<8xf32> {
  %0 = nn.exp %x {dist.sharding = [#dist.sharding<@mesh, [{}]>]} : tensor<8xf32>
  return %0 : tensor<8xf32>
}
