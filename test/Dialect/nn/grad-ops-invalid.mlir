// RUN: partita-opt %s -split-input-file -verify-diagnostics

// Diagnostics of the backward and optimizer ops (training spec, issue 6).

// Tests that relu_grad rejects a dy whose type differs from x's.
func.func @relu_grad_dy_type(%x: tensor<4xf32>, %dy: tensor<8xf32>) {
  // expected-error @+1 {{all of {input, dy, result} have same type}}
  %0 = "nn.relu_grad"(%x, %dy) : (tensor<4xf32>, tensor<8xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that silu_grad rejects integer tensors.
func.func @silu_grad_integer(%x: tensor<4xi32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of floating-point values}}
  %0 = "nn.silu_grad"(%x, %x) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  return
}

// -----

// Tests that gelu_grad rejects a result whose type differs from x's.
func.func @gelu_grad_result_type(%x: tensor<4xf32>) {
  // expected-error @+1 {{all of {input, dy, result} have same type}}
  %0 = "nn.gelu_grad"(%x, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xbf16>
  return
}

// -----

// Tests that greater_equal rejects integer operands (its mask is a float).
func.func @greater_equal_integer(%a: tensor<4xi32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of floating-point values}}
  %0 = "nn.greater_equal"(%a, %a) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  return
}

// -----

// Tests that layer_norm_grad rejects a rank-0 input.
func.func @layer_norm_grad_rank0(%x: tensor<f32>, %g: tensor<1xf32>) {
  // expected-error @+1 {{input must have rank >= 1 (it is normalized over its last dimension), but has rank 0}}
  %0 = nn.layer_norm_grad %x, %g, %x eps = 1.0e-05 : tensor<f32>, tensor<1xf32>
  return
}

// -----

// Tests that layer_norm_grad rejects a 2-D gamma.
func.func @layer_norm_grad_gamma_rank(%x: tensor<2x8xf32>, %g: tensor<1x8xf32>) {
  // expected-error @+1 {{gamma must be 1-D, but has rank 2}}
  %0 = nn.layer_norm_grad %x, %g, %x eps = 1.0e-05 : tensor<2x8xf32>, tensor<1x8xf32>
  return
}

// -----

// Tests that layer_norm_grad rejects a gamma whose size is not the input's
// last dimension.
func.func @layer_norm_grad_gamma_size(%x: tensor<2x8xf32>, %g: tensor<2xf32>) {
  // expected-error @+1 {{gamma has size 2, but the input's last dimension (1) has size 8}}
  %0 = nn.layer_norm_grad %x, %g, %x eps = 1.0e-05 : tensor<2x8xf32>, tensor<2xf32>
  return
}

// -----

// Tests that layer_norm_grad rejects a dy whose type differs from x's.
func.func @layer_norm_grad_dy_type(%x: tensor<2x8xf32>, %g: tensor<8xf32>, %dy: tensor<2x8xbf16>) {
  // expected-error @+1 {{all of {input, dy, result} have same type}}
  %0 = "nn.layer_norm_grad"(%x, %g, %dy) {epsilon = 1.0e-05 : f64} : (tensor<2x8xf32>, tensor<8xf32>, tensor<2x8xbf16>) -> tensor<2x8xf32>
  return
}

// -----

// Tests that rms_norm_grad rejects a gamma of another element type.
func.func @rms_norm_grad_gamma_element(%x: tensor<2x8xf32>, %g: tensor<8xbf16>) {
  // expected-error @+1 {{element type of gamma ('bf16') differs from that of the input ('f32')}}
  %0 = nn.rms_norm_grad %x, %g, %x eps = 1.0e-05 : tensor<2x8xf32>, tensor<8xbf16>
  return
}

// -----

// Tests that rms_norm_grad rejects a zero epsilon.
func.func @rms_norm_grad_epsilon(%x: tensor<2x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{epsilon must be a positive finite number, but is 0}}
  %0 = nn.rms_norm_grad %x, %g, %x eps = 0.0 : tensor<2x8xf32>, tensor<8xf32>
  return
}

// -----

