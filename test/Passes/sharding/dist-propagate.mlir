// RUN: partita-opt %s --dist-propagate -split-input-file --allow-unregistered-dialect | FileCheck %s
// RUN: partita-opt %s --dist-propagate=record-origins -split-input-file --allow-unregistered-dialect | FileCheck %s --check-prefix=ORIGIN
// Propagating again changes nothing: its output is a fixed point.
// RUN: partita-opt %s --dist-propagate -split-input-file --allow-unregistered-dialect \
// RUN:   | partita-opt --dist-propagate -split-input-file --allow-unregistered-dialect | FileCheck %s

// Tests that a returned argument gives its sharding to the function result,
// and that every dimension comes out closed and without priority.
dist.mesh @mesh <["dp"=2, "tp"=4]>

// CHECK-LABEL: func.func @return_takes_argument_sharding
// CHECK-SAME: (%{{.*}}: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>})
// CHECK-SAME: -> (tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>})
// ORIGIN-LABEL: func.func @return_takes_argument_sharding
// ORIGIN-SAME: dist.origin = "dp<-arg 0 of @return_takes_argument_sharding"
// ORIGIN-SAME: -> (tensor<8x16xf32> {dist.origin = "dp<-arg 0 of @return_takes_argument_sharding"
func.func @return_takes_argument_sharding(
    %a: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp", ?}p2, {?}]>})
    -> tensor<8x16xf32> {
  return %a : tensor<8x16xf32>
}

// -----

// Tests that a constraint pins its result and passes its sharding backward
// to an open input, but never into a closed dimension.
dist.mesh @mesh <["dp"=2, "tp"=4]>

// CHECK-LABEL: func.func @constraint_flows_backward
// CHECK-SAME: %{{[[:alnum:]]+}}: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {"tp"}]>}
// CHECK-SAME: %{{[[:alnum:]]+}}: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>}
// CHECK: dist.constraint {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {"tp"}]>]}
// CHECK: dist.constraint {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {"tp"}]>]}
// ORIGIN-LABEL: func.func @constraint_flows_backward
// ORIGIN-SAME: dist.origin = "dp<-constraint at dist-propagate.mlir:[[#@LINE+6]], tp<-constraint at dist-propagate.mlir:[[#@LINE+6]]"
// ORIGIN-SAME: dist.origin = "tp<-constraint at dist-propagate.mlir:[[#@LINE+6]]"
func.func @constraint_flows_backward(
    %a: tensor<8x16xf32>,
    %b: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {?}]>})
    -> (tensor<8x16xf32>, tensor<8x16xf32>) {
  %0 = dist.constraint %a <@mesh, [{"dp"}, {"tp"}]> : tensor<8x16xf32>
  %1 = dist.constraint %b <@mesh, [{"dp"}, {"tp"}]> : tensor<8x16xf32>
  return %0, %1 : tensor<8x16xf32>, tensor<8x16xf32>
}

// -----

// Tests that an open annotated dimension gains axes after the ones it has.
dist.mesh @mesh <["dp"=2, "tp"=4]>

