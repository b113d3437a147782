// RUN: partita-opt %s --dist-annotate="strategy=cp mesh=cp=4" | FileCheck %s --check-prefixes=CHECK,CP
// RUN: partita-opt %s --dist-annotate="strategy=dp+cp mesh=dp=2,cp=2" | FileCheck %s --check-prefixes=CHECK,DPCP
// RUN: partita-opt %s --dist-annotate="strategy=cp mesh=seq=2 context-axis=seq" | FileCheck %s --check-prefix=RENAMED

// Tests the context-parallel strategies: every input's dimension 1 (the
// sequence) is split over cp (dp+cp: dimension 0 over dp as well); every
// parameter is replicated; all closed at priority p0.
// CHECK-LABEL: func.func @lm
// CHECK-SAME: tensor<16x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "wte"}
// CHECK-SAME: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "lm_head"}
// CP-SAME:   tensor<2x8xi32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"cp"}p0]>, nn.input = "ids"}
// CP-SAME:   tensor<2x8xi32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"cp"}p0]>, nn.input = "labels"}
// DPCP-SAME: tensor<2x8xi32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}p0, {"cp"}p0]>, nn.input = "ids"}
// DPCP-SAME: tensor<2x8xi32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}p0, {"cp"}p0]>, nn.input = "labels"}
// RENAMED: {dist.sharding = #dist.sharding<@mesh, [{}p0, {"seq"}p0]>, nn.input = "ids"}
func.func @lm(%wte: tensor<16x8xf32> {nn.param = "wte"},
              %head: tensor<8x16xf32> {nn.param = "lm_head"},
              %ids: tensor<2x8xi32> {nn.input = "ids"},
              %labels: tensor<2x8xi32> {nn.input = "labels"}) -> tensor<2x8xi32> {
  return %ids : tensor<2x8xi32>
}
