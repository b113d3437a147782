// RUN: partita-opt %s -test-print-sharding-rules -split-input-file -verify-diagnostics

// Each remark is the op's rule: the operands' and results' dimensions as
// factor lists (a*b: major a, minor b; 1: no factor), the factor sizes, then
// the factors that are not parallel by kind.

// Tests that a matmul-style einsum has its contracted letter as a reduction.
func.func @einsum_matmul(%x: tensor<2x8x16xf32>, %w: tensor<16x64xf32>) -> tensor<2x8x64xf32> {
  // expected-remark @+1 {{([b,s,h],[h,f])->([b,s,f]) {b=2,s=8,h=16,f=64} reduction={h}}}
  %y = nn.einsum "bsh,hf->bsf" %x, %w : (tensor<2x8x16xf32>, tensor<16x64xf32>) -> tensor<2x8x64xf32>
  return %y : tensor<2x8x64xf32>
}

// -----

// Tests that the per-head projections of attention keep heads and head_dim
// parallel and contract hidden (in) or heads and head_dim (out).
func.func @einsum_heads(%x: tensor<2x8x16xf32>, %wq: tensor<16x4x4xf32>, %wo: tensor<4x4x16xf32>) -> tensor<2x8x16xf32> {
  // expected-remark @+1 {{([b,s,h],[h,n,d])->([b,s,n,d]) {b=2,s=8,h=16,n=4,d=4} reduction={h}}}
  %q = nn.einsum "bsh,hnd->bsnd" %x, %wq : (tensor<2x8x16xf32>, tensor<16x4x4xf32>) -> tensor<2x8x4x4xf32>
  // expected-remark @+1 {{([b,s,n,d],[n,d,h])->([b,s,h]) {b=2,s=8,n=4,d=4,h=16} reduction={n,d}}}
  %o = nn.einsum "bsnd,ndh->bsh" %q, %wo : (tensor<2x8x4x4xf32>, tensor<4x4x16xf32>) -> tensor<2x8x16xf32>
  return %o : tensor<2x8x16xf32>
}

// -----

// Tests that a one-operand einsum summing a dimension has it as a reduction,
// and that the tied-embedding logits contract hidden against the table.
func.func @einsum_unary_and_logits(%x: tensor<4x8xf32>, %h: tensor<2x8x16xf32>, %wte: tensor<32x16xf32>) -> (tensor<4xf32>, tensor<2x8x32xf32>) {
  // expected-remark @+1 {{([i,j])->([i]) {i=4,j=8} reduction={j}}}
  %s = nn.einsum "ij->i" %x : (tensor<4x8xf32>) -> tensor<4xf32>
  // expected-remark @+1 {{([b,s,h],[v,h])->([b,s,v]) {b=2,s=8,h=16,v=32} reduction={h}}}
  %l = nn.einsum "bsh,vh->bsv" %h, %wte : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
  return %s, %l : tensor<4xf32>, tensor<2x8x32xf32>
}

// -----

// Tests that every binary elementwise op shares one parallel factor per
// dimension among both operands and the result, integers included, and
// that add and sub are additive (a shared partial sum stays partial).
func.func @binary(%a: tensor<2x8xf32>, %b: tensor<2x8xf32>, %i: tensor<4xi32>) {
  // expected-remark @+1 {{([i,j],[i,j])->([i,j]) {i=2,j=8} additive}}
  %0 = nn.add %a, %b : tensor<2x8xf32>
  // expected-remark @+1 {{([i,j],[i,j])->([i,j]) {i=2,j=8} additive}}
  %1 = nn.sub %a, %b : tensor<2x8xf32>
  // expected-remark @+1 {{([i,j],[i,j])->([i,j]) {i=2,j=8}}}
  %2 = nn.mul %a, %b : tensor<2x8xf32>
  // expected-remark @+1 {{([i,j],[i,j])->([i,j]) {i=2,j=8}}}
  %3 = nn.div %a, %b : tensor<2x8xf32>
  // expected-remark @+1 {{([i,j],[i,j])->([i,j]) {i=2,j=8}}}
  %4 = nn.max %a, %b : tensor<2x8xf32>
  // expected-remark @+1 {{([i],[i])->([i]) {i=4} additive}}
  %5 = nn.add %i, %i : tensor<4xi32>
  return
}

// -----

