// RUN: partita-opt %s -test-reshard-plan -split-input-file -verify-diagnostics -allow-unregistered-dialect

// Expected plans are derived by hand (the unit tests in
// test/unit/partition/ReshardTest.cpp argue optimality of the same cases).
// An 8x8 f32 tensor is 256 bytes. -verify-diagnostics checks every remark
// and error, so no FileCheck is needed.

dist.mesh @mesh <["x"=2, "y"=2]>

// Tests that a constraint equal to the operand's sharding needs no step.
func.func @identity(%arg0: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"x"}, {"y"}]>}) -> tensor<8x8xf32> {
  // expected-remark @+1 {{no-op (cost 0)}}
  %0 = dist.constraint %arg0 <@mesh, [{"x"}, {"y"}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

dist.mesh @mesh <["x"=2, "y"=2]>

// Tests that replicated to split is a free local slice per dimension.
func.func @replicated_to_split(%arg0: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}]>}) -> tensor<8x8xf32> {
  // expected-remark @+1 {{local_slice(dim=0, axes=[x]) ; local_slice(dim=1, axes=[y]) (cost 0)}}
  %0 = dist.constraint %arg0 <@mesh, [{"x"}, {"y"}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

dist.mesh @mesh <["x"=2, "y"=2]>

// Tests that split to replicated is one all_gather over both axes:
// 3/4 * 256 bytes.
func.func @split_to_replicated(%arg0: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"x", "y"}, {}]>}) -> tensor<8x8xf32> {
  // expected-remark @+1 {{all_gather(dim=0, axes=[x, y]) (cost 192)}}
  %0 = dist.constraint %arg0 <@mesh, [{}, {}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

dist.mesh @mesh <["x"=2, "y"=2]>

// Tests that moving an axis between dimensions is an all_to_all of half the
// 128-byte local block.
func.func @dim_move(%arg0: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"x"}, {}]>}) -> tensor<8x8xf32> {
  // expected-remark @+1 {{all_to_all(axes=[x], 0->1) (cost 64)}}
  %0 = dist.constraint %arg0 <@mesh, [{}, {"x"}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

dist.mesh @mesh <["x"=2, "y"=2]>

// Tests that the element size scales the cost: bf16 halves the dim move.
func.func @element_size(%arg0: tensor<8x8xbf16> {dist.sharding = #dist.sharding<@mesh, [{"x"}, {}]>}) -> tensor<8x8xbf16> {
  // expected-remark @+1 {{all_to_all(axes=[x], 0->1) (cost 32)}}
  %0 = dist.constraint %arg0 <@mesh, [{}, {"x"}]> : tensor<8x8xbf16>
  return %0 : tensor<8x8xbf16>
}

// -----

dist.mesh @mesh <["x"=2, "y"=2]>

// Tests that a chain of constraints reshards from the previous constraint's
// sharding: first a free slice, then an all_to_all.
func.func @chained_constraints(%arg0: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}]>}) -> tensor<8x8xf32> {
  // expected-remark @+1 {{local_slice(dim=0, axes=[x]) (cost 0)}}
  %0 = dist.constraint %arg0 <@mesh, [{"x"}, {}]> : tensor<8x8xf32>
  // expected-remark @+1 {{all_to_all(axes=[x], 0->1) (cost 64)}}
  %1 = dist.constraint %0 <@mesh, [{}, {"x"}]> : tensor<8x8xf32>
  return %1 : tensor<8x8xf32>
}

// -----

dist.mesh @mesh <["x"=2, "y"=2]>

