// RUN: partita-opt %s | partita-opt | FileCheck %s
// RUN: partita-opt %s -mlir-print-op-generic | partita-opt | FileCheck %s
// RUN: partita-opt %s -mlir-print-op-generic | FileCheck %s --check-prefix=GENERIC

// Round trip of every dist op and every form of the mesh and sharding
// attributes. The second RUN line goes through the generic op form.

// CHECK: dist.mesh @mesh <["dp"=2, "tp"=4]>
// GENERIC: "dist.mesh"() <{mesh = #dist.mesh<["dp"=2, "tp"=4]>, sym_name = "mesh"}> : () -> ()
dist.mesh @mesh <["dp"=2, "tp"=4]>
// CHECK: dist.mesh @ordered <["dp"=2, "tp"=2], devices=[3, 2, 1, 0]>
dist.mesh @ordered <["dp" = 2, "tp" = 2], devices = [3, 2, 1, 0]>
// A mesh without axes is a single device.
// CHECK: dist.mesh @single <[]>
dist.mesh @single <[]>
// CHECK: dist.mesh @pipe <["pp"=4, "dp"=2, "tp"=8]>
dist.mesh @pipe <["pp"=4, "dp"=2, "tp"=8]>

// CHECK-LABEL: func.func @arg_and_result_shardings
// CHECK-SAME: %{{.*}}: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>}
// CHECK-SAME: %{{.*}}: tensor<16x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>}
// CHECK-SAME: %{{.*}}: tensor<f32> {dist.sharding = #dist.sharding<@mesh, []>}
// CHECK-SAME: %{{.*}}: tensor<8x32xf32>)
// CHECK-SAME: -> (tensor<8x32xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {"tp"}]>})
func.func @arg_and_result_shardings(
    %x: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>},
    %w: tensor<16x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>},
    %s: tensor<f32> {dist.sharding = #dist.sharding<@mesh, []>},
    %y: tensor<8x32xf32>)
    -> (tensor<8x32xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {"tp"}]>}) {
  return %y : tensor<8x32xf32>
}

// CHECK-LABEL: func.func @dim_sharding_forms
// CHECK-SAME: #dist.sharding<@mesh, [{"dp", "tp"}, {}, {}]>
// CHECK-SAME: #dist.sharding<@mesh, [{"dp", ?}, {?}, {}]>
// CHECK-SAME: #dist.sharding<@mesh, [{"dp"}p1, {?}p0, {"tp", ?}p12]>
// CHECK-SAME: #dist.sharding<@mesh, [{"tp":(1)2}, {"tp":(2)2}, {"dp"}]>
// CHECK-SAME: #dist.sharding<@mesh, [{"dp"}, {}, {}], partial={"tp"}>
// CHECK-SAME: #dist.sharding<@mesh, [{}, {}, {}], partial=max{"tp", "dp"}>
// CHECK-SAME: #dist.sharding<@mesh, [{}, {}, {}], partial=min{"tp":(2)2}>
// CHECK-SAME: #dist.sharding<@mesh, [{"dp"}, {}, {}], partial={"tp"}>
func.func @dim_sharding_forms(
    %a: tensor<16x8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp", "tp"}, {}, {}]>},
    %b: tensor<16x8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp", ?}, {?}, {}]>},
    %c: tensor<16x8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}p1, {?}p0, {"tp", ?}p12]>},
    %d: tensor<16x8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp":(1)2}, {"tp":(2)2}, {"dp"}]>},
    %e: tensor<16x8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}, {}], partial={"tp"}>},
    %f: tensor<16x8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}, {}], partial=max{"tp", "dp"}>},
    %g: tensor<16x8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}, {}], partial=min{"tp":(2)2}>},
    // An explicit `sum` prints as the default.
    %h: tensor<16x8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}, {}], partial=sum{"tp"}>}) {
  return
}

// CHECK-LABEL: func.func @dynamic_dims_are_not_checked
// CHECK-SAME: tensor<?x30xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>}
func.func @dynamic_dims_are_not_checked(
    %a: tensor<?x30xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>}) {
  return
}

// CHECK-LABEL: func.func @op_shardings
func.func @op_shardings(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // CHECK: %[[C:.+]] = dist.constraint %{{.*}} <@mesh, [{"dp"}, {"tp", ?}p0]> : tensor<8x16xf32>
  %0 = dist.constraint %x <@mesh, [{"dp"}, {"tp", ?}p0]> : tensor<8x16xf32>
  // CHECK: dist.constraint %[[C]] <@ordered, [{"dp", "tp"}, {}]> {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {}]>]} : tensor<8x16xf32>
  %1 = dist.constraint %0 <@ordered, [{"dp", "tp"}, {}]> {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {}]>]} : tensor<8x16xf32>
  return %1 : tensor<8x16xf32>
}

