// RUN: partita-opt %s -split-input-file -verify-diagnostics

//===----------------------------------------------------------------------===//
// Mesh syntax
//===----------------------------------------------------------------------===//

// Tests that a mesh needs its list of axes in brackets.
// expected-error @+1 {{expected '[' starting the list of mesh axes}}
dist.mesh @mesh <"dp"=2>

// -----

// Tests that a mesh axis is named by a string.
// expected-error @+1 {{expected axis name string}}
dist.mesh @mesh <[dp=2]>

// -----

// Tests that a mesh axis name is followed by '='.
// expected-error @+1 {{expected '='}}
dist.mesh @mesh <["dp" 2]>

// -----

// Tests that a mesh axis has an integer size.
// expected-error @+1 {{expected axis size integer}}
dist.mesh @mesh <["dp"=two]>

// -----

// Tests that only `devices=` may follow the axes.
// expected-error @+1 {{expected 'devices' after ',' in a mesh}}
dist.mesh @mesh <["dp"=2], order=[1, 0]>

// -----

// Tests that device ids are integers.
// expected-error @+1 {{expected device id integer}}
dist.mesh @mesh <["dp"=2], devices=[0, x]>

// -----

// Tests that an empty device list is rejected rather than read as the default.
// expected-error @+1 {{devices=[] lists no device ids; leave out 'devices=' for the default order}}
dist.mesh @mesh <["dp"=2], devices=[]>

// -----

// Tests that a mesh ends with '>'.
// expected-error @+1 {{expected '>'}}
dist.mesh @mesh <["dp"=2]

//===----------------------------------------------------------------------===//
// Mesh verification
//===----------------------------------------------------------------------===//

// -----

// Tests that axis names are not empty.
// expected-error @+1 {{mesh axis name must not be empty}}
dist.mesh @mesh <[""=2]>

// -----

// Tests that an axis name is declared once.
// expected-error @+1 {{mesh axis "dp" is declared twice}}
dist.mesh @mesh <["dp"=2, "dp"=4]>

// -----

// Tests that axis sizes are at least 1.
// expected-error @+1 {{mesh axis "tp" has size 0; sizes must be >= 1}}
dist.mesh @mesh <["dp"=2, "tp"=0]>

// -----

// Tests that negative axis sizes are rejected.
// expected-error @+1 {{mesh axis "dp" has size -2; sizes must be >= 1}}
dist.mesh @mesh <["dp"=-2]>

// -----

// Tests that a device count that overflows 64 bits is rejected.
// expected-error @+1 {{mesh has too many devices: the product of the axis sizes overflows 64 bits}}
dist.mesh @mesh <["a"=4294967296, "b"=4294967296]>

// -----

// Tests that the device list has one id per device.
// expected-error @+1 {{devices lists 3 ids, but the mesh has 4 devices}}
dist.mesh @mesh <["dp"=2, "tp"=2], devices=[0, 1, 2]>

// -----

// Tests that device ids lie in [0, N).
// expected-error @+1 {{device id 4 is out of range [0, 4); devices must be a permutation of 0..3}}
dist.mesh @mesh <["dp"=2, "tp"=2], devices=[0, 1, 2, 4]>

// -----

// Tests that device ids are not negative.
// expected-error @+1 {{device id -1 is out of range [0, 2)}}
dist.mesh @mesh <["dp"=2], devices=[-1, 0]>

// -----

// Tests that a device id is listed once.
// expected-error @+1 {{device id 2 is listed twice; devices must be a permutation of 0..3}}
dist.mesh @mesh <["dp"=2, "tp"=2], devices=[0, 2, 1, 2]>

//===----------------------------------------------------------------------===//
// Sharding syntax
//===----------------------------------------------------------------------===//

// -----

// Tests that a sharding starts with the mesh symbol.
// expected-error @+1 {{expected mesh symbol name, such as @mesh}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<mesh, [{}]>})

// -----

// Tests that the mesh symbol is followed by a comma.
// expected-error @+1 {{expected ','}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh [{}]>})

// -----

// Tests that the dimension shardings are a bracketed list.
// expected-error @+1 {{expected '[' starting the list of dimension shardings}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, {}>})

// -----