// CHECK-LABEL: func.func @open_dimension_gains_minor_axes
// CHECK-SAME: {dist.sharding = #dist.sharding<@mesh, [{"dp", "tp"}, {}]>}
func.func @open_dimension_gains_minor_axes(
    %a: tensor<16x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp", ?}, {}]>})
    -> tensor<16x16xf32> {
  %0 = dist.constraint %a <@mesh, [{"dp", "tp"}, {}]> : tensor<16x16xf32>
  return %0 : tensor<16x16xf32>
}

// -----

// Tests that two constraints competing for one value are settled by
// priority, whichever comes first in the file.
dist.mesh @mesh <["dp"=2, "tp"=4]>

// CHECK-LABEL: func.func @priority_decides_weak_first
// CHECK-SAME: (%{{.*}}: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>})
func.func @priority_decides_weak_first(%a: tensor<8x16xf32>)
    -> (tensor<8x16xf32>, tensor<8x16xf32>) {
  %0 = dist.constraint %a <@mesh, [{"dp"}p1, {}]> : tensor<8x16xf32>
  %1 = dist.constraint %a <@mesh, [{"tp"}p0, {}]> : tensor<8x16xf32>
  return %0, %1 : tensor<8x16xf32>, tensor<8x16xf32>
}

// CHECK-LABEL: func.func @priority_decides_strong_first
// CHECK-SAME: (%{{.*}}: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>})
func.func @priority_decides_strong_first(%a: tensor<8x16xf32>)
    -> (tensor<8x16xf32>, tensor<8x16xf32>) {
  %1 = dist.constraint %a <@mesh, [{"tp"}p0, {}]> : tensor<8x16xf32>
  %0 = dist.constraint %a <@mesh, [{"dp"}p1, {}]> : tensor<8x16xf32>
  return %0, %1 : tensor<8x16xf32>, tensor<8x16xf32>
}

// -----

// Tests that an op without a sharding rule keeps its results replicated and
// says so once, while the values around it are still sharded.
dist.mesh @mesh <["dp"=2, "tp"=4]>

// CHECK-LABEL: func.func @op_without_rule_stays_replicated
// CHECK: "foo.bar"{{.*}} {dist.sharding = [#dist.sharding<@mesh, [{}, {}]>, #dist.sharding<@mesh, [{}]>]}
// ORIGIN: "foo.bar"{{.*}} {dist.origin = ["replicated", "replicated"]
func.func @op_without_rule_stays_replicated(
    %a: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>})
    -> (tensor<8x16xf32>, tensor<4xf32>) {
  %0:2 = "foo.bar"(%a) : (tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<4xf32>)
  return %0#0, %0#1 : tensor<8x16xf32>, tensor<4xf32>
}

// -----

// Tests that a call joins the caller's operands with the callee's arguments
// and the callee's results with the call's results, in both directions: the
// caller's result sharding reaches the callee's argument through its return.
dist.mesh @mesh <["dp"=2, "tp"=4]>

// CHECK-LABEL: func.func @callee
// CHECK-SAME: (%{{.*}}: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {"tp"}]>})
// CHECK-SAME: -> (tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {"tp"}]>})
// ORIGIN-LABEL: func.func @callee
// ORIGIN-SAME: {dist.origin = "dp<-arg 0 of @caller, tp<-result 0 of @caller"
// ORIGIN-SAME: -> (tensor<8x16xf32> {dist.origin = "dp<-arg 0 of @caller, tp<-result 0 of @caller"
func.func @callee(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  return %x : tensor<8x16xf32>
}

// CHECK-LABEL: func.func @caller
// CHECK-SAME: -> (tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {"tp"}]>})
// CHECK: call @callee({{.*}}) {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {"tp"}]>]}
func.func @caller(
    %a: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>})
    -> (tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{?}, {"tp"}]>}) {
  %0 = func.call @callee(%a) : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

// Tests that functions that do not call each other are propagated apart,
// and an unannotated one comes out replicated on the module's mesh.
dist.mesh @mesh <["dp"=2, "tp"=4]>

// CHECK-LABEL: func.func @first
// CHECK-SAME: {dist.sharding = #dist.sharding<@mesh, [{"dp"}]>}
// CHECK-SAME: -> (tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}]>})
func.func @first(%a: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}]>}) -> tensor<8xf32> {
  return %a : tensor<8xf32>
}

// CHECK-LABEL: func.func @second
// CHECK-SAME: {dist.sharding = #dist.sharding<@mesh, [{}]>}
// CHECK-SAME: -> (tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{}]>})
// ORIGIN-LABEL: func.func @second
// ORIGIN-SAME: {dist.origin = "replicated"
func.func @second(%a: tensor<8xf32>) -> tensor<8xf32> {
  return %a : tensor<8xf32>
}

// -----

// Tests that with several meshes each value takes the mesh its linked
// annotations name.
dist.mesh @big <["dp"=4]>
dist.mesh @small <["dp"=2]>