// Tests that a partial sum read from an op result's `dist.sharding` becomes
// a reduce_scatter (1/2 * 256) where the consumer wants it split, and an
// all_reduce (2 * 1/2 * 256) where it wants it replicated.
func.func @partial_from_op_result() -> (tensor<8x8xf32>, tensor<8x8xf32>) {
  %0 = "test.producer"() {dist.sharding = [#dist.sharding<@mesh, [{}, {}], partial={"x"}>]} : () -> tensor<8x8xf32>
  // expected-remark @+1 {{reduce_scatter(dim=0, axes=[x], sum) (cost 128)}}
  %1 = dist.constraint %0 <@mesh, [{"x"}, {}]> : tensor<8x8xf32>
  // expected-remark @+1 {{all_reduce(axes=[x], sum) (cost 256)}}
  %2 = dist.constraint %0 <@mesh, [{}, {}]> : tensor<8x8xf32>
  return %1, %2 : tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

dist.mesh @mesh <["x"=2, "y"=2]>

// Tests that a partial max keeps its kind and that axes the target keeps
// partial are not reduced.
func.func @partial_max_kept(%arg0: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}], partial=max{"x", "y"}>}) -> tensor<8x8xf32> {
  // expected-remark @+1 {{reduce_scatter(dim=1, axes=[y], max) (cost 128)}}
  %0 = dist.constraint %arg0 <@mesh, [{}, {"y"}], partial=max{"x"}> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

dist.mesh @mesh <["x"=2, "y"=2]>

// Tests the multi-axis case [{x,y},{}] -> [{y},{x}]: both axes move to
// dim 1 (3/4 * 64), then y moves back (1/2 * 64).
func.func @two_axes_to_two_dims(%arg0: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"x", "y"}, {}]>}) -> tensor<8x8xf32> {
  // expected-remark @+1 {{all_to_all(axes=[x, y], 0->1) ; all_to_all(axes=[y], 1->0) (cost 80)}}
  %0 = dist.constraint %arg0 <@mesh, [{"y"}, {"x"}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

dist.mesh @mesh <["x"=2, "y"=2]>

// Tests that swapping two equal axes is one collective_permute of the
// 64-byte block.
func.func @swap(%arg0: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"x"}, {"y"}]>}) -> tensor<8x8xf32> {
  // expected-remark @+1 {{collective_permute(axes=[x, y]) (cost 64)}}
  %0 = dist.constraint %arg0 <@mesh, [{"y"}, {"x"}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

dist.mesh @mesh <["x"=2, "y"=2]>

// Tests that a heavy axis (test.axis_weights) makes a gather hierarchical:
// y first (8 bytes), then x (16 * 8), instead of one ring paced by x (24 * 8).
func.func @weighted_gather(%arg0: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{"x", "y"}]>}) -> tensor<8xf32>
    attributes {test.axis_weights = {x = 8.0 : f64}} {
  // expected-remark @+1 {{all_gather(dim=0, axes=[y]) ; all_gather(dim=0, axes=[x]) (cost 136)}}
  %0 = dist.constraint %arg0 <@mesh, [{}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

dist.mesh @mesh <["x"=2, "y"=2]>

// Tests that the same gather without weights is one step.
func.func @unweighted_gather(%arg0: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{"x", "y"}]>}) -> tensor<8xf32> {
  // expected-remark @+1 {{all_gather(dim=0, axes=[x, y]) (cost 24)}}
  %0 = dist.constraint %arg0 <@mesh, [{}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

dist.mesh @mesh <["x"=2, "y"=2]>

// Tests that an operand without a sharding is reported.
func.func @no_source(%arg0: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{operand has no 'dist.sharding' to reshard from}}
  %0 = dist.constraint %arg0 <@mesh, [{"x"}, {}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

dist.mesh @mesh <["x"=2, "y"=2]>
dist.mesh @other <["x"=2, "y"=2]>

// Tests that resharding across meshes is reported.
func.func @two_meshes(%arg0: tensor<8x8xf32> {dist.sharding = #dist.sharding<@other, [{"x"}, {}]>}) -> tensor<8x8xf32> {
  // expected-error @+1 {{the operand is sharded on mesh @other but the constraint on @mesh; resharding stays within one mesh}}
  %0 = dist.constraint %arg0 <@mesh, [{"x"}, {}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

dist.mesh @mesh <["x"=2, "y"=2]>

// Tests that a target partial where the source is not has no plan.
func.func @partial_target(%arg0: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}]>}) -> tensor<8x8xf32> {
  // expected-error @+1 {{cannot reshard: target is partial over axis 'x' where the source is not; the planner does not make values partial}}
  %0 = dist.constraint %arg0 <@mesh, [{}, {}], partial={"x"}> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

dist.mesh @mesh <["x"=2, "y"=2]>

// Tests that different partial kinds have no plan.
func.func @partial_kinds(%arg0: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}], partial={"x"}>}) -> tensor<8x8xf32> {
  // expected-error @+1 {{cannot reshard: source is a partial sum but the target a partial max}}
  %0 = dist.constraint %arg0 <@mesh, [{}, {}], partial=max{"x"}> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

dist.mesh @mesh <["x"=4]>

// Tests that sub-axes are reported as unsupported.
func.func @sub_axis(%arg0: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}]>}) -> tensor<8x8xf32> {
  // expected-error @+1 {{cannot reshard: sub-axis of 'x' is not supported by the resharding planner}}
  %0 = dist.constraint %arg0 <@mesh, [{"x":(1)2}, {}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

dist.mesh @mesh <["x"=2, "y"=2]>

// Tests that a dynamic dimension is reported.
func.func @dynamic(%arg0: tensor<8x?xf32> {dist.sharding = #dist.sharding<@mesh, [{"x"}, {}]>}) -> tensor<8x?xf32> {
  // expected-error @+1 {{cannot reshard: dimension 1 of 'tensor<8x?xf32>' is dynamic}}
  %0 = dist.constraint %arg0 <@mesh, [{}, {"x"}]> : tensor<8x?xf32>
  return %0 : tensor<8x?xf32>
}

// -----

dist.mesh @mesh <["x"=2, "y"=2]>

// Tests that an element type without a size is reported.
func.func @opaque_element(%arg0: tensor<8x8x!foo.bar> {dist.sharding = #dist.sharding<@mesh, [{"x"}, {}]>}) -> tensor<8x8x!foo.bar> {
  // expected-error @+1 {{cannot reshard: element type '!foo.bar' has no fixed size}}
  %0 = dist.constraint %arg0 <@mesh, [{}, {"x"}]> : tensor<8x8x!foo.bar>
  return %0 : tensor<8x8x!foo.bar>
}

// -----

dist.mesh @mesh <["x"=2, "y"=2]>

// Tests that the search bound fails with a diagnostic instead of searching on.
func.func @state_bound(%arg0: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"x", "y"}, {}]>}) -> tensor<8x8xf32>
    attributes {test.max_states = 1 : i64} {
  // expected-error @+1 {{cannot reshard: no resharding plan found within 1 search states; raise the bound or simplify the mesh}}
  %0 = dist.constraint %arg0 <@mesh, [{"y"}, {"x"}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

dist.mesh @mesh <["x"=2, "y"=2]>

// Tests that a weight for an unknown axis is reported.
func.func @unknown_weight_axis(%arg0: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"x"}, {}]>}) -> tensor<8x8xf32>
    attributes {test.axis_weights = {w = 2.0 : f64}} {
  // expected-error @+1 {{cannot reshard: cost weight given for unknown mesh axis 'w'}}
  %0 = dist.constraint %arg0 <@mesh, [{}, {"x"}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

dist.mesh @mesh <["x"=2, "y"=2]>

// Tests that malformed weights are reported at the function.
// expected-error @+1 {{test.axis_weights must be a dictionary from axis name to number}}
func.func @weights_not_dictionary(%arg0: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"x"}, {}]>}) -> tensor<8x8xf32>
    attributes {test.axis_weights = 8.0 : f64} {
  %0 = dist.constraint %arg0 <@mesh, [{}, {"x"}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

dist.mesh @mesh <["x"=2, "y"=2]>

// Tests that a weight that is not a number is reported at the function.
// expected-error @+1 {{test.axis_weights: the weight of axis 'x' is not a number}}
func.func @weight_not_number(%arg0: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"x"}, {}]>}) -> tensor<8x8xf32>
    attributes {test.axis_weights = {x = "heavy"}} {
  %0 = dist.constraint %arg0 <@mesh, [{}, {"x"}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

dist.mesh @mesh <["x"=2, "y"=2]>

// Tests that a bad search bound is reported at the function.
// expected-error @+1 {{test.max_states must be a non-negative 32-bit integer}}
func.func @bad_max_states(%arg0: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"x"}, {}]>}) -> tensor<8x8xf32>
    attributes {test.max_states = -1 : i64} {
  %0 = dist.constraint %arg0 <@mesh, [{}, {"x"}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
