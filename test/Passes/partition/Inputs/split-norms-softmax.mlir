module {
  dist.mesh @mesh <["tp"=4]>
  func.func @forward(%g: tensor<64xf32> {nn.param = "g", dist.sharding = #dist.sharding<@mesh, [{"tp"}]>},
                     %b: tensor<64xf32> {nn.param = "b", dist.sharding = #dist.sharding<@mesh, [{"tp"}]>},
                     %x: tensor<2x64xf32> {nn.input = "x", dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>})
      -> (tensor<2x64xf32> {nn.output = "logits"}) {
    %y = nn.layer_norm %x, %g, %b eps = 1.0e-5 {dist.sharding = [#dist.sharding<@mesh, [{}, {"tp"}]>]} : tensor<2x64xf32>, tensor<64xf32>
    %r = nn.rms_norm %y, %g eps = 1.0e-5 {dist.sharding = [#dist.sharding<@mesh, [{}, {"tp"}]>]} : tensor<2x64xf32>, tensor<64xf32>
    %s = nn.softmax %r dim = 1 {dist.sharding = [#dist.sharding<@mesh, [{}, {"tp"}]>]} : tensor<2x64xf32>
    return %s : tensor<2x64xf32>
  }
}
