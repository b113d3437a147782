// Every diagnostic of dist-annotate's sequence-parallel option. Each needs its
// own option values, so each is a part of this file (split-file) with its own
// RUN line.

// RUN: split-file %s %t
// RUN: partita-opt %t/dp-only.mlir --dist-annotate="strategy=dp mesh=dp=4 sequence-parallel=true" -verify-diagnostics
// RUN: partita-opt %t/seq-not-divisible.mlir --dist-annotate="strategy=megatron mesh=tp=4 sequence-parallel=true" -verify-diagnostics
// RUN: partita-opt %t/no-norm.mlir --dist-annotate="strategy=megatron mesh=tp=4 sequence-parallel=true" -verify-diagnostics

//--- dp-only.mlir
// Tests that sequence parallelism with a strategy that has no tensor axis is
// an error naming the strategies that have one.
// expected-error @+1 {{sequence-parallel splits the sequence over the tensor axis, but strategy 'dp' has none; use megatron or dp+megatron}}
module {}

//--- seq-not-divisible.mlir
// Tests that a sequence length the tensor axis does not divide is an error at
// the norm whose input would be split, naming the length and the axis.
func.func @forward(%x: tensor<2x6x8xf32> {nn.input = "x"},
                   %g: tensor<8xf32> {nn.param = "layers.0.ln1.gamma"},
                   %b: tensor<8xf32> {nn.param = "layers.0.ln1.beta"}) -> tensor<2x6x8xf32> {
  // expected-error @+1 {{sequence-parallel splits the sequence (dimension 1 of 'tensor<2x6x8xf32>') over mesh axis "tp" of size 4, which does not divide sequence length 6}}
  %y = nn.layer_norm %x, %g, %b eps = 1.0e-5 : tensor<2x6x8xf32>, tensor<8xf32>
  return %y : tensor<2x6x8xf32>
}

//--- no-norm.mlir
// Tests that a function without [batch, seq, hidden] activations entering a
// norm (the MLP model's [batch, hidden]) is an error: there is no residual
// stream to split on the sequence.
// expected-error @+1 {{sequence-parallel needs [batch, seq, hidden] activations entering an nn.layer_norm or nn.rms_norm, but @forward has none}}
func.func @forward(%x: tensor<4x8xf32> {nn.input = "x"},
                   %w: tensor<8x16xf32> {nn.param = "layers.0.w1"}) -> tensor<4x16xf32> {
  %y = nn.einsum "bh,hf->bf" %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}
