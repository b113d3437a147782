// RUN: partita-opt %s -split-input-file -verify-diagnostics --dist-pipeline-split

// Tests that a stage before one of its operands' stages is rejected.
func.func @forward(%w0: tensor<4x4xf32> {nn.param = "w0"},
                   %w1: tensor<4x4xf32> {nn.param = "w1"},
                   %x: tensor<2x4xf32> {nn.input = "x"}) -> tensor<2x4xf32> {
  %a = nn.einsum "bh,hk->bk" %x, %w0 {dist.stage = 1 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  // expected-error @+1 {{stages out of dataflow order: this op is on stage 0 but operand #0 comes from stage 1}}
  %b = nn.einsum "bh,hk->bk" %a, %w1 {dist.stage = 0 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  return %b : tensor<2x4xf32>
}

// -----

// Tests that splitting by annotation needs one.
// expected-error @+1 {{no forward op has a 'dist.stage' annotation to split by}}
func.func @forward(%w0: tensor<4x4xf32> {nn.param = "w0"},
                   %x: tensor<2x4xf32> {nn.input = "x"}) -> tensor<2x4xf32> {
  %a = nn.einsum "bh,hk->bk" %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  return %a : tensor<2x4xf32>
}

// -----

// Tests that a negative stage is rejected.
func.func @forward(%w0: tensor<4x4xf32> {nn.param = "w0"},
                   %x: tensor<2x4xf32> {nn.input = "x"}) -> tensor<2x4xf32> {
  // expected-error @+1 {{'dist.stage' must be an i64 stage >= 0, got -1 : i64}}
  %a = nn.einsum "bh,hk->bk" %x, %w0 {dist.stage = -1 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  return %a : tensor<2x4xf32>
}
