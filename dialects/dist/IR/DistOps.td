//===- DistOps.td - dist operations -----------------------*- tablegen -*-===//
//
// Mesh declaration, sharding constraints and collectives on local tensors.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIST_OPS
#define PARTITA_DIST_OPS

include "dialects/dist/IR/DistDialect.td"
include "dialects/dist/IR/DistAttrs.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"

def Dist_MeshOp : Dist_Op<"mesh", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "Declares a named logical device mesh.";
  let description = [{
    ```mlir
    dist.mesh @mesh <["dp"=2, "tp"=4]>
    ```
    declares an 8-device mesh with axes `dp` (major) and `tp` (minor).
    Shardings and collectives name the mesh by its symbol.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, Dist_MeshAttr:$mesh);
  let assemblyFormat = "$sym_name $mesh attr-dict";
  let hasVerifier = 1;
}

def Dist_ConstraintOp : Dist_Op<"constraint", [
    Pure, AllTypesMatch<["input", "result"]>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Pins the sharding of a value.";
  let description = [{
    ```mlir
    %1 = dist.constraint %0 <@mesh, [{"dp"}, {} ]> : tensor<8x16xf32>
    ```
    `%1` is `%0` laid out as the sharding says. Propagation treats the
    sharding as an annotation; partitioning reshards to it.
  }];
  let arguments = (ins AnyRankedTensor:$input, Dist_ShardingAttr:$sharding);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input $sharding attr-dict `:` type($result)";
}

class Dist_CollectiveOp<string mnemonic, list<Trait> traits = []>
    : Dist_Op<mnemonic, !listconcat(traits, [
        DeclareOpInterfaceMethods<SymbolUserOpInterface>])> {
  let hasVerifier = 1;
  code commonDecl = [{
    /// Product of the sizes of the named axes on the mesh; requires a valid
    /// mesh symbol (checked by verifySymbolUses).
    int64_t getGroupSize();
  }];
}

def Dist_AllGatherOp : Dist_CollectiveOp<"all_gather", [Pure]> {
  let summary = "Concatenates the local tensors of a device group along a dimension.";
  let description = [{
    Every device in the group spanned by `axes` contributes its local tensor;
    all receive the concatenation along `dim`, ordered by their position in
    the group (axes major to minor).
    ```mlir
    %1 = dist.all_gather %0 on @mesh axes = ["tp"] dim = 1
        : tensor<4x8xf32> -> tensor<4x32xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$dim);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh `axes` `=` $axes `dim` `=` $dim attr-dict
    `:` type($input) `->` type($result)
  }];
  let extraClassDeclaration = commonDecl;
}

def Dist_ReduceScatterOp : Dist_CollectiveOp<"reduce_scatter", [Pure]> {
  let summary = "Reduces over a device group and leaves each device one slice.";
  let description = [{
    ```mlir
    %1 = dist.reduce_scatter %0 on @mesh axes = ["tp"] dim = 0 kind = sum
        : tensor<32x8xf32> -> tensor<8x8xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$dim,
                       Dist_ReductionKindAttr:$kind);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh `axes` `=` $axes `dim` `=` $dim `kind` `=` `` $kind
    attr-dict `:` type($input) `->` type($result)
  }];
  let extraClassDeclaration = commonDecl;
}

def Dist_AllReduceOp : Dist_CollectiveOp<"all_reduce", [
    Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "Reduces over a device group; every device gets the result.";
  let description = [{
    ```mlir
    %1 = dist.all_reduce %0 on @mesh axes = ["tp"] kind = sum : tensor<8x8xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes, Dist_ReductionKindAttr:$kind);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh `axes` `=` $axes `kind` `=` `` $kind attr-dict
    `:` type($result)
  }];
  let extraClassDeclaration = commonDecl;
}

def Dist_AllToAllOp : Dist_CollectiveOp<"all_to_all", [Pure]> {
  let summary = "Splits along one dimension and concatenates along another across a group.";
  let description = [{
    Each device splits its local tensor into group-size pieces along
    `split_dim`, sends piece i to the i-th device of the group, and
    concatenates what it receives along `concat_dim`.
    ```mlir
    %1 = dist.all_to_all %0 on @mesh axes = ["tp"] split_dim = 1 concat_dim = 0
        : tensor<2x16xf32> -> tensor<8x4xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$split_dim,
                       I64Attr:$concat_dim);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh `axes` `=` $axes `split_dim` `=` $split_dim
    `concat_dim` `=` $concat_dim attr-dict `:` type($input) `->` type($result)
  }];
  let extraClassDeclaration = commonDecl;
}

