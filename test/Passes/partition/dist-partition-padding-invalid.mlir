// RUN: partita-opt %s -split-input-file --dist-partition="vocab-parallel-cross-entropy=true" -verify-diagnostics

// Ops over a padded dimension (one their axes do not divide) where masking
// the padding does not make them exact are diagnostics naming the tensor,
// the dimension and the axes that padded it.

// Tests that layer_norm over a padded hidden dimension is rejected (its mean and variance would need the real count and a second mask).
dist.mesh @mesh <["tp"=4]>
func.func @layer_norm(%x: tensor<4x6xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>},
                      %g: tensor<6xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}]>},
                      %b: tensor<6xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}]>})
    -> (tensor<4x6xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>}) {
  // expected-error @+1 {{cannot partition 'nn.layer_norm': dimension 1 of argument #0 (size 6, padded to 8 because of dimension 1 of argument #0 split over {"tp"}) is padded, and masking its padding does not make the op exact over it (a collective factor); split it over axes that divide its size}}
  %y = nn.layer_norm %x, %g, %b eps = 1.0e-5 {dist.sharding = [#dist.sharding<@mesh, [{}, {"tp"}]>]} : tensor<4x6xf32>, tensor<6xf32>
  return %y : tensor<4x6xf32>
}

// -----

// Tests that a reshape merging a padded dimension with another is rejected (padding would interleave with real elements).
dist.mesh @mesh <["tp"=4]>
func.func @reshape(%x: tensor<6x4xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>})
    -> (tensor<24xf32> {dist.sharding = #dist.sharding<@mesh, [{}]>}) {
  // expected-error @+1 {{cannot partition 'nn.reshape': dimension 0 of argument #0 (size 6, padded to 8 because of dimension 0 of argument #0 split over {"tp"}) is padded, but dimension 0 of result #0 merges it with other dimensions; split it over axes that divide its size}}
  %y = nn.reshape %x {dist.sharding = [#dist.sharding<@mesh, [{}]>]} : tensor<6x4xf32> -> tensor<24xf32>
  return %y : tensor<24xf32>
}

// -----

// Tests that the padding reason names the value whose split padded the class, here an op result consumed by a padded reshape.
dist.mesh @mesh <["tp"=4]>
func.func @reason(%x: tensor<6x4xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}]>})
    -> (tensor<24xf32> {dist.sharding = #dist.sharding<@mesh, [{}]>}) {
  %r = nn.relu %x {dist.sharding = [#dist.sharding<@mesh, [{"tp"}, {}]>]} : tensor<6x4xf32> loc("act")
  // expected-error @+1 {{dimension 0 of result #0 of 'nn.relu' ("act") (size 6, padded to 8 because of dimension 0 of result #0 of 'nn.relu' ("act") split over {"tp"}) is padded}}
  %y = nn.reshape %r {dist.sharding = [#dist.sharding<@mesh, [{}]>]} : tensor<6x4xf32> -> tensor<24xf32>
  return %y : tensor<24xf32>
}

// -----

// Tests that the vocabulary-parallel cross_entropy rejects padded tokens (it cannot skip their log-sum-exp).
dist.mesh @mesh <["dp"=4, "tp"=2]>
func.func @vocab_parallel_cross_entropy(%x: tensor<6x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {"tp"}]>},
                                        %l: tensor<6xi32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}]>})
    -> (tensor<f32> {dist.sharding = #dist.sharding<@mesh, []>}) {
  // expected-error @+1 {{cannot partition 'nn.cross_entropy': dimension 0 of argument #0 (size 6, padded to 8 because of dimension 0 of argument #0 split over {"dp"}) is padded, and the vocabulary-parallel cross_entropy cannot skip padded tokens; split it over axes that divide its size}}
  %y = nn.cross_entropy %x, %l {dist.sharding = [#dist.sharding<@mesh, [], partial={"dp", "tp"}>]} : tensor<6x16xf32>, tensor<6xi32> -> tensor<f32>
  return %y : tensor<f32>
}

// -----

// Tests that a non-splat constant with a padded dimension is rejected (it is computed whole, at its real size).
dist.mesh @mesh <["tp"=4]>
func.func @constant() -> (tensor<6xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}]>}) {
  // expected-error @+1 {{cannot partition 'nn.constant': dimension 0 of result #0 (size 6, padded to 8 because of dimension 0 of result #0 of 'nn.constant' split over {"tp"}) is padded, but the op runs on whole values; split it over axes that divide its size}}
  %c = nn.constant {dist.sharding = [#dist.sharding<@mesh, [{"tp"}]>]} dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]> : tensor<6xf32>
  return %c : tensor<6xf32>
}
