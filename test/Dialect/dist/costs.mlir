// RUN: partita-opt %s -test-print-op-costs -split-input-file -verify-diagnostics

// Each remark is the op's cost at its own types (f32: 4 bytes); `wire` is
// what each device sends under the ring algorithms of DistCost.cpp.

dist.mesh @mesh <["dp"=2, "tp"=4]>

// Tests the ring volumes over tp (n = 4): an all-gather sends (n-1)/n of its
// output, an all-reduce 2(n-1)/n of its input and adds (n-1)/n of its
// elements.
// expected-remark @+1 {{total of 2 ops: flops=48 transcendentals=0 read=384 written=768 wire=768}}
func.func @collectives(%a: tensor<4x8xf32>, %c: tensor<8x8xf32>) -> (tensor<4x32xf32>, tensor<8x8xf32>) {
  // expected-remark @+1 {{dist.all_gather: flops=0 transcendentals=0 read=128 written=512 wire=384}}
  %0 = dist.all_gather %a on @mesh axes = ["tp"] dim = 1 : tensor<4x8xf32> -> tensor<4x32xf32>
  // expected-remark @+1 {{dist.all_reduce: flops=48 transcendentals=0 read=256 written=256 wire=384}}
  %1 = dist.all_reduce %c on @mesh axes = ["tp"] kind = sum : tensor<8x8xf32>
  return %0, %1 : tensor<4x32xf32>, tensor<8x8xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>

// Tests that an op whose types have no static shape has no cost, which the
// pass reports as an error.
func.func @dynamic(%c: tensor<?x8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{no cost for the op's own types}}
  %1 = dist.all_reduce %c on @mesh axes = ["tp"] kind = sum : tensor<?x8xf32>
  return %1 : tensor<?x8xf32>
}
