// A cross entropy whose labels are computed on the device: the input y
// plus one. y's bound in the plan is the class count (16), so the host
// passes y = 15, and the label 16 is only seen by the kernel.
func.func @forward(%logits: tensor<8x16xf32> {nn.input = "logits"},
                   %y: tensor<8xi32> {nn.input = "y"})
    -> (tensor<f32> {nn.output = "loss"}) {
  %one = nn.constant dense<1> : tensor<8xi32>
  %labels = nn.add %y, %one : tensor<8xi32>
  %loss = nn.cross_entropy %logits, %labels : tensor<8x16xf32>, tensor<8xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
