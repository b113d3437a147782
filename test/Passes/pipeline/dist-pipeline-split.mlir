// RUN: partita-opt %s -split-input-file --dist-pipeline-split | FileCheck %s

// Tests that annotated ops keep their stage, an unannotated op takes the
// latest stage of its operands, and a value may skip a stage (%a, made on
// stage 0, read on stage 2).
// CHECK-LABEL: func.func @forward
// CHECK-SAME: dist.pipeline_stages = 3
// CHECK: %[[A:.+]] = nn.einsum {{.*}}dist.stage = 0 : i64
// CHECK: nn.relu {{.*}}dist.stage = 0 : i64
// CHECK: nn.einsum {{.*}}dist.stage = 1 : i64
// CHECK: %[[C:.+]] = nn.einsum {{.*}}dist.stage = 2 : i64
// CHECK: nn.add %[[C]], %[[A]] {dist.stage = 2 : i64}
func.func @forward(%w0: tensor<4x4xf32> {nn.param = "w0"},
                   %w1: tensor<4x4xf32> {nn.param = "w1"},
                   %w2: tensor<4x4xf32> {nn.param = "w2"},
                   %x: tensor<2x4xf32> {nn.input = "x"}) -> tensor<2x4xf32> {
  %a = nn.einsum "bh,hk->bk" %x, %w0 {dist.stage = 0 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %r = nn.relu %a : tensor<2x4xf32>
  %b = nn.einsum "bh,hk->bk" %r, %w1 {dist.stage = 1 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %c = nn.einsum "bh,hk->bk" %b, %w2 {dist.stage = 2 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %s = nn.add %c, %a : tensor<2x4xf32>
  return %s : tensor<2x4xf32>
}
