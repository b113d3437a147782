// Every diagnostic of dist-annotate. Errors about the options need their own
// option values, so each is a part of this file (split-file) with its own RUN
// line; errors about the IR are split cases of args.mlir.

// RUN: split-file %s %t
// RUN: partita-opt %t/unknown-strategy.mlir --dist-annotate="strategy=tp mesh=tp=4" -verify-diagnostics
// RUN: partita-opt %t/empty-mesh-name.mlir --dist-annotate="mesh=dp=2 mesh-name=" -verify-diagnostics
// RUN: partita-opt %t/empty-axis-entry.mlir --dist-annotate="mesh=dp=2,,tp=4" -verify-diagnostics
// RUN: partita-opt %t/axis-without-size.mlir --dist-annotate="mesh=dp" -verify-diagnostics
// RUN: partita-opt %t/axis-name-not-identifier.mlir --dist-annotate="mesh=2dp=2" -verify-diagnostics
// RUN: partita-opt %t/axis-size-not-integer.mlir --dist-annotate="mesh=dp=two" -verify-diagnostics
// RUN: partita-opt %t/axis-size-zero.mlir --dist-annotate="mesh=dp=2,tp=0" -verify-diagnostics
// RUN: partita-opt %t/axis-size-negative.mlir --dist-annotate="mesh=dp=-2" -verify-diagnostics
// RUN: partita-opt %t/repeated-axis.mlir --dist-annotate="mesh=dp=2,tp=2,dp=4" -verify-diagnostics
// RUN: partita-opt %t/no-mesh.mlir --dist-annotate="strategy=dp" -verify-diagnostics
// RUN: partita-opt %t/no-mesh.mlir --dist-annotate="strategy=dp mesh=' '" -verify-diagnostics
// RUN: partita-opt %t/mesh-name-not-a-mesh.mlir --dist-annotate="strategy=dp" -verify-diagnostics
// RUN: partita-opt %t/mesh-mismatch.mlir --dist-annotate="strategy=dp mesh=dp=2,tp=4" -verify-diagnostics
// RUN: partita-opt %t/megatron-without-tp.mlir --dist-annotate="strategy=megatron mesh=dp=8" -verify-diagnostics
// RUN: partita-opt %t/dp-without-dp.mlir --dist-annotate="strategy=dp+megatron mesh=data=2,tp=4" -verify-diagnostics
// RUN: partita-opt %t/empty-tensor-axis.mlir --dist-annotate="strategy=megatron mesh=tp=4 tensor-axis=" -verify-diagnostics
// RUN: partita-opt %t/same-axes.mlir --dist-annotate="strategy=dp+megatron mesh=tp=4 data-axis=tp" -verify-diagnostics
// RUN: partita-opt %t/args.mlir -split-input-file --dist-annotate="strategy=dp+megatron mesh=dp=2,tp=4" -verify-diagnostics
// RUN: partita-opt %t/dp-args.mlir -split-input-file --dist-annotate="strategy=dp mesh=dp=2,tp=4" -verify-diagnostics
// RUN: partita-opt %t/cp-without-cp.mlir --dist-annotate="strategy=cp mesh=dp=2" -verify-diagnostics
// RUN: partita-opt %t/cp-same-axes.mlir --dist-annotate="strategy=dp+cp mesh=dp=2 context-axis=dp" -verify-diagnostics
// RUN: partita-opt %t/cp-rank-one.mlir --dist-annotate="strategy=cp mesh=cp=2" -verify-diagnostics
// RUN: partita-opt %t/cp-too-short.mlir --dist-annotate="strategy=cp mesh=cp=4" -verify-diagnostics

//--- unknown-strategy.mlir
// Tests that an unknown strategy is an error listing the known ones.
// expected-error @+1 {{unknown strategy 'tp'; known strategies: dp, zero1, zero2, zero3, fsdp, megatron, dp+megatron, zero1+megatron, zero2+megatron, zero3+megatron, fsdp+megatron}}
module {}

//--- empty-mesh-name.mlir
// Tests that an empty mesh-name is an error.
// expected-error @+1 {{mesh-name is empty; name the mesh to annotate for}}
module {}

