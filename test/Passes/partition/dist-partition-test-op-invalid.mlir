// RUN: partita-opt %s -split-input-file -verify-diagnostics --dist-propagate --dist-partition

// Tests that a partition hook that builds the wrong number of results is a
// diagnostic at the op, not a crash (ptest.bad_hook, test/lib/TestDialect.cpp,
// builds none).
dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @bad_hook(%x: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>})
    -> tensor<8x16xf32> {
  // expected-error @+1 {{cannot partition 'ptest.bad_hook': its partition hook built 0 results for 1}}
  %y = "ptest.bad_hook"(%x) : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}

// -----

// Tests the test op's own verifier.
func.func @not_rank2(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'ptest.sum_normalize' op expects a rank-2 tensor operand and a result of its type}}
  %y = "ptest.sum_normalize"(%x) : (tensor<8xf32>) -> tensor<8xf32>
  return %y : tensor<8xf32>
}