// Tests that rotary_grad rejects a dy that is not rank 4.
func.func @rotary_grad_rank(%dy: tensor<8x4x16xf32>) {
  // expected-error @+1 {{dy must be [batch, seq, heads, head_dim] (rank 4), but has rank 3}}
  %0 = nn.rotary_grad %dy theta = 10000.0 : tensor<8x4x16xf32>
  return
}

// -----

// Tests that rotary_grad rejects an odd head_dim.
func.func @rotary_grad_odd(%dy: tensor<2x8x4x15xf32>) {
  // expected-error @+1 {{head_dim (dimension 3) must be even, but is 15}}
  %0 = nn.rotary_grad %dy theta = 10000.0 : tensor<2x8x4x15xf32>
  return
}

// -----

// Tests that rotary_grad rejects a negative theta.
func.func @rotary_grad_theta(%dy: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{theta must be a positive finite number, but is -1}}
  %0 = nn.rotary_grad %dy theta = -1.0 : tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that attention_grad rejects a query that is not rank 4.
func.func @attention_grad_query_rank(%q: tensor<8x4x16xf32>, %k: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{query must be [batch, seq_q, heads, head_dim] (rank 4), but has rank 3}}
  %0 = nn.attention_grad %q, %k, %k, %q wrt = q : tensor<8x4x16xf32>, tensor<2x8x4x16xf32> -> tensor<8x4x16xf32>
  return
}

// -----

// Tests that attention_grad rejects a key that is not rank 4.
func.func @attention_grad_key_rank(%q: tensor<2x8x4x16xf32>, %k: tensor<8x4x16xf32>) {
  // expected-error @+1 {{key and value must be [batch, seq_kv, kv_heads, head_dim] (rank 4), but have rank 3}}
  %0 = nn.attention_grad %q, %k, %k, %q wrt = k : tensor<2x8x4x16xf32>, tensor<8x4x16xf32> -> tensor<8x4x16xf32>
  return
}

// -----

// Tests that attention_grad rejects a value whose type differs from the key's.
func.func @attention_grad_value_type(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x4x16xf32>, %v: tensor<2x8x4x8xf32>) {
  // expected-error @+1 {{all of {key, value} have same type}}
  %0 = "nn.attention_grad"(%q, %k, %v, %q) {operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0>, wrt = 2 : i32} : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x8xf32>, tensor<2x8x4x16xf32>) -> tensor<2x8x4x8xf32>
  return
}

// -----

// Tests that attention_grad rejects a dy whose type differs from the query's.
func.func @attention_grad_dy_type(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x4x16xf32>, %dy: tensor<2x8x4x8xf32>) {
  // expected-error @+1 {{all of {query, dy} have same type}}
  %0 = "nn.attention_grad"(%q, %k, %k, %dy) {operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0>, wrt = 0 : i32} : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x8xf32>) -> tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that attention_grad rejects an unknown wrt.
func.func @attention_grad_wrt(%q: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{unknown attention operand 'o'; expected 'q', 'k' or 'v'}}
  %0 = nn.attention_grad %q, %q, %q, %q wrt = o : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32> -> tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that attention_grad in generic form rejects a wrt value with a bit
// that names no operand.
func.func @attention_grad_wrt_generic(%q: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{attribute 'wrt' failed to satisfy constraint: the nn.attention operands differentiated: any of q, k and v}}
  %0 = "nn.attention_grad"(%q, %q, %q, %q) {operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0>, wrt = 8 : i32} : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that attention_grad rejects a key of another element type.
