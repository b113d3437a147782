// RUN: partita-opt %s -split-input-file -verify-diagnostics

// Tests that an einsum with three operands is rejected.
func.func @einsum_three_operands(%x: tensor<4xf32>) {
  // expected-error @+1 {{takes 1 or 2 operands, but has 3}}
  %0 = nn.einsum "a,a,a->a" %x, %x, %x : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that an einsum with no operand is rejected.
func.func @einsum_no_operand() {
  // expected-error @+1 {{takes 1 or 2 operands, but has 0}}
  %0 = nn.einsum "->" : () -> tensor<f32>
  return
}

// -----

// Tests that an einsum spec without '->' is rejected.
func.func @einsum_no_arrow(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{spec 'ab' has no '->' between the operands and the result (expected e.g. 'bsh,hf->bsf')}}
  %0 = nn.einsum "ab" %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

// Tests that a space in an einsum spec is rejected.
func.func @einsum_space(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{spec 'ab -> ba' has ' ' at position 2; only letters, ',' between operands and one '->' are allowed}}
  %0 = nn.einsum "ab -> ba" %x : (tensor<4x8xf32>) -> tensor<8x4xf32>
  return
}

// -----

// Tests that an ellipsis in an einsum spec is rejected.
func.func @einsum_ellipsis(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{spec '...b->...b' has '.' at position 0}}
  %0 = nn.einsum "...b->...b" %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

// Tests that a second '->' in an einsum spec is rejected.
func.func @einsum_two_arrows(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{spec 'ab->ba->ab' has '-' at position 6}}
  %0 = nn.einsum "ab->ba->ab" %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

// Tests that a ',' in the result of an einsum spec is rejected.
func.func @einsum_comma_in_result(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{spec 'ab->a,b' has ',' at position 5}}
  %0 = nn.einsum "ab->a,b" %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

// Tests that an einsum spec with more operand terms than operands is rejected.
func.func @einsum_term_count(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{spec 'ab,bc->ac' describes 2 operands, but the op has 1}}
  %0 = nn.einsum "ab,bc->ac" %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

// Tests that an einsum spec with fewer operand terms than operands is rejected.
func.func @einsum_term_count_one(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{spec 'ab->ab' describes 1 operand, but the op has 2}}
  %0 = nn.einsum "ab->ab" %x, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