// CHECK-LABEL: func.func @two_meshes
// CHECK-SAME: -> (tensor<8xf32> {dist.sharding = #dist.sharding<@big, [{"dp"}]>}, tensor<8xf32> {dist.sharding = #dist.sharding<@small, [{"dp"}]>})
func.func @two_meshes(%a: tensor<8xf32> {dist.sharding = #dist.sharding<@big, [{"dp"}]>},
                      %b: tensor<8xf32> {dist.sharding = #dist.sharding<@small, [{"dp"}]>})
    -> (tensor<8xf32>, tensor<8xf32>) {
  return %a, %b : tensor<8xf32>, tensor<8xf32>
}

// -----

// Tests that a value's partial annotation is kept, and that its partial
// axis is not used to split a dimension.
dist.mesh @mesh <["dp"=2, "tp"=4]>

// CHECK-LABEL: func.func @partial_annotation_is_kept
// CHECK-SAME: {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}], partial={"tp"}>}
// ORIGIN-LABEL: func.func @partial_annotation_is_kept
// ORIGIN-SAME: {dist.origin = "dp<-arg 0 of @partial_annotation_is_kept, partial tp<-arg 0 of @partial_annotation_is_kept"
func.func @partial_annotation_is_kept(
    %a: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {?}], partial={"tp"}>})
    -> tensor<8x16xf32> {
  %0 = dist.constraint %a <@mesh, [{"dp"}, {"tp"}]> : tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

// Tests that a module without a mesh and without annotations is left alone.
// CHECK-LABEL: func.func @no_mesh
// CHECK-NOT: dist.sharding
func.func @no_mesh(%a: tensor<8xf32>) -> tensor<8xf32> {
  return %a : tensor<8xf32>
}

// -----

// Tests that elementwise ops join the axes of their operands dimension by
// dimension and pass them on through unary ops.
dist.mesh @mesh <["dp"=2, "tp"=4]>

// CHECK-LABEL: func.func @elementwise
// CHECK: nn.add {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {"tp"}]>]}
// CHECK: nn.relu {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {"tp"}]>]}
// CHECK: nn.exp {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {"tp"}]>]}
func.func @elementwise(
    %a: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>},
    %b: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>})
    -> tensor<8x16xf32> {
  %0 = nn.add %a, %b : tensor<8x16xf32>
  %1 = nn.relu %0 : tensor<8x16xf32>
  %2 = nn.exp %1 : tensor<8x16xf32>
  return %2 : tensor<8x16xf32>
}

// -----

// Tests a Megatron MLP: column-parallel w1 splits the hidden activations,
// row-parallel w2 contracts the split factor and leaves a partial sum; the
// batch axis of the input reaches every activation.
dist.mesh @mesh <["dp"=2, "tp"=4]>

// CHECK-LABEL: func.func @einsum_megatron_mlp
// CHECK: nn.einsum "bsh,hf->bsf" {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {}, {"tp"}]>]}
// CHECK: nn.gelu {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {}, {"tp"}]>]}
// CHECK: nn.einsum "bsf,fh->bsh" {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {}, {}], partial={"tp"}>]}
// ORIGIN-LABEL: func.func @einsum_megatron_mlp
// ORIGIN: nn.einsum "bsh,hf->bsf" {{.*}} {dist.origin = ["dp<-input x, tp<-param layers.0.mlp.w1"]
// ORIGIN: nn.einsum "bsf,fh->bsh" {{.*}} {dist.origin = ["dp<-input x, partial tp<-param layers.0.mlp.w2"]
func.func @einsum_megatron_mlp(
    %x: tensor<2x8x16xf32> {nn.input = "x", dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}, {}]>},
    %w1: tensor<16x64xf32> {nn.param = "layers.0.mlp.w1", dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>},
    %w2: tensor<64x16xf32> {nn.param = "layers.0.mlp.w2", dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>})
    -> tensor<2x8x16xf32> {
  %0 = nn.einsum "bsh,hf->bsf" %x, %w1 : (tensor<2x8x16xf32>, tensor<16x64xf32>) -> tensor<2x8x64xf32>
  %1 = nn.gelu %0 : tensor<2x8x64xf32>
  %2 = nn.einsum "bsf,fh->bsh" %1, %w2 : (tensor<2x8x64xf32>, tensor<64x16xf32>) -> tensor<2x8x16xf32>
  return %2 : tensor<2x8x16xf32>
}

// -----

