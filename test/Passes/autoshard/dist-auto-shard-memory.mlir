// RUN: partita-opt %s -nn-autodiff=optimizer=sgd \
// RUN:   -dist-auto-shard="mesh=dp=2 device-tflops=0.001" | FileCheck %s --check-prefix=FREE
// RUN: partita-opt %s -nn-autodiff=optimizer=sgd \
// RUN:   -dist-auto-shard="mesh=dp=2 device-tflops=0.001 memory-per-device-gib=7.450580596923828e-05" \
// RUN:   | FileCheck %s --check-prefix=CAPPED
// RUN: not partita-opt %s -nn-autodiff=optimizer=sgd \
// RUN:   -dist-auto-shard="mesh=dp=2 memory-per-device-gib=1e-6" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=NONE-FITS

// The memory cap counts the arguments a device holds. Here they are the
// weights (8192 and 2048 bytes) with their momentum, and the inputs (x of
// 131072 bytes, labels of 2048). Uncapped, the weights stay whole and the
// batch is split: 20480 + 65536 + 1024 = 87040 bytes a device.
func.func @forward(%w1: tensor<64x32xf32> {nn.param = "w1"},
                   %w2: tensor<32x16xf32> {nn.param = "w2"},
                   %x: tensor<512x64xf32> {nn.input = "x"},
                   %l: tensor<512xi32> {nn.input = "labels"})
    -> (tensor<f32> {nn.output = "loss"}) {
  %h = nn.einsum "bh,hf->bf" %x, %w1 : (tensor<512x64xf32>, tensor<64x32xf32>) -> tensor<512x32xf32>
  %a = nn.gelu %h : tensor<512x32xf32>
  %y = nn.einsum "bf,fc->bc" %a, %w2 : (tensor<512x32xf32>, tensor<32x16xf32>) -> tensor<512x16xf32>
  %loss = nn.cross_entropy %y, %l : tensor<512x16xf32>, tensor<512xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
// FREE: nn.param = "w1"
// FREE-SAME: dist.auto_shard = {argument_bytes = 8.704000e+04 : f64

// At 80000 bytes (7.45e-5 GiB) the weight w1 and its momentum are split
// (8192 bytes less), as ZeRO-3 would split them, and gathered where they
// are read whole.
// CAPPED: %arg0: tensor<64x32xf32> {dist.sharding = #dist.sharding<@mesh, [{{[^]]*}}"dp"{{[^]]*}}]>, nn.param = "w1"}
// CAPPED-SAME: %arg2: tensor<64x32xf32> {dist.sharding = #dist.sharding<@mesh, [{{[^]]*}}"dp"{{[^]]*}}]>, nn.state = "w1.momentum"}
// CAPPED-SAME: dist.auto_shard = {argument_bytes = 7.884800e+04 : f64

// NONE-FITS: error: dist-auto-shard: no choices fit the memory limit on mesh @mesh ["dp"=2]