// Tests that every unary elementwise op maps each dimension to itself.
func.func @unary(%x: tensor<2x8x4xf32>) {
  // expected-remark @+1 {{([i,j,k])->([i,j,k]) {i=2,j=8,k=4}}}
  %0 = nn.neg %x : tensor<2x8x4xf32>
  // expected-remark @+1 {{([i,j,k])->([i,j,k]) {i=2,j=8,k=4}}}
  %1 = nn.exp %x : tensor<2x8x4xf32>
  // expected-remark @+1 {{([i,j,k])->([i,j,k]) {i=2,j=8,k=4}}}
  %2 = nn.log %x : tensor<2x8x4xf32>
  // expected-remark @+1 {{([i,j,k])->([i,j,k]) {i=2,j=8,k=4}}}
  %3 = nn.tanh %x : tensor<2x8x4xf32>
  // expected-remark @+1 {{([i,j,k])->([i,j,k]) {i=2,j=8,k=4}}}
  %4 = nn.relu %x : tensor<2x8x4xf32>
  // expected-remark @+1 {{([i,j,k])->([i,j,k]) {i=2,j=8,k=4}}}
  %5 = nn.silu %x : tensor<2x8x4xf32>
  // expected-remark @+1 {{([i,j,k])->([i,j,k]) {i=2,j=8,k=4}}}
  %6 = nn.rsqrt %x : tensor<2x8x4xf32>
  // expected-remark @+1 {{([i,j,k])->([i,j,k]) {i=2,j=8,k=4}}}
  %7 = nn.sqrt %x : tensor<2x8x4xf32>
  // expected-remark @+1 {{([i,j,k])->([i,j,k]) {i=2,j=8,k=4}}}
  %8 = nn.gelu %x : tensor<2x8x4xf32>
  // expected-remark @+1 {{([i,j,k])->([i,j,k]) {i=2,j=8,k=4}}}
  %9 = nn.gelu %x tanh : tensor<2x8x4xf32>
  return
}

// -----

// Tests that an elementwise op on a rank-0 tensor has no factors.
func.func @scalar(%x: tensor<f32>) -> tensor<f32> {
  // expected-remark @+1 {{([],[])->([]) {}}}
  %0 = nn.mul %x, %x : tensor<f32>
  return %0 : tensor<f32>
}

// -----

// Tests that a broadcast's new result dimensions get factors no operand
// carries, and the mapped dimension shares its factor.
func.func @broadcast_new_dims(%b: tensor<64xf32>) -> tensor<2x8x64xf32> {
  // expected-remark @+1 {{([k])->([i,j,k]) {i=2,j=8,k=64}}}
  %y = nn.broadcast %b dims = [2] : tensor<64xf32> -> tensor<2x8x64xf32>
  return %y : tensor<2x8x64xf32>
}

// -----

// Tests that an operand dimension of size 1 repeated into a larger result
// dimension has no factor, in the lead and in the middle.
func.func @broadcast_expand_size_one(%a: tensor<1x64xf32>, %b: tensor<2x1x64xf32>) {
  // expected-remark @+1 {{([1,k])->([i,j,k]) {i=2,j=8,k=64}}}
  %0 = nn.broadcast %a dims = [1, 2] : tensor<1x64xf32> -> tensor<2x8x64xf32>
  // expected-remark @+1 {{([i,1,k])->([i,j,k]) {i=2,j=8,k=64}}}
  %1 = nn.broadcast %b dims = [0, 1, 2] : tensor<2x1x64xf32> -> tensor<2x8x64xf32>
  return
}

// -----

// Tests that a size-1 operand dimension mapped to a size-1 result dimension
// keeps sharing its (size-1) factor.
func.func @broadcast_keep_size_one(%a: tensor<8x1xf32>) -> tensor<4x8x1xf32> {
  // expected-remark @+1 {{([j,k])->([i,j,k]) {i=4,j=8,k=1}}}
  %y = nn.broadcast %a dims = [1, 2] : tensor<8x1xf32> -> tensor<4x8x1xf32>
  return %y : tensor<4x8x1xf32>
}

// -----

