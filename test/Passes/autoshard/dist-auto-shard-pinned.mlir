// RUN: partita-opt %s -split-input-file -verify-diagnostics \
// RUN:   -dist-auto-shard="mesh=x=4 device-tflops=0.001" | FileCheck %s

// What is annotated beforehand stays as it is; the program chooses the
// rest around it. An annotated op result is pinned: a dist.constraint after
// the op takes it from whatever the op writes to the annotation (the
// reshard dist-partition makes there), and its readers read from that. So
// a propagated program is priced as it is.

// Left alone, a batch of 64 is split over x (all compute split, nothing
// reduced). Pinned whole after the first gelu, a gather there would cost a
// call: the first gelu runs whole instead, and the second reads its rows
// of the pinned value (a local slice), split again.
dist.mesh @mesh <["x"=4]>
func.func @pinned(%x: tensor<64x8xf32> {nn.input = "x"}) -> tensor<64x8xf32> {
  %a = nn.gelu %x {dist.sharding = [#dist.sharding<@mesh, [{}, {}]>]} : tensor<64x8xf32>
  %b = nn.gelu %a : tensor<64x8xf32>
  return %b : tensor<64x8xf32>
}
// CHECK-LABEL: func.func @pinned
// CHECK: %[[A:.+]] = nn.gelu %arg0 {dist.sharding = [#dist.sharding<@mesh, [{}p0, {}p0]>]}
// CHECK-NEXT: %[[WHOLE:.+]] = dist.constraint %[[A]] <@mesh, [{}, {}]>
// CHECK-NEXT: %[[ROWS:.+]] = dist.constraint %[[WHOLE]] <@mesh, [{"x"}p0, {}p0]>
// CHECK-NEXT: nn.gelu %[[ROWS]] {dist.sharding = [#dist.sharding<@mesh, [{"x"}p0, {}p0]>]}

// -----

// A dist.constraint written beforehand is kept the same way.
dist.mesh @mesh <["x"=4]>
func.func @constrained(%x: tensor<64x8xf32> {nn.input = "x"}) -> tensor<64x8xf32> {
  %a = nn.gelu %x : tensor<64x8xf32>
  %c = dist.constraint %a <@mesh, [{}, {"x"}]> : tensor<64x8xf32>
  %b = nn.gelu %c : tensor<64x8xf32>
  return %b : tensor<64x8xf32>
}
// CHECK-LABEL: func.func @constrained
// CHECK: %[[C:.+]] = dist.constraint %{{.+}} <@mesh, [{}, {"x"}]>
// CHECK-NEXT: nn.gelu %[[C]] {dist.sharding = [#dist.sharding<@mesh, [{}p0, {"x"}p0]>]}

// -----

dist.mesh @mesh <["x"=4]>
func.func @sub_axes(%x: tensor<64x8xf32> {nn.input = "x"}) -> tensor<64x8xf32> {
  %a = nn.gelu %x : tensor<64x8xf32>
  // expected-error @below {{dist-auto-shard takes pinned layouts without sub-axes}}
  %c = dist.constraint %a <@mesh, [{"x":(1)2}, {}]> : tensor<64x8xf32>
  return %c : tensor<64x8xf32>
}