// Tests that an einsum term with more letters than the operand's rank is rejected.
func.func @einsum_operand_rank(%x: tensor<2x8x16xf32>, %w: tensor<16x64xf32>) {
  // expected-error @+1 {{spec 'bsh,hf->bsf' names 3 dimensions for operand #0 of rank 2}}
  %0 = nn.einsum "bsh,hf->bsf" %w, %x : (tensor<16x64xf32>, tensor<2x8x16xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

// Tests that einsum operands of different element types are rejected.
func.func @einsum_operand_element_types(%x: tensor<4x8xf32>, %w: tensor<8x2xf16>) {
  // expected-error @+1 {{operand #1 has element type 'f16', but operand #0 has 'f32'}}
  %0 = nn.einsum "ab,bc->ac" %x, %w : (tensor<4x8xf32>, tensor<8x2xf16>) -> tensor<4x2xf32>
  return
}

// -----

// Tests that a letter repeated within one einsum operand (a diagonal) is rejected.
func.func @einsum_repeated_letter(%x: tensor<4x4xf32>) {
  // expected-error @+1 {{spec 'aa->a' repeats letter 'a' in operand #0 (a letter names one dimension per operand)}}
  %0 = nn.einsum "aa->a" %x : (tensor<4x4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that an einsum letter with two sizes is rejected, naming both places.
func.func @einsum_size_mismatch(%x: tensor<2x8x16xf32>, %w: tensor<32x64xf32>) {
  // expected-error @+1 {{operand #1 dimension 0 ('h') has size 32, but 'h' has size 16 in operand #0}}
  %0 = nn.einsum "bsh,hf->bsf" %x, %w : (tensor<2x8x16xf32>, tensor<32x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

// Tests that an einsum result of another element type than its operands is rejected.
func.func @einsum_result_element_type(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{result has element type 'f16', but the operands have 'f32'}}
  %0 = nn.einsum "ab->ba" %x : (tensor<4x8xf32>) -> tensor<8x4xf16>
  return
}

// -----

// Tests that an einsum result term whose length differs from the result's rank is rejected.
func.func @einsum_result_rank(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{spec 'ab->a' names 1 dimensions for the result of rank 2}}
  %0 = nn.einsum "ab->a" %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

// Tests that a letter repeated in the einsum result is rejected.
func.func @einsum_result_repeated_letter(%x: tensor<4xf32>) {
  // expected-error @+1 {{spec 'a->aa' repeats letter 'a' in the result}}
  %0 = nn.einsum "a->aa" %x : (tensor<4xf32>) -> tensor<4x4xf32>
  return
}

// -----

// Tests that an einsum result letter that no operand has is rejected.
func.func @einsum_result_unknown_letter(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{result letter 'z' does not appear in any input}}
  %0 = nn.einsum "ab->az" %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

// Tests that an einsum result dimension of the wrong size is rejected.
func.func @einsum_result_size(%x: tensor<2x8x16xf32>, %w: tensor<16x64xf32>) {
  // expected-error @+1 {{result dimension 2 ('f') has size 32, but 'f' has size 64 in operand #1}}
  %0 = nn.einsum "bsh,hf->bsf" %x, %w : (tensor<2x8x16xf32>, tensor<16x64xf32>) -> tensor<2x8x32xf32>
  return
}

// -----

// Tests that integer einsum operands are rejected by the type constraint.
func.func @einsum_integer_operand(%x: tensor<4xi32>) {
  // expected-error @+1 {{operand #0 must be variadic of statically shaped tensor of floating-point values, but got 'tensor<4xi32>'}}
  %0 = nn.einsum "a->a" %x : (tensor<4xi32>) -> tensor<4xf32>
  return
}

// -----

// Tests that an integer einsum result is rejected by the type constraint.
func.func @einsum_integer_result(%x: tensor<4xf32>) {
  // expected-error @+1 {{result #0 must be statically shaped tensor of floating-point values, but got 'tensor<4xi32>'}}
  %0 = nn.einsum "a->a" %x : (tensor<4xf32>) -> tensor<4xi32>
  return
}

// -----

// Tests that an einsum without a spec is rejected.
func.func @einsum_missing_spec(%x: tensor<4xf32>) {
  // expected-error @+1 {{'nn.einsum' op requires attribute 'spec'}}
  %0 = "nn.einsum"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that an einsum spec that is not a string is rejected.
func.func @einsum_spec_not_string(%x: tensor<4xf32>) {
  // expected-error @+1 {{Invalid attribute `spec` in property conversion: 3 : i64}}
  %0 = "nn.einsum"(%x) <{spec = 3 : i64}> : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that a binary op with operands of different types is rejected.
func.func @binary_type_mismatch(%a: tensor<4xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{'nn.add' op failed to verify that all of {lhs, rhs, result} have same type}}
  %0 = "nn.add"(%a, %b) : (tensor<4xf32>, tensor<8xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that a binary op whose result type differs from its operands' is rejected.
func.func @binary_result_mismatch(%a: tensor<4xf32>) {
  // expected-error @+1 {{'nn.max' op failed to verify that all of {lhs, rhs, result} have same type}}
  %0 = "nn.max"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf16>
  return
}

// -----

// Tests that a binary op on index tensors is rejected by the type constraint.
func.func @binary_index(%a: tensor<4xindex>) {
  // expected-error @+1 {{'nn.mul' op operand #0 must be statically shaped tensor of floating-point or signless integer values, but got 'tensor<4xindex>'}}
  %0 = nn.mul %a, %a : tensor<4xindex>
  return
}

// -----

// Tests that a binary op on unsigned integer tensors is rejected by the type constraint.
func.func @binary_unsigned(%a: tensor<4xui32>) {
  // expected-error @+1 {{'nn.sub' op operand #0 must be statically shaped tensor of floating-point or signless integer values, but got 'tensor<4xui32>'}}
  %0 = nn.sub %a, %a : tensor<4xui32>
  return
}

// -----

// Tests that a binary op on a dynamically shaped tensor is rejected by the type constraint.
func.func @binary_dynamic(%a: tensor<?x4xf32>) {
  // expected-error @+1 {{'nn.div' op operand #0 must be statically shaped tensor of floating-point or signless integer values, but got 'tensor<?x4xf32>'}}
  %0 = nn.div %a, %a : tensor<?x4xf32>
  return
}

// -----

// Tests that a binary op with one operand is rejected.
func.func @binary_operand_count(%a: tensor<4xf32>) {
  // expected-error @+1 {{'nn.add' op expected 2 operands, but found 1}}
  %0 = "nn.add"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that nn.neg rejects an integer tensor.
func.func @neg_integer(%x: tensor<4xi32>) {
  // expected-error @+1 {{'nn.neg' op operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<4xi32>'}}
  %0 = nn.neg %x : tensor<4xi32>
  return
}

// -----

// Tests that nn.exp rejects an integer tensor.
func.func @exp_integer(%x: tensor<4xi32>) {
  // expected-error @+1 {{'nn.exp' op operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<4xi32>'}}
  %0 = nn.exp %x : tensor<4xi32>
  return
}

// -----

// Tests that nn.log rejects an integer tensor.
func.func @log_integer(%x: tensor<4xi32>) {
  // expected-error @+1 {{'nn.log' op operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<4xi32>'}}
  %0 = nn.log %x : tensor<4xi32>
  return
}

// -----

// Tests that nn.tanh rejects an integer tensor.
func.func @tanh_integer(%x: tensor<4xi32>) {
  // expected-error @+1 {{'nn.tanh' op operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<4xi32>'}}
  %0 = nn.tanh %x : tensor<4xi32>
  return
}

// -----

// Tests that nn.relu rejects an integer tensor.
func.func @relu_integer(%x: tensor<4xi32>) {
  // expected-error @+1 {{'nn.relu' op operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<4xi32>'}}
  %0 = nn.relu %x : tensor<4xi32>
  return
}

// -----

// Tests that nn.silu rejects an integer tensor.
func.func @silu_integer(%x: tensor<4xi32>) {
  // expected-error @+1 {{'nn.silu' op operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<4xi32>'}}
  %0 = nn.silu %x : tensor<4xi32>
  return
}

// -----

// Tests that nn.rsqrt rejects an integer tensor.
func.func @rsqrt_integer(%x: tensor<4xi32>) {
  // expected-error @+1 {{'nn.rsqrt' op operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<4xi32>'}}
  %0 = nn.rsqrt %x : tensor<4xi32>
  return
}

// -----

// Tests that nn.sqrt rejects an integer tensor.
func.func @sqrt_integer(%x: tensor<4xi32>) {
  // expected-error @+1 {{'nn.sqrt' op operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<4xi32>'}}
  %0 = nn.sqrt %x : tensor<4xi32>
  return
}

// -----

// Tests that nn.gelu rejects an integer tensor.
func.func @gelu_integer(%x: tensor<4xi32>) {
  // expected-error @+1 {{'nn.gelu' op operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<4xi32>'}}
  %0 = nn.gelu %x : tensor<4xi32>
  return
}

// -----

// Tests that a unary op whose result type differs from its input's is rejected.
func.func @unary_result_mismatch(%x: tensor<4xf32>) {
  // expected-error @+1 {{'nn.exp' op failed to verify that all of {input, result} have same type}}
  %0 = "nn.exp"(%x) : (tensor<4xf32>) -> tensor<4xf16>
  return
}

// -----

// Tests that a unary op on an unranked tensor is rejected by the type constraint.
func.func @unary_unranked(%x: tensor<*xf32>) {
  // expected-error @+1 {{'nn.relu' op operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<*xf32>'}}
  %0 = "nn.relu"(%x) : (tensor<*xf32>) -> tensor<*xf32>
  return
}

// -----

// Tests that the custom form rejects an unranked tensor type while parsing.
func.func @unary_unranked_custom(%x: tensor<*xf32>) {
  // expected-error @+1 {{invalid kind of type specified: expected builtin.tensor, but found 'tensor<*xf32>'}}
  %0 = nn.relu %x : tensor<*xf32>
  return
}

// -----

// Tests that a unary op without a result is rejected.
func.func @unary_no_result(%x: tensor<4xf32>) {
  // expected-error @+1 {{'nn.exp' op requires one result}}
  "nn.exp"(%x) : (tensor<4xf32>) -> ()
  return
}

// -----

// Tests that gelu whose result type differs from its input's is rejected.
func.func @gelu_result_mismatch(%x: tensor<4xf32>) {
  // expected-error @+1 {{'nn.gelu' op failed to verify that all of {input, result} have same type}}
  %0 = "nn.gelu"(%x) <{tanh}> : (tensor<4xf32>) -> tensor<8xf32>
  return
}

// -----

// Tests that a gelu tanh flag that is not a unit attribute is rejected.
func.func @gelu_tanh_not_unit(%x: tensor<4xf32>) {
  // expected-error @+1 {{Invalid attribute `tanh` in property conversion: 1 : i32}}
  %0 = "nn.gelu"(%x) <{tanh = 1 : i32}> : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that a broadcast that changes the element type is rejected.
func.func @broadcast_element_type(%b: tensor<64xf32>) {
  // expected-error @+1 {{element type of the result ('f16') differs from that of the input ('f32')}}
  %0 = nn.broadcast %b dims = [1] : tensor<64xf32> -> tensor<8x64xf16>
  return
}

// -----

// Tests that broadcast dims with fewer entries than the input's rank are rejected.
func.func @broadcast_dims_count(%b: tensor<8x64xf32>) {
  // expected-error @+1 {{dims has 1 entries, but the input has rank 2 (one entry per input dimension)}}
  %0 = nn.broadcast %b dims = [2] : tensor<8x64xf32> -> tensor<2x8x64xf32>
  return
}

// -----

// Tests that a broadcast dim beyond the result's rank is rejected.
func.func @broadcast_dim_out_of_range(%b: tensor<64xf32>) {
  // expected-error @+1 {{dims[0] = 3 is out of range for a result of rank 3}}
  %0 = nn.broadcast %b dims = [3] : tensor<64xf32> -> tensor<2x8x64xf32>
  return
}

// -----

// Tests that a negative broadcast dim is rejected.
func.func @broadcast_dim_negative(%b: tensor<64xf32>) {
  // expected-error @+1 {{dims[0] = -1 is out of range for a result of rank 3}}
  %0 = nn.broadcast %b dims = [-1] : tensor<64xf32> -> tensor<2x8x64xf32>
  return
}

// -----

// Tests that broadcast dims out of order (a transpose in disguise) are rejected.
func.func @broadcast_dims_not_increasing(%b: tensor<8x64xf32>) {
  // expected-error @+1 {{dims must be strictly increasing, but dims[1] = 1 follows dims[0] = 2}}
  %0 = nn.broadcast %b dims = [2, 1] : tensor<8x64xf32> -> tensor<2x64x8xf32>
  return
}

// -----

// Tests that repeated broadcast dims are rejected.
func.func @broadcast_dims_repeated(%b: tensor<8x8xf32>) {
  // expected-error @+1 {{dims must be strictly increasing, but dims[1] = 1 follows dims[0] = 1}}
  %0 = nn.broadcast %b dims = [1, 1] : tensor<8x8xf32> -> tensor<2x8x8xf32>
  return
}

// -----

// Tests that a broadcast input dimension neither 1 nor the result's size is rejected.
func.func @broadcast_size(%b: tensor<32xf32>) {
  // expected-error @+1 {{input dimension 0 has size 32, but result dimension 2 (dims[0]) has size 64; it must be equal or 1}}
  %0 = nn.broadcast %b dims = [2] : tensor<32xf32> -> tensor<2x8x64xf32>
  return
}

// -----

// Tests that broadcast dims that are not a dense i64 array are rejected.
func.func @broadcast_dims_attr(%b: tensor<64xf32>) {
  // expected-error @+1 {{Invalid attribute `dims` in property conversion: [0]}}
  %0 = "nn.broadcast"(%b) <{dims = [0]}> : (tensor<64xf32>) -> tensor<64xf32>
  return
}

// -----

// Tests that a broadcast without dims is rejected.
func.func @broadcast_missing_dims(%b: tensor<64xf32>) {
  // expected-error @+1 {{'nn.broadcast' op requires attribute 'dims'}}
  %0 = "nn.broadcast"(%b) : (tensor<64xf32>) -> tensor<64xf32>
  return
}

// -----

// Tests that a reduce that changes the element type is rejected.
func.func @reduce_element_type(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{element type of the result ('f64') differs from that of the input ('f32')}}
  %0 = nn.reduce sum %x dims = [1] : tensor<2x8xf32> -> tensor<2xf64>
  return
}

// -----

// Tests that a reduce dim beyond the input's rank is rejected.
func.func @reduce_dim_out_of_range(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{dims[1] = 3 is out of range for an input of rank 3}}
  %0 = nn.reduce sum %x dims = [0, 3] : tensor<2x8x64xf32> -> tensor<8x64xf32>
  return
}

// -----

// Tests that a negative reduce dim is rejected.
func.func @reduce_dim_negative(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{dims[0] = -1 is out of range for an input of rank 3}}
  %0 = nn.reduce max %x dims = [-1] : tensor<2x8x64xf32> -> tensor<2x8xf32>
  return
}

// -----

// Tests that a reduce dim named twice is rejected.
func.func @reduce_dim_twice(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{dims names dimension 2 twice}}
  %0 = nn.reduce sum %x dims = [2, 2] : tensor<2x8x64xf32> -> tensor<2x8xf32>
  return
}

// -----

// Tests that a reduce result that keeps the reduced dimension is rejected.
func.func @reduce_result_shape(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{result shape [2, 8] must be the input shape [2, 8, 64] without dims [1], i.e. [2, 64]}}
  %0 = nn.reduce mean %x dims = [1] : tensor<2x8x64xf32> -> tensor<2x8xf32>
  return
}

// -----

// Tests that a reduce result of rank 1 instead of 0 is rejected.
func.func @reduce_keepdims(%x: tensor<8xf32>) {
  // expected-error @+1 {{result shape [1] must be the input shape [8] without dims [0], i.e. []}}
  %0 = nn.reduce sum %x dims = [0] : tensor<8xf32> -> tensor<1xf32>
  return
}

// -----

// Tests that a reduce without a kind keyword is rejected.
func.func @reduce_missing_kind(%x: tensor<8xf32>) {
  // expected-error @+1 {{expected a reduction kind: 'sum', 'max' or 'mean'}}
  %0 = nn.reduce %x dims = [0] : tensor<8xf32> -> tensor<f32>
  return
}

// -----

// Tests that an unknown reduce kind is rejected.
func.func @reduce_unknown_kind(%x: tensor<8xf32>) {
  // expected-error @+1 {{unknown reduction kind 'min'; expected 'sum', 'max' or 'mean'}}
  %0 = nn.reduce min %x dims = [0] : tensor<8xf32> -> tensor<f32>
  return
}

// -----

// Tests that a reduce kind that is not a reduce_kind attribute is rejected.
func.func @reduce_kind_attr(%x: tensor<8xf32>) {
  // expected-error @+1 {{Invalid attribute `kind` in property conversion: 1 : i32}}
  %0 = "nn.reduce"(%x) <{dims = array<i64: 0>, kind = 1 : i32}> : (tensor<8xf32>) -> tensor<f32>
  return
}

// -----

// Tests that a reduce without a kind is rejected.
func.func @reduce_kind_missing(%x: tensor<8xf32>) {
  // expected-error @+1 {{'nn.reduce' op requires attribute 'kind'}}
  %0 = "nn.reduce"(%x) <{dims = array<i64: 0>}> : (tensor<8xf32>) -> tensor<f32>
  return
}

// -----

// Tests that a reduce of an integer tensor is rejected by the type constraint.
func.func @reduce_integer(%x: tensor<8xi32>) {
  // expected-error @+1 {{'nn.reduce' op operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<8xi32>'}}
  %0 = nn.reduce sum %x dims = [0] : tensor<8xi32> -> tensor<i32>
  return
}

// -----

// Tests that a transpose that changes the element type is rejected.
func.func @transpose_element_type(%x: tensor<2x8xi32>) {
  // expected-error @+1 {{element type of the result ('i64') differs from that of the input ('i32')}}
  %0 = nn.transpose %x perm = [1, 0] : tensor<2x8xi32> -> tensor<8x2xi64>
  return
}

// -----

// Tests that a transpose perm shorter than the input's rank is rejected.
func.func @transpose_perm_count(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{perm has 2 entries, but the input has rank 3}}
  %0 = nn.transpose %x perm = [1, 0] : tensor<2x8x64xf32> -> tensor<8x2x64xf32>
  return
}

// -----

// Tests that a transpose perm entry beyond the input's rank is rejected.
func.func @transpose_perm_out_of_range(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{perm[1] = 2 is out of range for an input of rank 2}}
  %0 = nn.transpose %x perm = [1, 2] : tensor<2x8xf32> -> tensor<8x2xf32>
  return
}

// -----

// Tests that a transpose perm that names a dimension twice is rejected.
func.func @transpose_not_permutation(%x: tensor<8x8xf32>) {
  // expected-error @+1 {{perm is not a permutation: it names dimension 0 twice}}
  %0 = nn.transpose %x perm = [0, 0] : tensor<8x8xf32> -> tensor<8x8xf32>
  return
}

// -----

// Tests that a transpose result that does not match the permuted input is rejected.
func.func @transpose_result_shape(%x: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{result shape [2, 8, 4, 16] must be the input shape [2, 8, 4, 16] permuted by perm [0, 2, 1, 3], i.e. [2, 4, 8, 16]}}
  %0 = nn.transpose %x perm = [0, 2, 1, 3] : tensor<2x8x4x16xf32> -> tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that a transpose without perm is rejected.
func.func @transpose_missing_perm(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{'nn.transpose' op requires attribute 'perm'}}
  %0 = "nn.transpose"(%x) : (tensor<2x8xf32>) -> tensor<8x2xf32>
  return
}

// -----

// Tests that a reshape that changes the element type is rejected.
func.func @reshape_element_type(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{element type of the result ('bf16') differs from that of the input ('f32')}}
  %0 = nn.reshape %x : tensor<2x8xf32> -> tensor<16xbf16>
  return
}

// -----

// Tests that a reshape that changes the element count is rejected.
func.func @reshape_element_count(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{input shape [2, 8] has 16 elements, but result shape [4, 5] has 20}}
  %0 = nn.reshape %x : tensor<2x8xf32> -> tensor<4x5xf32>
  return
}