// Tests that a sum reduction leaves partial sums over the reduced factor.
func.func @reduce_sum(%x: tensor<2x8x16xf32>) -> tensor<2x8xf32> {
  // expected-remark @+1 {{([i,j,k])->([i,j]) {i=2,j=8,k=16} reduction={k}}}
  %y = nn.reduce sum %x dims = [2] : tensor<2x8x16xf32> -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// Tests that a max reduction leaves partial maxima over the reduced factor.
func.func @reduce_max(%x: tensor<2x8x16xf32>) -> tensor<2x8xf32> {
  // expected-remark @+1 {{([i,j,k])->([i,j]) {i=2,j=8,k=16} reduction={k:max}}}
  %y = nn.reduce max %x dims = [2] : tensor<2x8x16xf32> -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// Tests that a mean over dimensions listed out of order is a sum reduction
// of both, with the kept middle dimension parallel.
func.func @reduce_mean(%x: tensor<2x8x16xf32>) -> tensor<8xf32> {
  // expected-remark @+1 {{([i,j,k])->([j]) {i=2,j=8,k=16} reduction={i,k}}}
  %y = nn.reduce mean %x dims = [2, 0] : tensor<2x8x16xf32> -> tensor<8xf32>
  return %y : tensor<8xf32>
}

// -----

// Tests that reducing every dimension gives a rank-0 result with no factors.
func.func @reduce_all(%x: tensor<4x8xf32>) -> tensor<f32> {
  // expected-remark @+1 {{([i,j])->([]) {i=4,j=8} reduction={i,j}}}
  %y = nn.reduce sum %x dims = [0, 1] : tensor<4x8xf32> -> tensor<f32>
  return %y : tensor<f32>
}

// -----

// Tests that transpose factors follow the permutation.
func.func @transpose(%x: tensor<2x8x4x16xf32>, %z: tensor<2x3x4xf32>) {
  // expected-remark @+1 {{([i,j,k,l])->([i,k,j,l]) {i=2,j=8,k=4,l=16}}}
  %0 = nn.transpose %x perm = [0, 2, 1, 3] : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
  // expected-remark @+1 {{([i,j,k])->([k,i,j]) {i=2,j=3,k=4}}}
  %1 = nn.transpose %z perm = [2, 0, 1] : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
  return
}

// -----

// Tests that merging and splitting dimensions factorizes both shapes into one
// sequence of parallel factors.
func.func @reshape_merge_split(%a: tensor<8x6xf32>, %b: tensor<2x4x6xf32>, %c: tensor<48xf32>, %d: tensor<2x8x4x16xf32>) {
  // expected-remark @+1 {{([i,j])->([i*j]) {i=8,j=6}}}
  %0 = nn.reshape %a : tensor<8x6xf32> -> tensor<48xf32>
  // expected-remark @+1 {{([i,j,k])->([i*j,k]) {i=2,j=4,k=6}}}
  %1 = nn.reshape %b : tensor<2x4x6xf32> -> tensor<8x6xf32>
  // expected-remark @+1 {{([i*j])->([i,j]) {i=8,j=6}}}
  %2 = nn.reshape %c : tensor<48xf32> -> tensor<8x6xf32>
  // expected-remark @+1 {{([i,j,k,l])->([i,j,k*l]) {i=2,j=8,k=4,l=16}}}
  %3 = nn.reshape %d : tensor<2x8x4x16xf32> -> tensor<2x8x64xf32>
  return
}

// -----

// Tests that dimensions that overlap without nesting ([4,3] -> [2,6]) still
// factorize through gcds: 4 = 2*2 and 6 = 2*3.
func.func @reshape_overlapping(%a: tensor<4x3xf32>) -> tensor<2x6xf32> {
  // expected-remark @+1 {{([i*j,k])->([i,j*k]) {i=2,j=2,k=3}}}
  %0 = nn.reshape %a : tensor<4x3xf32> -> tensor<2x6xf32>
  return %0 : tensor<2x6xf32>
}

// -----

// Tests that size-1 dimensions get no factor on either side.
func.func @reshape_size_one(%a: tensor<1x8x1x6xf32>, %s: tensor<f32>) {
  // expected-remark @+1 {{([1,i,1,j])->([i*j,1]) {i=8,j=6}}}
  %0 = nn.reshape %a : tensor<1x8x1x6xf32> -> tensor<48x1xf32>
  // expected-remark @+1 {{([])->([1,1]) {}}}
  %1 = nn.reshape %s : tensor<f32> -> tensor<1x1xf32>
  return
}

// -----

// Tests that [6,4] -> [4,6] keeps the common major factor 2 parallel and
// falls back to whole factors for the misaligned rest.
func.func @reshape_fallback_partial(%a: tensor<6x4xf32>) -> tensor<4x6xf32> {
  // expected-remark @+1 {{([i*j,k])->([i*l,m]) {i=2,j=3,k=4,l=2,m=6} whole={j,k,l,m}}}
  %0 = nn.reshape %a : tensor<6x4xf32> -> tensor<4x6xf32>
  return %0 : tensor<4x6xf32>
}

// -----

// Tests that a misaligned run of whole factors ([3,4] -> [2,6]) ends where
// the products agree, and a later dimension is parallel again.
func.func @reshape_fallback_realign(%a: tensor<3x4xf32>, %b: tensor<3x4x5xf32>) {
  // expected-remark @+1 {{([i,j])->([k,l]) {i=3,j=4,k=2,l=6} whole={i,j,k,l}}}
  %0 = nn.reshape %a : tensor<3x4xf32> -> tensor<2x6xf32>
  // expected-remark @+1 {{([i,j,m])->([k,l,m]) {i=3,j=4,k=2,l=6,m=5} whole={i,j,k,l}}}
  %1 = nn.reshape %b : tensor<3x4x5xf32> -> tensor<2x6x5xf32>
  return
}

// -----

// Tests that the softmax dimension is collective and the others parallel.
func.func @softmax(%s: tensor<2x4x8x8xf32>, %t: tensor<4x8xf32>) {
  // expected-remark @+1 {{([i,j,k,l])->([i,j,k,l]) {i=2,j=4,k=8,l=8} collective={l}}}
  %0 = nn.softmax %s dim = 3 : tensor<2x4x8x8xf32>
  // expected-remark @+1 {{([i,j])->([i,j]) {i=4,j=8} collective={i}}}
  %1 = nn.softmax %t dim = 0 : tensor<4x8xf32>
  return
}

// -----

// Tests that layer_norm's normalized dimension is collective and shared with
// gamma and beta.
func.func @layer_norm(%x: tensor<2x8x64xf32>, %g: tensor<64xf32>, %b: tensor<64xf32>) -> tensor<2x8x64xf32> {
  // expected-remark @+1 {{([i,j,k],[k],[k])->([i,j,k]) {i=2,j=8,k=64} collective={k}}}
  %y = nn.layer_norm %x, %g, %b eps = 1.0e-05 : tensor<2x8x64xf32>, tensor<64xf32>
  return %y : tensor<2x8x64xf32>
}

// -----

// Tests that rms_norm's normalized dimension is collective and shared with
// gamma, for a batch of rows and for a single vector.
func.func @rms_norm(%x: tensor<2x8x64xf32>, %v: tensor<64xf32>, %g: tensor<64xf32>) {
  // expected-remark @+1 {{([i,j,k],[k])->([i,j,k]) {i=2,j=8,k=64} collective={k}}}
  %0 = nn.rms_norm %x, %g eps = 1.0e-05 : tensor<2x8x64xf32>, tensor<64xf32>
  // expected-remark @+1 {{([i],[i])->([i]) {i=64} collective={i}}}
  %1 = nn.rms_norm %v, %g eps = 1.0e-05 : tensor<64xf32>, tensor<64xf32>
  return
}

// -----

// Tests that rotary keeps batch, seq and heads parallel and head_dim whole.
func.func @rotary(%q: tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32> {
  // expected-remark @+1 {{([b,s,n,d])->([b,s,n,d]) {b=2,s=8,n=4,d=16} whole={d}}}
  %y = nn.rotary %q theta = 10000.0 : tensor<2x8x4x16xf32>
  return %y : tensor<2x8x4x16xf32>
}

// -----

// Tests that multi-head attention shares heads among q, k, v and the result,
// keeps the q/k head_dim whole, the key seq collective and the v head_dim
// parallel.
func.func @attention_mha(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x4x16xf32>, %v: tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32> {
  // expected-remark @+1 {{([b,s,n,d],[b,t,n,d],[b,t,n,v])->([b,s,n,v]) {b=2,s=8,n=4,d=16,t=8,v=16} whole={d} collective={t}}}
  %o = nn.attention %q, %k, %v causal : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>
  return %o : tensor<2x8x4x16xf32>
}

// -----

// Tests that cross attention has separate query and key seq factors.
func.func @attention_cross(%q: tensor<2x8x4x16xf32>, %k: tensor<2x32x4x16xf32>, %v: tensor<2x32x4x16xf32>) -> tensor<2x8x4x16xf32> {
  // expected-remark @+1 {{([b,s,n,d],[b,t,n,d],[b,t,n,v])->([b,s,n,v]) {b=2,s=8,n=4,d=16,t=32,v=16} whole={d} collective={t}}}
  %o = nn.attention %q, %k, %v scale = 2.5e-01 : tensor<2x8x4x16xf32>, tensor<2x32x4x16xf32>
  return %o : tensor<2x8x4x16xf32>
}

// -----

// Tests that grouped-query attention splits the query heads into a kv-heads
// factor (major, shared with k and v) and a group factor.
func.func @attention_gqa(%q: tensor<2x8x8x16xf32>, %k: tensor<2x8x2x16xf32>, %v: tensor<2x8x2x16xf32>) -> tensor<2x8x8x16xf32> {
  // expected-remark @+1 {{([b,s,k*g,d],[b,t,k,d],[b,t,k,v])->([b,s,k*g,v]) {b=2,s=8,k=2,g=4,d=16,t=8,v=16} whole={d} collective={t}}}
  %o = nn.attention %q, %k, %v causal : tensor<2x8x8x16xf32>, tensor<2x8x2x16xf32>
  return %o : tensor<2x8x8x16xf32>
}

// -----

// Tests that multi-query attention (one kv head) is the group-only case.
func.func @attention_mqa(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x1x16xf32>, %v: tensor<2x8x1x16xf32>) -> tensor<2x8x4x16xf32> {
  // expected-remark @+1 {{([b,s,k*g,d],[b,t,k,d],[b,t,k,v])->([b,s,k*g,v]) {b=2,s=8,k=1,g=4,d=16,t=8,v=16} whole={d} collective={t}}}
  %o = nn.attention %q, %k, %v : tensor<2x8x4x16xf32>, tensor<2x8x1x16xf32>
  return %o : tensor<2x8x4x16xf32>
}

// -----

// Tests that embedding shares the id dimensions and hidden with the result
// and makes the vocabulary collective, for [b, s] and [b] ids.
func.func @embedding(%table: tensor<512x64xf32>, %ids: tensor<2x8xi32>, %ids1: tensor<8xi64>) {
  // expected-remark @+1 {{([v,h],[b,s])->([b,s,h]) {b=2,s=8,v=512,h=64} collective={v}}}
  %0 = nn.embedding %table[%ids] : tensor<512x64xf32>, tensor<2x8xi32> -> tensor<2x8x64xf32>
  // expected-remark @+1 {{([v,h],[b])->([b,h]) {b=8,v=512,h=64} collective={v}}}
  %1 = nn.embedding %table[%ids1] : tensor<512x64xf32>, tensor<8xi64> -> tensor<8x64xf32>
  return
}

// -----

// Tests that cross_entropy reduces over the token dimensions and makes the
// vocabulary collective.
func.func @cross_entropy(%logits: tensor<2x8x512xf32>, %labels: tensor<2x8xi32>) -> tensor<f32> {
  // expected-remark @+1 {{([b,s,v],[b,s])->([]) {b=2,s=8,v=512} reduction={b,s} collective={v}}}
  %l = nn.cross_entropy %logits, %labels : tensor<2x8x512xf32>, tensor<2x8xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests cross_entropy with rank-1 labels (the MLP's [B]) and with a single
// token (rank-1 logits, rank-0 label).
func.func @cross_entropy_rank1(%logits: tensor<4x10xf32>, %labels: tensor<4xi32>, %one: tensor<10xf32>, %label: tensor<i32>) {
  // expected-remark @+1 {{([b,v],[b])->([]) {b=4,v=10} reduction={b} collective={v}}}
  %0 = nn.cross_entropy %logits, %labels : tensor<4x10xf32>, tensor<4xi32> -> tensor<f32>
  // expected-remark @+1 {{([v],[])->([]) {v=10} collective={v}}}
  %1 = nn.cross_entropy %one, %label : tensor<10xf32>, tensor<i32> -> tensor<f32>
  return
}

// -----

// Tests that a constant has no operands and a parallel factor per dimension.
func.func @constant() {
  // expected-remark @+1 {{()->([i,j]) {i=4,j=8}}}
  %0 = nn.constant dense<1.0> : tensor<4x8xf32>
  // expected-remark @+1 {{()->([]) {}}}
  %1 = nn.constant dense<0> : tensor<i32>
  return
}

// -----

// Tests that attention with its lse result maps the lse to [b, heads, s],
// keeps the key seq whole (no merge of split keys is written for it) and,
// when causal, the query seq too (its split form has no lse).
func.func @attention_lse(%q: tensor<2x8x8x16xf32>, %k: tensor<2x6x2x16xf32>, %k2: tensor<2x8x8x16xf32>) {
  // expected-remark @+1 {{([b,s,k*g,d],[b,t,k,d],[b,t,k,v])->([b,s,k*g,v],[b,k*g,s]) {b=2,s=8,k=2,g=4,d=16,t=6,v=16} whole={d,t}}}
  %o, %l = nn.attention %q, %k, %k : tensor<2x8x8x16xf32>, tensor<2x6x2x16xf32> -> tensor<2x8x8xf32>
  // expected-remark @+1 {{([b,s,n,d],[b,t,n,d],[b,t,n,v])->([b,s,n,v],[b,n,s]) {b=2,s=8,n=8,d=16,t=8,v=16} whole={s,d,t}}}
  %o2, %l2 = nn.attention %q, %k2, %k2 causal : tensor<2x8x8x16xf32>, tensor<2x8x8x16xf32> -> tensor<2x8x8xf32>
  return
}