// Tests that each dimension sharding is in braces.
// expected-error @+1 {{expected '{' starting a dimension sharding}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, ["dp"]>})

// -----

// Tests that a dimension lists axis name strings.
// expected-error @+1 {{expected axis name string or '?'}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{dp}]>})

// -----

// Tests that axes in a dimension are separated by commas.
// expected-error @+1 {{expected ',' or '}' after an axis}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp" "tp"}]>})

// -----

// Tests that '?' is the last entry of a dimension.
// expected-error @+1 {{expected '}' after '?': '?' must be the last entry of a dimension}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{?, "dp"}]>})

// -----

// Tests that a priority is written p<N>.
// expected-error @+1 {{expected a priority such as 'p0' after a dimension sharding}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}q1]>})

// -----

// Tests that a priority has digits after the p.
// expected-error @+1 {{expected a priority such as 'p0' after a dimension sharding}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}p]>})

// -----

// Tests that a priority that does not fit 64 bits is rejected.
// expected-error @+1 {{priority is too large}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}p99999999999999999999]>})

// -----

// Tests that a sub-axis is written "name":(pre)size.
// expected-error @+1 {{expected '('}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp":2}]>})

// -----

// Tests that a sub-axis pre-size is an integer.
// expected-error @+1 {{expected sub-axis pre-size integer}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp":(a)2}]>})

// -----

// Tests that a sub-axis pre-size is at least 1.
// expected-error @+1 {{sub-axis pre-size must be >= 1, got 0}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp":(0)2}]>})

// -----

// Tests that a sub-axis pre-size is closed by ')'.
// expected-error @+1 {{expected ')'}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp":(1 2)2}]>})

// -----

// Tests that a sub-axis size is an integer.
// expected-error @+1 {{expected sub-axis size integer}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp":(1)}]>})

// -----

// Tests that a sub-axis size is at least 1.
// expected-error @+1 {{sub-axis size must be >= 1, got -2}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp":(1)-2}]>})

// -----

// Tests that only `partial=` may follow the dimensions.
// expected-error @+1 {{expected 'partial' after ',' in a sharding}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{}], unreduced={"tp"}>})

// -----

// Tests that the partial kind is sum, max or min.
// expected-error @+1 {{unknown partial kind 'avg'; expected sum, max or min}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{}], partial=avg{"tp"}>})

// -----

// Tests that the partial axes are in braces.
// expected-error @+1 {{expected '{' starting the list of partial axes}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{}], partial=["tp"]>})

// -----

// Tests that an empty partial list is rejected rather than dropped.
// expected-error @+1 {{expected at least one axis in the list of partial axes; leave out 'partial=' when there is none}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{}], partial=max{}>})

// -----

// Tests that the partial axes are name strings ('?' has no meaning there).
// expected-error @+1 {{expected axis name string}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{}], partial={"tp", ?}>})

// -----

// Tests that a standalone axis reference is checked like one inside a sharding.
// expected-error @+1 {{expected axis name string}}
func.func @f() attributes {a = #dist.axis<tp>}

// -----

// Tests that a standalone dimension sharding is closed by '>'.
// expected-error @+1 {{expected '>'}}
func.func @f() attributes {a = #dist.dim_sharding<{"dp"}, {}>}

//===----------------------------------------------------------------------===//
// Sharding verification (through function arguments and results)
//===----------------------------------------------------------------------===//

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
// Tests that the sharding's rank matches the tensor's.
// expected-error @+1 {{'func.func' op 'dist.sharding' of argument #0: sharding has 2 dimension(s), but 'tensor<8xf32>' has rank 1}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}]>})

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
// Tests that every axis of a sharding exists in its mesh.
// expected-error @+1 {{'dist.sharding' of argument #0: dimension 1 names axis "pp", which mesh @mesh does not have}}
func.func private @f(%x: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"pp"}]>})

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
// Tests that partial axes exist in the mesh.
// expected-error @+1 {{the partial axes names axis "x", which mesh @mesh does not have}}
func.func private @f(%x: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}], partial={"x"}>})

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
// Tests that an axis is used once across dimensions.
// expected-error @+1 {{axis "tp" is used twice in the sharding}}
func.func private @f(%x: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {"tp"}]>})

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
// Tests that an axis is used once within one dimension.
// expected-error @+1 {{axis "dp" is used twice in the sharding}}
func.func private @f(%x: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp", "dp"}, {}]>})

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
// Tests that an axis may not both split a dimension and be partial.
// expected-error @+1 {{axis "tp" is used twice in the sharding}}
func.func private @f(%x: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}], partial={"tp"}>})

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
// Tests that a sub-axis may not overlap its whole axis.
// expected-error @+1 {{axis "tp":(2)2 overlaps "tp", used earlier in the sharding}}
func.func private @f(%x: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {"tp":(2)2}]>})

