// RUN: partita-translate --to-plan --plan-text -split-input-file %s | FileCheck %s

// Tests that a module's @train_step is lowered rather than its @forward;
// that nn.param arguments become PARAMETER buffers and nn.state arguments
// STATE buffers named by it (zero-initialized: no init); that nn.adamw is
// one kernel with three outputs and its attributes; that each result with
// nn.param / nn.state records the buffer it replaces; and that adamw's
// outputs are donated (in_place: written over w, w.m and w.v, which adamw
// reads at the matching inputs and nothing reads later), so the memory plan
// gives them no arena bytes, and so is the new step (nn.add, elementwise,
// reads the old step once, where it writes the new one, and nothing later).
// By hand, first fit with 64-byte alignment: logits [0,24) live 0..3, loss
// at 64 (1..end), the constant one at 128 (2..5), dlogits [192,216)
// (3..4), dw [0,48) (4..6, after logits died); arena 216 bytes (368 when
// w', m' and v' had bytes of their own at 128, 256 and 320).

// CHECK-LABEL: name: "train_step"
// CHECK-NOT:   partitioned
// CHECK:       buffers {
// CHECK-NEXT:    local_shape: 4
// CHECK-NEXT:    local_shape: 3
// CHECK-NEXT:    global_shape: 4
// CHECK-NEXT:    global_shape: 3
// CHECK-NEXT:    role: PARAMETER
// CHECK-NEXT:    name: "w"
// CHECK-NEXT:    last_use: 6
// CHECK-NEXT:    init {
// CHECK:       buffers {
// CHECK-NEXT:    id: 1
// CHECK:         role: STATE
// CHECK-NEXT:    name: "w.m"
// CHECK-NEXT:    last_use: 6
// CHECK-NEXT:  }
// CHECK-NEXT:  buffers {
// CHECK-NEXT:    id: 2
// CHECK:         role: STATE
// CHECK-NEXT:    name: "w.v"
// CHECK-NEXT:    last_use: 6
// CHECK-NEXT:  }
// CHECK-NEXT:  buffers {
// CHECK-NEXT:    id: 3
// CHECK-NEXT:    role: STATE
// CHECK-NEXT:    name: "step"
// CHECK-NEXT:    last_use: 5
// CHECK-NEXT:  }
// CHECK:         name: "x"
// CHECK:         name: "labels"
// CHECK:       buffers {
// CHECK-NEXT:    id: 6
// CHECK:         last_use: 3
// CHECK-NEXT:  }
// CHECK-NEXT:  buffers {
// CHECK-NEXT:    id: 7
// CHECK-NEXT:    name: "loss"
// CHECK-NEXT:    offset: 64
// CHECK-NEXT:    first_use: 1
// CHECK-NEXT:    last_use: 7
// CHECK-NEXT:  }
// CHECK-NEXT:  buffers {
// CHECK-NEXT:    id: 8
// CHECK-NEXT:    offset: 128
// CHECK:       buffers {
// CHECK-NEXT:    id: 9
// CHECK:         offset: 192
// CHECK:       buffers {
// CHECK-NEXT:    id: 10
// CHECK-NOT:     offset
// CHECK:         first_use: 4
// CHECK-NEXT:    last_use: 6
// CHECK-NEXT:  }
// CHECK-NEXT:  buffers {
// CHECK-NEXT:    id: 11
// CHECK-NEXT:    name: "step"
// CHECK-NEXT:    first_use: 5
// CHECK-NEXT:    last_use: 7
// CHECK-NEXT:    replaces: "step"
// CHECK-NEXT:    in_place: true
// CHECK-NEXT:  }
// CHECK-NEXT:  buffers {
// CHECK-NEXT:    id: 12
// CHECK:         name: "w"
// CHECK-NEXT:    first_use: 6
// CHECK-NEXT:    last_use: 7
// CHECK-NEXT:    replaces: "w"
// CHECK-NEXT:    in_place: true
// CHECK-NEXT:  }
// CHECK-NEXT:  buffers {
// CHECK-NEXT:    id: 13
// CHECK:         name: "w.m"
// CHECK-NEXT:    first_use: 6
// CHECK-NEXT:    last_use: 7
// CHECK-NEXT:    replaces: "w.m"
// CHECK-NEXT:    in_place: true
// CHECK-NEXT:  }
// CHECK-NEXT:  buffers {
// CHECK-NEXT:    id: 14
// CHECK:         name: "w.v"
// CHECK-NEXT:    first_use: 6
// CHECK-NEXT:    last_use: 7
// CHECK-NEXT:    replaces: "w.v"
// CHECK-NEXT:    in_place: true
// CHECK-NEXT:  }
// CHECK:         kind: CROSS_ENTROPY_GRAD
// CHECK-NEXT:    attrs {
// CHECK-NEXT:    }
// CHECK-NEXT:    inputs: 6
// CHECK-NEXT:    inputs: 5
// CHECK-NEXT:    inputs: 8
// CHECK-NEXT:    outputs: 9
// CHECK:         kind: ADAMW
// CHECK-NEXT:    attrs {
// CHECK-NEXT:      lr: 0.001
// CHECK-NEXT:      beta1: 0.9
// CHECK-NEXT:      beta2: 0.999
// CHECK-NEXT:      eps: 1e-08
// CHECK-NEXT:      weight_decay: 0.01
// CHECK-NEXT:    }
// CHECK-NEXT:    inputs: 0
// CHECK-NEXT:    inputs: 10
// CHECK-NEXT:    inputs: 1
// CHECK-NEXT:    inputs: 2
// CHECK-NEXT:    inputs: 11
// CHECK-NEXT:    outputs: 12
// CHECK-NEXT:    outputs: 13
// CHECK-NEXT:    outputs: 14
// (Its cost, CostOpInterface's: 14 FLOPs an element of the 12; reads the
// parameter, gradient and both moments, 48 bytes each, and the step's 4,
// writes three: 340 bytes.)
// CHECK-NEXT:    flops: 168
// CHECK-NEXT:    bytes: 340
// CHECK-NEXT:  }
// CHECK:       results: 12
// CHECK-NEXT:  results: 13
// CHECK-NEXT:  results: 14
// CHECK-NEXT:  results: 11
// CHECK-NEXT:  results: 7
// CHECK-NEXT:  arena_bytes: 216
// CHECK-NOT:   name: "forward"
func.func @forward(%w: tensor<4x3xf32> {nn.param = "w"}, %x: tensor<2x4xf32> {nn.input = "x"}, %labels: tensor<2xi32> {nn.input = "labels"}) -> (tensor<f32> {nn.output = "loss"}) {
  %logits = nn.einsum "bh,hv->bv" %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %loss = nn.cross_entropy %logits, %labels : tensor<2x3xf32>, tensor<2xi32> -> tensor<f32>
  return %loss : tensor<f32>
}