// -----

// Tests that a reshape to a dynamic shape is rejected by the type constraint.
func.func @reshape_dynamic_result(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{'nn.reshape' op result #0 must be statically shaped tensor of floating-point or signless integer values, but got 'tensor<?xf32>'}}
  %0 = nn.reshape %x : tensor<2x8xf32> -> tensor<?xf32>
  return
}

// -----

// Tests that a softmax dim equal to the input's rank is rejected.
func.func @softmax_dim_out_of_range(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{dim 3 is out of range for an input of rank 3}}
  %0 = nn.softmax %x dim = 3 : tensor<2x8x64xf32>
  return
}

// -----

// Tests that a negative softmax dim is rejected with the index to use instead.
func.func @softmax_dim_negative(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{dim -1 is negative; name the dimension by its index in [0, 3) (the last one is 2)}}
  %0 = nn.softmax %x dim = -1 : tensor<2x8x64xf32>
  return
}

// -----

// Tests that a softmax of a rank-0 tensor is rejected.
func.func @softmax_rank0(%x: tensor<f32>) {
  // expected-error @+1 {{input must have rank >= 1, but has rank 0}}
  %0 = nn.softmax %x dim = 0 : tensor<f32>
  return
}

// -----

// Tests that a softmax whose result type differs from its input's is rejected.
func.func @softmax_result_mismatch(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{'nn.softmax' op failed to verify that all of {input, result} have same type}}
  %0 = "nn.softmax"(%x) <{dim = 1 : i64}> : (tensor<2x8xf32>) -> tensor<2x8xf16>
  return
}

