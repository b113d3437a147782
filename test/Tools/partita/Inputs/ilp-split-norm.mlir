// A wide hidden layer (4096) on a batch of one: `partita plan --strategy ilp
// --call-us 0.1` runs its layer norm split over the hidden dimension
// (plan-ilp.test).
func.func @forward(%x: tensor<1x16xf32> {nn.input = "x"},
                   %w1: tensor<16x4096xf32> {nn.param = "w1"},
                   %g: tensor<4096xf32> {nn.param = "g"},
                   %b: tensor<4096xf32> {nn.param = "b"},
                   %w2: tensor<4096x16xf32> {nn.param = "w2"},
                   %labels: tensor<1xi32> {nn.input = "labels"})
    -> (tensor<f32> {nn.output = "loss"}) {
  %h = nn.einsum "bk,kh->bh" %x, %w1 : (tensor<1x16xf32>, tensor<16x4096xf32>) -> tensor<1x4096xf32>
  %n = nn.layer_norm %h, %g, %b eps = 1.0e-05 : tensor<1x4096xf32>, tensor<4096xf32>
  %y = nn.einsum "bh,hc->bc" %n, %w2 : (tensor<1x4096xf32>, tensor<4096x16xf32>) -> tensor<1x16xf32>
  %loss = nn.cross_entropy %y, %labels : tensor<1x16xf32>, tensor<1xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
