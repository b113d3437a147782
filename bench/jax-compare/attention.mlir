// Multi-head attention block, Megatron-style: q/k/v projections split by
// head over "tp", output projection row-parallel, batch over "dp". Written
// out op by op (not nn.attention) so that every intermediate is compared.
// Mirrors `attention` in jax_programs.py; each op's loc names its row in
// docs/propagation-vs-jax.md. B=4, S=8, H=32, n=4 heads, d=8.
dist.mesh @mesh <["dp"=2, "tp"=4]>

func.func @forward(
    %x: tensor<4x8x32xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}, {}]>},
    %wq: tensor<32x4x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}, {}]>},
    %wk: tensor<32x4x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}, {}]>},
    %wv: tensor<32x4x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}, {}]>},
    %wo: tensor<4x8x32xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}, {}]>})
    -> tensor<4x8x32xf32> {
  %q = nn.einsum "bsh,hnd->bsnd" %x, %wq
      : (tensor<4x8x32xf32>, tensor<32x4x8xf32>) -> tensor<4x8x4x8xf32> loc("q")
  %k = nn.einsum "bsh,hnd->bsnd" %x, %wk
      : (tensor<4x8x32xf32>, tensor<32x4x8xf32>) -> tensor<4x8x4x8xf32> loc("k")
  %v = nn.einsum "bsh,hnd->bsnd" %x, %wv
      : (tensor<4x8x32xf32>, tensor<32x4x8xf32>) -> tensor<4x8x4x8xf32> loc("v")
  %s = nn.einsum "bqnd,bknd->bnqk" %q, %k
      : (tensor<4x8x4x8xf32>, tensor<4x8x4x8xf32>) -> tensor<4x4x8x8xf32> loc("scores")
  // 1/sqrt(8)
  %c = nn.constant dense<0.353553385> : tensor<4x4x8x8xf32> loc("scale")
  %ss = nn.mul %s, %c : tensor<4x4x8x8xf32> loc("scores_scaled")
  %p = nn.softmax %ss dim = 3 : tensor<4x4x8x8xf32> loc("probs")
  %o = nn.einsum "bnqk,bknd->bqnd" %p, %v
      : (tensor<4x4x8x8xf32>, tensor<4x8x4x8xf32>) -> tensor<4x8x4x8xf32> loc("context")
  %y = nn.einsum "bqnd,ndh->bqh" %o, %wo
      : (tensor<4x8x4x8xf32>, tensor<4x8x32xf32>) -> tensor<4x8x32xf32> loc("out")
  return %y : tensor<4x8x32xf32>
}