// -----

// Tests that a softmax dim that is not a 64-bit integer is rejected.
func.func @softmax_dim_i32(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{'nn.softmax' op attribute 'dim' failed to satisfy constraint: 64-bit signless integer attribute}}
  %0 = "nn.softmax"(%x) <{dim = 1 : i32}> : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

// Tests that a softmax dim that is not an integer is rejected.
func.func @softmax_dim_string(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{Invalid attribute `dim` in property conversion: "x"}}
  %0 = "nn.softmax"(%x) <{dim = "x"}> : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

// Tests that a softmax without dim is rejected.
func.func @softmax_missing_dim(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{'nn.softmax' op requires attribute 'dim'}}
  %0 = "nn.softmax"(%x) : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

// Tests that layer_norm of a rank-0 tensor is rejected.
func.func @layer_norm_rank0(%x: tensor<f32>, %g: tensor<1xf32>) {
  // expected-error @+1 {{input must have rank >= 1 (it is normalized over its last dimension), but has rank 0}}
  %0 = nn.layer_norm %x, %g, %g eps = 1.0e-05 : tensor<f32>, tensor<1xf32>
  return
}

// -----

// Tests that a 2-D layer_norm gamma is rejected.
func.func @layer_norm_gamma_rank(%x: tensor<2x64xf32>, %g: tensor<1x64xf32>) {
  // expected-error @+1 {{gamma must be 1-D, but has rank 2}}
  %0 = nn.layer_norm %x, %g, %g eps = 1.0e-05 : tensor<2x64xf32>, tensor<1x64xf32>
  return
}