func.func @attention_grad_key_element(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x4x16xbf16>) {
  // expected-error @+1 {{element type of the key ('bf16') differs from that of the query ('f32')}}
  %0 = nn.attention_grad %q, %k, %k, %q wrt = q : tensor<2x8x4x16xf32>, tensor<2x8x4x16xbf16> -> tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that attention_grad rejects a key batch that differs from the query's.
func.func @attention_grad_batch(%q: tensor<2x8x4x16xf32>, %k: tensor<3x8x4x16xf32>) {
  // expected-error @+1 {{key batch size (dimension 0) is 3, but the query's is 2}}
  %0 = nn.attention_grad %q, %k, %k, %q wrt = q : tensor<2x8x4x16xf32>, tensor<3x8x4x16xf32> -> tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that attention_grad rejects a key head_dim that differs from the
// query's.
func.func @attention_grad_head_dim(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x4x8xf32>) {
  // expected-error @+1 {{key head_dim (dimension 3) is 8, but the query's is 16}}
  %0 = nn.attention_grad %q, %k, %k, %q wrt = q : tensor<2x8x4x16xf32>, tensor<2x8x4x8xf32> -> tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that attention_grad rejects zero kv heads.
func.func @attention_grad_zero_kv_heads(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x0x16xf32>) {
  // expected-error @+1 {{kv_heads (key dimension 2) must be at least 1}}
  %0 = nn.attention_grad %q, %k, %k, %q wrt = q : tensor<2x8x4x16xf32>, tensor<2x8x0x16xf32> -> tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that attention_grad rejects query heads that are not a multiple of
// the kv heads.
func.func @attention_grad_heads(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x3x16xf32>) {
  // expected-error @+1 {{query heads (4) must be a multiple of kv_heads (3)}}
  %0 = nn.attention_grad %q, %k, %k, %q wrt = k : tensor<2x8x4x16xf32>, tensor<2x8x3x16xf32> -> tensor<2x8x3x16xf32>
  return
}

// -----

// Tests that causal attention_grad rejects seq_q != seq_kv.
func.func @attention_grad_causal(%q: tensor<2x8x4x16xf32>, %k: tensor<2x16x4x16xf32>) {
  // expected-error @+1 {{causal attention needs seq_q == seq_kv, but seq_q is 8 and seq_kv is 16}}
  %0 = nn.attention_grad %q, %k, %k, %q wrt = q causal : tensor<2x8x4x16xf32>, tensor<2x16x4x16xf32> -> tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that attention_grad rejects a negative scale.
func.func @attention_grad_scale(%q: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{scale must be a positive finite number, but is -0.5}}
  %0 = nn.attention_grad %q, %q, %q, %q wrt = q scale = -0.5 : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32> -> tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that attention_grad wrt q rejects a result typed like the key
// (under grouped-query attention the two differ).
func.func @attention_grad_wrt_q_result(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x2x16xf32>) {
  // expected-error @+1 {{result #0 (the gradient with respect to q) has type 'tensor<2x8x2x16xf32>', but must have the query's type 'tensor<2x8x4x16xf32>'}}
  %0 = nn.attention_grad %q, %k, %k, %q wrt = q : tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x2x16xf32>
  return
}

// -----

// Tests that attention_grad wrt v rejects a result typed like the query.
func.func @attention_grad_wrt_v_result(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x2x16xf32>) {
  // expected-error @+1 {{result #0 (the gradient with respect to v) has type 'tensor<2x8x4x16xf32>', but must have the key's type 'tensor<2x8x2x16xf32>'}}
  %0 = nn.attention_grad %q, %k, %k, %q wrt = v : tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that attention_grad wrt k rejects a result of another element type.
func.func @attention_grad_wrt_k_result_element(%q: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{result #0 (the gradient with respect to k) has type 'tensor<2x8x4x16xbf16>', but must have the key's type 'tensor<2x8x4x16xf32>'}}
  %0 = nn.attention_grad %q, %q, %q, %q wrt = k : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32> -> tensor<2x8x4x16xbf16>
  return
}

// -----

// Tests that embedding_grad rejects a result that is not rank 2.
func.func @embedding_grad_result_rank(%dy: tensor<2x8x64xf32>, %ids: tensor<2x8xi32>) {
  // expected-error @+1 {{result must be the [vocab, hidden] table gradient (rank 2), but has rank 3}}
  %0 = nn.embedding_grad %dy, %ids : tensor<2x8x64xf32>, tensor<2x8xi32> -> tensor<1x512x64xf32>
  return
}

// -----

// Tests that embedding_grad rejects a rank-0 dy.
func.func @embedding_grad_dy_rank0(%dy: tensor<f32>, %ids: tensor<i32>) {
  // expected-error @+1 {{dy must be ids.shape + [hidden] (rank >= 1), but has rank 0}}
  %0 = nn.embedding_grad %dy, %ids : tensor<f32>, tensor<i32> -> tensor<512x64xf32>
  return
}

// -----

// Tests that embedding_grad rejects a result of another element type than dy.
func.func @embedding_grad_element(%dy: tensor<2x8x64xf32>, %ids: tensor<2x8xi32>) {
  // expected-error @+1 {{element type of the result ('bf16') differs from that of dy ('f32')}}
  %0 = nn.embedding_grad %dy, %ids : tensor<2x8x64xf32>, tensor<2x8xi32> -> tensor<512x64xbf16>
  return
}

// -----

// Tests that embedding_grad rejects a dy whose leading dimensions are not
// the ids' shape.
func.func @embedding_grad_dy_shape(%dy: tensor<2x4x64xf32>, %ids: tensor<2x8xi32>) {
  // expected-error @+1 {{dy shape [2, 4, 64] must be ids.shape + [hidden], i.e. [2, 8, 64]}}
  %0 = nn.embedding_grad %dy, %ids : tensor<2x4x64xf32>, tensor<2x8xi32> -> tensor<512x64xf32>
  return
}

// -----

// Tests that embedding_grad rejects a result hidden size other than dy's
// last dimension.
func.func @embedding_grad_hidden(%dy: tensor<2x8x64xf32>, %ids: tensor<2x8xi32>) {
  // expected-error @+1 {{result hidden size (dimension 1) is 32, but dy's last dimension has size 64}}
  %0 = nn.embedding_grad %dy, %ids : tensor<2x8x64xf32>, tensor<2x8xi32> -> tensor<512x32xf32>
  return
}

// -----

// Tests that embedding_grad rejects float ids.
func.func @embedding_grad_float_ids(%dy: tensor<2x8x64xf32>, %ids: tensor<2x8xf32>) {
  // expected-error @+1 {{operand #1 must be statically shaped tensor of signless integer values}}
  %0 = nn.embedding_grad %dy, %ids : tensor<2x8x64xf32>, tensor<2x8xf32> -> tensor<512x64xf32>
  return
}

// -----

// Tests that cross_entropy_grad rejects rank-0 logits.
func.func @cross_entropy_grad_rank0(%l: tensor<f32>, %labels: tensor<i32>) {
  // expected-error @+1 {{logits must be [..., vocab] (rank >= 1), but has rank 0}}
  %0 = nn.cross_entropy_grad %l, %labels, %l : tensor<f32>, tensor<i32>, tensor<f32>
  return
}

// -----

// Tests that cross_entropy_grad rejects labels that are not the logits'
// leading dimensions.
func.func @cross_entropy_grad_labels(%l: tensor<2x8x512xf32>, %labels: tensor<2x4xi32>, %dl: tensor<f32>) {
  // expected-error @+1 {{labels shape [2, 4] must be the logits shape without its last dimension, i.e. [2, 8]}}
  %0 = nn.cross_entropy_grad %l, %labels, %dl : tensor<2x8x512xf32>, tensor<2x4xi32>, tensor<f32>
  return
}

// -----

// Tests that cross_entropy_grad rejects a dloss that is not rank 0.
func.func @cross_entropy_grad_dloss_rank(%l: tensor<2x8x512xf32>, %labels: tensor<2x8xi32>, %dl: tensor<1xf32>) {
  // expected-error @+1 {{dloss must be a 0-d tensor (the gradient of the mean loss), but has type 'tensor<1xf32>'}}
  %0 = nn.cross_entropy_grad %l, %labels, %dl : tensor<2x8x512xf32>, tensor<2x8xi32>, tensor<1xf32>
  return
}

// -----

// Tests that cross_entropy_grad rejects a dloss of another element type.
func.func @cross_entropy_grad_dloss_element(%l: tensor<2x8x512xbf16>, %labels: tensor<2x8xi32>, %dl: tensor<f32>) {
  // expected-error @+1 {{element type of dloss ('f32') differs from that of the logits ('bf16')}}
  %0 = nn.cross_entropy_grad %l, %labels, %dl : tensor<2x8x512xbf16>, tensor<2x8xi32>, tensor<f32>
  return
}

// -----

// Tests that cross_entropy_grad rejects a result whose type differs from
// the logits'.
func.func @cross_entropy_grad_result(%l: tensor<2x8x512xf32>, %labels: tensor<2x8xi32>, %dl: tensor<f32>) {
  // expected-error @+1 {{all of {logits, result} have same type}}
  %0 = "nn.cross_entropy_grad"(%l, %labels, %dl) : (tensor<2x8x512xf32>, tensor<2x8xi32>, tensor<f32>) -> tensor<2x8x512xbf16>
  return
}

// -----

// Tests that convert rejects a change of shape.
func.func @convert_shape(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{result shape [8, 4] must be the input shape [4, 8] (convert changes only the element type)}}
  %0 = nn.convert %x : tensor<4x8xf32> to tensor<8x4xbf16>
  return
}

// -----

// Tests that convert rejects an integer result.
func.func @convert_integer(%x: tensor<4xf32>) {
  // expected-error @+1 {{result #0 must be statically shaped tensor of floating-point values}}
  %0 = nn.convert %x : tensor<4xf32> to tensor<4xi32>
  return
}

// -----

// Tests that sgd rejects a gradient whose type differs from the parameter's.
func.func @sgd_grad_type(%p: tensor<4x8xf32>, %g: tensor<8x4xf32>) {
  // expected-error @+1 {{all of {param, grad, buffer, new_param, new_buffer} have same type}}
  %0:2 = "nn.sgd"(%p, %g, %p) {lr = 0.1 : f64, momentum = 0.0 : f64, weight_decay = 0.0 : f64} : (tensor<4x8xf32>, tensor<8x4xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  return
}

// -----

// Tests that sgd rejects a negative learning rate.
func.func @sgd_lr(%p: tensor<4xf32>) {
  // expected-error @+1 {{lr must be a finite number >= 0, but is -0.1}}
  %0:2 = nn.sgd %p, %p, %p lr = -0.1 momentum = 0.9 weight_decay = 0.0 : tensor<4xf32>
  return
}

// -----

// Tests that sgd rejects a negative momentum.
func.func @sgd_momentum(%p: tensor<4xf32>) {
  // expected-error @+1 {{momentum must be a finite number >= 0, but is -0.5}}
  %0:2 = nn.sgd %p, %p, %p lr = 0.1 momentum = -0.5 weight_decay = 0.0 : tensor<4xf32>
  return
}

// -----

// Tests that sgd rejects an infinite weight decay.
func.func @sgd_weight_decay(%p: tensor<4xf32>) {
  // expected-error @+1 {{weight_decay must be a finite number >= 0, but is inf}}
  %0:2 = nn.sgd %p, %p, %p lr = 0.1 momentum = 0.9 weight_decay = 0x7FF0000000000000 : tensor<4xf32>
  return
}

// -----

// Tests that adamw rejects a second moment whose type differs from the
// parameter's.
func.func @adamw_v_type(%p: tensor<4xf32>, %v: tensor<4xbf16>, %t: tensor<f32>) {
  // expected-error @+1 {{all of {param, grad, m, v, new_param, new_m, new_v} have same type}}
  %0:3 = "nn.adamw"(%p, %p, %p, %v, %t) {lr = 1.0e-03 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-08 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xbf16>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

// Tests that adamw rejects a step that is not rank 0.
func.func @adamw_step_rank(%p: tensor<4xf32>, %t: tensor<1xf32>) {
  // expected-error @+1 {{step must be a 0-d tensor of the parameter's element type ('tensor<f32>'), but has type 'tensor<1xf32>'}}
  %0:3 = nn.adamw %p, %p, %p, %p, %t lr = 1.0e-03 beta1 = 0.9 beta2 = 0.999 eps = 1.0e-08 weight_decay = 0.0 : tensor<4xf32>, tensor<1xf32>
  return
}

// -----

// Tests that adamw rejects a step of another element type than the
// parameter's.
func.func @adamw_step_element(%p: tensor<4xbf16>, %t: tensor<f32>) {
  // expected-error @+1 {{step must be a 0-d tensor of the parameter's element type ('tensor<bf16>'), but has type 'tensor<f32>'}}
  %0:3 = nn.adamw %p, %p, %p, %p, %t lr = 1.0e-03 beta1 = 0.9 beta2 = 0.999 eps = 1.0e-08 weight_decay = 0.0 : tensor<4xbf16>, tensor<f32>
  return
}

// -----

// Tests that adamw rejects a NaN learning rate.
func.func @adamw_lr(%p: tensor<4xf32>, %t: tensor<f32>) {
  // expected-error @+1 {{lr must be a finite number >= 0, but is nan}}
  %0:3 = nn.adamw %p, %p, %p, %p, %t lr = 0x7FF8000000000000 beta1 = 0.9 beta2 = 0.999 eps = 1.0e-08 weight_decay = 0.0 : tensor<4xf32>, tensor<f32>
  return
}

// -----

// Tests that adamw rejects beta1 = 1 (the bias correction would divide by 0).
func.func @adamw_beta1(%p: tensor<4xf32>, %t: tensor<f32>) {
  // expected-error @+1 {{beta1 must be in [0, 1), but is 1}}
  %0:3 = nn.adamw %p, %p, %p, %p, %t lr = 1.0e-03 beta1 = 1.0 beta2 = 0.999 eps = 1.0e-08 weight_decay = 0.0 : tensor<4xf32>, tensor<f32>
  return
}

// -----

// Tests that adamw rejects a negative beta2.
func.func @adamw_beta2(%p: tensor<4xf32>, %t: tensor<f32>) {
  // expected-error @+1 {{beta2 must be in [0, 1), but is -0.5}}
  %0:3 = nn.adamw %p, %p, %p, %p, %t lr = 1.0e-03 beta1 = 0.9 beta2 = -0.5 eps = 1.0e-08 weight_decay = 0.0 : tensor<4xf32>, tensor<f32>
  return
}

// -----

// Tests that adamw rejects a zero epsilon.
func.func @adamw_epsilon(%p: tensor<4xf32>, %t: tensor<f32>) {
  // expected-error @+1 {{epsilon must be a positive finite number, but is 0}}
  %0:3 = nn.adamw %p, %p, %p, %p, %t lr = 1.0e-03 beta1 = 0.9 beta2 = 0.999 eps = 0.0 weight_decay = 0.0 : tensor<4xf32>, tensor<f32>
  return
}

// -----

// Tests that adamw rejects a negative weight decay.
func.func @adamw_weight_decay(%p: tensor<4xf32>, %t: tensor<f32>) {
  // expected-error @+1 {{weight_decay must be a finite number >= 0, but is -0.01}}
  %0:3 = nn.adamw %p, %p, %p, %p, %t lr = 1.0e-03 beta1 = 0.9 beta2 = 0.999 eps = 1.0e-08 weight_decay = -0.01 : tensor<4xf32>, tensor<f32>
  return
}

// -----

// Tests that attention_grad rejects a member named twice.
func.func @attention_grad_wrt_twice(%q: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{'k' appears twice in wrt}}
  %0:2 = nn.attention_grad %q, %q, %q, %q wrt = k|q|k : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32> -> tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that attention_grad rejects a result count other than its members'.
func.func @attention_grad_result_count(%q: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{has 1 results, but wrt = q|k asks for 2 (one per member, in the order q, k, v)}}
  %0 = "nn.attention_grad"(%q, %q, %q, %q) {operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0>, wrt = 3 : i32} : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that attention_grad in generic form rejects an empty wrt.
func.func @attention_grad_wrt_empty(%q: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{wrt must name at least one of q, k and v}}
  "nn.attention_grad"(%q, %q, %q, %q) {operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0>, wrt = 0 : i32} : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> ()
  return
}

// -----

// Tests that each result of a several-member attention_grad is checked:
// here the second (dv) has the query's type.
func.func @attention_grad_member_type(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x2x16xf32>) {
  // expected-error @+1 {{result #1 (the gradient with respect to v) has type 'tensor<2x8x4x16xf32>', but must have the key's type 'tensor<2x8x2x16xf32>'}}
  %0:2 = nn.attention_grad %q, %k, %k, %q wrt = q|v : tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that layer_norm_gamma_grad rejects a rank-0 input.
func.func @layer_norm_gamma_grad_rank0(%x: tensor<f32>) {
  // expected-error @+1 {{input must have rank >= 1 (it is normalized over its last dimension), but has rank 0}}
  %0 = nn.layer_norm_gamma_grad %x, %x eps = 1.0e-05 : tensor<f32> -> tensor<1xf32>
  return
}

// -----

// Tests that layer_norm_gamma_grad rejects a result that is not 1-D.
func.func @layer_norm_gamma_grad_result_rank(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{result must be 1-D, but has rank 2}}
  %0 = nn.layer_norm_gamma_grad %x, %x eps = 1.0e-05 : tensor<2x8xf32> -> tensor<2x8xf32>
  return
}

// -----

// Tests that layer_norm_gamma_grad rejects a result whose size is not the
// input's last dimension.
func.func @layer_norm_gamma_grad_result_size(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{result has size 2, but the input's last dimension (1) has size 8}}
  %0 = nn.layer_norm_gamma_grad %x, %x eps = 1.0e-05 : tensor<2x8xf32> -> tensor<2xf32>
  return
}

// -----

// Tests that layer_norm_gamma_grad rejects a result of another element type.
func.func @layer_norm_gamma_grad_result_type(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{element type of result ('bf16') differs from that of the input ('f32')}}
  %0 = nn.layer_norm_gamma_grad %x, %x eps = 1.0e-05 : tensor<2x8xf32> -> tensor<8xbf16>
  return
}

// -----

// Tests that layer_norm_gamma_grad rejects a dy whose type differs from x's.
func.func @layer_norm_gamma_grad_dy_type(%x: tensor<2x8xf32>, %dy: tensor<4x8xf32>) {
  // expected-error @+1 {{all of {input, dy} have same type}}
  %0 = "nn.layer_norm_gamma_grad"(%x, %dy) {epsilon = 1.0e-05 : f64} : (tensor<2x8xf32>, tensor<4x8xf32>) -> tensor<8xf32>
  return
}

// -----

// Tests that layer_norm_gamma_grad rejects an epsilon that is not positive.
func.func @layer_norm_gamma_grad_epsilon(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{epsilon must be a positive finite number, but is 0}}
  %0 = nn.layer_norm_gamma_grad %x, %x eps = 0.0 : tensor<2x8xf32> -> tensor<8xf32>
  return
}

// -----

// Tests that attention_grad rejects a saved output without its lse.
func.func @attention_grad_saved_alone(%q: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{saved needs both the forward's result and its lse}}
  %0 = "nn.attention_grad"(%q, %q, %q, %q, %q) {operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0>, wrt = 1 : i32} : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that attention_grad rejects a saved output of another type than dy.
func.func @attention_grad_saved_output_type(%q: tensor<2x8x4x16xf32>, %o: tensor<2x8x4x8xf32>, %lse: tensor<2x4x8xf32>) {
  // expected-error @+1 {{the saved forward result has type 'tensor<2x8x4x8xf32>', but must have dy's type 'tensor<2x8x4x16xf32>'}}
  %0 = nn.attention_grad %q, %q, %q, %q saved(%o, %lse : tensor<2x8x4x8xf32>, tensor<2x4x8xf32>) wrt = q : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32> -> tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that attention_grad rejects a saved lse that is not [batch, heads,
// seq_q] (here [batch, seq_q, heads]).
func.func @attention_grad_saved_lse_shape(%q: tensor<2x8x4x16xf32>, %lse: tensor<2x8x4xf32>) {
  // expected-error @+1 {{the saved lse [2, 8, 4] must be [batch, heads, seq_q] of the query, i.e. [2, 4, 8]}}
  %0 = nn.attention_grad %q, %q, %q, %q saved(%q, %lse : tensor<2x8x4x16xf32>, tensor<2x8x4xf32>) wrt = q : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32> -> tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that attention_grad rejects a saved lse of another element type.
func.func @attention_grad_saved_lse_type(%q: tensor<2x8x4x16xf32>, %lse: tensor<2x4x8xf64>) {
  // expected-error @+1 {{element type of the saved lse ('f64') differs from that of the query ('f32')}}
  %0 = nn.attention_grad %q, %q, %q, %q saved(%q, %lse : tensor<2x8x4x16xf32>, tensor<2x4x8xf64>) wrt = q : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32> -> tensor<2x8x4x16xf32>
  return
}
