// RUN: partita-opt %s -split-input-file -verify-diagnostics

dist.mesh @mesh <["dp"=4]>
func.func @f(%x: tensor<2x16xf32>) -> tensor<2x16xf32> {
  // Tests that dist.mask's dim is a dimension of its input.
  // expected-error @+1 {{'dist.mask' op dim 2 is out of range for rank 2}}
  %0 = dist.mask %x on @mesh axes = ["dp"] dim = 2 size = 6 value = 0.0 : tensor<2x16xf32>
  return %0 : tensor<2x16xf32>
}

// -----

dist.mesh @mesh <["dp"=4]>
func.func @f(%x: tensor<2x16xf32>) -> tensor<2x16xf32> {
  // Tests that dist.mask's size is positive.
  // expected-error @+1 {{'dist.mask' op size 0 must be >= 1}}
  %0 = dist.mask %x on @mesh axes = ["dp"] dim = 0 size = 0 value = 0.0 : tensor<2x16xf32>
  return %0 : tensor<2x16xf32>
}

// -----

dist.mesh @mesh <["dp"=4]>
func.func @f(%x: tensor<2x16xf32>) -> tensor<2x16xf32> {
  // Tests that dist.mask's size fits in the local size times the group size.
  // expected-error @+1 {{'dist.mask' op size 9 exceeds dimension 0's 2 elements times the group size 4}}
  %0 = dist.mask %x on @mesh axes = ["dp"] dim = 0 size = 9 value = 0.0 : tensor<2x16xf32>
  return %0 : tensor<2x16xf32>
}

// -----

dist.mesh @mesh <["dp"=4]>
func.func @f(%x: tensor<2x16xf32>) -> tensor<2x16xf32> {
  // Tests that dist.mask names only axes of its mesh.
  // expected-error @+1 {{'dist.mask' op axis "tp" is not an axis of mesh @mesh}}
  %0 = dist.mask %x on @mesh axes = ["tp"] dim = 0 size = 6 value = 0.0 : tensor<2x16xf32>
  return %0 : tensor<2x16xf32>
}

// -----

dist.mesh @mesh <["dp"=4]>
func.func @f(%x: tensor<2x16xf32>) -> tensor<2x16xf32> {
  // Tests that dist.mask names each axis once.
  // expected-error @+1 {{'dist.mask' op axis "dp" is listed twice}}
  %0 = dist.mask %x on @mesh axes = ["dp", "dp"] dim = 0 size = 6 value = 0.0 : tensor<2x16xf32>
  return %0 : tensor<2x16xf32>
}

// -----

dist.mesh @mesh <["dp"=4]>
func.func @f(%x: tensor<2x16xcomplex<f32>>) -> tensor<2x16xcomplex<f32>> {
  // Tests that dist.mask takes integer or float elements.
  // expected-error @+1 {{'dist.mask' op expects integer or float elements, got 'complex<f32>'}}
  %0 = dist.mask %x on @mesh axes = ["dp"] dim = 0 size = 6 value = 0.0 : tensor<2x16xcomplex<f32>>
  return %0 : tensor<2x16xcomplex<f32>>
}