//--- empty-axis-entry.mlir
// Tests that two commas in a row in the mesh spec are an error.
// expected-error @+1 {{mesh spec "dp=2,,tp=4" has an empty axis entry; expected axes like "dp=2,tp=4"}}
module {}

//--- axis-without-size.mlir
// Tests that an axis without "=size" is an error.
// expected-error @+1 {{mesh axis 'dp' in mesh spec "dp" has no size; expected name=size, e.g. "dp=2"}}
module {}

//--- axis-name-not-identifier.mlir
// Tests that an axis name must be an identifier.
// expected-error @+1 {{mesh axis name '2dp' in mesh spec "2dp=2" is not an identifier (letters, digits and '_', not starting with a digit)}}
module {}

//--- axis-size-not-integer.mlir
// Tests that an axis size must be an integer.
// expected-error @+1 {{mesh axis 'dp' has size 'two', which is not an integer}}
module {}

//--- axis-size-zero.mlir
// Tests that an axis size of 0 is an error.
// expected-error @+1 {{mesh axis 'tp' has size 0; axis sizes must be at least 1}}
module {}

//--- axis-size-negative.mlir
// Tests that a negative axis size is an error.
// expected-error @+1 {{mesh axis 'dp' has size -2; axis sizes must be at least 1}}
module {}

//--- repeated-axis.mlir
// Tests that an axis named twice in the mesh spec is an error.
// expected-error @+1 {{mesh axis 'dp' appears twice in mesh spec "dp=2,tp=2,dp=4"}}
module {}

//--- no-mesh.mlir
// Tests that a module without the mesh, and no mesh option, is an error.
// expected-error @+1 {{module has no mesh @mesh; declare one or pass the mesh option (e.g. mesh=dp=2,tp=4) to create it}}
module {}

//--- mesh-name-not-a-mesh.mlir
// Tests that mesh-name naming a symbol that is not a mesh is an error.
module {
  // expected-error @+1 {{symbol @mesh is not a dist.mesh; mesh-name must name one}}
  func.func private @mesh()
}

//--- mesh-mismatch.mlir
// Tests that a declared mesh and the mesh option must list the same axes.
module {
  // expected-error @+1 {{mesh @mesh has axes "dp=2,tp=2" but the mesh option asks for "dp=2,tp=4"}}
  dist.mesh @mesh <["dp"=2, "tp"=2]>
}

//--- megatron-without-tp.mlir
// Tests that megatron on a mesh without the tensor axis names the axis and
// the mesh (the mesh created from the option takes the module's location).
// expected-error @+1 {{strategy 'megatron' needs mesh axis "tp" (tensor-axis), which mesh @mesh lacks; its axes are "dp=8"}}
module {}

//--- dp-without-dp.mlir
// Tests that dp+megatron on a mesh without the data axis names the axis.
// expected-error @+1 {{strategy 'dp+megatron' needs mesh axis "dp" (data-axis), which mesh @mesh lacks; its axes are "data=2,tp=4"}}
module {}

//--- empty-tensor-axis.mlir
// Tests that an empty axis option that the strategy needs is an error.
// expected-error @+1 {{strategy 'megatron' needs a tensor-axis but the option is empty}}
module {}

//--- same-axes.mlir
// Tests that dp+megatron needs two different axes.
// expected-error @+1 {{strategy 'dp+megatron' needs two different axes, but data-axis and tensor-axis are both "tp"}}
module {}

//--- args.mlir
// Tests that a parameter dimension the tensor axis does not divide, and too
// small to pad, names the parameter, the dimension, its size and the axis.
func.func @f(
    // expected-error @+1 {{parameter 'layers.0.mlp.w1' dimension 1 (F) has size 3, which mesh axis "tp" of size 4 does not divide, and it is too small to pad (a padded dimension needs at least one element per shard)}}
    %w1: tensor<8x3xf32> {nn.param = "layers.0.mlp.w1"}) {
  return
}

// -----