// Tests that a contraction factor sharded on one operand reaches the other
// operand, and that the result is partial over it.
dist.mesh @mesh <["dp"=2, "tp"=4]>

// CHECK-LABEL: func.func @einsum_contraction_partial
// CHECK-SAME: %{{[[:alnum:]]+}}: tensor<16x32xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>}
// CHECK: nn.einsum {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{}, {}], partial={"tp"}>]}
func.func @einsum_contraction_partial(
    %a: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>},
    %b: tensor<16x32xf32>) -> tensor<8x32xf32> {
  %0 = nn.einsum "ij,jk->ik" %a, %b : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  return %0 : tensor<8x32xf32>
}

// -----

// Tests that a sum reduction over a split dimension leaves a partial sum and
// a max reduction a partial max; kept dimensions keep their axes.
dist.mesh @mesh <["dp"=2, "tp"=4]>

// CHECK-LABEL: func.func @reduce
// CHECK: nn.reduce sum {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp"}], partial={"tp"}>]}
// CHECK: nn.reduce max {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp"}], partial=max{"tp"}>]}
func.func @reduce(
    %x: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {"tp"}]>})
    -> (tensor<8xf32>, tensor<8xf32>) {
  %0 = nn.reduce sum %x dims = [1] : tensor<8x16xf32> -> tensor<8xf32>
  %1 = nn.reduce max %x dims = [1] : tensor<8x16xf32> -> tensor<8xf32>
  return %0, %1 : tensor<8xf32>, tensor<8xf32>
}

// -----

// Tests that broadcast carries the operand's axes to the dimensions they map
// to and back, but not through a size-1 dimension that it expands.
dist.mesh @mesh <["dp"=2, "tp"=4]>

// CHECK-LABEL: func.func @broadcast
// CHECK-SAME: %{{[[:alnum:]]+}}: tensor<64xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}]>}
// CHECK-SAME: %{{[[:alnum:]]+}}: tensor<8x64xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>}
// CHECK: nn.broadcast {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {}, {"tp"}]>]}
// CHECK: nn.broadcast {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {}, {"tp"}]>]}
func.func @broadcast(%b: tensor<64xf32>, %c: tensor<8x64xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x64xf32>) {
  %0 = nn.broadcast %b dims = [2] : tensor<64xf32> -> tensor<2x8x64xf32>
  %1 = nn.broadcast %c dims = [1, 2] : tensor<8x64xf32> -> tensor<2x8x64xf32>
  %2 = dist.constraint %0 <@mesh, [{"dp"}, {}, {"tp"}]> : tensor<2x8x64xf32>
  %3 = dist.constraint %1 <@mesh, [{"dp"}, {}, {"tp"}]> : tensor<2x8x64xf32>
  return %2, %3 : tensor<2x8x64xf32>, tensor<2x8x64xf32>
}

// CHECK-LABEL: func.func @broadcast_size_one
// CHECK-SAME: %{{[[:alnum:]]+}}: tensor<1x64xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>}
func.func @broadcast_size_one(%b: tensor<1x64xf32>) -> tensor<8x64xf32> {
  %0 = nn.broadcast %b dims = [0, 1] : tensor<1x64xf32> -> tensor<8x64xf32>
  %1 = dist.constraint %0 <@mesh, [{"dp"}, {"tp"}]> : tensor<8x64xf32>
  return %1 : tensor<8x64xf32>
}

// -----

// Tests that transpose permutes the axes with the dimensions.
dist.mesh @mesh <["dp"=2, "tp"=4]>

// CHECK-LABEL: func.func @transpose
// CHECK: nn.transpose {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"tp"}, {}, {"dp"}]>]}
func.func @transpose(
    %x: tensor<8x6x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}, {"tp"}]>})
    -> tensor<16x6x8xf32> {
  %0 = nn.transpose %x perm = [2, 1, 0] : tensor<8x6x16xf32> -> tensor<16x6x8xf32>
  return %0 : tensor<16x6x8xf32>
}

// -----

// Tests reshape: merging [8,6] into [48] keeps the major dimension's axes;
// splitting [48] sharded 2x4 gives both axes to the major factor 8; an
// axis on the minor dimension cannot reach the merged one (the major one
// would have to be fully split first), so it does not propagate.
dist.mesh @mesh <["dp"=2, "tp"=4]>

