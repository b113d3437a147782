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
// CHECK-SAME: %{{.*}}: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {"tp"}]>}
// CHECK-SAME: %{{.*}}: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>}
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
