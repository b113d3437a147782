//===- DistAttrs.cpp - dist attributes ------------------------------------===//
//
// Parsing, printing and verification of meshes and shardings.
//
//===----------------------------------------------------------------------===//

#include "dialects/dist/IR/DistDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace partita::dist;

#include "dialects/dist/IR/DistEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/dist/IR/DistAttrs.cpp.inc"

void DistDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/dist/IR/DistAttrs.cpp.inc"
      >();
}

// TODO(dist): real parsers, printers and verifiers.
Attribute MeshAttr::parse(AsmParser &parser, Type) {
  parser.emitError(parser.getCurrentLocation(), "not implemented");
  return {};
}
void MeshAttr::print(AsmPrinter &printer) const {}
LogicalResult MeshAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               ArrayRef<MeshAxisAttr> axes,
                               ArrayRef<int64_t> deviceIds) {
  return success();
}
MeshAxisAttr MeshAttr::getAxis(StringRef name) const {
  for (MeshAxisAttr axis : getAxes())
    if (axis.getName() == name)
      return axis;
  return {};
}
int64_t MeshAttr::getNumDevices() const {
  int64_t n = 1;
  for (MeshAxisAttr axis : getAxes())
    n *= axis.getSize();
  return n;
}

Attribute AxisRefAttr::parse(AsmParser &parser, Type) {
  parser.emitError(parser.getCurrentLocation(), "not implemented");
  return {};
}
void AxisRefAttr::print(AsmPrinter &printer) const {}
int64_t AxisRefAttr::getSize(MeshAttr mesh) const {
  if (isSubAxis())
    return getSubSize();
  MeshAxisAttr axis = mesh.getAxis(getName());
  return axis ? axis.getSize() : 1;
}

Attribute DimShardingAttr::parse(AsmParser &parser, Type) {
  parser.emitError(parser.getCurrentLocation(), "not implemented");
  return {};
}
void DimShardingAttr::print(AsmPrinter &printer) const {}
int64_t DimShardingAttr::getShardCount(MeshAttr mesh) const {
  int64_t n = 1;
  for (AxisRefAttr axis : getAxes())
    n *= axis.getSize(mesh);
  return n;
}

Attribute ShardingAttr::parse(AsmParser &parser, Type) {
  parser.emitError(parser.getCurrentLocation(), "not implemented");
  return {};
}
void ShardingAttr::print(AsmPrinter &printer) const {}
LogicalResult
ShardingAttr::verifyFor(function_ref<InFlightDiagnostic()> emitError,
                        MeshAttr mesh, ShapedType type) const {
  return success();
}
SmallVector<int64_t> ShardingAttr::getLocalShape(MeshAttr mesh,
                                                 ArrayRef<int64_t> shape) const {
  SmallVector<int64_t> local(shape);
  for (auto [i, dim] : llvm::enumerate(getDims()))
    local[i] /= dim.getShardCount(mesh);
  return local;
}
ShardingAttr ShardingAttr::getReplicated(MLIRContext *ctx, StringRef meshName,
                                         int64_t rank, bool closed) {
  SmallVector<DimShardingAttr> dims(
      rank, DimShardingAttr::get(ctx, {}, closed, std::nullopt));
  return ShardingAttr::get(ctx, FlatSymbolRefAttr::get(ctx, meshName), dims,
                           {}, ReductionKind::Sum);
}