// -----

// Tests that a layer_norm gamma whose size is not the last dimension's is rejected.
func.func @layer_norm_gamma_size(%x: tensor<2x8x64xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{gamma has size 8, but the input's last dimension (2) has size 64}}
  %0 = nn.layer_norm %x, %g, %g eps = 1.0e-05 : tensor<2x8x64xf32>, tensor<8xf32>
  return
}

// -----

// Tests that a layer_norm gamma of another element type than the input is rejected.
func.func @layer_norm_gamma_element_type(%x: tensor<2x64xbf16>, %g: tensor<64xf32>) {
  // expected-error @+1 {{element type of gamma ('f32') differs from that of the input ('bf16')}}
  %0 = nn.layer_norm %x, %g, %g eps = 1.0e-05 : tensor<2x64xbf16>, tensor<64xf32>
  return
}

// -----

// Tests that a zero layer_norm epsilon is rejected.
func.func @layer_norm_epsilon_zero(%x: tensor<2x64xf32>, %g: tensor<64xf32>) {
  // expected-error @+1 {{epsilon must be a positive finite number, but is 0}}
  %0 = nn.layer_norm %x, %g, %g eps = 0.0 : tensor<2x64xf32>, tensor<64xf32>
  return
}

// -----

// Tests that a negative layer_norm epsilon is rejected.
func.func @layer_norm_epsilon_negative(%x: tensor<2x64xf32>, %g: tensor<64xf32>) {
  // expected-error @+1 {{epsilon must be a positive finite number, but is -1e-05}}
  %0 = nn.layer_norm %x, %g, %g eps = -1.0e-05 : tensor<2x64xf32>, tensor<64xf32>
  return
}

// -----

// Tests that a layer_norm result type that differs from its input's is rejected.
func.func @layer_norm_result_mismatch(%x: tensor<2x64xf32>, %g: tensor<64xf32>) {
  // expected-error @+1 {{'nn.layer_norm' op failed to verify that all of {input, result} have same type}}
  %0 = "nn.layer_norm"(%x, %g, %g) <{epsilon = 1.0e-05 : f64}> : (tensor<2x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x32xf32>
  return
}

// -----

// Tests that a layer_norm epsilon that is not a 64-bit float is rejected.
func.func @layer_norm_epsilon_f32(%x: tensor<2x64xf32>, %g: tensor<64xf32>) {
  // expected-error @+1 {{'nn.layer_norm' op attribute 'epsilon' failed to satisfy constraint: 64-bit float attribute}}
  %0 = "nn.layer_norm"(%x, %g, %g) <{epsilon = 1.0e-05 : f32}> : (tensor<2x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x64xf32>
  return
}

// -----

// Tests that layer_norm of an integer tensor is rejected by the type constraint.
func.func @layer_norm_integer(%x: tensor<2x64xi32>, %g: tensor<64xi32>) {
  // expected-error @+1 {{'nn.layer_norm' op operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<2x64xi32>'}}
  %0 = nn.layer_norm %x, %g, %g eps = 1.0e-05 : tensor<2x64xi32>, tensor<64xi32>
  return
}

// -----

// Tests that rms_norm of a rank-0 tensor is rejected.
func.func @rms_norm_rank0(%x: tensor<f32>, %g: tensor<1xf32>) {
  // expected-error @+1 {{input must have rank >= 1 (it is normalized over its last dimension), but has rank 0}}
  %0 = nn.rms_norm %x, %g eps = 1.0e-05 : tensor<f32>, tensor<1xf32>
  return
}

// -----

// Tests that a 2-D rms_norm gamma is rejected.
func.func @rms_norm_gamma_rank(%x: tensor<2x64xf32>, %g: tensor<1x64xf32>) {
  // expected-error @+1 {{gamma must be 1-D, but has rank 2}}
  %0 = nn.rms_norm %x, %g eps = 1.0e-05 : tensor<2x64xf32>, tensor<1x64xf32>
  return
}

// -----

// Tests that a rms_norm gamma whose size is not the last dimension's is rejected.
func.func @rms_norm_gamma_size(%x: tensor<2x8x64xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{gamma has size 8, but the input's last dimension (2) has size 64}}
  %0 = nn.rms_norm %x, %g eps = 1.0e-05 : tensor<2x8x64xf32>, tensor<8xf32>
  return
}

// -----

// Tests that a rms_norm gamma of another element type than the input is rejected.
func.func @rms_norm_gamma_element_type(%x: tensor<2x64xbf16>, %g: tensor<64xf32>) {
  // expected-error @+1 {{element type of gamma ('f32') differs from that of the input ('bf16')}}
  %0 = nn.rms_norm %x, %g eps = 1.0e-05 : tensor<2x64xbf16>, tensor<64xf32>
  return
}

// -----

// Tests that a zero rms_norm epsilon is rejected.
func.func @rms_norm_epsilon_zero(%x: tensor<2x64xf32>, %g: tensor<64xf32>) {
  // expected-error @+1 {{epsilon must be a positive finite number, but is 0}}
  %0 = nn.rms_norm %x, %g eps = 0.0 : tensor<2x64xf32>, tensor<64xf32>
  return
}

// -----

// Tests that a negative rms_norm epsilon is rejected.
func.func @rms_norm_epsilon_negative(%x: tensor<2x64xf32>, %g: tensor<64xf32>) {
  // expected-error @+1 {{epsilon must be a positive finite number, but is -1e-05}}
  %0 = nn.rms_norm %x, %g eps = -1.0e-05 : tensor<2x64xf32>, tensor<64xf32>
  return
}

// -----

// Tests that a rms_norm result type that differs from its input's is rejected.
func.func @rms_norm_result_mismatch(%x: tensor<2x64xf32>, %g: tensor<64xf32>) {
  // expected-error @+1 {{'nn.rms_norm' op failed to verify that all of {input, result} have same type}}
  %0 = "nn.rms_norm"(%x, %g) <{epsilon = 1.0e-05 : f64}> : (tensor<2x64xf32>, tensor<64xf32>) -> tensor<2x32xf32>
  return
}

// -----

// Tests that a rms_norm epsilon that is not a 64-bit float is rejected.
func.func @rms_norm_epsilon_f32(%x: tensor<2x64xf32>, %g: tensor<64xf32>) {
  // expected-error @+1 {{'nn.rms_norm' op attribute 'epsilon' failed to satisfy constraint: 64-bit float attribute}}
  %0 = "nn.rms_norm"(%x, %g) <{epsilon = 1.0e-05 : f32}> : (tensor<2x64xf32>, tensor<64xf32>) -> tensor<2x64xf32>
  return
}

// -----

// Tests that rms_norm of an integer tensor is rejected by the type constraint.
func.func @rms_norm_integer(%x: tensor<2x64xi32>, %g: tensor<64xi32>) {
  // expected-error @+1 {{'nn.rms_norm' op operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<2x64xi32>'}}
  %0 = nn.rms_norm %x, %g eps = 1.0e-05 : tensor<2x64xi32>, tensor<64xi32>
  return
}

// -----

// Tests that a NaN layer_norm epsilon is rejected.
func.func @layer_norm_epsilon_nan(%x: tensor<2x64xf32>, %g: tensor<64xf32>) {
  // expected-error @+1 {{epsilon must be a positive finite number, but is nan}}
  %0 = nn.layer_norm %x, %g, %g eps = 0x7FF8000000000000 : tensor<2x64xf32>, tensor<64xf32>
  return
}

// -----

// Tests that layer_norm beta of another type than gamma is rejected.
func.func @layer_norm_beta_mismatch(%x: tensor<2x64xf32>, %g: tensor<64xf32>, %b: tensor<32xf32>) {
  // expected-error @+1 {{'nn.layer_norm' op failed to verify that all of {gamma, beta} have same type}}
  %0 = "nn.layer_norm"(%x, %g, %b) <{epsilon = 1.0e-05 : f64}> : (tensor<2x64xf32>, tensor<64xf32>, tensor<32xf32>) -> tensor<2x64xf32>
  return
}

// -----

// Tests that rotary of a rank-3 tensor is rejected.
func.func @rotary_rank(%x: tensor<2x8x16xf32>) {
  // expected-error @+1 {{input must be [batch, seq, heads, head_dim] (rank 4), but has rank 3}}
  %0 = nn.rotary %x theta = 10000.0 : tensor<2x8x16xf32>
  return
}

// -----

// Tests that rotary with an odd head_dim is rejected.
func.func @rotary_odd_head_dim(%x: tensor<2x8x4x7xf32>) {
  // expected-error @+1 {{head_dim (dimension 3) must be even, but is 7}}
  %0 = nn.rotary %x theta = 10000.0 : tensor<2x8x4x7xf32>
  return
}

// -----

// Tests that a negative rotary theta is rejected.
func.func @rotary_theta_negative(%x: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{theta must be a positive finite number, but is -10000}}
  %0 = nn.rotary %x theta = -10000.0 : tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that an infinite rotary theta is rejected.
func.func @rotary_theta_infinite(%x: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{theta must be a positive finite number, but is inf}}
  %0 = nn.rotary %x theta = 0x7FF0000000000000 : tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that a rotary result type that differs from its input's is rejected.
func.func @rotary_result_mismatch(%x: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{'nn.rotary' op failed to verify that all of {input, result} have same type}}
  %0 = "nn.rotary"(%x) <{theta = 10000.0 : f64}> : (tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf16>
  return
}

// -----

// Tests that an attention query of rank 3 is rejected.
func.func @attention_query_rank(%q: tensor<2x8x16xf32>, %k: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{query must be [batch, seq_q, heads, head_dim] (rank 4), but has rank 3}}
  %0 = nn.attention %q, %k, %k : tensor<2x8x16xf32>, tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that attention keys and values of rank 3 are rejected.
func.func @attention_key_rank(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x64xf32>) {
  // expected-error @+1 {{key and value must be [batch, seq_kv, kv_heads, head_dim] (rank 4), but have rank 3}}
  %0 = nn.attention %q, %k, %k : tensor<2x8x4x16xf32>, tensor<2x8x64xf32>
  return
}

// -----

// Tests that attention keys of another element type than the query are rejected.
func.func @attention_key_element_type(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x4x16xf16>) {
  // expected-error @+1 {{element type of the key ('f16') differs from that of the query ('f32')}}
  %0 = nn.attention %q, %k, %k : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf16>
  return
}

// -----

// Tests that attention keys of another batch size than the query are rejected.
func.func @attention_batch(%q: tensor<2x8x4x16xf32>, %k: tensor<4x8x4x16xf32>) {
  // expected-error @+1 {{key batch size (dimension 0) is 4, but the query's is 2}}
  %0 = nn.attention %q, %k, %k : tensor<2x8x4x16xf32>, tensor<4x8x4x16xf32>
  return
}

// -----

// Tests that attention keys of another head_dim than the query are rejected.
func.func @attention_head_dim(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x4x8xf32>) {
  // expected-error @+1 {{key head_dim (dimension 3) is 8, but the query's is 16}}
  %0 = nn.attention %q, %k, %k : tensor<2x8x4x16xf32>, tensor<2x8x4x8xf32>
  return
}

// -----

// Tests that attention with zero kv heads is rejected (and does not divide by zero).
func.func @attention_zero_kv_heads(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x0x16xf32>) {
  // expected-error @+1 {{kv_heads (key dimension 2) must be at least 1}}
  %0 = nn.attention %q, %k, %k : tensor<2x8x4x16xf32>, tensor<2x8x0x16xf32>
  return
}

// -----

// Tests that attention whose heads are not a multiple of kv_heads is rejected.
func.func @attention_heads_multiple(%q: tensor<2x8x12x16xf32>, %k: tensor<2x8x8x16xf32>) {
  // expected-error @+1 {{query heads (12) must be a multiple of kv_heads (8)}}
  %0 = nn.attention %q, %k, %k : tensor<2x8x12x16xf32>, tensor<2x8x8x16xf32>
  return
}

// -----

// Tests that causal attention with different query and key lengths is rejected.
func.func @attention_causal_lengths(%q: tensor<2x8x4x16xf32>, %k: tensor<2x16x4x16xf32>) {
  // expected-error @+1 {{causal attention needs seq_q == seq_kv, but seq_q is 8 and seq_kv is 16}}
  %0 = nn.attention %q, %k, %k causal : tensor<2x8x4x16xf32>, tensor<2x16x4x16xf32>
  return
}

// -----

// Tests that a zero attention scale is rejected.
func.func @attention_scale_zero(%q: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{scale must be a positive finite number, but is 0}}
  %0 = nn.attention %q, %q, %q scale = 0.0 : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that a negative attention scale is rejected.
func.func @attention_scale_negative(%q: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{scale must be a positive finite number, but is -0.25}}
  %0 = nn.attention %q, %q, %q causal scale = -0.25 : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that attention values of another type than the keys are rejected.
func.func @attention_value_mismatch(%q: tensor<2x8x4x16xf32>, %v: tensor<2x8x4x32xf32>) {
  // expected-error @+1 {{'nn.attention' op failed to verify that all of {key, value} have same type}}
  %0 = "nn.attention"(%q, %q, %v) : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x32xf32>) -> tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that an attention result of another type than the query is rejected.
func.func @attention_result_mismatch(%q: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{'nn.attention' op failed to verify that all of {query, result} have same type}}
  %0 = "nn.attention"(%q, %q, %q) : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

// Tests that an attention lse that is not [batch, heads, seq_q] (here
// [batch, seq_q, heads]) is rejected.
func.func @attention_lse_shape(%q: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{'nn.attention' op the lse result [2, 8, 4] must be [batch, heads, seq_q] of the query, i.e. [2, 4, 8]}}
  %0, %1 = nn.attention %q, %q, %q : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32> -> tensor<2x8x4xf32>
  return
}

// -----

// Tests that an attention lse with head_dim 0 is rejected (no kernel would
// write it: the output is empty).
func.func @attention_lse_no_head_dim(%q: tensor<2x8x4x0xf32>) {
  // expected-error @+1 {{'nn.attention' op the lse result needs head_dim >= 1}}
  %0, %1 = nn.attention %q, %q, %q : tensor<2x8x4x0xf32>, tensor<2x8x4x0xf32> -> tensor<2x4x8xf32>
  return
}

// -----

// Tests that an attention lse of another element type is rejected.
func.func @attention_lse_type(%q: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{'nn.attention' op element type of the lse result ('f16') differs from that of the query ('f32')}}
  %0, %1 = nn.attention %q, %q, %q : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32> -> tensor<2x4x8xf16>
  return
}

// -----

// Tests that an attention scale that is not a 64-bit float is rejected.
func.func @attention_scale_f32(%q: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{'nn.attention' op attribute 'scale' failed to satisfy constraint: 64-bit float attribute}}
  %0 = "nn.attention"(%q, %q, %q) <{scale = 0.25 : f32}> : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that an attention causal flag that is not a unit attribute is rejected.
func.func @attention_causal_not_unit(%q: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{Invalid attribute `causal` in property conversion: true}}
  %0 = "nn.attention"(%q, %q, %q) <{causal = true}> : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32>
  return
}

// -----

// Tests that an embedding table of rank 3 is rejected.
func.func @embedding_table_rank(%t: tensor<512x4x16xf32>, %ids: tensor<2x8xi32>) {
  // expected-error @+1 {{table must be [vocab, hidden] (rank 2), but has rank 3}}
  %0 = nn.embedding %t[%ids] : tensor<512x4x16xf32>, tensor<2x8xi32> -> tensor<2x8x64xf32>
  return
}

// -----

// Tests that an embedding result of another element type than the table is rejected.
func.func @embedding_element_type(%t: tensor<512x64xf32>, %ids: tensor<2x8xi32>) {
  // expected-error @+1 {{element type of the result ('f16') differs from that of the table ('f32')}}
  %0 = nn.embedding %t[%ids] : tensor<512x64xf32>, tensor<2x8xi32> -> tensor<2x8x64xf16>
  return
}

// -----

// Tests that an embedding result with the wrong hidden size is rejected.
func.func @embedding_hidden(%t: tensor<512x64xf32>, %ids: tensor<2x8xi32>) {
  // expected-error @+1 {{result shape [2, 8, 32] must be ids.shape + [hidden], i.e. [2, 8, 64]}}
  %0 = nn.embedding %t[%ids] : tensor<512x64xf32>, tensor<2x8xi32> -> tensor<2x8x32xf32>
  return
}

// -----

// Tests that an embedding result that drops an ids dimension is rejected.
func.func @embedding_ids_shape(%t: tensor<512x64xf32>, %ids: tensor<2x8xi32>) {
  // expected-error @+1 {{result shape [16, 64] must be ids.shape + [hidden], i.e. [2, 8, 64]}}
  %0 = nn.embedding %t[%ids] : tensor<512x64xf32>, tensor<2x8xi32> -> tensor<16x64xf32>
  return
}

// -----

// Tests that float embedding ids are rejected by the type constraint.
func.func @embedding_float_ids(%t: tensor<512x64xf32>, %ids: tensor<2x8xf32>) {
  // expected-error @+1 {{'nn.embedding' op operand #1 must be statically shaped tensor of signless integer values, but got 'tensor<2x8xf32>'}}
  %0 = nn.embedding %t[%ids] : tensor<512x64xf32>, tensor<2x8xf32> -> tensor<2x8x64xf32>
  return
}

// -----

// Tests that an integer embedding table is rejected by the type constraint.
func.func @embedding_integer_table(%t: tensor<512x64xi32>, %ids: tensor<2x8xi32>) {
  // expected-error @+1 {{'nn.embedding' op operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<512x64xi32>'}}
  %0 = nn.embedding %t[%ids] : tensor<512x64xi32>, tensor<2x8xi32> -> tensor<2x8x64xi32>
  return
}

// -----

// Tests that cross_entropy of rank-0 logits is rejected.
func.func @cross_entropy_logits_rank0(%logits: tensor<f32>, %labels: tensor<i32>) {
  // expected-error @+1 {{logits must be [..., vocab] (rank >= 1), but has rank 0}}
  %0 = nn.cross_entropy %logits, %labels : tensor<f32>, tensor<i32> -> tensor<f32>
  return
}

// -----

// Tests that cross_entropy labels that do not match the logits' leading shape are rejected.
func.func @cross_entropy_labels_shape(%logits: tensor<2x8x512xf32>, %labels: tensor<2x4xi32>) {
  // expected-error @+1 {{labels shape [2, 4] must be the logits shape without its last dimension, i.e. [2, 8]}}
  %0 = nn.cross_entropy %logits, %labels : tensor<2x8x512xf32>, tensor<2x4xi32> -> tensor<f32>
  return
}

// -----

// Tests that cross_entropy labels shaped like the logits (one-hot) are rejected.
func.func @cross_entropy_labels_full_shape(%logits: tensor<4x10xf32>, %labels: tensor<4x10xi32>) {
  // expected-error @+1 {{labels shape [4, 10] must be the logits shape without its last dimension, i.e. [4]}}
  %0 = nn.cross_entropy %logits, %labels : tensor<4x10xf32>, tensor<4x10xi32> -> tensor<f32>
  return
}

// -----

// Tests that a per-token cross_entropy result (not the mean) is rejected.
func.func @cross_entropy_result_rank(%logits: tensor<2x8x512xf32>, %labels: tensor<2x8xi32>) {
  // expected-error @+1 {{result must be a 0-d tensor (the mean loss), but has type 'tensor<2x8xf32>'}}
  %0 = nn.cross_entropy %logits, %labels : tensor<2x8x512xf32>, tensor<2x8xi32> -> tensor<2x8xf32>
  return
}

// -----

// Tests that a cross_entropy result of another element type than the logits is rejected.
func.func @cross_entropy_result_element_type(%logits: tensor<2x8x512xbf16>, %labels: tensor<2x8xi32>) {
  // expected-error @+1 {{element type of the result ('f32') differs from that of the logits ('bf16')}}
  %0 = nn.cross_entropy %logits, %labels : tensor<2x8x512xbf16>, tensor<2x8xi32> -> tensor<f32>
  return
}

// -----

// Tests that float cross_entropy labels are rejected by the type constraint.
func.func @cross_entropy_float_labels(%logits: tensor<4x10xf32>, %labels: tensor<4xf32>) {
  // expected-error @+1 {{'nn.cross_entropy' op operand #1 must be statically shaped tensor of signless integer values, but got 'tensor<4xf32>'}}
  %0 = nn.cross_entropy %logits, %labels : tensor<4x10xf32>, tensor<4xf32> -> tensor<f32>
  return
}

// -----

// Tests that a constant whose value type differs from its result type is rejected.
func.func @constant_type_mismatch() {
  // expected-error @+1 {{'nn.constant' op failed to verify that all of {value, result} have same type}}
  %0 = "nn.constant"() <{value = dense<1.0> : tensor<2xf32>}> : () -> tensor<4xf32>
  return
}

// -----

// Tests that a constant whose value is a scalar, not a tensor, is rejected.
func.func @constant_scalar_value() {
  // expected-error @+1 {{Invalid attribute `value` in property conversion: 1.000000e+00 : f32}}
  %0 = "nn.constant"() <{value = 1.0 : f32}> : () -> tensor<f32>
  return
}

// -----

// Tests that a constant of a vector type is rejected by the type constraint.
func.func @constant_vector() {
  // expected-error @+1 {{'nn.constant' op result #0 must be statically shaped tensor of floating-point or signless integer values, but got 'vector<4xf32>'}}
  %0 = "nn.constant"() <{value = dense<1.0> : vector<4xf32>}> : () -> vector<4xf32>
  return
}

// -----

// Tests that a constant without a value is rejected.
func.func @constant_missing_value() {
  // expected-error @+1 {{'nn.constant' op requires attribute 'value'}}
  %0 = "nn.constant"() : () -> tensor<4xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Declared attributes (NNAttributes.h)
//===----------------------------------------------------------------------===//

// Tests that an argument's nn.input must be a string (the input's name).
func.func @input_not_string(
    // expected-error @+1 {{nn.input of argument #0 of @input_not_string must be a string, not 1 : i64}}
    %x: tensor<4xf32> {nn.input = 1}) {
  return
}

// -----

// Tests that an argument cannot carry an nn attribute of results.
// expected-error @+1 {{argument #0 of @output_on_argument carries nn.output, which is not an nn argument attribute (nn.param, nn.state, nn.master, nn.init_value or nn.input)}}
func.func @output_on_argument(%x: tensor<4xf32> {nn.output = "loss"}) {
  return
}

// -----

// Tests that a result's nn.output must be a string.
// expected-error @+1 {{nn.output of result #0 of @output_not_string must be a string, not unit}}
func.func @output_not_string(%x: tensor<f32>) -> (tensor<f32> {nn.output}) {
  return %x : tensor<f32>
}

// -----

// Tests that a result cannot carry an input's attribute.
// expected-error @+1 {{result #0 of @input_on_result carries nn.input, which is not an nn result attribute (nn.param, nn.state, nn.output or nn.grad)}}
func.func @input_on_result(%x: tensor<f32>) -> (tensor<f32> {nn.input = "x"}) {
  return %x : tensor<f32>
}

// -----

// Tests that nn.layer must be an integer index.
func.func @layer_not_integer(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{nn.layer must be a layer index (an integer >= 0), not "0"}}
  %0 = nn.relu %x {nn.layer = "0"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Tests that nn.layer must not be negative.
func.func @layer_negative(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{nn.layer must be a layer index (an integer >= 0), not -1 : i64}}
  %0 = nn.relu %x {nn.layer = -1 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Tests that nn.grad_kind must be one of the kinds nn-autodiff writes.
func.func @grad_kind_unknown(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{nn.grad_kind must be "B" (input gradient), "W" (weight gradient) or "update", not "backward"}}
  %0 = nn.relu %x {nn.grad_kind = "backward"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Tests that nn.recompute is a unit attribute.
func.func @recompute_not_unit(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{nn.recompute is a unit attribute, not true}}
  %0 = nn.relu %x {nn.recompute = true} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Tests that nn.mean_count must be an integer.
func.func @mean_count_not_integer(%l: tensor<2x4xf32>, %y: tensor<2xi32>, %d: tensor<f32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{nn.mean_count must be an integer count, not 8.000000e+00 : f32}}
  %0 = nn.cross_entropy_grad %l, %y, %d {nn.mean_count = 8.0 : f32} : tensor<2x4xf32>, tensor<2xi32>, tensor<f32>
  return %0 : tensor<2x4xf32>
}

// -----

// Tests that an nn attribute the dialect does not declare is rejected.
func.func @unknown_attribute(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{unknown nn attribute nn.stage (nn.layer, nn.grad_kind, nn.recompute, nn.mean_count or nn.wide_sum)}}
  %0 = nn.relu %x {nn.stage = 0 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}