// CHECK-LABEL: func.func @origins
// CHECK-SAME: {dist.origin = "wte"}
// CHECK-SAME: {dist.origin = ["x", "y"]}
// CHECK: dist.constraint %{{.*}} <@mesh, [{"tp"}]> {dist.origin = "wte"} : tensor<4xf32>
func.func @origins(%a: tensor<4xf32> {dist.origin = "wte"})
    -> (tensor<4xf32> {dist.origin = ["x", "y"]}) {
  %0 = dist.constraint %a <@mesh, [{"tp"}]> {dist.origin = "wte"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @collectives
func.func @collectives(%a: tensor<4x8xf32>, %b: tensor<32x8xf32>,
                       %c: tensor<2x16xf32>, %d: tensor<8xf32>,
                       %dyn: tensor<?x8xf32>) {
  // CHECK: dist.all_gather %{{.*}} on @mesh axes = ["tp"] dim = 1 : tensor<4x8xf32> -> tensor<4x32xf32>
  %0 = dist.all_gather %a on @mesh axes = ["tp"] dim = 1 : tensor<4x8xf32> -> tensor<4x32xf32>
  // CHECK: dist.all_gather %{{.*}} on @mesh axes = ["dp", "tp"] dim = 0 : tensor<4x8xf32> -> tensor<32x8xf32>
  %1 = dist.all_gather %a on @mesh axes = ["dp", "tp"] dim = 0 : tensor<4x8xf32> -> tensor<32x8xf32>
  // CHECK: dist.reduce_scatter %{{.*}} on @mesh axes = ["tp"] dim = 0 kind = sum : tensor<32x8xf32> -> tensor<8x8xf32>
  %2 = dist.reduce_scatter %b on @mesh axes = ["tp"] dim = 0 kind = sum : tensor<32x8xf32> -> tensor<8x8xf32>
  // CHECK: dist.reduce_scatter %{{.*}} on @mesh axes = ["dp"] dim = 1 kind = max : tensor<32x8xf32> -> tensor<32x4xf32>
  %3 = dist.reduce_scatter %b on @mesh axes = ["dp"] dim = 1 kind = max : tensor<32x8xf32> -> tensor<32x4xf32>
  // CHECK: dist.all_reduce %{{.*}} on @mesh axes = ["tp"] kind = sum : tensor<4x8xf32>
  %4 = dist.all_reduce %a on @mesh axes = ["tp"] kind = sum : tensor<4x8xf32>
  // CHECK: dist.all_reduce %{{.*}} on @mesh axes = ["dp", "tp"] kind = min : tensor<4x8xf32>
  %5 = dist.all_reduce %a on @mesh axes = ["dp", "tp"] kind = min : tensor<4x8xf32>
  // CHECK: dist.all_to_all %{{.*}} on @mesh axes = ["tp"] split_dim = 1 concat_dim = 0 : tensor<2x16xf32> -> tensor<8x4xf32>
  %6 = dist.all_to_all %c on @mesh axes = ["tp"] split_dim = 1 concat_dim = 0 : tensor<2x16xf32> -> tensor<8x4xf32>
  // CHECK: dist.all_to_all %{{.*}} on @mesh axes = ["tp"] split_dim = 1 concat_dim = 1 : tensor<2x16xf32> -> tensor<2x16xf32>
  %7 = dist.all_to_all %c on @mesh axes = ["tp"] split_dim = 1 concat_dim = 1 : tensor<2x16xf32> -> tensor<2x16xf32>
  // CHECK: dist.collective_permute %{{.*}} on @mesh axes = ["tp"] pairs = [0, 1, 1, 2, 2, 3, 3, 0] : tensor<8xf32>
  %8 = dist.collective_permute %d on @mesh axes = ["tp"] pairs = [0, 1, 1, 2, 2, 3, 3, 0] : tensor<8xf32>
  // CHECK: dist.collective_permute %{{.*}} on @mesh axes = ["dp"] pairs = [] : tensor<8xf32>
  %9 = dist.collective_permute %d on @mesh axes = ["dp"] pairs = [] : tensor<8xf32>
  // CHECK: dist.send %{{.*}} on @pipe axis = "pp" to 1 : tensor<4x8xf32>
  dist.send %a on @pipe axis = "pp" to 1 : tensor<4x8xf32>
  // CHECK: dist.recv on @pipe axis = "pp" from 3 : tensor<4x8xf32>
  %10 = dist.recv on @pipe axis = "pp" from 3 : tensor<4x8xf32>
  // A collective over no axes is over a group of one device.
  // CHECK: dist.all_reduce %{{.*}} on @single axes = [] kind = sum : tensor<8xf32>
  %11 = dist.all_reduce %d on @single axes = [] kind = sum : tensor<8xf32>
  // Dynamic sizes are not checked.
  // CHECK: dist.all_gather %{{.*}} on @mesh axes = ["tp"] dim = 0 : tensor<?x8xf32> -> tensor<?x8xf32>
  %12 = dist.all_gather %dyn on @mesh axes = ["tp"] dim = 0 : tensor<?x8xf32> -> tensor<?x8xf32>
  return
}

// Tests that dist.slice round-trips with one and several axes.
// CHECK-LABEL: func.func @slice
func.func @slice(%a: tensor<4x32xf32>, %b: tensor<8x32xf32>) -> (tensor<4x8xf32>, tensor<1x32xf32>) {
  // CHECK: dist.slice %{{.*}} on @mesh axes = ["tp"] dim = 1 : tensor<4x32xf32> -> tensor<4x8xf32>
  %0 = dist.slice %a on @mesh axes = ["tp"] dim = 1 : tensor<4x32xf32> -> tensor<4x8xf32>
  // CHECK: dist.slice %{{.*}} on @mesh axes = ["dp", "tp"] dim = 0 : tensor<8x32xf32> -> tensor<1x32xf32>
  %1 = dist.slice %b on @mesh axes = ["dp", "tp"] dim = 0 : tensor<8x32xf32> -> tensor<1x32xf32>
  return %0, %1 : tensor<4x8xf32>, tensor<1x32xf32>
}

// Tests that dist.axis_index round-trips with one, several and no axes.
// CHECK-LABEL: func.func @axis_index
func.func @axis_index() -> (tensor<i32>, tensor<i64>, tensor<i32>) {
  // CHECK: dist.axis_index on @mesh axes = ["tp"] : tensor<i32>
  %0 = dist.axis_index on @mesh axes = ["tp"] : tensor<i32>
  // CHECK: dist.axis_index on @mesh axes = ["dp", "tp"] : tensor<i64>
  %1 = dist.axis_index on @mesh axes = ["dp", "tp"] : tensor<i64>
  // CHECK: dist.axis_index on @mesh axes = [] : tensor<i32>
  %2 = dist.axis_index on @mesh axes = [] : tensor<i32>
  return %0, %1, %2 : tensor<i32>, tensor<i64>, tensor<i32>
}

// Each attribute written alone, outside a sharding.
// CHECK-LABEL: func.func @standalone_attributes
// CHECK-SAME: a = #dist.mesh<["x"=3]>
// CHECK-SAME: b = #dist.mesh<["x"=2, "y"=1], devices=[1, 0]>
// CHECK-SAME: c = #dist.axis<"tp">
// CHECK-SAME: d = #dist.axis<"tp":(2)2>
// CHECK-SAME: e = #dist.dim_sharding<{"dp", "tp"}>
// CHECK-SAME: f = #dist.dim_sharding<{}>
// CHECK-SAME: g = #dist.dim_sharding<{"dp", ?}>
// CHECK-SAME: h = #dist.dim_sharding<{?}>
// CHECK-SAME: i = #dist.dim_sharding<{"dp"}p1>
// CHECK-SAME: j = #dist.dim_sharding<{?}p0>
// CHECK-SAME: k = #dist.mesh_axis<"dp" = 2>
// CHECK-SAME: l = #dist<reduction max>
func.func @standalone_attributes() attributes {
    a = #dist.mesh<["x"=3]>,
    b = #dist.mesh<["x"=2, "y"=1], devices=[1, 0]>,
    c = #dist.axis<"tp">,
    d = #dist.axis<"tp":(2)2>,
    e = #dist.dim_sharding<{"dp", "tp"}>,
    f = #dist.dim_sharding<{}>,
    g = #dist.dim_sharding<{"dp", ?}>,
    h = #dist.dim_sharding<{?}>,
    i = #dist.dim_sharding<{"dp"} p1>,
    j = #dist.dim_sharding<{?}p0>,
    k = #dist.mesh_axis<"dp" = 2>,
    l = #dist<reduction max>} {
  return
}
