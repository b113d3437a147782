// RUN: partita-opt %s -split-input-file \
// RUN:   -dist-auto-shard="mesh=tp=2 memory-per-device-gib=0.00146484375 call-us=0.1 device-tflops=0.001" \
// RUN:   | FileCheck %s
// RUN: partita-opt %s -split-input-file \
// RUN:   -dist-auto-shard="mesh=tp=2 memory-per-device-gib=0.00146484375 call-us=20 device-tflops=0.001" \
// RUN:   | FileCheck %s --check-prefix=SLOW-CALL
// RUN: partita-opt %s -split-input-file \
// RUN:   -dist-auto-shard="mesh=tp=2 memory-per-device-gib=0.00146484375 call-us=0.1 device-tflops=0.001" \
// RUN:   -dist-propagate -dist-partition | FileCheck %s --check-prefix=PART

// Factors whose split needs a collective-aware local form (FactorKind::
// Collective) are choices when the op's partition hook builds that form:
// the embedding's vocabulary, the norms' and softmax's reduced dimension.
// Such a choice is priced by the form the hook builds.

// A table of 65536x9 floats (2.25 MiB) under a cap of 1.5 MiB must
// be split, and 9 columns do not split over 2: the rows (the vocabulary)
// are. The embedding then looks up its own rows and leaves its result a
// partial sum (Megatron-LM's vocabulary-parallel embedding): 288 bytes to
// reduce rather than 1.1 MiB of table to gather.
func.func @embed(%table: tensor<65536x9xf32> {nn.param = "table"},
                 %ids: tensor<2x4xi32> {nn.input = "ids"})
    -> (tensor<2x4x9xf32> {nn.output = "e"}) {
  %e = nn.embedding %table[%ids] : tensor<65536x9xf32>, tensor<2x4xi32> -> tensor<2x4x9xf32>
  return %e : tensor<2x4x9xf32>
}
// CHECK-LABEL: func.func @embed
// CHECK-SAME: {dist.sharding = #dist.sharding<@mesh, [{"tp"}p0, {}p0]>, nn.param = "table"}
// CHECK: nn.embedding %arg0[%arg1] {dist.sharding = [#dist.sharding<@mesh, [{}p0, {}p0, {}p0], partial={"tp"}>]}

// The same choice at any call cost: a gather of the table is a call too.
// SLOW-CALL-LABEL: func.func @embed
// SLOW-CALL: nn.embedding %arg0[%arg1] {dist.sharding = [#dist.sharding<@mesh, [{}p0, {}p0, {}p0], partial={"tp"}>]}

// Partitioned: the rows of this device's shard are found from its index on
// the axis. The partial result is returned partial (dist-partition's
// keep-partial-results: the runtime reduces it as it reads the output),
// which the program prices as free.
// PART-LABEL: func.func @embed
// PART-SAME: -> (tensor<2x4x9xf32> {dist.global_sharding = #dist.sharding<@mesh, [{}, {}, {}], partial={"tp"}>
// PART: dist.axis_index on @mesh axes = ["tp"]
// PART: nn.embedding {{.*}} : tensor<32768x9xf32>, tensor<2x4xi32> -> tensor<2x4x9xf32>
// PART-NOT: dist.
// PART: return

// -----

// A wide hidden layer (4096) between two einsums, on a batch of one that
// cannot be split: the column- and row-parallel einsums leave the norm's
// input split on its hidden dimension. With 0.1 us a call, the norm runs
// split too (its mean and variance all-reduced: 4 bytes twice) rather than
// gathering 16 KiB; with 20 us a call, one gather beats two all-reduces.
func.func @norm(%x: tensor<1x16xf32> {nn.input = "x"},
                %w1: tensor<16x4096xf32> {nn.param = "w1"},
                %g: tensor<4096xf32> {nn.param = "g"},
                %b: tensor<4096xf32> {nn.param = "b"},
                %w2: tensor<4096x16xf32> {nn.param = "w2"})
    -> (tensor<1x16xf32> {nn.output = "y"}) {
  %h = nn.einsum "bk,kh->bh" %x, %w1 : (tensor<1x16xf32>, tensor<16x4096xf32>) -> tensor<1x4096xf32>
  %n = nn.layer_norm %h, %g, %b eps = 1.0e-05 : tensor<1x4096xf32>, tensor<4096xf32>
  %y = nn.einsum "bh,hc->bc" %n, %w2 : (tensor<1x4096xf32>, tensor<4096x16xf32>) -> tensor<1x16xf32>
  return %y : tensor<1x16xf32>
}
// CHECK-LABEL: func.func @norm
// CHECK: nn.layer_norm {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{}p0, {"tp"}p0]>]}

// SLOW-CALL-LABEL: func.func @norm
// SLOW-CALL: %[[H:.+]] = nn.einsum "bk,kh->bh" {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{}p0, {"tp"}p0]>]}
// SLOW-CALL: %[[WHOLE:.+]] = dist.constraint %[[H]] <@mesh, [{}p0, {}p0]>
// SLOW-CALL: nn.layer_norm %[[WHOLE]], {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{}p0, {}p0]>]}

// Partitioned: the norm's two all-reduces of one-element statistics (the
// mean, then the variance), then the row-parallel einsum's partial output,
// returned partial.
// PART-LABEL: func.func @norm
// PART-SAME: -> (tensor<1x16xf32> {dist.global_sharding = #dist.sharding<@mesh, [{}, {}], partial={"tp"}>
// PART-NOT: dist.all_gather
// PART: dist.all_reduce {{.*}} axes = ["tp"] kind = sum : tensor<1xf32>
// PART: dist.all_reduce {{.*}} axes = ["tp"] kind = sum : tensor<1xf32>
// PART: nn.einsum "bh,hc->bc" {{.*}} : (tensor<1x2048xf32>, tensor<2048x16xf32>) -> tensor<1x16xf32>
// PART-NEXT: return
