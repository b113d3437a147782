// A model with two ops outside the nn dialect between nn ops:
// ptest.sum_normalize (of exp: a softmax over each row) and ptest.row_max
// (test/lib/TestDialect.cpp: each with its own sharding rule, partition hook
// and cost, and a custom runtime kernel from test/lib/Kernels). Its
// parameter is named as an MLP's first layer, so `--strategy megatron`
// splits its columns and with them the ptest ops' collective factor.
func.func @forward(%x: tensor<8x16xf32> {nn.input = "x"},
                   %w: tensor<16x32xf32> {nn.param = "layers.0.mlp.w1"})
    -> (tensor<8x32xf32> {nn.output = "probs"},
        tensor<8xf32> {nn.output = "row_max"}) {
  %h = nn.einsum "bh,hf->bf" %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %e = nn.exp %h : tensor<8x32xf32>
  %p = "ptest.sum_normalize"(%e) : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %m = "ptest.row_max"(%h) : (tensor<8x32xf32>) -> tensor<8xf32>
  return %p, %m : tensor<8x32xf32>, tensor<8xf32>
}
