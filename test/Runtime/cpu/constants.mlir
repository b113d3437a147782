// RUN: partita-translate --to-plan %s -o %t.pb
// RUN: partita run %t.pb | FileCheck %s

// Tests that splat constants (fill kernels) and other constants (CONSTANT
// buffers holding their bytes), float and integer, hold their values:
// s = sum([1, 2, 3] + 0.5) = 7.5; t looks up rows max([0, 1, 2], 1) =
// [1, 1, 2] of the table [1, 10, 100] and sums them: 10 + 10 + 100 = 120.

// CHECK: s: f32[] = 7.5{{$}}
// CHECK: t: f32[] = 120{{$}}
func.func @forward() -> (tensor<f32> {nn.output = "s"}, tensor<f32> {nn.output = "t"}) {
  %c = nn.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  %h = nn.constant dense<0.5> : tensor<3xf32>
  %a = nn.add %c, %h : tensor<3xf32>
  %s = nn.reduce sum %a dims = [0] : tensor<3xf32> -> tensor<f32>
  %table = nn.constant dense<[[1.0], [10.0], [100.0]]> : tensor<3x1xf32>
  %ids = nn.constant dense<[0, 1, 2]> : tensor<3xi32>
  %one = nn.constant dense<1> : tensor<3xi32>
  %m = nn.max %ids, %one : tensor<3xi32>
  %e = nn.embedding %table[%m] : tensor<3x1xf32>, tensor<3xi32> -> tensor<3x1xf32>
  %t = nn.reduce sum %e dims = [0, 1] : tensor<3x1xf32> -> tensor<f32>
  return %s, %t : tensor<f32>, tensor<f32>
}