// -----

dist.mesh @mesh <["dp"=2, "tp"=8]>
// Tests that two sub-axes of one axis may not overlap.
// expected-error @+1 {{axis "tp":(2)2 overlaps "tp":(1)4, used earlier in the sharding}}
func.func private @f(%x: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp":(1)4}, {"tp":(2)2}]>})

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
// Tests that a sub-axis fits its axis: pre-size times size divides the axis size.
// expected-error @+1 {{sub-axis "tp":(3)2 does not fit axis "tp" of size 4: 3*2 does not divide 4}}
func.func private @f(%x: tensor<12x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp":(3)2}, {}]>})

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
// Tests that a dimension the axes do not divide is rejected when it is smaller than its shard count (too small to pad).
// expected-error @+1 {{dimension 1 of size 3 in 'tensor<8x3xf32>' is not divisible by 4, the product of axes {"tp"}, and is too small to pad: a padded dimension needs at least one element per shard}}
func.func private @f(%x: tensor<8x3xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>})

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
// Tests that divisibility counts every axis of a dimension.
// expected-error @+1 {{dimension 0 of size 4 in 'tensor<4xf32>' is not divisible by 8, the product of axes {"dp", "tp"}}}
func.func private @f(%x: tensor<4xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp", "tp"}]>})

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
// Tests that an argument's location name is part of the message.
// expected-error @+1 {{'dist.sharding' of argument #1 ("wte"): dimension 0 of size 2}}
func.func @f(%a: tensor<8xf32>, %wte: tensor<2xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}]>} loc("wte")) { return }

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
// Tests that function result shardings are verified.
// expected-error @+1 {{'dist.sharding' of result #0: dimension 0 of size 2 in 'tensor<2xf32>' is not divisible by 4}}
func.func private @f() -> (tensor<2xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}]>})

// -----

// Tests that the mesh of a sharding exists.
// expected-error @+1 {{'dist.sharding' of argument #0 names unknown mesh @nowhere}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@nowhere, [{}]>})

// -----

func.func private @mesh()
// Tests that the mesh symbol names a dist.mesh.
// expected-error @+1 {{'dist.sharding' of argument #0 names @mesh, a 'func.func', not a dist.mesh}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{}]>})

// -----

