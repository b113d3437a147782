// RUN: partita-opt %s -nn-autodiff=optimizer=sgd \
// RUN:   -dist-auto-shard="mesh=tp=2 device-tflops=0.01 overlap-share=0" \
// RUN:   | FileCheck %s --check-prefix=NONE
// RUN: partita-opt %s -nn-autodiff=optimizer=sgd \
// RUN:   -dist-auto-shard="mesh=tp=2 device-tflops=0.01" \
// RUN:   | FileCheck %s --check-prefix=HIDDEN
// RUN: partita-opt %s -nn-autodiff=optimizer=sgd \
// RUN:   -dist-auto-shard="mesh=tp=2 device-tflops=0.01" -dist-propagate \
// RUN:   -dist-partition -dist-optimize-comm | FileCheck %s --check-prefix=PART

// The overlap of the gradient reductions with the backward (overlap-share,
// the strategy search's 2/3 of the compute by default). Splitting the
// feed-forward width (Megatron's column then row split) all-reduces the
// 64x16 logits in the forward, which the step waits for; splitting the
// batch all-reduces 80 KiB of weight gradients (one bucket's call and more
// bytes), which dist-optimize-comm issues as the backward makes them.
// Without overlap the first is cheaper; with it the second is all hidden.
func.func @forward(%w1: tensor<64x256xf32> {nn.param = "w1"},
                   %w2: tensor<256x16xf32> {nn.param = "w2"},
                   %x: tensor<64x64xf32> {nn.input = "x"},
                   %l: tensor<64xi32> {nn.input = "labels"})
    -> (tensor<f32> {nn.output = "loss"}) {
  %h = nn.einsum "bh,hf->bf" %x, %w1 : (tensor<64x64xf32>, tensor<64x256xf32>) -> tensor<64x256xf32>
  %a = nn.gelu %h : tensor<64x256xf32>
  %y = nn.einsum "bf,fc->bc" %a, %w2 : (tensor<64x256xf32>, tensor<256x16xf32>) -> tensor<64x16xf32>
  %loss = nn.cross_entropy %y, %l : tensor<64x16xf32>, tensor<64xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
// NONE-LABEL: func.func @train_step
// NONE-SAME: %arg0: tensor<64x256xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"tp"}p0]>, nn.param = "w1"}
// NONE-SAME: %arg4: tensor<64x64xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.input = "x"}
// NONE-SAME: dist.auto_shard = {{{.*}}hidden_seconds = 0.000000e+00 : f64, method = "optimal"

// HIDDEN-LABEL: func.func @train_step
// HIDDEN-SAME: %arg0: tensor<64x256xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "w1"}
// HIDDEN-SAME: %arg4: tensor<64x64xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}p0, {}p0]>, nn.input = "x"}
// All of its communication (20.8 us: a call and the bytes) is hidden.
// HIDDEN-SAME: dist.auto_shard = {{{.*}}comm_seconds = 2.08{{[0-9]*}}E-5 : f64{{.*}}hidden_seconds = 2.08{{[0-9]*}}e-05 : f64, method = "optimal"

// Partitioned, the weight gradients' all-reduces ride one bucket, and
// nothing else communicates.
// PART-LABEL: func.func @train_step
// PART-COUNT-2: dist.all_reduce {{.*}} {dist.bucket = 1 : i64}
// PART-NOT: dist.all_reduce
// PART-NOT: dist.all_gather
// PART: return
