// Ways to name the mesh and its axes: the option value forms that the MLIR
// pass-option parser accepts, another mesh name, other axis names, and a
// mesh the module declares itself.

// RUN: split-file %s %t
// RUN: partita-opt %t/create.mlir --dist-annotate="strategy=dp+megatron mesh=dp=2,tp=4" | FileCheck %t/create.mlir --check-prefix=CREATE
// RUN: partita-opt %t/create.mlir --dist-annotate='strategy=dp+megatron mesh={dp=2,tp=4}' | FileCheck %t/create.mlir --check-prefix=CREATE
// RUN: partita-opt %t/create.mlir --pass-pipeline='builtin.module(dist-annotate{strategy=dp+megatron mesh=dp=2,tp=4})' | FileCheck %t/create.mlir --check-prefix=CREATE
// RUN: partita-opt %t/create.mlir --dist-annotate="strategy=dp+megatron mesh=batch=2,model=4 mesh-name=grid data-axis=batch tensor-axis=model" | FileCheck %t/create.mlir --check-prefix=RENAME
// RUN: partita-opt %t/declared.mlir -split-input-file --dist-annotate="strategy=dp+megatron" | FileCheck %t/declared.mlir
// RUN: partita-opt %t/declared.mlir -split-input-file --dist-annotate="strategy=dp+megatron mesh=dp=2,tp=4" | FileCheck %t/declared.mlir

//--- create.mlir

// Tests that the mesh is created at the start of the module from the option,
// under the default or the given name, and that the shardings name it.
// CREATE:      module {
// CREATE-NEXT:   dist.mesh @mesh <["dp"=2, "tp"=4]>
// CREATE-NEXT:   func.func @forward
// CREATE-SAME:   tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"tp"}p0]>, nn.param = "layers.0.mlp.w1"}
// CREATE-SAME:   tensor<4x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}p0, {}p0]>, nn.input = "x"}
// RENAME:      module {
// RENAME-NEXT:   dist.mesh @grid <["batch"=2, "model"=4]>
// RENAME-NEXT:   func.func @forward
// RENAME-SAME:   tensor<8x16xf32> {dist.sharding = #dist.sharding<@grid, [{}p0, {"model"}p0]>, nn.param = "layers.0.mlp.w1"}
// RENAME-SAME:   tensor<4x8xf32> {dist.sharding = #dist.sharding<@grid, [{"batch"}p0, {}p0]>, nn.input = "x"}
func.func @forward(%w1: tensor<8x16xf32> {nn.param = "layers.0.mlp.w1"},
                   %x: tensor<4x8xf32> {nn.input = "x"}) {
  return
}

//--- declared.mlir

// Tests that a mesh the module declares is used, not duplicated, when the
// option is absent or agrees with it; its device order is kept.
// CHECK-LABEL: module {
// CHECK-NEXT:    dist.mesh @mesh <["dp"=2, "tp"=4], devices=[7, 6, 5, 4, 3, 2, 1, 0]>
// CHECK-NOT:     dist.mesh
// CHECK:         func.func @forward
// CHECK-SAME:    {dist.sharding = #dist.sharding<@mesh, [{}p0, {"tp"}p0]>, nn.param = "layers.0.mlp.w1"}
module {
  dist.mesh @mesh <["dp"=2, "tp"=4], devices=[7, 6, 5, 4, 3, 2, 1, 0]>
  func.func @forward(%w1: tensor<8x16xf32> {nn.param = "layers.0.mlp.w1"}) {
    return
  }
}

// -----

// Tests that an argument that already carries a sharding keeps it: the
// user's annotation wins over the recipe, while its neighbours get the recipe.
// CHECK-LABEL: func.func @user_annotation
// CHECK-SAME:    {dist.sharding = #dist.sharding<@mesh, [{"dp", ?}, {}]>, nn.param = "layers.0.mlp.w1"}
// CHECK-SAME:    {dist.sharding = #dist.sharding<@mesh, [{"tp"}p0, {}p0]>, nn.param = "layers.0.mlp.w2"}
dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @user_annotation(
    %w1: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp", ?}, {}]>, nn.param = "layers.0.mlp.w1"},
    %w2: tensor<16x8xf32> {nn.param = "layers.0.mlp.w2"}) {
  return
}
