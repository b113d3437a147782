// RUN: partita-opt %s -split-input-file --dist-partition -verify-diagnostics

dist.mesh @mesh <["sp"=4]>
func.func @f(%q: tensor<1x6x2x4xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>}) -> tensor<1x6x2x4xf32> {
  // Tests that non-causal attention over padded keys is still rejected: every query would attend to the padding (only the causal mask drops it).
  // expected-error @+1 {{cannot partition 'nn.attention': dimension 1 of argument #0 (size 6, padded to 8 because of dimension 1 of argument #0 split over {"sp"}) is padded, and masking its padding does not make the op exact over it (a collective factor)}}
  %0 = nn.attention %q, %q, %q {dist.sharding = [#dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>]} : tensor<1x6x2x4xf32>, tensor<1x6x2x4xf32>
  return %0 : tensor<1x6x2x4xf32>
}