func.func @train_step(%w: tensor<4x3xf32> {nn.param = "w"}, %m: tensor<4x3xf32> {nn.state = "w.m"}, %v: tensor<4x3xf32> {nn.state = "w.v"}, %step: tensor<f32> {nn.state = "step"}, %x: tensor<2x4xf32> {nn.input = "x"}, %labels: tensor<2xi32> {nn.input = "labels"}) -> (tensor<4x3xf32> {nn.param = "w"}, tensor<4x3xf32> {nn.state = "w.m"}, tensor<4x3xf32> {nn.state = "w.v"}, tensor<f32> {nn.state = "step"}, tensor<f32> {nn.output = "loss"}) {
  %logits = nn.einsum "bh,hv->bv" %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %loss = nn.cross_entropy %logits, %labels : tensor<2x3xf32>, tensor<2xi32> -> tensor<f32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %dlogits = nn.cross_entropy_grad %logits, %labels, %one : tensor<2x3xf32>, tensor<2xi32>, tensor<f32>
  %dw = nn.einsum "bh,bv->hv" %x, %dlogits : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  %t = nn.add %step, %one : tensor<f32>
  %w2, %m2, %v2 = nn.adamw %w, %dw, %m, %v, %t lr = 1.0e-03 beta1 = 0.9 beta2 = 0.999 eps = 1.0e-08 weight_decay = 0.01 : tensor<4x3xf32>, tensor<f32>
  return %w2, %m2, %v2, %t, %loss : tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>, tensor<f32>
}