dist.mesh @mesh <["dp"=2]>
// Tests that only tensor values carry shardings.
// expected-error @+1 {{'dist.sharding' of argument #0: expected a ranked tensor value, got 'i32'}}
func.func private @f(%x: i32 {dist.sharding = #dist.sharding<@mesh, []>})

// -----

dist.mesh @mesh <["dp"=2]>
// Tests that an unranked tensor carries no sharding.
// expected-error @+1 {{'dist.sharding' of argument #0: expected a ranked tensor value, got 'tensor<*xf32>'}}
func.func private @f(%x: tensor<*xf32> {dist.sharding = #dist.sharding<@mesh, []>})

// -----

dist.mesh @mesh <["dp"=2]>
// Tests that an argument's dist.sharding is a single #dist.sharding.
// expected-error @+1 {{'dist.sharding' of argument #0 must be a #dist.sharding, got [#dist.sharding<@mesh, [{}]>]}}
func.func private @f(%x: tensor<8xf32> {dist.sharding = [#dist.sharding<@mesh, [{}]>]})

// -----

dist.mesh @mesh <["dp"=2]>
// Tests that a result's dist.sharding is a single #dist.sharding.
// expected-error @+1 {{'dist.sharding' of result #0 must be a #dist.sharding, got "dp"}}
func.func private @f() -> (tensor<8xf32> {dist.sharding = "dp"})

//===----------------------------------------------------------------------===//
// dist.sharding and dist.origin on operations
//===----------------------------------------------------------------------===//

// -----

dist.mesh @mesh <["dp"=2]>
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // Tests that an op's dist.sharding is an array.
  // expected-error @+1 {{'dist.sharding' on an operation must be an array of #dist.sharding, one per result, got #dist.sharding<@mesh, [{}]>}}
  %0 = dist.constraint %x <@mesh, [{}]> {dist.sharding = #dist.sharding<@mesh, [{}]>} : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

dist.mesh @mesh <["dp"=2]>
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // Tests that an op's dist.sharding has one entry per result.
  // expected-error @+1 {{'dist.sharding' has 2 entries, but the op has 1 results}}
  %0 = dist.constraint %x <@mesh, [{}]> {dist.sharding = [#dist.sharding<@mesh, [{}]>, #dist.sharding<@mesh, [{}]>]} : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

dist.mesh @mesh <["dp"=2]>
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // Tests that every entry of an op's dist.sharding is a #dist.sharding.
  // expected-error @+1 {{'dist.sharding' of result #0 must be a #dist.sharding, got "dp"}}
  %0 = dist.constraint %x <@mesh, [{}]> {dist.sharding = ["dp"]} : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

dist.mesh @mesh <["dp"=4]>
func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  // Tests that an op's result sharding is verified against the result type.
  // expected-error @+1 {{'dist.constraint' op 'dist.sharding' of result #0: dimension 0 of size 3 in 'tensor<3xf32>' is not divisible by 4}}
  %0 = dist.constraint %x <@mesh, [{}]> {dist.sharding = [#dist.sharding<@mesh, [{"dp"}]>]} : tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

dist.mesh @mesh <["dp"=2]>
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // Tests that an op's result sharding names an existing mesh.
  // expected-error @+1 {{'dist.sharding' of result #0 names unknown mesh @other}}
  %0 = dist.constraint %x <@mesh, [{}]> {dist.sharding = [#dist.sharding<@other, [{}]>]} : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that dist.origin on an op is a string or an array of strings.
dist.mesh @mesh <["dp"=2]>
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'dist.origin' must be a string or an array of strings, got 3 : i64}}
  %0 = dist.constraint %x <@mesh, [{}]> {dist.origin = 3} : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that dist.origin on an argument is a string or an array of strings.
// expected-error @+1 {{'dist.origin' of argument #0 must be a string or an array of strings, got ["a", 1]}}
func.func private @f(%x: tensor<8xf32> {dist.origin = ["a", 1]})

// -----

// Tests that dist.origin on a result is a string or an array of strings.
// expected-error @+1 {{'dist.origin' of result #0 must be a string or an array of strings, got unit}}
func.func private @f() -> (tensor<8xf32> {dist.origin})

//===----------------------------------------------------------------------===//
// dist.constraint
//===----------------------------------------------------------------------===//

// -----

func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // Tests that a constraint names an existing mesh.
  // expected-error @+1 {{'dist.constraint' op names unknown mesh @mesh}}
  %0 = dist.constraint %x <@mesh, [{}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // Tests that a constraint's mesh symbol names a dist.mesh.
  // expected-error @+1 {{'dist.constraint' op names @f, a 'func.func', not a dist.mesh}}
  %0 = dist.constraint %x <@f, [{}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<8x3xf32>) -> tensor<8x3xf32> {
  // Tests that a constraint's sharding is valid for its type.
  // expected-error @+1 {{'dist.constraint' op sharding: dimension 1 of size 3 in 'tensor<8x3xf32>' is not divisible by 4, the product of axes {"tp"}}}
  %0 = dist.constraint %x <@mesh, [{}, {"tp"}]> : tensor<8x3xf32>
  return %0 : tensor<8x3xf32>
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

// -----

func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // Tests that a collective names an existing mesh.
  // expected-error @+1 {{'dist.all_reduce' op names unknown mesh @mesh}}
  %0 = dist.all_reduce %x on @mesh axes = ["tp"] kind = sum : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // Tests that a collective's mesh symbol names a dist.mesh.
  // expected-error @+1 {{'dist.all_reduce' op names @f, a 'func.func', not a dist.mesh}}
  %0 = dist.all_reduce %x on @f axes = ["tp"] kind = sum : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // Tests that a collective's axes exist in the mesh.
  // expected-error @+1 {{'dist.all_reduce' op axis "pp" is not an axis of mesh @mesh}}
  %0 = dist.all_reduce %x on @mesh axes = ["dp", "pp"] kind = sum : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // Tests that a collective names each axis once.
  // expected-error @+1 {{'dist.all_reduce' op axis "tp" is listed twice}}
  %0 = dist.all_reduce %x on @mesh axes = ["tp", "tp"] kind = sum : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x32xf32> {
  // Tests that all_gather's dim is in range.
  // expected-error @+1 {{'dist.all_gather' op dim 2 is out of range for rank 2}}
  %0 = dist.all_gather %x on @mesh axes = ["tp"] dim = 2 : tensor<4x8xf32> -> tensor<4x32xf32>
  return %0 : tensor<4x32xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x32xf32> {
  // Tests that a negative dim is out of range.
  // expected-error @+1 {{'dist.all_gather' op dim -1 is out of range for rank 2}}
  %0 = dist.all_gather %x on @mesh axes = ["tp"] dim = -1 : tensor<4x8xf32> -> tensor<4x32xf32>
  return %0 : tensor<4x32xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8x4xf32> {
  // Tests that all_gather keeps the rank.
  // expected-error @+1 {{'dist.all_gather' op result rank 3 differs from input rank 2}}
  %0 = dist.all_gather %x on @mesh axes = ["tp"] dim = 1 : tensor<4x8xf32> -> tensor<4x8x4xf32>
  return %0 : tensor<4x8x4xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x32xf16> {
  // Tests that all_gather keeps the element type.
  // expected-error @+1 {{'dist.all_gather' op result element type 'f16' differs from input element type 'f32'}}
  %0 = dist.all_gather %x on @mesh axes = ["tp"] dim = 1 : tensor<4x8xf32> -> tensor<4x32xf16>
  return %0 : tensor<4x32xf16>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x16xf32> {
  // Tests that all_gather multiplies the gathered dimension by the group size.
  // expected-error @+1 {{'dist.all_gather' op result dimension 1 has size 16, expected 32 (input size 8 * group size 4)}}
  %0 = dist.all_gather %x on @mesh axes = ["tp"] dim = 1 : tensor<4x8xf32> -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<4x8xf32>) -> tensor<2x64xf32> {
  // Tests that all_gather keeps the other dimensions.
  // expected-error @+1 {{'dist.all_gather' op result dimension 0 has size 2, expected 4 (the input's size)}}
  %0 = dist.all_gather %x on @mesh axes = ["dp", "tp"] dim = 1 : tensor<4x8xf32> -> tensor<2x64xf32>
  return %0 : tensor<2x64xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<32x8xf32>) -> tensor<8x8xf32> {
  // Tests that reduce_scatter's dim is in range.
  // expected-error @+1 {{'dist.reduce_scatter' op dim 2 is out of range for rank 2}}
  %0 = dist.reduce_scatter %x on @mesh axes = ["tp"] dim = 2 kind = sum : tensor<32x8xf32> -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<32x8xf32>) -> tensor<8x8xi32> {
  // Tests that reduce_scatter keeps the element type.
  // expected-error @+1 {{'dist.reduce_scatter' op result element type 'i32' differs from input element type 'f32'}}
  %0 = dist.reduce_scatter %x on @mesh axes = ["tp"] dim = 0 kind = sum : tensor<32x8xf32> -> tensor<8x8xi32>
  return %0 : tensor<8x8xi32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<30x8xf32>) -> tensor<7x8xf32> {
  // Tests that reduce_scatter's dimension is divisible by the group size.
  // expected-error @+1 {{'dist.reduce_scatter' op input dimension 0 of size 30 is not divisible by the group size 4}}
  %0 = dist.reduce_scatter %x on @mesh axes = ["tp"] dim = 0 kind = sum : tensor<30x8xf32> -> tensor<7x8xf32>
  return %0 : tensor<7x8xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<32x8xf32>) -> tensor<16x8xf32> {
  // Tests that reduce_scatter divides the scattered dimension by the group size.
  // expected-error @+1 {{'dist.reduce_scatter' op result dimension 0 has size 16, expected 8 (input size 32 / group size 4)}}
  %0 = dist.reduce_scatter %x on @mesh axes = ["tp"] dim = 0 kind = sum : tensor<32x8xf32> -> tensor<16x8xf32>
  return %0 : tensor<16x8xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<32x8xf32>) -> tensor<8x4xf32> {
  // Tests that reduce_scatter keeps the other dimensions.
  // expected-error @+1 {{'dist.reduce_scatter' op result dimension 1 has size 4, expected 8 (the input's size)}}
  %0 = dist.reduce_scatter %x on @mesh axes = ["tp"] dim = 0 kind = sum : tensor<32x8xf32> -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<8xf32>) -> tensor<4xf32> {
  // Tests that all_reduce keeps the type (written generically, since the
  // custom form has one type only).
  // expected-error @+1 {{'dist.all_reduce' op failed to verify that all of {input, result} have same type}}
  %0 = "dist.all_reduce"(%x) <{axes = ["tp"], kind = #dist<reduction sum>, mesh = @mesh}> : (tensor<8xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<2x16xf32>) -> tensor<8x4xf32> {
  // Tests that all_to_all's split_dim is in range.
  // expected-error @+1 {{'dist.all_to_all' op split_dim 2 is out of range for rank 2}}
  %0 = dist.all_to_all %x on @mesh axes = ["tp"] split_dim = 2 concat_dim = 0 : tensor<2x16xf32> -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<2x16xf32>) -> tensor<8x4xf32> {
  // Tests that all_to_all's concat_dim is in range.
  // expected-error @+1 {{'dist.all_to_all' op concat_dim -1 is out of range for rank 2}}
  %0 = dist.all_to_all %x on @mesh axes = ["tp"] split_dim = 1 concat_dim = -1 : tensor<2x16xf32> -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<2x16xf32>) -> tensor<128xf32> {
  // Tests that all_to_all keeps the rank.
  // expected-error @+1 {{'dist.all_to_all' op result rank 1 differs from input rank 2}}
  %0 = dist.all_to_all %x on @mesh axes = ["tp"] split_dim = 1 concat_dim = 0 : tensor<2x16xf32> -> tensor<128xf32>
  return %0 : tensor<128xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<2x10xf32>) -> tensor<8x2xf32> {
  // Tests that all_to_all's split dimension is divisible by the group size.
  // expected-error @+1 {{'dist.all_to_all' op input split_dim 1 of size 10 is not divisible by the group size 4}}
  %0 = dist.all_to_all %x on @mesh axes = ["tp"] split_dim = 1 concat_dim = 0 : tensor<2x10xf32> -> tensor<8x2xf32>
  return %0 : tensor<8x2xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<2x16xf32>) -> tensor<8x16xf32> {
  // Tests that all_to_all divides the split dimension by the group size.
  // expected-error @+1 {{'dist.all_to_all' op result dimension 1 has size 16, expected 4 (split_dim: input size 16 / group size 4)}}
  %0 = dist.all_to_all %x on @mesh axes = ["tp"] split_dim = 1 concat_dim = 0 : tensor<2x16xf32> -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<2x16xf32>) -> tensor<2x4xf32> {
  // Tests that all_to_all multiplies the concat dimension by the group size.
  // expected-error @+1 {{'dist.all_to_all' op result dimension 0 has size 2, expected 8 (concat_dim: input size 2 * group size 4)}}
  %0 = dist.all_to_all %x on @mesh axes = ["tp"] split_dim = 1 concat_dim = 0 : tensor<2x16xf32> -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<2x16xf32>) -> tensor<2x4xf32> {
  // Tests that all_to_all with split_dim == concat_dim keeps the shape.
  // expected-error @+1 {{'dist.all_to_all' op result dimension 1 has size 4, expected 16 (split_dim and concat_dim coincide, so the input's size)}}
  %0 = dist.all_to_all %x on @mesh axes = ["tp"] split_dim = 1 concat_dim = 1 : tensor<2x16xf32> -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4, "x"=2]>
func.func @f(%x: tensor<2x16x3xf32>) -> tensor<8x4x6xf32> {
  // Tests that all_to_all keeps the dimensions it neither splits nor concatenates.
  // expected-error @+1 {{'dist.all_to_all' op result dimension 2 has size 6, expected 3 (the input's size)}}
  %0 = dist.all_to_all %x on @mesh axes = ["tp"] split_dim = 1 concat_dim = 0 : tensor<2x16x3xf32> -> tensor<8x4x6xf32>
  return %0 : tensor<8x4x6xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // Tests that collective_permute's pairs have an even number of entries.
  // expected-error @+1 {{'dist.collective_permute' op pairs must list (source, target) positions, an even number of entries, but has 3}}
  %0 = dist.collective_permute %x on @mesh axes = ["tp"] pairs = [0, 1, 2] : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // Tests that collective_permute's positions lie in the group.
  // expected-error @+1 {{'dist.collective_permute' op pairs entry #3 (4) is out of range [0, 4) of the group}}
  %0 = dist.collective_permute %x on @mesh axes = ["tp"] pairs = [0, 1, 1, 4] : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // Tests that negative positions are out of range.
  // expected-error @+1 {{'dist.collective_permute' op pairs entry #0 (-1) is out of range [0, 2) of the group}}
  %0 = dist.collective_permute %x on @mesh axes = ["dp"] pairs = [-1, 1] : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // Tests that a source sends once.
  // expected-error @+1 {{'dist.collective_permute' op source position 0 appears in more than one pair}}
  %0 = dist.collective_permute %x on @mesh axes = ["tp"] pairs = [0, 1, 0, 2] : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // Tests that a target receives once.
  // expected-error @+1 {{'dist.collective_permute' op target position 1 appears in more than one pair}}
  %0 = dist.collective_permute %x on @mesh axes = ["tp"] pairs = [0, 1, 2, 1] : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

dist.mesh @mesh <["pp"=4, "dp"=2]>
func.func @f(%x: tensor<8xf32>) {
  // Tests that send's peer lies on the axis.
  // expected-error @+1 {{'dist.send' op peer 4 is out of range [0, 4) of axis "pp"}}
  dist.send %x on @mesh axis = "pp" to 4 : tensor<8xf32>
  return
}

// -----

dist.mesh @mesh <["pp"=4, "dp"=2]>
func.func @f(%x: tensor<8xf32>) {
  // Tests that send's axis exists.
  // expected-error @+1 {{'dist.send' op axis "tp" is not an axis of mesh @mesh}}
  dist.send %x on @mesh axis = "tp" to 1 : tensor<8xf32>
  return
}

// -----

func.func @f(%x: tensor<8xf32>) {
  // Tests that send's mesh exists.
  // expected-error @+1 {{'dist.send' op names unknown mesh @mesh}}
  dist.send %x on @mesh axis = "pp" to 1 : tensor<8xf32>
  return
}

// -----

dist.mesh @mesh <["pp"=4, "dp"=2]>
func.func @f() -> tensor<8xf32> {
  // Tests that recv's peer is not negative.
  // expected-error @+1 {{'dist.recv' op peer -1 is out of range [0, 4) of axis "pp"}}
  %0 = dist.recv on @mesh axis = "pp" from -1 : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

dist.mesh @mesh <["pp"=4, "dp"=2]>
func.func @f() -> tensor<8xf32> {
  // Tests that recv's axis exists.
  // expected-error @+1 {{'dist.recv' op axis "x" is not an axis of mesh @mesh}}
  %0 = dist.recv on @mesh axis = "x" from 0 : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

dist.mesh @mesh <["pp"=4, "dp"=2]>
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  // Tests that collectives reject an unknown mesh even with valid shapes.
  // expected-error @+1 {{'dist.all_gather' op names unknown mesh @other}}
  %0 = dist.all_gather %x on @other axes = ["dp"] dim = 0 : tensor<8xf32> -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that a mesh lives directly in a module.
func.func @f() {
  // expected-error @+1 {{'dist.mesh' op expects parent op 'builtin.module'}}
  dist.mesh @inner <["dp"=2]>
  return
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<30x8xf32>) -> tensor<7x8xf32> {
  // Tests that slice's dimension is divisible by the group size.
  // expected-error @+1 {{'dist.slice' op input dimension 0 of size 30 is not divisible by the group size 4}}
  %0 = dist.slice %x on @mesh axes = ["tp"] dim = 0 : tensor<30x8xf32> -> tensor<7x8xf32>
  return %0 : tensor<7x8xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<32x8xf32>) -> tensor<16x8xf32> {
  // Tests that slice divides the sliced dimension by the group size.
  // expected-error @+1 {{'dist.slice' op result dimension 0 has size 16, expected 8 (input size 32 / group size 4)}}
  %0 = dist.slice %x on @mesh axes = ["tp"] dim = 0 : tensor<32x8xf32> -> tensor<16x8xf32>
  return %0 : tensor<16x8xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<32x8xf32>) -> tensor<8x8xf32> {
  // Tests that slice's dim is in range.
  // expected-error @+1 {{'dist.slice' op dim 2 is out of range for rank 2}}
  %0 = dist.slice %x on @mesh axes = ["tp"] dim = 2 : tensor<32x8xf32> -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f(%x: tensor<32x8xf32>) -> tensor<8x8xf32> {
  // Tests that slice names only axes of its mesh.
  // expected-error @+1 {{'dist.slice' op axis "pp" is not an axis of mesh @mesh}}
  %0 = dist.slice %x on @mesh axes = ["pp"] dim = 0 : tensor<32x8xf32> -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f() -> tensor<i32> {
  // Tests that axis_index names only axes of its mesh.
  // expected-error @+1 {{'dist.axis_index' op axis "pp" is not an axis of mesh @mesh}}
  %0 = dist.axis_index on @mesh axes = ["pp"] : tensor<i32>
  return %0 : tensor<i32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f() -> tensor<i32> {
  // Tests that axis_index names each axis once.
  // expected-error @+1 {{'dist.axis_index' op axis "tp" is listed twice}}
  %0 = dist.axis_index on @mesh axes = ["tp", "tp"] : tensor<i32>
  return %0 : tensor<i32>
}

// -----

dist.mesh @mesh <["dp"=2, "tp"=4]>
func.func @f() -> tensor<2xi32> {
  // Tests that axis_index's result is a rank-0 integer tensor.
  // expected-error @+1 {{'dist.axis_index' op result #0 must be 0D tensor of signless integer values, but got 'tensor<2xi32>'}}
  %0 = dist.axis_index on @mesh axes = ["tp"] : tensor<2xi32>
  return %0 : tensor<2xi32>
}

// -----

dist.mesh @mesh <["dp"=2]>
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // Tests that dist.bucket is a positive i64.
  // expected-error @+1 {{'dist.all_reduce' op 'dist.bucket' must be a positive i64, got 0 : i64}}
  %0 = dist.all_reduce %x on @mesh axes = ["dp"] kind = sum {dist.bucket = 0 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

dist.mesh @mesh <["dp"=2]>
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // Tests that dist.bucket is an integer of 64 bits.
  // expected-error @+1 {{'dist.all_reduce' op 'dist.bucket' must be a positive i64, got "one"}}
  %0 = dist.all_reduce %x on @mesh axes = ["dp"] kind = sum {dist.bucket = "one"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

dist.mesh @mesh <["dp"=2]>
func.func @f(%x: tensor<2xf32>) -> tensor<4xf32> {
  // Tests that only gradient reductions carry dist.bucket.
  // expected-error @+1 {{'dist.all_gather' op 'dist.bucket' is only valid on dist.all_reduce and dist.reduce_scatter}}
  %0 = dist.all_gather %x on @mesh axes = ["dp"] dim = 0 {dist.bucket = 1 : i64} : tensor<2xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Tests that dist.zero_stage is a ZeRO stage: an i64 from 1 to 3.
// expected-error @+1 {{'func.func' op 'dist.zero_stage' must be an i64 ZeRO stage 1, 2 or 3, got 4 : i64}}
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> attributes {dist.zero_stage = 4 : i64} {
  return %x : tensor<4xf32>
}

// -----

// Tests that dist.zero_stage is an integer.
// expected-error @+1 {{'func.func' op 'dist.zero_stage' must be an i64 ZeRO stage 1, 2 or 3, got "two"}}
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> attributes {dist.zero_stage = "two"} {
  return %x : tensor<4xf32>
}
