// RUN: partita-opt %s -split-input-file -nn-autodiff=optimizer=sgd \
// RUN:   -dist-auto-shard="mesh=tp=2 device-tflops=0.001" | FileCheck %s
// RUN: partita-opt %s -split-input-file -nn-autodiff=optimizer=sgd \
// RUN:   -dist-auto-shard="mesh=dp=2,tp=2 device-tflops=0.001" \
// RUN:   | FileCheck %s --check-prefix=MESH2D
// RUN: partita-opt %s -split-input-file -nn-autodiff=optimizer=sgd \
// RUN:   -dist-auto-shard="mesh=tp=2 device-tflops=0.001" -dist-propagate \
// RUN:   -dist-partition | FileCheck %s --check-prefix=PART

// The choices a cost model makes plain. On a train step, splitting the
// batch leaves every weight gradient partial (an all-reduce of the weights'
// bytes), splitting the feed-forward width (Megatron's column then row
// split) leaves the second einsum's output partial (an all-reduce of the
// activations' bytes). Devices are slow (1 GFLOP/s), so the compute is
// worth splitting in both cases.

// Weights of 64x1024 and 1024x16 floats, activations of 8x16: Megatron.
func.func @forward(%w1: tensor<64x1024xf32> {nn.param = "w1"},
                   %w2: tensor<1024x16xf32> {nn.param = "w2"},
                   %x: tensor<8x64xf32> {nn.input = "x"},
                   %l: tensor<8xi32> {nn.input = "labels"})
    -> (tensor<f32> {nn.output = "loss"}) {
  %h = nn.einsum "bh,hf->bf" %x, %w1 : (tensor<8x64xf32>, tensor<64x1024xf32>) -> tensor<8x1024xf32>
  %a = nn.gelu %h : tensor<8x1024xf32>
  %y = nn.einsum "bf,fc->bc" %a, %w2 : (tensor<8x1024xf32>, tensor<1024x16xf32>) -> tensor<8x16xf32>
  %loss = nn.cross_entropy %y, %l : tensor<8x16xf32>, tensor<8xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %arg0: tensor<64x1024xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"tp"}p0]>, nn.param = "w1"}
// CHECK-SAME: %arg1: tensor<1024x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}p0, {}p0]>, nn.param = "w2"}
// CHECK-SAME: %arg2: tensor<64x1024xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"tp"}p0]>, nn.state = "w1.momentum"}
// CHECK-SAME: %arg3: tensor<1024x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}p0, {}p0]>, nn.state = "w2.momentum"}
// The updated weights come back as they went in.
// CHECK-SAME: -> (tensor<64x1024xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"tp"}p0]>, nn.param = "w1"}
// CHECK-SAME: tensor<1024x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}p0, {}p0]>, nn.param = "w2"}
// CHECK-SAME: dist.auto_shard = {{{.*}}method = "optimal"
// The row-parallel einsum's output is partial. It is reduced once (the one
// all-reduce of the forward), read by the cross-entropy and its gradient;
// the cross-entropy takes its own rows of it (a local slice), its loss
// partial, returned partial.
// CHECK: %[[Y:.+]] = nn.einsum "bf,fc->bc" {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{}p0, {}p0], partial={"tp"}>]}
// CHECK-NEXT: %[[WHOLE:.+]] = dist.constraint %[[Y]] <@mesh, [{}p0, {}p0]>
// CHECK-NEXT: %[[ROWS:.+]] = dist.constraint %[[WHOLE]] <@mesh, [{"tp"}p0, {}p0]>
// CHECK: nn.cross_entropy %[[ROWS]], {{.*}} partial={"tp"}
// CHECK: nn.cross_entropy_grad %[[WHOLE]],

// On dp=2,tp=2 the same split takes both axes (a batch of 8 split over dp
// would leave 320 KiB of weight gradients to reduce).
// MESH2D-LABEL: func.func @train_step
// MESH2D-SAME: {dist.sharding = #dist.sharding<@mesh, [{}p0, {"dp", "tp"}p0]>, nn.param = "w1"}
// MESH2D-SAME: {dist.sharding = #dist.sharding<@mesh, [{"dp", "tp"}p0, {}p0]>, nn.param = "w2"}

// After partitioning: the one reduction of the forward is the all-reduce of
// the 8x16 logits, and no weight gradient is reduced.
// PART-LABEL: func.func @train_step
// PART-SAME: (%arg0: tensor<64x512xf32>
// PART-COUNT-1: dist.all_reduce
// PART-NOT: dist.all_reduce
// PART: return

// -----

// Weights of 64x32 and 32x16 floats, a batch of 512: data parallelism, the
// weights whole, the small gradients reduced.
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
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %arg0: tensor<64x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "w1"}
// CHECK-SAME: %arg1: tensor<32x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "w2"}
// CHECK-SAME: %arg4: tensor<512x64xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}p0, {}p0]>, nn.input = "x"}
// CHECK-SAME: %arg5: tensor<512xi32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}p0]>, nn.input = "labels"}
// The weight gradients are partial over the batch's axis until the update
// reads them whole.
// CHECK: nn.einsum "bc,bf->fc" {{.*}}partial={"tp"}
// CHECK: dist.constraint {{.*}} <@mesh, [{}p0, {}p0]>

// MESH2D-LABEL: func.func @train_step
// MESH2D-SAME: {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "w1"}
// MESH2D-SAME: {dist.sharding = #dist.sharding<@mesh, [{"dp", "tp"}p0, {}p0]>, nn.input = "x"}

// PART-LABEL: func.func @train_step
// PART-SAME: %arg4: tensor<256x64xf32>