// CHECK-LABEL: func.func @reshape
// CHECK: nn.reshape %{{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp"}]>]} : tensor<8x6xf32> -> tensor<48xf32>
// CHECK: nn.reshape %{{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp", "tp"}, {}]>]} : tensor<48xf32> -> tensor<8x6xf32>
// CHECK: nn.reshape %{{.*}} {dist.sharding = [#dist.sharding<@mesh, [{}]>]} : tensor<8x6xf32> -> tensor<48xf32>
func.func @reshape(
    %a: tensor<8x6xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>},
    %b: tensor<48xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp", "tp"}]>},
    %c: tensor<8x6xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"dp"}]>})
    -> (tensor<48xf32>, tensor<8x6xf32>, tensor<48xf32>) {
  %0 = nn.reshape %a : tensor<8x6xf32> -> tensor<48xf32>
  %1 = nn.reshape %b : tensor<48xf32> -> tensor<8x6xf32>
  %2 = nn.reshape %c : tensor<8x6xf32> -> tensor<48xf32>
  return %0, %1, %2 : tensor<48xf32>, tensor<8x6xf32>, tensor<48xf32>
}

// -----

// Tests that softmax and the norms pass axes along their collective
// (normalized) dimension, and the norm's scale and shift share it.
dist.mesh @mesh <["dp"=2, "tp"=4]>

// CHECK-LABEL: func.func @softmax_and_norms
// CHECK-SAME: %{{[[:alnum:]]+}}: tensor<64xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}]>}
// CHECK-SAME: %{{[[:alnum:]]+}}: tensor<64xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}]>}
// CHECK: nn.softmax {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {}, {"tp"}]>]}
// CHECK: nn.layer_norm {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {}, {"tp"}]>]}
// CHECK: nn.rms_norm {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {}, {"tp"}]>]}
func.func @softmax_and_norms(
    %x: tensor<2x8x64xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}, {"tp"}]>},
    %g: tensor<64xf32>, %b: tensor<64xf32>)
    -> (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>) {
  %0 = nn.softmax %x dim = 2 : tensor<2x8x64xf32>
  %1 = nn.layer_norm %x, %g, %b eps = 1.0e-05 : tensor<2x8x64xf32>, tensor<64xf32>
  %2 = nn.rms_norm %x, %g eps = 1.0e-05 : tensor<2x8x64xf32>, tensor<64xf32>
  return %0, %1, %2 : tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>
}

// -----

// Tests that attention passes batch and heads from the query to keys,
// values and result, and never splits the contracted head dimension.
dist.mesh @mesh <["dp"=2, "tp"=4]>

// CHECK-LABEL: func.func @attention
// CHECK-SAME: %{{[[:alnum:]]+}}: tensor<2x8x4x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}, {"tp"}, {}]>}
// CHECK-SAME: %{{[[:alnum:]]+}}: tensor<2x8x4x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}, {"tp"}, {}]>}
// CHECK: nn.attention {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {}, {"tp"}, {}]>]}
func.func @attention(
    %q: tensor<2x8x4x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}, {"tp"}, {?}]>},
    %k: tensor<2x8x4x16xf32>, %v: tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32> {
  %0 = nn.attention %q, %k, %v causal : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>
  return %0 : tensor<2x8x4x16xf32>
}

// -----

// Tests that embedding passes the ids' axes and the table's hidden axis to
// the result, while a vocabulary-parallel table leaves the result whole
// along hidden.
dist.mesh @mesh <["dp"=2, "tp"=4]>

// CHECK-LABEL: func.func @embedding
// CHECK: nn.embedding {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {}, {"tp"}]>]}
// CHECK: nn.embedding {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {}, {}]>]}
func.func @embedding(
    %t: tensor<256x64xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>},
    %v: tensor<256x64xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>},
    %ids: tensor<2x8xi32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>})
    -> (tensor<2x8x64xf32>, tensor<2x8x64xf32>) {
  %0 = nn.embedding %t[%ids] : tensor<256x64xf32>, tensor<2x8xi32> -> tensor<2x8x64xf32>
  %1 = nn.embedding %v[%ids] : tensor<256x64xf32>, tensor<2x8xi32> -> tensor<2x8x64xf32>
  return %0, %1 : tensor<2x8x64xf32>, tensor<2x8x64xf32>
}

