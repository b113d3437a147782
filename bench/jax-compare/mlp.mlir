// Two-layer MLP, Megatron-style: w1 column-parallel, w2 row-parallel over
// "tp", batch over "dp". Mirrors `mlp` in jax_programs.py; each op's loc names
// the row of docs/propagation-vs-jax.md it fills.
dist.mesh @mesh <["dp"=2, "tp"=4]>

func.func @forward(
    %x: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>},
    %w1: tensor<16x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>},
    %b1: tensor<32xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}]>},
    %w2: tensor<32x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>},
    %b2: tensor<16xf32> {dist.sharding = #dist.sharding<@mesh, [{}]>})
    -> tensor<8x16xf32> {
  %h = nn.einsum "bh,hf->bf" %x, %w1
      : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32> loc("x_w1")
  %b1b = nn.broadcast %b1 dims = [1] : tensor<32xf32> -> tensor<8x32xf32> loc("b1_bcast")
  %hb = nn.add %h, %b1b : tensor<8x32xf32> loc("x_w1_b1")
  %a = nn.relu %hb : tensor<8x32xf32> loc("relu")
  %y = nn.einsum "bf,fh->bh" %a, %w2
      : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32> loc("relu_w2")
  %b2b = nn.broadcast %b2 dims = [1] : tensor<16xf32> -> tensor<8x16xf32> loc("b2_bcast")
  %yb = nn.add %y, %b2b : tensor<8x16xf32> loc("out")
  return %yb : tensor<8x16xf32>
}
