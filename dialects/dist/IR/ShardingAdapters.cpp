//===- ShardingAdapters.cpp - the sharding model <-> dist attributes -----===//
//
// Field-by-field conversions between ShardingModel.h and the attributes.
//
//===----------------------------------------------------------------------===//

#include "dialects/dist/IR/ShardingAdapters.h"

#include "llvm/ADT/STLExtras.h"

using namespace mlir;

namespace partita::dist {

FailureOr<Mesh> meshFromAttr(MeshAttr attr, StringRef name,
                             EmitErrorFn emitError) {
  if (!attr)
    return emitError() << "missing mesh" << (name.empty() ? "" : " @") << name;
  Mesh mesh;
  mesh.name = name.str();
  for (MeshAxisAttr axis : attr.getAxes()) {
    if (!axis)
      return emitError() << "mesh axis is null";
    mesh.axes.push_back(MeshAxis{axis.getName().str(), axis.getSize()});
  }
  mesh.deviceIds.assign(attr.getDeviceIds().begin(), attr.getDeviceIds().end());
  if (std::optional<std::string> error = mesh.verify())
    return emitError() << "invalid mesh " << mesh.toString() << ": " << *error;
  return mesh;
}

FailureOr<Mesh> meshFromOp(MeshOp op) {
  return meshFromAttr(op.getMesh(), op.getSymName(),
                      [&] { return op.emitError(); });
}

MeshAttr meshToAttr(MLIRContext *ctx, const Mesh &mesh) {
  SmallVector<MeshAxisAttr> axes;
  for (const MeshAxis &axis : mesh.axes)
    axes.push_back(MeshAxisAttr::get(ctx, axis.name, axis.size));
  return MeshAttr::get(ctx, axes, mesh.deviceIds);
}

FailureOr<Sharding> shardingFromAttr(ShardingAttr attr, EmitErrorFn emitError) {
  if (!attr)
    return emitError() << "missing sharding";
  auto readAxes = [&](ArrayRef<AxisRefAttr> refs,
                      std::vector<AxisRef> &out) -> LogicalResult {
    for (AxisRefAttr ref : refs) {
      if (!ref)
        return emitError() << "null axis in sharding " << attr;
      out.emplace_back(ref.getName().str(), ref.getPreSize(), ref.getSubSize());
    }
    return success();
  };
  Sharding sharding;
  for (DimShardingAttr dim : attr.getDims()) {
    if (!dim)
      return emitError() << "null dimension in sharding " << attr;
    DimSharding model;
    model.closed = dim.getIsClosed();
    model.priority = dim.getPriority();
    if (failed(readAxes(dim.getAxes(), model.axes)))
      return failure();
    sharding.dims.push_back(std::move(model));
  }
  if (failed(readAxes(attr.getPartialAxes(), sharding.partialAxes)))
    return failure();
  sharding.partialKind = attr.getPartialKind();
  return sharding;
}

FailureOr<Sharding> shardingFromAttr(ShardingAttr attr, const Mesh &mesh,
                                     EmitErrorFn emitError) {
  FailureOr<Sharding> sharding = shardingFromAttr(attr, emitError);
  if (failed(sharding))
    return failure();
  if (!mesh.name.empty() && attr.getMeshName().getValue() != mesh.name)
    return emitError() << "sharding " << attr << " names mesh "
                       << attr.getMeshName() << ", not @" << mesh.name;
  if (std::optional<std::string> error = sharding->verify(mesh))
    return emitError() << "invalid sharding " << attr << ": " << *error;
  return sharding;
}

ShardingAttr shardingToAttr(MLIRContext *ctx, const Sharding &sharding,
                            StringRef meshName) {
  auto refs = [&](const std::vector<AxisRef> &axes) {
    return llvm::to_vector(llvm::map_range(axes, [&](const AxisRef &axis) {
      return AxisRefAttr::get(ctx, axis.name, axis.preSize, axis.subSize);
    }));
  };
  SmallVector<DimShardingAttr> dims;
  for (const DimSharding &dim : sharding.dims)
    dims.push_back(
        DimShardingAttr::get(ctx, refs(dim.axes), dim.closed, dim.priority));
  return ShardingAttr::get(ctx, FlatSymbolRefAttr::get(ctx, meshName), dims,
                           refs(sharding.partialAxes), sharding.partialKind);
}

} // namespace partita::dist
