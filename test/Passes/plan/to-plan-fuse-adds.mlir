// RUN: partita-translate --to-plan --plan-text %s | FileCheck %s
// RUN: partita-translate --to-plan --plan-text --plan-fuse-adds=false %s | FileCheck %s --check-prefix=APART
// RUN: partita-translate --to-plan %s -o %t.fused.pb
// RUN: partita-translate --to-plan --plan-fuse-adds=false %s -o %t.apart.pb
// RUN: partita run %t.fused.pb --outputs %t.fused | FileCheck %s --check-prefix=OUT
// RUN: partita run %t.apart.pb --outputs %t.apart | FileCheck %s --check-prefix=OUT
// RUN: %python %S/../../Runtime/cpu/Inputs/close_arrays.py %t.fused %t.apart 1e-6 | FileCheck %s --check-prefix=SAME

// Tests the plan lowering's fusion of adds into einsums (fuseAdds, on by
// default):
//  - y = einsum(x, w) + broadcast(b): one einsum reading x, w and b, the
//    broadcast's dims as its own, where the einsum stood (location "p");
//  - s = q + r of two einsums: the later one (r) takes q as its addend and
//    writes over it (reuses: q dies there);
//  - z = t + t (an einsum read twice) is no fusion;
//  - f = c + e where the broadcast c is also read by g: e takes c whole
//    (dims 0, 1), and the broadcast stays.
// Each kernel carries its cost (the ops' CostOpInterface): p's einsum is
// 2*4*8*6 = 384 FLOPs and its add 4*6 = 24; it reads x and w (80 floats) and
// the addend b (6) and writes y (24) once: 440 bytes. r's is 2*4*6*6 + 24 =
// 312 FLOPs; y and u (60 floats), the addend q (24) and s (24): 432 bytes.
// With --plan-fuse-adds=false every op is its own instruction. Both plans
// compute the same results (within rounding: the fused GEMM adds the bias
// before its sum is rounded).

// CHECK:      buffers {
// CHECK:        id: 7
// CHECK:        first_use: 2
// CHECK-NEXT:   last_use: 8
// CHECK-NEXT:   reuses: 6
// CHECK:      instructions {
// CHECK-NEXT:   kernel {
// CHECK-NEXT:     kind: EINSUM
// CHECK-NEXT:     attrs {
// CHECK-NEXT:       spec: "bh,hf->bf"
// CHECK-NEXT:       dims: 1
// CHECK-NEXT:     }
// CHECK-NEXT:     inputs: 0
// CHECK-NEXT:     inputs: 1
// CHECK-NEXT:     inputs: 2
// CHECK-NEXT:     outputs: 5
// CHECK-NEXT:     flops: 408
// CHECK-NEXT:     bytes: 440
// CHECK-NEXT:   }
// CHECK-NEXT:   location: "p"
// CHECK:          kind: EINSUM
// CHECK:          location: "q"
// CHECK:          kind: EINSUM
// CHECK-NEXT:     attrs {
// CHECK-NEXT:       spec: "bf,fg->bg"
// CHECK-NEXT:       dims: 0
// CHECK-NEXT:       dims: 1
// CHECK-NEXT:     }
// CHECK-NEXT:     inputs: 5
// CHECK-NEXT:     inputs: 4
// CHECK-NEXT:     inputs: 6
// CHECK-NEXT:     outputs: 7
// CHECK-NEXT:     flops: 312
// CHECK-NEXT:     bytes: 432
// CHECK-NEXT:   }
// CHECK-NEXT:   location: "r"
// CHECK:          kind: EINSUM
// CHECK:          location: "t"
// CHECK:          kind: ADD
// CHECK:          inputs: 8
// CHECK-NEXT:     inputs: 8
// CHECK:          location: "z"
// CHECK:          kind: BROADCAST
// CHECK:          location: "c"
// CHECK:          kind: EINSUM
// CHECK-NEXT:     attrs {
// CHECK-NEXT:       spec: "bh,hf->bf"
// CHECK-NEXT:       dims: 0
// CHECK-NEXT:       dims: 1
// CHECK-NEXT:     }
// CHECK-NEXT:     inputs: 0
// CHECK-NEXT:     inputs: 1
// CHECK-NEXT:     inputs: 10
// CHECK:          location: "e"
// CHECK:          kind: MUL
// CHECK-NOT:      kind:
// CHECK:        results: 5

// APART:      kind: EINSUM
// APART:      kind: BROADCAST
// APART:      kind: ADD
// APART:      kind: EINSUM
// APART:      kind: EINSUM
// APART:      kind: ADD
// APART:      kind: EINSUM
// APART:      kind: ADD
// APART:      kind: BROADCAST
// APART:      kind: EINSUM
// APART-NOT:  inputs: 10
// APART:      kind: ADD
// APART:      kind: MUL
// APART-NOT:  kind:
// APART:      results: 

// OUT:  result3: f32[4x6]
// SAME: 4 arrays within 1e-06

func.func @forward(%x: tensor<4x8xf32> {nn.input = "x"},
                   %w: tensor<8x6xf32> {nn.param = "w"},
                   %b: tensor<6xf32> {nn.param = "b"},
                   %v: tensor<8x6xf32> {nn.param = "v"},
                   %u: tensor<6x6xf32> {nn.param = "u"})
    -> (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>) {
  %p = nn.einsum "bh,hf->bf" %x, %w : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32> loc("p")
  %bb = nn.broadcast %b dims = [1] : tensor<6xf32> -> tensor<4x6xf32> loc("bb")
  %y = nn.add %p, %bb : tensor<4x6xf32> loc("y")
  %q = nn.einsum "bh,hf->bf" %x, %v : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32> loc("q")
  %r = nn.einsum "bf,fg->bg" %y, %u : (tensor<4x6xf32>, tensor<6x6xf32>) -> tensor<4x6xf32> loc("r")
  %s = nn.add %q, %r : tensor<4x6xf32> loc("s")
  %t = nn.einsum "bh,hf->bf" %x, %v : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32> loc("t")
  %z = nn.add %t, %t : tensor<4x6xf32> loc("z")
  %c = nn.broadcast %b dims = [1] : tensor<6xf32> -> tensor<4x6xf32> loc("c")
  %e = nn.einsum "bh,hf->bf" %x, %w : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32> loc("e")
  %f = nn.add %c, %e : tensor<4x6xf32> loc("f")
  %g = nn.mul %c, %f : tensor<4x6xf32> loc("g")
  return %y, %s, %z, %g : tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>
}
