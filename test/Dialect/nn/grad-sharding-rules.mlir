// RUN: partita-opt %s -test-print-sharding-rules -split-input-file -verify-diagnostics

// Sharding rules of the backward and optimizer ops, as the training spec's
// op table states them. Each remark is the op's rule: the operands' and
// results' dimensions as factor lists (a*b: major a, minor b), the factor
// sizes, then the factors that are not parallel by kind.

// Tests that the elementwise gradients, greater_equal and convert share one
// parallel factor per dimension among all operands and the result.
func.func @elementwise(%x: tensor<2x8xf32>, %dy: tensor<2x8xf32>) {
  // expected-remark @+1 {{([i,j],[i,j])->([i,j]) {i=2,j=8}}}
  %0 = nn.relu_grad %x, %dy : tensor<2x8xf32>
  // expected-remark @+1 {{([i,j],[i,j])->([i,j]) {i=2,j=8}}}
  %1 = nn.silu_grad %x, %dy : tensor<2x8xf32>
  // expected-remark @+1 {{([i,j],[i,j])->([i,j]) {i=2,j=8}}}
  %2 = nn.gelu_grad %x, %dy tanh : tensor<2x8xf32>
  // expected-remark @+1 {{([i,j],[i,j])->([i,j]) {i=2,j=8}}}
  %3 = nn.greater_equal %x, %dy : tensor<2x8xf32>
  // expected-remark @+1 {{([i,j])->([i,j]) {i=2,j=8}}}
  %4 = nn.convert %x : tensor<2x8xf32> to tensor<2x8xbf16>
  return
}

// -----

// Tests that the norm gradients keep the leading dimensions parallel and
// the normalized dimension H whole, shared by x, gamma, dy and dx.
func.func @norm_grads(%x: tensor<2x8x64xf32>, %g: tensor<64xf32>, %dy: tensor<2x8x64xf32>) {
  // expected-remark @+1 {{([i,j,k],[k],[i,j,k])->([i,j,k]) {i=2,j=8,k=64} whole={k}}}
  %0 = nn.layer_norm_grad %x, %g, %dy eps = 1.0e-05 : tensor<2x8x64xf32>, tensor<64xf32>
  // expected-remark @+1 {{([i,j,k],[k],[i,j,k])->([i,j,k]) {i=2,j=8,k=64} whole={k}}}
  %1 = nn.rms_norm_grad %x, %g, %dy eps = 1.0e-05 : tensor<2x8x64xf32>, tensor<64xf32>
  return
}

// -----

// Tests layer_norm_gamma_grad's rule: x and dy share every factor; H whole
// and kept in the [H] result, the leading dimensions summed over (their
// shards leave partial sums).
func.func @layer_norm_gamma_grad(%x: tensor<2x8x64xf32>, %dy: tensor<2x8x64xf32>) {
  // expected-remark @+1 {{([i,j,k],[i,j,k])->([k]) {i=2,j=8,k=64} reduction={i,j} whole={k}}}
  %0 = nn.layer_norm_gamma_grad %x, %dy eps = 1.0e-05 : tensor<2x8x64xf32> -> tensor<64xf32>
  return
}

// -----