def Dist_CollectivePermuteOp : Dist_CollectiveOp<"collective_permute", [
    Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "Sends each device's tensor to another position in its group.";
  let description = [{
    `pairs` lists (source, target) positions within the group spanned by
    `axes`, flattened. A device that is no target receives zeros.
    ```mlir
    %1 = dist.collective_permute %0 on @mesh axes = ["tp"] pairs = [0, 1, 1, 0]
        : tensor<8xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes, DenseI64ArrayAttr:$pairs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh `axes` `=` $axes `pairs` `=` $pairs attr-dict
    `:` type($result)
  }];
  let extraClassDeclaration = commonDecl;
}

def Dist_SliceOp : Dist_CollectiveOp<"slice", [Pure]> {
  let summary = "Keeps this device's block of a tensor along one dimension (no communication).";
  let description = [{
    The inverse of `all_gather`, with no communication: the input is the
    same on every device of the group spanned by `axes`; the device at
    position i of the group (axes major to minor, as in `all_gather`) keeps
    the i-th of group-size equal blocks along `dim`. The input's `dim` must
    be divisible by the group size. The partitioner (`dist-partition`) emits
    it where a replicated value meets a consumer that wants it split.
    ```mlir
    %1 = dist.slice %0 on @mesh axes = ["tp"] dim = 1
        : tensor<4x32xf32> -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$dim);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh `axes` `=` $axes `dim` `=` $dim attr-dict
    `:` type($input) `->` type($result)
  }];
  let extraClassDeclaration = commonDecl;
}

def Dist_AxisIndexOp : Dist_CollectiveOp<"axis_index", [Pure]> {
  let summary = "This device's position in the group spanned by some mesh axes.";
  let description = [{
    No communication: the result is the position of the running device in
    the group spanned by `axes`, counted as in `all_gather` (axes major to
    minor): for axes `["x", "y"]` it is `x * size(y) + y` of the device's
    mesh coordinates; with no axes it is 0. The partitioner
    (`dist-partition`) uses it for the offsets of a device's shard, e.g. the
    first vocabulary row of a vocabulary-parallel embedding.
    ```mlir
    %i = dist.axis_index on @mesh axes = ["tp"] : tensor<i32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$mesh, StrArrayAttr:$axes);
  let results = (outs 0DTensorOf<[AnySignlessInteger]>:$result);
  let assemblyFormat = [{
    `on` $mesh `axes` `=` $axes attr-dict `:` type($result)
  }];
  let extraClassDeclaration = commonDecl;
}

def Dist_MaskOp : Dist_CollectiveOp<"mask", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "Writes a value into the padding of a padded dimension (no communication).";
  let description = [{
    For a dimension of global size `size` split over `axes` and padded
    (each device holds `L` = the local size of `dim` elements, the group
    `g * L >= size`), the device at position `p` of the group spanned by
    `axes` (counted as in `all_gather`) holds global indices
    `p * L .. p * L + L - 1` of `dim`; the result is the input with `value`
    written at every element whose global index is `>= size`, the padding.
    With no axes the dimension is whole but padded (`L >= size`).
    `value` is converted to the element type (an integer tensor takes it
    rounded toward zero; `-inf` is allowed for floats).
    The partitioner (`dist-partition`) emits it before an op that reduces
    over a padded dimension, with the reduction's identity (0 for a sum,
    `-inf` for a max), so padding never reaches a reduced value.
    ```mlir
    %1 = dist.mask %0 on @mesh axes = ["dp"] dim = 0 size = 6 value = 0.0
        : tensor<2x16xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$dim, I64Attr:$size,
                       F64Attr:$value);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh `axes` `=` $axes `dim` `=` $dim `size` `=` $size
    `value` `=` $value attr-dict `:` type($result)
  }];
  let extraClassDeclaration = commonDecl;
}

def Dist_SendOp : Dist_CollectiveOp<"send"> {
  // Only the axis and the peer to check, both against the mesh.
  let hasVerifier = 0;
  let summary = "Sends a tensor to the device at another position along one axis.";
  let description = [{
    Used between pipeline stages: the device at position p along `axis`
    sends to the device at position `peer`, all other coordinates equal.
    ```mlir
    dist.send %0 on @mesh axis = "pp" to 1 : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       StrAttr:$axis, I64Attr:$peer);
  let assemblyFormat = [{
    $input `on` $mesh `axis` `=` $axis `to` $peer attr-dict `:` type($input)
  }];
  let extraClassDeclaration = commonDecl;
}

def Dist_RecvOp : Dist_CollectiveOp<"recv"> {
  // Only the axis and the peer to check, both against the mesh.
  let hasVerifier = 0;
  let summary = "Receives a tensor sent by `dist.send` from another position along one axis.";
  let description = [{
    ```mlir
    %0 = dist.recv on @mesh axis = "pp" from 0 : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$mesh, StrAttr:$axis, I64Attr:$peer);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    `on` $mesh `axis` `=` $axis `from` $peer attr-dict `:` type($result)
  }];
  let extraClassDeclaration = commonDecl;
}

#endif // PARTITA_DIST_OPS
