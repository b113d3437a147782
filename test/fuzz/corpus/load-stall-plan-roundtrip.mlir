// Tests that hand-written per-device programs on a 2-rank mesh compute what
// the unpartitioned program computes on one rank (partita run --check):
// a Megatron MLP (w1 split by columns, w2 by rows, one all_reduce of the
// partial sums), and the same without the all_reduce, returning a result
// that is partial over tp, which the runtime sums when gathering it.

// RUN: rm -rf %t && mkdir -p %t
// RUN: partita-translate --to-plan --plan-function tp_all_reduce --plan-reference whole %s -o %t/ar.pb
// RUN: partita run %t/ar.pb --check --rtol 1e-6 | FileCheck %s --check-prefix=AR
// AR:      partit{       a run: tp_all_reduce on 2 ranks (local)
// AR:      loss: f32[] = {{[0-9.]+$}}
// AR-NEXT: logits: f32[4x8]{{$}}
// AR-NEXT: check loss: max abs diff {{.*}} (ok, rtol 1e-06)
// AR-NEXT: check logits: max abs diff {{.*}} (ok, rtol 1e-06)

// The rank count must match the mesh.
// RUN: not partita run %t/ar.pb --ranks 3 2>&1 | FileCheck %s --check-prefix=RANKS
// RANKS: partita run: error: the plan's program 'tp_all_reduce' runs on 2 ranks (its mesh), but --ranks is 3

// RUN: partita-translate --to-plan --plan-function tp_partial_result --plan-reference whole_logits %s -o %t/partial.pb
// RUN: partita run %t/partial.pb --check --rtol 1e-6 | FileCheck %s --check-prefix=PARTIAL
// PARTIAL:      partita run: tp_partial_result on 2 ranks (local)
// PARTIAL:      logits: f32[4x8]{{$}}
// PARTIAL,NEXT: check logits: max abs diff {{.*}} (ok, rtol 1e-06)

// A reference that computes something else (no relu) fails the check.
// RUN: partita-translate --to-plan --plan-function tp_partial_result --plan-reference no_relu %s -o %t/wrong.pb
// RUN: not partita run %t/wrong.pb --check 2>&1 | FileCheck %s --check-prefix=WRONG
// WRONG:      check logits: max abs diff {{.*}} (FAILED, rtol 1e-05)
// WRONG-NEXT: partita run: error: results differ from the reference beyond -                                                                                         -rtol

dist.mesh @mesh <["tp"=2]>

func.func @tp_all_reduce(
    %w1: tensor<8x8xf32> {nn.param = "w1", dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>, dist.global_type = tensor<8x16xf32>},
    %w2: tensor<8x8xf32> {nn.param = "w2", dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>, dist.global_type = tensor<16x8xf32>},
    %x: tensor<4x8xf32> {nn.input = "x"},
    %labels: tensor<4xi32> {nn.input = "labels"})
    -> (tensor<f32> {nn.output = "loss"}, tensor<4x8xf32> {nn.output = "logits"})
    attributes {dist.mesh = @mesh} {
  %h = nn.einsum "bh,hf->bf" %x, %w1 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r = nn.relu %h : tensor<4x8xf32>
  %p = nn.einsum "bf,fh->bh" %r, %w2 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %s = dist.all_reduce %p on @mesh axes = ["tp"] kind = sum : tensor<4x8xf32>
  %loss = nn.cross_entropy %s, %labels : tensor<4x8xf32>, tensor<4xi32> -> tensor<f32>
  return %loss, %s : tensor<f32>, tensor<4x8xf32>
}

func.func @tp_partial_result(
    %w1: tensor<8x8xf32> {nn.param = "w1", dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>},
    %w2: tensor<8x8xf32> {nn.param = "w2", dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>},
    %x: tensor<4x8xf32> {nn.input = "x"})
    -> (tensor<4x8xf32> {nn.output = "logits", dist.sharding = #dist.sharding<@mesh, [{}, {}], partial={"tp"}>})
    attributes {dist.mesh = @mesh} {
  %h = nn.einsum "bh,hf->bf" %x, %w1 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r = nn.relu %h : tensor<4x8xf32>
  %p = nn.einsum "bf,fh->bh" %r, %w2 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  return %p : tensor<4x8xf32>
}

func.func @whole(
    %w1: tensor<8x16xf32> {nn.param = "w1"},
    %w2: tensor<16x8xf32> {nn.param = "w2"},
    %x: tensor<4x8xf32> {nn.input = "x"},
    %labels: tensor<4xi32> {nn.input = "labels"})
    -> (tensor<f32> {nn.output = "loss"}, tensor<4x8xf32> {nn.output = "logits"}) {
  %h = nn.einsum "bh,hf->bf" %x, %w1 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %r = nn.relu %h : tensor<4x16xf32>
  %s = nn.einsum "bf,fh->bh" %r, %w2 : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  %loss = nn.cross_entropy %s, %labels : tensor<4x8xf32>, tensor<4xi32> -> tensor<f32>
  return %loss, %s : tensor<f32>, tensor<4x8xf32>
}

func.func @whole_logits(
    %w1: tensor<8x16xf32> {nn.param = "w1"},
    %w2: tensor<16x8xf32> {nn.param = "w2"},
    %x: tensor<4x8xf32> {nn.input = "x"})
    -> (tensor<4x8xf32> {nn.output = "logits"}) {
  %h = nn.einsum "bh,hf->bf" %x, %w1 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %r = nn.relu %h : tensor<4x16xf32>
  %s = nn.einsum "bf,fh->bh" %r, %w2 : ( tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  return %s : tensor<4x8xf32>
}

func.func @no_relu(
    %w1: tensor<8x16xf32> {nn.param = "w1"},
    %w2: tensor<16x8xf32> {nn.param = "w2"},
    %x: tensor<4x8xf32> {nn.input = "x"})
    -> (tensor<4x8xf32> {nn.output = "logits"}) {
  %h=  nn.einsum "bh,hf->bf" %x, %w1 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %s = nn.einsum "bf,fh->bh" %h, %w2 : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  return %s : tensor<4x8xf32>
}