// Tests that rotary_grad has exactly nn.rotary's rule: b, s, n parallel and
// the head dim whole.
func.func @rotary_grad(%x: tensor<2x8x4x16xf32>) {
  // expected-remark @+1 {{([b,s,n,d])->([b,s,n,d]) {b=2,s=8,n=4,d=16} whole={d}}}
  %0 = nn.rotary %x theta = 10000.0 : tensor<2x8x4x16xf32>
  // expected-remark @+1 {{([b,s,n,d])->([b,s,n,d]) {b=2,s=8,n=4,d=16} whole={d}}}
  %1 = nn.rotary_grad %x theta = 10000.0 : tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that multi-head attention_grad wrt q keeps b, s and the heads
// parallel and d, t, v whole; wrt k and v the query seq s becomes a (sum)
// reduction and the heads stay parallel.
func.func @attention_grad_mha(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x4x16xf32>, %v: tensor<2x8x4x16xf32>, %dy: tensor<2x8x4x16xf32>) {
  // expected-remark @+1 {{([b,s,n,d],[b,t,n,d],[b,t,n,v],[b,s,n,v])->([b,s,n,d]) {b=2,s=8,n=4,d=16,t=8,v=16} whole={d,t,v}}}
  %dq = nn.attention_grad %q, %k, %v, %dy wrt = q causal : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32> -> tensor<2x8x4x16xf32>
  // expected-remark @+1 {{([b,s,n,d],[b,t,n,d],[b,t,n,v],[b,s,n,v])->([b,t,n,d]) {b=2,s=8,n=4,d=16,t=8,v=16} reduction={s} whole={d,t,v}}}
  %dk = nn.attention_grad %q, %k, %v, %dy wrt = k causal : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32> -> tensor<2x8x4x16xf32>
  // expected-remark @+1 {{([b,s,n,d],[b,t,n,d],[b,t,n,v],[b,s,n,v])->([b,t,n,v]) {b=2,s=8,n=4,d=16,t=8,v=16} reduction={s} whole={d,t,v}}}
  %dv = nn.attention_grad %q, %k, %v, %dy wrt = v causal : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32> -> tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that grouped-query attention_grad splits the query heads into the
// kv heads k (major) and the group g: wrt q both parallel; wrt k and v, k
// parallel and g a (sum) reduction alongside s.
func.func @attention_grad_gqa(%q: tensor<2x8x8x16xf32>, %k: tensor<2x8x2x16xf32>, %v: tensor<2x8x2x16xf32>, %dy: tensor<2x8x8x16xf32>) {
  // expected-remark @+1 {{([b,s,k*g,d],[b,t,k,d],[b,t,k,v],[b,s,k*g,v])->([b,s,k*g,d]) {b=2,s=8,k=2,g=4,d=16,t=8,v=16} whole={d,t,v}}}
  %dq = nn.attention_grad %q, %k, %v, %dy wrt = q causal : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x8x16xf32>
  // expected-remark @+1 {{([b,s,k*g,d],[b,t,k,d],[b,t,k,v],[b,s,k*g,v])->([b,t,k,d]) {b=2,s=8,k=2,g=4,d=16,t=8,v=16} reduction={s,g} whole={d,t,v}}}
  %dk = nn.attention_grad %q, %k, %v, %dy wrt = k causal : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x2x16xf32>
  // expected-remark @+1 {{([b,s,k*g,d],[b,t,k,d],[b,t,k,v],[b,s,k*g,v])->([b,t,k,v]) {b=2,s=8,k=2,g=4,d=16,t=8,v=16} reduction={s,g} whole={d,t,v}}}
  %dv = nn.attention_grad %q, %k, %v, %dy wrt = v causal : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x2x16xf32>
  return
}

// -----

// Tests the rule of an attention_grad with several members: dq beside dk
// or dv keeps s (and the group g) whole, as one rule cannot leave dq split
// and dk partial; dk with dv keeps them reductions.
func.func @attention_grad_members(%q: tensor<2x8x8x16xf32>, %k: tensor<2x8x2x16xf32>, %v: tensor<2x8x2x16xf32>, %dy: tensor<2x8x8x16xf32>) {
  // expected-remark @+1 {{([b,s,k*g,d],[b,t,k,d],[b,t,k,v],[b,s,k*g,v])->([b,s,k*g,d],[b,t,k,d],[b,t,k,v]) {b=2,s=8,k=2,g=4,d=16,t=8,v=16} whole={s,g,d,t,v}}}
  %g:3 = nn.attention_grad %q, %k, %v, %dy wrt = q|k|v causal : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32>
  // expected-remark @+1 {{([b,s,k*g,d],[b,t,k,d],[b,t,k,v],[b,s,k*g,v])->([b,t,k,d],[b,t,k,v]) {b=2,s=8,k=2,g=4,d=16,t=8,v=16} reduction={s,g} whole={d,t,v}}}
  %h:2 = nn.attention_grad %q, %k, %v, %dy wrt = k|v causal : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32>
  return
}

// -----

// Tests that cross attention_grad keeps the query seq s and the key seq t
// apart (t whole, s parallel wrt q and a reduction wrt v).
func.func @attention_grad_cross(%q: tensor<2x8x4x16xf32>, %k: tensor<2x32x4x16xf32>, %v: tensor<2x32x4x16xf32>, %dy: tensor<2x8x4x16xf32>) {
  // expected-remark @+1 {{([b,s,n,d],[b,t,n,d],[b,t,n,v],[b,s,n,v])->([b,s,n,d]) {b=2,s=8,n=4,d=16,t=32,v=16} whole={d,t,v}}}
  %dq = nn.attention_grad %q, %k, %v, %dy wrt = q scale = 0.25 : tensor<2x8x4x16xf32>, tensor<2x32x4x16xf32> -> tensor<2x8x4x16xf32>
  // expected-remark @+1 {{([b,s,n,d],[b,t,n,d],[b,t,n,v],[b,s,n,v])->([b,t,n,v]) {b=2,s=8,n=4,d=16,t=32,v=16} reduction={s} whole={d,t,v}}}
  %dv = nn.attention_grad %q, %k, %v, %dy wrt = v scale = 0.25 : tensor<2x8x4x16xf32>, tensor<2x32x4x16xf32> -> tensor<2x32x4x16xf32>
  return
}

// -----

// Tests that embedding_grad makes the token dimensions (sum) reductions,
// the vocabulary whole and hidden parallel, for [B, S] and [B] ids.
func.func @embedding_grad(%dy: tensor<2x8x64xf32>, %ids: tensor<2x8xi32>, %dy1: tensor<16x64xf32>, %ids1: tensor<16xi32>) {
  // expected-remark @+1 {{([b,s,h],[b,s])->([v,h]) {b=2,s=8,v=512,h=64} reduction={b,s} whole={v}}}
  %0 = nn.embedding_grad %dy, %ids : tensor<2x8x64xf32>, tensor<2x8xi32> -> tensor<512x64xf32>
  // expected-remark @+1 {{([b,h],[b])->([v,h]) {b=16,v=100,h=64} reduction={b} whole={v}}}
  %1 = nn.embedding_grad %dy1, %ids1 : tensor<16x64xf32>, tensor<16xi32> -> tensor<100x64xf32>
  return
}

// -----

// Tests that cross_entropy_grad keeps the token dimensions parallel, the
// vocabulary whole, and gives the rank-0 dloss no factors.
func.func @cross_entropy_grad(%l: tensor<2x8x512xf32>, %labels: tensor<2x8xi32>, %l1: tensor<4x10xf32>, %labels1: tensor<4xi32>, %dl: tensor<f32>) {
  // expected-remark @+1 {{([b,s,v],[b,s],[])->([b,s,v]) {b=2,s=8,v=512} whole={v}}}
  %0 = nn.cross_entropy_grad %l, %labels, %dl : tensor<2x8x512xf32>, tensor<2x8xi32>, tensor<f32>
  // expected-remark @+1 {{([b,v],[b],[])->([b,v]) {b=4,v=10} whole={v}}}
  %1 = nn.cross_entropy_grad %l1, %labels1, %dl : tensor<4x10xf32>, tensor<4xi32>, tensor<f32>
  return
}

// -----

// Tests that sgd and adamw make every dimension parallel across all their
// tensors and give adamw's rank-0 step no factors.
func.func @optimizers(%p: tensor<4x8xf32>, %t: tensor<f32>) {
  // expected-remark @+1 {{([i,j],[i,j],[i,j])->([i,j],[i,j]) {i=4,j=8}}}
  %0:2 = nn.sgd %p, %p, %p lr = 0.1 momentum = 0.9 weight_decay = 0.0 : tensor<4x8xf32>
  // expected-remark @+1 {{([i,j],[i,j],[i,j],[i,j],[])->([i,j],[i,j],[i,j]) {i=4,j=8}}}
  %1:3 = nn.adamw %p, %p, %p, %p, %t lr = 1.0e-03 beta1 = 0.9 beta2 = 0.999 eps = 1.0e-08 weight_decay = 0.0 : tensor<4x8xf32>, tensor<f32>
  return
}

// -----

// Tests that adamw on a rank-0 parameter has no factors at all.
func.func @adamw_scalar(%p: tensor<f32>) {
  // expected-remark @+1 {{([],[],[],[],[])->([],[],[]) {}}}
  %0:3 = nn.adamw %p, %p, %p, %p, %p lr = 1.0e-03 beta1 = 0.9 beta2 = 0.999 eps = 1.0e-08 weight_decay = 0.0 : tensor<f32>, tensor<f32>
  return
}

// -----

// Tests that the saved forward output has dy's factors and the saved lse
// [b, heads, s], the gradient's own factors unchanged.
func.func @attention_grad_saved(%q: tensor<2x8x8x16xf32>, %k: tensor<2x8x2x16xf32>, %o: tensor<2x8x8x16xf32>, %lse: tensor<2x8x8xf32>) {
  // expected-remark @+1 {{([b,s,k*g,d],[b,t,k,d],[b,t,k,v],[b,s,k*g,v],[b,s,k*g,v],[b,k*g,s])->([b,s,k*g,d]) {b=2,s=8,k=2,g=4,d=16,t=8,v=16} whole={d,t,v}}}
  %dq = nn.attention_grad %q, %k, %k, %q saved(%o, %lse : tensor<2x8x8x16xf32>, tensor<2x8x8xf32>) wrt = q causal : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x8x16xf32>
  // expected-remark @+1 {{([b,s,k*g,d],[b,t,k,d],[b,t,k,v],[b,s,k*g,v],[b,s,k*g,v],[b,k*g,s])->([b,t,k,d]) {b=2,s=8,k=2,g=4,d=16,t=8,v=16} reduction={s,g} whole={d,t,v}}}
  %dk = nn.attention_grad %q, %k, %k, %q saved(%o, %lse : tensor<2x8x8x16xf32>, tensor<2x8x8xf32>) wrt = k causal : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x2x16xf32>
  return
}
