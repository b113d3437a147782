// RUN: partita-opt %s -split-input-file -nn-autodiff="optimizer=none recompute=full" | FileCheck %s --check-prefix=FULL
// RUN: partita-opt %s -split-input-file -nn-autodiff="optimizer=none recompute=selective" | FileCheck %s --check-prefix=SELECTIVE
// RUN: partita-opt %s -split-input-file -nn-autodiff="optimizer=none" | FileCheck %s --check-prefix=NONE

// Tests full recomputation on two layers declared as `partita model`
// declares them (nn.layer): the backward reads each layer's pre-activation
// (relu_grad's input), so the layer's projection is cloned just before that
// relu_grad (the clone keeps its nn.layer); the
// layer's output (read by the next layer) and the last layer's activation
// (read by the loss) are kept, not recomputed. Selective recomputation
// (attention only) changes nothing here.
func.func @forward(%w0: tensor<4x4xf32> {nn.param = "layers.0.w"}, %w1: tensor<4x4xf32> {nn.param = "layers.1.w"},
                   %x: tensor<2x4xf32> {nn.input = "x"}, %l: tensor<2xi32> {nn.input = "labels"})
    -> (tensor<f32> {nn.output = "loss"}) {
  %h0 = nn.einsum "bh,hf->bf" %x, %w0 {nn.layer = 0 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %a0 = nn.relu %h0 {nn.layer = 0 : i64} : tensor<2x4xf32>
  %o0 = nn.add %x, %a0 {nn.layer = 0 : i64} : tensor<2x4xf32>
  %h1 = nn.einsum "bh,hf->bf" %o0, %w1 {nn.layer = 1 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %a1 = nn.relu %h1 {nn.layer = 1 : i64} : tensor<2x4xf32>
  %loss = nn.cross_entropy %a1, %l : tensor<2x4xf32>, tensor<2xi32> -> tensor<f32> loc("loss")
  return %loss : tensor<f32>
}
// FULL-LABEL: func.func @grads
// FULL-SAME: (%[[W0:arg0]]: {{[^,]*}}, %[[W1:arg1]]: {{[^,]*}}, %[[X:arg2]]: {{[^,]*}}, %[[L:arg3]]: {{[^)]*}})
// FULL: %[[H0:.+]] = nn.einsum "bh,hf->bf" %[[X]], %[[W0]] {nn.layer = 0 : i64} :
// FULL: %[[A0:.+]] = nn.relu %[[H0]] {nn.layer = 0 : i64} :
// FULL: %[[O0:.+]] = nn.add %[[X]], %[[A0]] {nn.layer = 0 : i64} :
// FULL: %[[H1:.+]] = nn.einsum "bh,hf->bf" %[[O0]], %[[W1]] {nn.layer = 1 : i64} :
// FULL: %[[A1:.+]] = nn.relu %[[H1]] {nn.layer = 1 : i64} :
// FULL: %[[DA1:.+]] = nn.cross_entropy_grad %[[A1]], %[[L]]
// FULL: %[[R1:.+]] = nn.einsum "bh,hf->bf" %[[O0]], %[[W1]] {nn.grad_kind = "B", nn.layer = 1 : i64, nn.recompute}
// FULL: %[[DH1:.+]] = nn.relu_grad %[[R1]], %[[DA1]] {nn.grad_kind = "B"}
// FULL: %[[DO0:.+]] = nn.einsum "bf,hf->bh" %[[DH1]], %[[W1]]
// FULL: %[[DW1:.+]] = nn.einsum "bf,bh->hf" %[[DH1]], %[[O0]]
// FULL: %[[R0:.+]] = nn.einsum "bh,hf->bf" %[[X]], %[[W0]] {nn.grad_kind = "B", nn.layer = 0 : i64, nn.recompute}
// FULL: %[[DH0:.+]] = nn.relu_grad %[[R0]], %[[DO0]] {nn.grad_kind = "B"}
// FULL: %[[DW0:.+]] = nn.einsum "bf,bh->hf" %[[DH0]], %[[X]]
// FULL-NOT: nn.recompute
// FULL: return %{{.+}}, %[[DW0]], %[[DW1]]
// SELECTIVE-LABEL: func.func @grads
// SELECTIVE-NOT: nn.recompute
// NONE-LABEL: func.func @grads
// NONE-NOT: nn.recompute

// -----

// Tests selective recomputation: only the attention core is cloned, before
// the output projection's weight gradient that reads it; full
// recomputation also clones the q/k/v projections the attention_grads read.
func.func @forward(%wq: tensor<8x2x4xf32> {nn.param = "layers.0.attn.wq"}, %wo: tensor<2x4x8xf32> {nn.param = "layers.0.attn.wo"},
                   %x: tensor<1x4x8xf32> {nn.input = "x"}) -> (tensor<f32> {nn.output = "loss"}) {
  %q = nn.einsum "bsh,hnd->bsnd" %x, %wq {nn.layer = 0 : i64} : (tensor<1x4x8xf32>, tensor<8x2x4xf32>) -> tensor<1x4x2x4xf32>
  %o = nn.attention %q, %q, %q causal {nn.layer = 0 : i64} : tensor<1x4x2x4xf32>, tensor<1x4x2x4xf32>
  %y = nn.einsum "bsnd,ndh->bsh" %o, %wo {nn.layer = 0 : i64} : (tensor<1x4x2x4xf32>, tensor<2x4x8xf32>) -> tensor<1x4x8xf32>
  %loss = nn.reduce sum %y dims = [0, 1, 2] : tensor<1x4x8xf32> -> tensor<f32> loc("loss")
  return %loss : tensor<f32>
}
// SELECTIVE-LABEL: func.func @grads
// SELECTIVE-SAME: (%[[WQ:arg0]]: {{[^,]*}}, %[[WO:arg1]]: {{[^,]*}}, %[[X:arg2]]: {{[^)]*}})
// SELECTIVE: %[[Q:.+]] = nn.einsum "bsh,hnd->bsnd" %[[X]], %[[WQ]] {nn.layer = 0 : i64} :
// SELECTIVE: %[[O:.+]] = nn.attention %[[Q]], %[[Q]], %[[Q]] causal {nn.layer = 0 : i64} :
// SELECTIVE: %[[DY:.+]] = nn.broadcast
// SELECTIVE: %[[DO:.+]] = nn.einsum "bsh,ndh->bsnd" %[[DY]], %[[WO]]
// SELECTIVE: %[[RO:.+]] = nn.attention %[[Q]], %[[Q]], %[[Q]] causal {nn.grad_kind = "B", nn.layer = 0 : i64, nn.recompute}
// SELECTIVE: %[[DWO:.+]] = nn.einsum "bsh,bsnd->ndh" %[[DY]], %[[RO]]
// SELECTIVE: nn.attention_grad %[[Q]], %[[Q]], %[[Q]], %[[DO]] wrt = q
// SELECTIVE-NOT: nn.recompute
// SELECTIVE: return

// FULL-LABEL: func.func @grads
// FULL: %[[DO:.+]] = nn.einsum "bsh,ndh->bsnd"
// FULL: %[[RQ:.+]] = nn.einsum "bsh,hnd->bsnd" %{{.+}}, %{{.+}} {nn.grad_kind = "B", nn.layer = 0 : i64, nn.recompute}
// FULL: %[[RO:.+]] = nn.attention %[[RQ]], %[[RQ]], %[[RQ]] causal {nn.grad_kind = "B", nn.layer = 0 : i64, nn.recompute}
// FULL: nn.einsum "bsh,bsnd->ndh" %{{.+}}, %[[RO]]
// FULL: nn.attention_grad %[[RQ]], %[[RQ]], %[[RQ]], %[[DO]] wrt = q
// FULL-NOT: nn.recompute
// FULL: return

// -----

// Tests that layers come from nn.layer alone: ops whose locations are named
// "layers.0...." but carry no nn.layer are in no layer, so nothing is
// recomputed.
func.func @forward(%w0: tensor<4x4xf32> {nn.param = "layers.0.w"},
                   %x: tensor<2x4xf32> {nn.input = "x"}, %l: tensor<2xi32> {nn.input = "labels"})
    -> (tensor<f32> {nn.output = "loss"}) {
  %h0 = nn.einsum "bh,hf->bf" %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("layers.0.proj")
  %a0 = nn.relu %h0 : tensor<2x4xf32> loc("layers.0.relu")
  %loss = nn.cross_entropy %a0, %l : tensor<2x4xf32>, tensor<2xi32> -> tensor<f32> loc("loss")
  return %loss : tensor<f32>
}
// FULL-LABEL: func.func @grads
// FULL-NOT: nn.recompute
// FULL: return