// -----

// Tests that without @train_step, @grads is lowered rather than @forward,
// and that every backward op becomes its kernel with its attributes:
// gelu_grad's tanh, the norms' epsilon, rotary_grad's theta,
// attention_grad's wrt, causal and scale, cross_entropy_grad's mean_count
// from nn.mean_count; convert's result keeps its dtype (bf16).

// CHECK-LABEL: name: "grads"
// CHECK:       kind: RELU_GRAD
// CHECK-NEXT:  attrs {
// CHECK-NEXT:  }
// CHECK-NEXT:  inputs: 1
// CHECK-NEXT:  inputs: 2
// CHECK:       kind: SILU_GRAD
// CHECK:       kind: GELU_GRAD
// CHECK-NEXT:  attrs {
// CHECK-NEXT:    tanh: true
// CHECK-NEXT:  }
// CHECK:       kind: GREATER_EQUAL
// CHECK:       kind: LAYER_NORM_GRAD
// CHECK-NEXT:  attrs {
// CHECK-NEXT:    epsilon: 0.001
// CHECK-NEXT:  }
// CHECK-NEXT:  inputs: 1
// CHECK-NEXT:  inputs: 0
// CHECK-NEXT:  inputs: 2
// CHECK:       kind: RMS_NORM_GRAD
// CHECK-NEXT:  attrs {
// CHECK-NEXT:    epsilon: 0.002
// CHECK-NEXT:  }
// CHECK:       kind: ROTARY_GRAD
// CHECK-NEXT:  attrs {
// CHECK-NEXT:    theta: 500
// CHECK-NEXT:  }
// CHECK:       kind: ATTENTION_GRAD
// CHECK-NEXT:  attrs {
// CHECK-NEXT:    causal: true
// CHECK-NEXT:    has_scale: true
// CHECK-NEXT:    scale: 0.5
// CHECK-NEXT:    wrt: "k"
// CHECK-NEXT:  }
// CHECK-NEXT:  inputs: 3
// CHECK-NEXT:  inputs: 4
// CHECK-NEXT:  inputs: 5
// CHECK-NEXT:  inputs: 3
// CHECK:       kind: ATTENTION_GRAD
// CHECK-NEXT:  attrs {
// CHECK-NEXT:    wrt: "q"
// CHECK-NEXT:  }
// CHECK:       kind: EMBEDDING_GRAD
// CHECK-NEXT:  attrs {
// CHECK-NEXT:  }
// CHECK-NEXT:  inputs: 2
// CHECK-NEXT:  inputs: 6
// CHECK:       kind: CROSS_ENTROPY_GRAD
// CHECK-NEXT:  attrs {
// CHECK-NEXT:    mean_count: 8
// CHECK-NEXT:  }
// CHECK:       kind: CONVERT
// CHECK-NEXT:  attrs {
// CHECK-NEXT:  }
// CHECK-NEXT:  inputs: 1
// CHECK-NEXT:  outputs: [[BF16:[0-9]+]]
// CHECK:       results: [[BF16]]
// CHECK-NOT:   name: "forward"
func.func @forward(%x: tensor<2x4xf32> {nn.input = "x"}) -> tensor<2x4xf32> {
  return %x : tensor<2x4xf32>
}