// -----

// Tests that cross entropy over logits split on batch and vocabulary gives
// the labels the batch axis and a scalar loss partial over it.
dist.mesh @mesh <["dp"=2, "tp"=4]>

// CHECK-LABEL: func.func @cross_entropy
// CHECK-SAME: %{{[[:alnum:]]+}}: tensor<2x8xi32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>}
// CHECK-SAME: -> (tensor<f32> {dist.sharding = #dist.sharding<@mesh, []>})
// CHECK: nn.cross_entropy {{.*}} {dist.sharding = [#dist.sharding<@mesh, [], partial={"dp"}>]}
func.func @cross_entropy(
    %logits: tensor<2x8x256xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}, {"tp"}]>},
    %labels: tensor<2x8xi32>) -> tensor<f32> {
  %0 = nn.cross_entropy %logits, %labels : tensor<2x8x256xf32>, tensor<2x8xi32> -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

// Tests that a conflict between equally strong annotations goes to the
// choice that reshards fewer bytes (the larger operand keeps its sharding,
// although "dp" sorts before "tp"), and the result is partial over it.
dist.mesh @mesh <["dp"=2, "tp"=2]>

// CHECK-LABEL: func.func @conflict_by_bytes
// CHECK: nn.einsum {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{}, {}], partial={"tp"}>]}
func.func @conflict_by_bytes(
    %a: tensor<4x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"dp"}]>},
    %b: tensor<16x1024xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>})
    -> tensor<4x1024xf32> {
  %0 = nn.einsum "ij,jk->ik" %a, %b : (tensor<4x16xf32>, tensor<16x1024xf32>) -> tensor<4x1024xf32>
  return %0 : tensor<4x1024xf32>
}

// CHECK-LABEL: func.func @conflict_equal_bytes_by_name
// CHECK: nn.add {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp"}]>]}
func.func @conflict_equal_bytes_by_name(
    %a: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}]>},
    %b: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}]>}) -> tensor<8xf32> {
  %0 = nn.add %a, %b : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that the result does not depend on the order of ops in the file:
// the same program written in two orders gives the same shardings, although
// a sweep in file order would reach %mid from a different side first.
dist.mesh @mesh <["dp"=2, "tp"=2]>

// CHECK-LABEL: func.func @order_one
// CHECK: nn.relu %arg0 {dist.sharding = [#dist.sharding<@mesh, [{"tp"}, {"dp"}]>]}
// CHECK: nn.exp %arg1 {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {"tp"}]>]}
// CHECK: nn.add {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {"tp"}]>]}
// CHECK: nn.neg {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {"tp"}]>]}
func.func @order_one(
    %a: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {"dp"}]>},
    %b: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {"tp"}]>})
    -> tensor<8x8xf32> {
  %0 = nn.relu %a : tensor<8x8xf32>
  %1 = nn.exp %b : tensor<8x8xf32>
  %mid = nn.add %0, %1 : tensor<8x8xf32>
  %2 = nn.neg %mid : tensor<8x8xf32>
  return %2 : tensor<8x8xf32>
}

// CHECK-LABEL: func.func @order_two
// CHECK: nn.exp %arg1 {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {"tp"}]>]}
// CHECK: nn.relu %arg0 {dist.sharding = [#dist.sharding<@mesh, [{"tp"}, {"dp"}]>]}
// CHECK: nn.add {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {"tp"}]>]}
// CHECK: nn.neg {{.*}} {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {"tp"}]>]}
func.func @order_two(
    %a: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {"dp"}]>},
    %b: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {"tp"}]>})
    -> tensor<8x8xf32> {
  %1 = nn.exp %b : tensor<8x8xf32>
  %0 = nn.relu %a : tensor<8x8xf32>
  %mid = nn.add %1, %0 : tensor<8x8xf32>
  %2 = nn.neg %mid : tensor<8x8xf32>
  return %2 : tensor<8x8xf32>
}
