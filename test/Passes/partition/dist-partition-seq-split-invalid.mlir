// RUN: partita-opt %s -split-input-file --dist-partition -verify-diagnostics

dist.mesh @mesh <["sp"=2]>
func.func @f(%q: tensor<1x4x2x4xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>}) -> tensor<1x4x2x4xf32> {
  // Tests that causal attention_grad with a split query sequence is rejected: its mask needs position offsets.
  // expected-error @+1 {{cannot partition causal 'nn.attention_grad' with its query sequence split over {"sp"}: its mask needs each shard's position offset, which dist-partition does not support yet}}
  %0 = nn.attention_grad %q, %q, %q, %q wrt = q causal {dist.sharding = [#dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>]} : tensor<1x4x2x4xf32>, tensor<1x4x2x4xf32> -> tensor<1x4x2x4xf32>
  return %0 : tensor<1x4x2x4xf32>
}

// -----

dist.mesh @mesh <["sp"=2]>
func.func @f(%q: tensor<1x4x2x4xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"sp"}, {}, {}]>}, %k: tensor<1x4x2x4xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}, {}, {}]>}) -> tensor<1x4x2x4xf32> {
  // Tests that the gradient with respect to the keys (query sequence a sum reduction) is rejected too.
  // expected-error @+1 {{cannot partition causal 'nn.attention_grad' with its query sequence split over {"sp"}}}
  %0 = nn.attention_grad %q, %k, %k, %q wrt = k causal {dist.sharding = [#dist.sharding<@mesh, [{}, {}, {}, {}], partial={"sp"}>]} : tensor<1x4x2x4xf32>, tensor<1x4x2x4xf32> -> tensor<1x4x2x4xf32>
  return %0 : tensor<1x4x2x4xf32>
}