func.func @grads(%g: tensor<4xf32> {nn.param = "g"}, %x: tensor<2x4xf32> {nn.input = "x"}, %dy: tensor<2x4xf32> {nn.input = "dy"}, %q: tensor<1x2x2x4xf32> {nn.input = "q"}, %k: tensor<1x2x1x4xf32> {nn.input = "k"}, %v: tensor<1x2x1x4xf32> {nn.input = "v"}, %ids: tensor<2xi32> {nn.input = "ids"}, %dloss: tensor<f32> {nn.input = "dloss"}) -> (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<1x2x2x4xf32>, tensor<1x2x1x4xf32>, tensor<1x2x2x4xf32>, tensor<10x4xf32>, tensor<2x4xf32>, tensor<2x4xbf16>) {
  %0 = nn.relu_grad %x, %dy : tensor<2x4xf32>
  %1 = nn.silu_grad %x, %dy : tensor<2x4xf32>
  %2 = nn.gelu_grad %x, %dy tanh : tensor<2x4xf32>
  %3 = nn.greater_equal %x, %dy : tensor<2x4xf32>
  %4 = nn.layer_norm_grad %x, %g, %dy eps = 1.0e-03 : tensor<2x4xf32>, tensor<4xf32>
  %5 = nn.rms_norm_grad %x, %g, %dy eps = 2.0e-03 : tensor<2x4xf32>, tensor<4xf32>
  %6 = nn.rotary_grad %q theta = 500.0 : tensor<1x2x2x4xf32>
  %7 = nn.attention_grad %q, %k, %v, %q wrt = k causal scale = 0.5 : tensor<1x2x2x4xf32>, tensor<1x2x1x4xf32> -> tensor<1x2x1x4xf32>
  %8 = nn.attention_grad %q, %k, %v, %q wrt = q : tensor<1x2x2x4xf32>, tensor<1x2x1x4xf32> -> tensor<1x2x2x4xf32>
  %9 = nn.embedding_grad %dy, %ids : tensor<2x4xf32>, tensor<2xi32> -> tensor<10x4xf32>
  %10 = nn.cross_entropy_grad %x, %ids, %dloss {nn.mean_count = 8 : i64} : tensor<2x4xf32>, tensor<2xi32>, tensor<f32>
  %11 = nn.convert %x : tensor<2x4xf32> to tensor<2x4xbf16>
  return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11 : tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<1x2x2x4xf32>, tensor<1x2x1x4xf32>, tensor<1x2x2x4xf32>, tensor<10x4xf32>, tensor<2x4xf32>, tensor<2x4xbf16>
}

// -----

// Tests that nn.sgd is one kernel with two outputs that replace the
// parameter and its momentum, and that a parameter returned unchanged
// replaces itself (no copy is needed); it lives to the end (the return is
// instruction 2).

// CHECK-LABEL: name: "update"
// CHECK:       buffers {
// CHECK-NEXT:    local_shape: 3
// CHECK-NEXT:    global_shape: 3
// CHECK-NEXT:    role: PARAMETER
// CHECK-NEXT:    name: "frozen"
// CHECK-NEXT:    last_use: 2
// CHECK-NEXT:    init {
// CHECK:         replaces: "frozen"
// CHECK-NEXT:  }
// CHECK:         name: "w.momentum"
// CHECK:       kind: SGD
// CHECK-NEXT:  attrs {
// CHECK-NEXT:    lr: 0.1
// CHECK-NEXT:    momentum: 0.9
// CHECK-NEXT:    weight_decay: 0.0001
// CHECK-NEXT:  }
// CHECK-NEXT:  inputs: 1
// CHECK-NEXT:  inputs: 4
// CHECK-NEXT:  inputs: 2
// CHECK-NEXT:  outputs: 5
// CHECK-NEXT:  outputs: 6
// CHECK:       results: 0
// CHECK-NEXT:  results: 5
// CHECK-NEXT:  results: 6
func.func @update(%frozen: tensor<3xf32> {nn.param = "frozen"}, %w: tensor<3xf32> {nn.param = "w"}, %buf: tensor<3xf32> {nn.state = "w.momentum"}, %x: tensor<3xf32> {nn.input = "x"}) -> (tensor<3xf32> {nn.param = "frozen"}, tensor<3xf32> {nn.param = "w"}, tensor<3xf32> {nn.state = "w.momentum"}) {
  %g = nn.mul %x, %frozen : tensor<3xf32>
  %w2, %buf2 = nn.sgd %w, %g, %buf lr = 0.1 momentum = 0.9 weight_decay = 1.0e-04 : tensor<3xf32>
  return %frozen, %w2, %buf2 : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
}

