// Embedding lookup, LM-head logits and mean softmax cross-entropy, with a
// vocab-parallel table and LM head over "tp" and tokens over "dp". Mirrors
// `embedding_loss` in jax_programs.py; each op's loc names its row in
// docs/propagation-vs-jax.md. B=4, S=8, H=16, V=64.
dist.mesh @mesh <["dp"=2, "tp"=4]>

func.func @forward(
    %wte: tensor<64x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>},
    %lm_head: tensor<64x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>},
    %ids: tensor<4x8xi32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>},
    %labels: tensor<4x8xi32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>})
    -> (tensor<f32>, tensor<4x8x64xf32>) {
  %e = nn.embedding %wte[%ids]
      : tensor<64x16xf32>, tensor<4x8xi32> -> tensor<4x8x16xf32> loc("embed")
  %logits = nn.einsum "bsh,vh->bsv" %e, %lm_head
      : (tensor<4x8x16xf32>, tensor<64x16xf32>) -> tensor<4x8x64xf32> loc("logits")
  %loss = nn.cross_entropy %logits, %labels
      : tensor<4x8x64xf32>, tensor<4x8xi32> -> tensor<f32> loc("loss")
  return %loss, %logits : tensor<f32>, tensor<4x8x64xf32>
}
