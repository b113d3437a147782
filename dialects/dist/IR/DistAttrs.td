//===- DistAttrs.td - dist attributes ---------------------*- tablegen -*-===//
//
// Meshes, axis references and the sharding attribute.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIST_ATTRS
#define PARTITA_DIST_ATTRS

include "dialects/dist/IR/DistDialect.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

def Dist_ReductionKind : I32EnumAttr<"ReductionKind", "how values are combined", [
    I32EnumAttrCase<"Sum", 0, "sum">,
    I32EnumAttrCase<"Max", 1, "max">,
    I32EnumAttrCase<"Min", 2, "min">,
  ]> {
  let cppNamespace = "::partita::dist";
  let genSpecializedAttr = 0;
}
def Dist_ReductionKindAttr : EnumAttr<Dist_Dialect, Dist_ReductionKind, "reduction">;

// The role of a factor in a sharding rule (ShardingRule.h): what the factor
// means to its op's collective-aware lowering, so that the partitioner finds
// a factor by what it is instead of by a name that must stay in step with
// the rule. Most factors have none.
def Dist_FactorRole : I32EnumAttr<"FactorRole", "what a sharding-rule factor is", [
    // No special meaning: the factor's kind says everything.
    I32EnumAttrCase<"None", 0, "none">,
    // Positions along the (query) sequence, read globally by the op (rotary
    // angles, the causal mask): a split needs each shard's offset.
    I32EnumAttrCase<"Sequence", 1, "sequence">,
    // Attention's key sequence: split, the partial softmaxes need merging.
    I32EnumAttrCase<"KeySequence", 2, "key_sequence">,
    // Attention's value head dimension (the result's last dimension).
    I32EnumAttrCase<"ValueHeadDim", 3, "value_head_dim">,
    // Rows of an embedding table, or classes of cross-entropy logits.
    I32EnumAttrCase<"Vocabulary", 4, "vocabulary">,
  ]> {
  let cppNamespace = "::partita::dist";
  let genSpecializedAttr = 0;
}

def Dist_MeshAxisAttr : Dist_Attr<"MeshAxis", "mesh_axis"> {
  let summary = "A named mesh axis and its size.";
  let parameters = (ins StringRefParameter<"axis name">:$name,
                        "int64_t":$size);
  let assemblyFormat = "`<` $name `=` $size `>`";
}

def Dist_MeshAttr : Dist_Attr<"Mesh", "mesh"> {
  let summary = "The axes of a logical device mesh, major to minor.";
  let description = [{
    `<["dp"=2, "tp"=4]>` is a 2x4 mesh of 8 devices; the last axis is the
    fastest varying. An optional `devices=[...]` lists the physical device id
    of every mesh position in row-major order (default: 0..N-1).
  }];
  let parameters = (ins
    ArrayRefParameter<"MeshAxisAttr">:$axes,
    OptionalArrayRefParameter<"int64_t">:$deviceIds);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The axis with this name, or null.
    MeshAxisAttr getAxis(::llvm::StringRef name) const;
    /// Product of all axis sizes.
    int64_t getNumDevices() const;
  }];
}

def Dist_AxisRefAttr : Dist_Attr<"AxisRef", "axis"> {
  let summary = "A reference to a mesh axis, or to a sub-axis of it.";
  let description = [{
    Printed inside a sharding as `"tp"`. A sub-axis `"tp":(2)2` names the part
    of axis `tp` of size 2 that follows a major part of size 2 (as in Shardy);
    it is parsed and verified so that expert and sequence degrees that are not
    whole axes fit later, but passes reject it until they support it.
  }];
  let parameters = (ins StringRefParameter<"axis name">:$name,
                        DefaultValuedParameter<"int64_t", "1">:$preSize,
                        DefaultValuedParameter<"int64_t", "0">:$subSize);
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    bool isSubAxis() const { return getSubSize() != 0; }
    /// Number of devices this reference spans on `mesh`.
    int64_t getSize(MeshAttr mesh) const;
    /// Whether this and `other` share devices of one axis: the same axis,
    /// whole or sub-axes whose ranges [pre, pre*sub) intersect.
    bool overlaps(AxisRefAttr other, MeshAttr mesh) const;
    /// The form used inside a sharding: `"tp"` or `"tp":(2)2`.
    std::string toString() const;
  }];
}

def Dist_DimShardingAttr : Dist_Attr<"DimSharding", "dim_sharding"> {
  let summary = "The mesh axes that split one tensor dimension.";
  let description = [{
    `{"dp", "tp"}` splits the dimension over `dp` (major) then `tp` (minor);
    `{}` leaves it whole. A closed dimension (the default) may not change
    during propagation; `{"dp", ?}` is open and may gain further axes. A
    suffix `p<N>` is the user's priority (`p0` strongest).
  }];
  let parameters = (ins
    OptionalArrayRefParameter<"AxisRefAttr">:$axes,
    DefaultValuedParameter<"bool", "true">:$isClosed,
    OptionalParameter<"std::optional<int64_t>">:$priority);
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    /// Product of the axis sizes on `mesh`.
    int64_t getShardCount(MeshAttr mesh) const;
  }];
}

def Dist_ShardingAttr : Dist_Attr<"Sharding", "sharding"> {
  let summary = "How one tensor is laid out over a mesh.";
  let description = [{
    `#dist.sharding<@mesh, [{"dp"}, {}, {"tp"} ], partial={"tp"}>` names the
    mesh, then per tensor dimension the axes that split it, then the axes over
    which the value is an unreduced partial result (`partial=max{...}` for a
    partial maximum; sum is the default). Axes named nowhere mean replication.
  }];
  let parameters = (ins
    "::mlir::FlatSymbolRefAttr":$meshName,
    OptionalArrayRefParameter<"DimShardingAttr">:$dims,
    OptionalArrayRefParameter<"AxisRefAttr">:$partialAxes,
    DefaultValuedParameter<"ReductionKind", "ReductionKind::Sum">:$partialKind);
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    int64_t getRank() const { return getDims().size(); }
    /// Checks this sharding against `mesh` and a tensor of `type`; reports
    /// through `emitError`. Nothing about the sharding is assumed valid.
    ::mlir::LogicalResult verifyFor(
        ::llvm::function_ref<::mlir::InFlightDiagnostic()> emitError,
        MeshAttr mesh, ::mlir::ShapedType type) const;
    /// The local (per-device) shape of a tensor of `globalShape`.
    ::llvm::SmallVector<int64_t> getLocalShape(
        MeshAttr mesh, ::llvm::ArrayRef<int64_t> globalShape) const;
    /// Number of shards of the whole tensor: the product of the shard counts
    /// of its dimensions on `mesh`.
    int64_t getShardCount(MeshAttr mesh) const;
    /// A fully replicated sharding of a tensor of `rank` on `mesh`.
    static ShardingAttr getReplicated(::mlir::MLIRContext *ctx,
                                      ::llvm::StringRef meshName, int64_t rank,
                                      bool closed = true);
  }];
}

#endif // PARTITA_DIST_ATTRS