// -----

// Tests where an update cannot be donated: w' is not in_place because an
// einsum reads the old w after sgd wrote w' (w' keeps arena bytes and is
// copied back when the step ends); w.momentum' is donated, since sgd reads
// the old momentum only at input 2, the position of output 1; and u' is
// not, because sgd reads u as its gradient (input 1), not as the value it
// updates (u.momentum' is donated).

// CHECK-LABEL: name: "late_read"
// w' at arena offset 0 (not printed), defined at instruction 0.
// CHECK:         id: 5
// CHECK-NEXT:    local_shape: 3
// CHECK-NEXT:    global_shape: 3
// CHECK-NEXT:    name: "w"
// CHECK-NEXT:    last_use: 3
// CHECK-NEXT:    replaces: "w"
// CHECK-NEXT:  }
// CHECK-NEXT:  buffers {
// CHECK-NEXT:    id: 6
// CHECK-NEXT:    local_shape: 3
// CHECK-NEXT:    global_shape: 3
// CHECK-NEXT:    name: "w.momentum"
// CHECK-NEXT:    last_use: 3
// CHECK-NEXT:    replaces: "w.momentum"
// CHECK-NEXT:    in_place: true
// CHECK-NEXT:  }
// CHECK-NEXT:  buffers {
// CHECK-NEXT:    id: 7
// CHECK-NEXT:    local_shape: 3
// CHECK-NEXT:    global_shape: 3
// CHECK-NEXT:    name: "u"
// CHECK-NEXT:    offset: 64
// CHECK-NEXT:    first_use: 1
// CHECK-NEXT:    last_use: 3
// CHECK-NEXT:    replaces: "u"
// CHECK-NEXT:  }
// CHECK:         name: "u.momentum"
// CHECK-NEXT:    first_use: 1
// CHECK-NEXT:    last_use: 3
// CHECK-NEXT:    replaces: "u.momentum"
// CHECK-NEXT:    in_place: true
// CHECK:       kind: SGD
// CHECK:       kind: SGD
// CHECK:       kind: EINSUM
func.func @late_read(%w: tensor<3xf32> {nn.param = "w"}, %buf: tensor<3xf32> {nn.state = "w.momentum"}, %u: tensor<3xf32> {nn.param = "u"}, %ub: tensor<3xf32> {nn.state = "u.momentum"}, %g: tensor<3xf32> {nn.input = "g"}) -> (tensor<3xf32> {nn.param = "w"}, tensor<3xf32> {nn.state = "w.momentum"}, tensor<3xf32> {nn.param = "u"}, tensor<3xf32> {nn.state = "u.momentum"}, tensor<f32> {nn.output = "dot"}) {
  %w2, %buf2 = nn.sgd %w, %g, %buf lr = 0.1 momentum = 0.9 weight_decay = 0.0 : tensor<3xf32>
  %u2, %ub2 = nn.sgd %u, %u, %ub lr = 0.1 momentum = 0.9 weight_decay = 0.0 : tensor<3xf32>
  %dot = nn.einsum "i,i->" %w, %g : (tensor<3xf32>, tensor<3xf32>) -> tensor<f32>
  return %w2, %buf2, %u2, %ub2, %dot : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<f32>
}
