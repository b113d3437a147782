// RUN: partita-opt %s --dist-optimize-comm=bucket-bytes=512 -split-input-file | FileCheck %s
// RUN: partita-opt %s --dist-optimize-comm=bucket-bytes=0 -split-input-file | FileCheck %s --check-prefix=OFF --implicit-check-not=dist.bucket
// RUN: partita-opt %s --dist-optimize-comm -split-input-file | FileCheck %s --check-prefix=DEFAULT
// RUN: not partita-opt %s --dist-optimize-comm=bucket-bytes=-1 -split-input-file 2>&1 | FileCheck %s --check-prefix=NEG

// NEG: error: dist-optimize-comm: bucket-bytes must be >= 0 (0 disables bucketing), got -1

// Tests the cap. Operand bytes per device: g1 8x8xf32 = 256, g2 and g3
// 4x8xf32 = 128 each, g4 8x8xf32 = 256. Hoisted, the reductions follow
// their gradients; with a cap of 512, r1+r2+r3 = 512 fits exactly (bucket
// 1) and r4 would make 768, so it opens bucket 2. Bucket 1's members move
// down to its last member, r3, below g2 and g3. The forward einsum %x stays
// last. The default cap (25 MiB) puts all four in one bucket; bucket-bytes=0
// hoists without buckets.
dist.mesh @mesh <["dp"=2]>
// CHECK-LABEL: func.func @cap
// CHECK:      %[[G1:.*]] = nn.einsum "bi,bj->ij" %arg0, %arg1
// CHECK-NEXT: %[[G2:.*]] = nn.add %arg0, %arg1
// CHECK-NEXT: %[[G3:.*]] = nn.add %arg0, %arg0
// CHECK-NEXT: %[[R1:.*]] = dist.all_reduce %[[G1]] {{.*}} {dist.bucket = 1 : i64}
// CHECK-NEXT: %[[R2:.*]] = dist.all_reduce %[[G2]] {{.*}} {dist.bucket = 1 : i64}
// CHECK-NEXT: %[[R3:.*]] = dist.all_reduce %[[G3]] {{.*}} {dist.bucket = 1 : i64}
// CHECK-NEXT: %[[G4:.*]] = nn.einsum "bi,bj->ij" %arg1, %arg1
// CHECK-NEXT: %[[R4:.*]] = dist.all_reduce %[[G4]] {{.*}} {dist.bucket = 2 : i64}
// CHECK-NEXT: %[[X:.*]] = nn.einsum "bi,ij->bj"
// CHECK-NEXT: return %[[R1]], %[[R2]], %[[R3]], %[[R4]], %[[X]]
// OFF-LABEL: func.func @cap
// OFF:      nn.einsum "bi,bj->ij" %arg0, %arg1
// OFF-NEXT: dist.all_reduce
// OFF-NEXT: nn.add %arg0, %arg1
// OFF-NEXT: dist.all_reduce
// OFF-NEXT: nn.add %arg0, %arg0
// OFF-NEXT: dist.all_reduce
// OFF-NEXT: nn.einsum "bi,bj->ij" %arg1, %arg1
// OFF-NEXT: dist.all_reduce
// DEFAULT-LABEL: func.func @cap
// DEFAULT-COUNT-4: {dist.bucket = 1 : i64}
// DEFAULT-NOT: dist.bucket
// DEFAULT: return
func.func @cap(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %w: tensor<8x8xf32>)
    -> (tensor<8x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x8xf32>, tensor<4x8xf32>) {
  %g1 = nn.einsum "bi,bj->ij" %a, %b {nn.grad_kind = "W"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %g2 = nn.add %a, %b {nn.grad_kind = "B"} : tensor<4x8xf32>
  %g3 = nn.add %a, %a {nn.grad_kind = "B"} : tensor<4x8xf32>
  %g4 = nn.einsum "bi,bj->ij" %b, %b {nn.grad_kind = "W"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %x = nn.einsum "bi,ij->bj" %a, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r1 = dist.all_reduce %g1 on @mesh axes = ["dp"] kind = sum : tensor<8x8xf32>
  %r2 = dist.all_reduce %g2 on @mesh axes = ["dp"] kind = sum : tensor<4x8xf32>
  %r3 = dist.all_reduce %g3 on @mesh axes = ["dp"] kind = sum : tensor<4x8xf32>
  %r4 = dist.all_reduce %g4 on @mesh axes = ["dp"] kind = sum : tensor<8x8xf32>
  return %r1, %r2, %r3, %r4, %x : tensor<8x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x8xf32>, tensor<4x8xf32>
}

// -----

// Tests that an activation gradient's reduction, which the next backward op
// (tagged "B" or "W") reads, stays out of the buckets (a tensor-parallel
// backward's): bucketed, it would hold back the weight gradients with it
// and nothing could run behind it. It is still hoisted, and the weight
// gradients' reductions around it share one bucket.
dist.mesh @mesh <["dp"=2]>
// CHECK-LABEL: func.func @activation_gradient_unbucketed
// CHECK:      nn.einsum "bi,bj->ij" {{.*}} {nn.grad_kind = "W"}
// CHECK-NEXT: %[[DX:.*]] = nn.add
// CHECK-NEXT: %[[RDX:.*]] = dist.all_reduce %[[DX]] on @mesh axes = ["dp"] kind = sum : tensor<4x8xf32>
// CHECK-NEXT: nn.add %[[RDX]], %arg0 {nn.grad_kind = "B"}
// CHECK-NEXT: nn.einsum "bi,bj->ij" {{.*}} {nn.grad_kind = "W"}
// CHECK-NEXT: dist.all_reduce {{.*}} {dist.bucket = 1 : i64}
// CHECK-NEXT: dist.all_reduce {{.*}} {dist.bucket = 1 : i64}
// CHECK-NOT:  dist.bucket = 2
// DEFAULT-LABEL: func.func @activation_gradient_unbucketed
// DEFAULT:  dist.all_reduce {{.*}} : tensor<4x8xf32>
// DEFAULT-COUNT-2: {dist.bucket = 1 : i64}
// DEFAULT-NOT: dist.bucket
// DEFAULT: return
func.func @activation_gradient_unbucketed(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>)
    -> (tensor<8x8xf32>, tensor<8x8xf32>, tensor<4x8xf32>) {
  %gw1 = nn.einsum "bi,bj->ij" %a, %b {nn.grad_kind = "W"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %dx = nn.add %a, %b {nn.grad_kind = "B"} : tensor<4x8xf32>
  %rdx = dist.all_reduce %dx on @mesh axes = ["dp"] kind = sum : tensor<4x8xf32>
  %dx2 = nn.add %rdx, %a {nn.grad_kind = "B"} : tensor<4x8xf32>
  %gw2 = nn.einsum "bi,bj->ij" %dx2, %b {nn.grad_kind = "W"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %r1 = dist.all_reduce %gw1 on @mesh axes = ["dp"] kind = sum : tensor<8x8xf32>
  %r2 = dist.all_reduce %gw2 on @mesh axes = ["dp"] kind = sum : tensor<8x8xf32>
  return %r1, %r2, %dx2 : tensor<8x8xf32>, tensor<8x8xf32>, tensor<4x8xf32>
}

// -----

// Tests that reading a member's result closes its bucket: %y reads r1
// before g2 exists, so r1 runs alone (bucket 1) and r2 starts bucket 2.
// A reduction larger than the cap (g3, 1024 bytes) is a bucket of its own.
dist.mesh @mesh <["dp"=2]>
// CHECK-LABEL: func.func @closed_by_a_read
// CHECK:      %[[R1:.*]] = dist.all_reduce {{.*}} {dist.bucket = 1 : i64}
// CHECK-NEXT: nn.relu %[[R1]]
// CHECK-NEXT: nn.add
// CHECK-NEXT: dist.all_reduce {{.*}} {dist.bucket = 2 : i64}
// CHECK-NEXT: nn.einsum
// CHECK-NEXT: dist.all_reduce {{.*}} {dist.bucket = 3 : i64} : tensor<16x16xf32>
func.func @closed_by_a_read(%a: tensor<4x8xf32>, %b: tensor<4x16xf32>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<16x16xf32>) {
  %g1 = nn.add %a, %a {nn.grad_kind = "B"} : tensor<4x8xf32>
  %r1 = dist.all_reduce %g1 on @mesh axes = ["dp"] kind = sum : tensor<4x8xf32>
  %y = nn.relu %r1 : tensor<4x8xf32>
  %g2 = nn.add %y, %a {nn.grad_kind = "B"} : tensor<4x8xf32>
  %r2 = dist.all_reduce %g2 on @mesh axes = ["dp"] kind = sum : tensor<4x8xf32>
  %g3 = nn.einsum "bi,bj->ij" %b, %b {nn.grad_kind = "W"} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<16x16xf32>
  %r3 = dist.all_reduce %g3 on @mesh axes = ["dp"] kind = sum : tensor<16x16xf32>
  return %y, %r2, %r3 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<16x16xf32>
}

// -----

// Tests that only like reductions share a bucket, and that other kinds
// interleave without closing one: on a 2-D mesh the dp all_reduces r1 and
// r3 share bucket 2 across the tp all_reduce t2 (bucket 1, which ends
// first); the reduce_scatter s4, the max all_reduce m5 and the f64 all_reduce
// d6 each get a bucket of their own. Buckets are numbered by where they end.
dist.mesh @mesh <["dp"=2, "tp"=2]>
// CHECK-LABEL: func.func @kinds
// CHECK:      dist.all_reduce %{{.*}} axes = ["tp"] {{.*}} {dist.bucket = 1 : i64}
// CHECK-NEXT: dist.all_reduce %{{.*}} axes = ["dp"] {{.*}} {dist.bucket = 2 : i64}
// CHECK-NEXT: dist.all_reduce %{{.*}} axes = ["dp"] {{.*}} {dist.bucket = 2 : i64}
// CHECK-NEXT: dist.reduce_scatter {{.*}} {dist.bucket = 3 : i64}
// CHECK-NEXT: dist.all_reduce {{.*}} kind = max {dist.bucket = 4 : i64}
// CHECK-NEXT: nn.add
// CHECK-NEXT: dist.all_reduce {{.*}} {dist.bucket = 5 : i64} : tensor<4x8xf64>
func.func @kinds(%a: tensor<4x8xf32>, %d: tensor<4x8xf64>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<2x8xf32>, tensor<4x8xf32>, tensor<4x8xf64>) {
  %g = nn.add %a, %a {nn.grad_kind = "B"} : tensor<4x8xf32>
  %r1 = dist.all_reduce %g on @mesh axes = ["dp"] kind = sum : tensor<4x8xf32>
  %t2 = dist.all_reduce %g on @mesh axes = ["tp"] kind = sum : tensor<4x8xf32>
  %r3 = dist.all_reduce %g on @mesh axes = ["dp"] kind = sum : tensor<4x8xf32>
  %s4 = dist.reduce_scatter %g on @mesh axes = ["dp"] dim = 0 kind = sum : tensor<4x8xf32> -> tensor<2x8xf32>
  %m5 = dist.all_reduce %g on @mesh axes = ["dp"] kind = max : tensor<4x8xf32>
  %gd = nn.add %d, %d {nn.grad_kind = "B"} : tensor<4x8xf64>
  %d6 = dist.all_reduce %gd on @mesh axes = ["dp"] kind = sum : tensor<4x8xf64>
  return %r1, %t2, %r3, %s4, %m5, %d6 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<2x8xf32>, tensor<4x8xf32>, tensor<4x8xf64>
}