// Tests that too few kv heads for the tensor axis is an error (grouped-query
// attention with k=2 on tp=4).
func.func @f(
    // expected-error @+1 {{parameter 'layers.0.attn.wk' dimension 1 (heads) has size 2, which mesh axis "tp" of size 4 does not divide}}
    %wk: tensor<16x2x2xf32> {nn.param = "layers.0.attn.wk"}) {
  return
}

// -----

// Tests that a batch the data axis does not divide is an error when it is too small to pad.
func.func @f(
    // expected-error @+1 {{input 'ids' dimension 0 (the batch) has size 1, which mesh axis "dp" of size 2 does not divide}}
    %ids: tensor<1x4xi32> {nn.input = "ids"}) {
  return
}

// -----

// Tests that a known parameter of the wrong rank is an error giving the
// expected shape.
func.func @f(
    // expected-error @+1 {{parameter 'layers.0.attn.wq' has rank 2 ('tensor<8x8xf32>'); strategy 'dp+megatron' expects rank 3 [H,heads,d]}}
    %wq: tensor<8x8xf32> {nn.param = "layers.0.attn.wq"}) {
  return
}

// -----

// Tests that a known parameter that is not a ranked tensor is an error.
func.func @f(
    // expected-error @+1 {{parameter 'wte' has type 'tensor<*xf32>'; strategy 'dp+megatron' annotates ranked tensors only}}
    %wte: tensor<*xf32> {nn.param = "wte"}) {
  return
}

// -----

// Tests that an input that is a scalar is an error when the batch is split.
func.func @f(
    // expected-error @+1 {{input 'x' is a scalar; strategy 'dp+megatron' splits dimension 0 (the batch) of every input}}
    %x: tensor<f32> {nn.input = "x"}) {
  return
}

// -----

// Tests that an argument named both a parameter and an input is an error.
func.func @f(
    // expected-error @+1 {{argument #0 of @f carries both nn.param and nn.input}}
    %x: tensor<4xf32> {nn.param = "x", nn.input = "x"}) {
  return
}

// -----

// Tests that a name that is not a string is an error.
func.func @f(
    // expected-error @+1 {{nn.param of argument #0 of @f must be a string, not 3 : i64}}
    %x: tensor<4xf32> {nn.param = 3}) {
  return
}

// -----

// Tests that a declaration's error is reported at the function.
// expected-error @+1 {{parameter 'layers.0.mlp.w2' dimension 0 (F) has size 3, which mesh axis "tp" of size 4 does not divide}}
func.func private @decl(tensor<3x8xf32> {nn.param = "layers.0.mlp.w2"})

//--- dp-args.mlir
// Tests that dp checks every parameter's type, whatever its name, since it
// annotates every parameter.
func.func @f(
    // expected-error @+1 {{parameter 'step' has type 'i32'; strategy 'dp' annotates ranked tensors only}}
    %step: i32 {nn.param = "step"}) {
  return
}

//--- cp-without-cp.mlir
// Tests that cp on a mesh without the context axis names the axis.
// expected-error @+1 {{strategy 'cp' needs mesh axis "cp" (context-axis), which mesh @mesh lacks; its axes are "dp=2"}}
module {}

//--- cp-same-axes.mlir
// Tests that dp+cp needs two different axes.
// expected-error @+1 {{strategy 'dp+cp' needs two different axes, but data-axis and context-axis are both "dp"}}
module {}

//--- cp-rank-one.mlir
// Tests that cp needs every input to have a sequence dimension.
func.func @f(
    // expected-error @+1 {{input 'x' has rank 1 ('tensor<4xf32>'); strategy 'cp' splits dimension 1 (the sequence) of every input}}
    %x: tensor<4xf32> {nn.input = "x"}) {
  return
}

//--- cp-too-short.mlir
// Tests that a sequence too short to give every cp shard a token is an
// error naming the input and the axis.
func.func @f(
    // expected-error @+1 {{input 'ids' dimension 1 (the sequence) has size 3, which mesh axis "cp" of size 4 does not divide, and it is too small to pad (a padded dimension needs at least one element per shard)}}
    %ids: tensor<2x3xi32> {nn.input = "ids"}) {
  return
}
