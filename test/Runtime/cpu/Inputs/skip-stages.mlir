// A three-stage model by dist.stage annotations with a skip connection: %a,
// made on stage 0, is read on stage 2 (it passes through stage 1), and %x,
// an input, on stage 1. Used by pipeline-stages.test.
module {
  func.func @forward(%w0: tensor<8x16xf32> {nn.param = "w0"},
                     %w1: tensor<16x16xf32> {nn.param = "w1"},
                     %w2: tensor<16x8xf32> {nn.param = "w2"},
                     %wx: tensor<8x16xf32> {nn.param = "wx"},
                     %x: tensor<12x8xf32> {nn.input = "x"},
                     %labels: tensor<12xi32> {nn.input = "labels"})
      -> (tensor<f32> {nn.output = "loss"}) {
    %p = nn.einsum "bh,hk->bk" %x, %w0 {dist.stage = 0 : i64} : (tensor<12x8xf32>, tensor<8x16xf32>) -> tensor<12x16xf32>
    %a = nn.tanh %p {dist.stage = 0 : i64} : tensor<12x16xf32>
    %q = nn.einsum "bh,hk->bk" %a, %w1 {dist.stage = 1 : i64} : (tensor<12x16xf32>, tensor<16x16xf32>) -> tensor<12x16xf32>
    %r = nn.einsum "bh,hk->bk" %x, %wx {dist.stage = 1 : i64} : (tensor<12x8xf32>, tensor<8x16xf32>) -> tensor<12x16xf32>
    %b = nn.add %q, %r {dist.stage = 1 : i64} : tensor<12x16xf32>
    %c = nn.tanh %b {dist.stage = 1 : i64} : tensor<12x16xf32>
    %s = nn.add %c, %a {dist.stage = 2 : i64} : tensor<12x16xf32>
    %logits = nn.einsum "bh,hv->bv" %s, %w2 {dist.stage = 2 : i64} : (tensor<12x16xf32>, tensor<16x8xf32>) -> tensor<12x8xf32>
    %loss = nn.cross_entropy %logits, %labels {dist.stage = 2 : i64} : tensor<12x8xf32>, tensor<12xi32> -> tensor<f32>
    return %loss : tensor<f32>
  }
}
