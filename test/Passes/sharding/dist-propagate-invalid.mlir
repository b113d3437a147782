// RUN: partita-opt %s --dist-propagate -split-input-file -verify-diagnostics --allow-unregistered-dialect

// Tests that a sub-axis, which propagation cannot handle yet, is rejected at
// the value that carries it.
dist.mesh @mesh <["dp"=2, "tp"=4]>

// expected-error @+1 {{sharding of argument #0 of @sub_axis uses sub-axis "tp":(2)2, which dist-propagate does not support yet}}
func.func @sub_axis(%a: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp":(2)2}]>}) -> tensor<8xf32> {
  return %a : tensor<8xf32>
}

// -----

// Tests that values linked by an op but annotated on different meshes are
// an error naming the second value.
dist.mesh @a <["dp"=2]>
dist.mesh @b <["dp"=2]>

func.func @meshes_disagree(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@a, [{"dp"}]>}) -> tensor<8xf32> {
  // expected-error @+1 {{result #0 of 'dist.constraint' is sharded on mesh @b, but it is linked through ops to argument #0 of @meshes_disagree, sharded on mesh @a}}
  %0 = dist.constraint %x <@b, [{"dp"}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that a value with no annotation naming a mesh, in a module with
// several meshes, is an error: nothing says which mesh to use.
dist.mesh @a <["dp"=2]>
dist.mesh @b <["dp"=2]>

// expected-error @+1 {{cannot choose a mesh for argument #0 of @which_mesh: the module declares 2 meshes and no sharding linked to it names one}}
func.func @which_mesh(%x: tensor<8xf32>) -> tensor<8xf32> {
  return %x : tensor<8xf32>
}

// -----

// Tests that an op without a sharding rule is named in a warning.
dist.mesh @mesh <["dp"=2]>

func.func @no_rule(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-warning @+1 {{op 'foo.bar' has no sharding rule; its results stay replicated}}
  %0 = "foo.bar"(%x) : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that a sharding of the wrong rank is reported at the value, not a
// crash (the dist verifier catches it before the pass runs).
dist.mesh @mesh <["dp"=2]>

// expected-error @+1 {{'dist.sharding' of argument #0: sharding has 1 dimension(s), but 'tensor<8x8xf32>' has rank 2}}
func.func @wrong_rank(%x: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}]>}) -> tensor<8x8xf32> {
  return %x : tensor<8x8xf32>
}

// -----

// Tests that a sharding naming an unknown mesh is reported at the value.
dist.mesh @mesh <["dp"=2]>

// expected-error @+1 {{'dist.sharding' of argument #0 names unknown mesh @nope}}
func.func @unknown_mesh(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@nope, [{"dp"}]>}) -> tensor<8xf32> {
  return %x : tensor<8xf32>
}
