//===- MicrobatchAnnotatePass.cpp - the batch split over a microbatch axis ===//
//
// dist-microbatch-annotate: adds the `microbatch` mesh axis and splits every
// input's batch dimension over it (see Passes.td).
//
//===----------------------------------------------------------------------===//

#include "passes/pipeline/Passes.h"

#include "dialects/dist/IR/DistDialect.h"
#include "dialects/dist/IR/DistOps.h"
#include "dialects/dist/IR/ShardingAdapters.h"
#include "dialects/nn/IR/NNAttributes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace partita::pipeline {
#define GEN_PASS_DEF_DISTMICROBATCHANNOTATE
#include "passes/pipeline/Passes.h.inc"
} // namespace partita::pipeline

using namespace mlir;
using namespace partita;

namespace {

struct DistMicrobatchAnnotatePass
    : public pipeline::impl::DistMicrobatchAnnotateBase<
          DistMicrobatchAnnotatePass> {
  using DistMicrobatchAnnotateBase::DistMicrobatchAnnotateBase;

  /// The mesh `func`'s annotations use (its dist.mesh, else its arguments'),
  /// else the module's only mesh, else a new @mesh with no axes.
  FailureOr<dist::MeshOp> findMesh(ModuleOp module, func::FuncOp func) {
    FlatSymbolRefAttr symbol =
        func->getAttrOfType<FlatSymbolRefAttr>("dist.mesh");
    for (unsigned i = 0; i < func.getNumArguments() && !symbol; ++i)
      if (auto s = func.getArgAttrOfType<dist::ShardingAttr>(
              i, dist::DistDialect::kShardingAttrName))
        symbol = s.getMeshName();
    if (symbol) {
      auto mesh = module.lookupSymbol<dist::MeshOp>(symbol.getAttr());
      if (!mesh)
        return func.emitError() << "names mesh " << symbol
                                << ", which is not a dist.mesh";
      return mesh;
    }
    auto meshes = module.getOps<dist::MeshOp>();
    if (std::distance(meshes.begin(), meshes.end()) == 1)
      return *meshes.begin();
    if (!meshes.empty())
      return func.emitError() << "has no annotation naming one of the "
                                 "module's meshes to add the microbatch axis to";
    auto builder = OpBuilder::atBlockBegin(module.getBody());
    return dist::MeshOp::create(builder, module.getLoc(), "mesh",
                                dist::MeshAttr::get(module.getContext(), {},
                                                    /*deviceIds=*/{}));
  }

  void runOnOperation() final {
    if (microbatches < 1 || (microbatches == 1 && !always))
      return;
    ModuleOp module = getOperation();
    func::FuncOp step;
    for (func::FuncOp func : module.getOps<func::FuncOp>()) {
      bool hasInput = false;
      for (unsigned i = 0; i < func.getNumArguments(); ++i)
        hasInput |= nn::inputAttr.onArg(func, i);
      if (!hasInput)
        continue;
      if (step) {
        func.emitError() << "microbatches: more than one function takes "
                            "nn.input arguments (also @"
                         << step.getName() << ")";
        return signalPassFailure();
      }
      step = func;
    }
    if (!step) {
      module.emitError() << "microbatches: no function takes nn.input "
                            "arguments to split into microbatches";
      return signalPassFailure();
    }
    for (unsigned i = 0; i < step.getNumArguments(); ++i) {
      if (!nn::inputAttr.onArg(step, i))
        continue;
      auto type = dyn_cast<RankedTensorType>(step.getArgumentTypes()[i]);
      StringRef name = nn::inputAttr.getArg(step, i).getValue();
      if (!type || type.getRank() == 0 || type.isDynamicDim(0) ||
          type.getDimSize(0) % microbatches != 0) {
        mlir::emitError(step.getArgument(i).getLoc())
            << "input '" << name << "': its batch (dimension 0 of "
            << step.getArgumentTypes()[i]
            << ") is not divisible by the microbatch count "
            << int64_t(microbatches);
        return signalPassFailure();
      }
    }
    FailureOr<dist::MeshOp> meshOp = findMesh(module, step);
    if (failed(meshOp))
      return signalPassFailure();
    FailureOr<dist::Mesh> mesh = dist::meshFromOp(*meshOp);
    if (failed(mesh))
      return signalPassFailure();
    if (!mesh->deviceIds.empty()) {
      meshOp->emitError() << "microbatches: a mesh with an explicit device "
                             "order is not supported";
      return signalPassFailure();
    }
    if (mesh->findAxis(pipeline::kMicrobatchAxis.str())) {
      meshOp->emitError() << "already has an axis named '"
                          << pipeline::kMicrobatchAxis
                          << "', which microbatching reserves";
      return signalPassFailure();
    }
    mesh->axes.push_back({pipeline::kMicrobatchAxis.str(), microbatches});
    MLIRContext *ctx = module.getContext();
    meshOp->setMeshAttr(dist::meshToAttr(ctx, *mesh));

    StringRef meshName = meshOp->getSymName();
    for (unsigned i = 0; i < step.getNumArguments(); ++i) {
      if (!nn::inputAttr.onArg(step, i))
        continue;
      auto type = cast<RankedTensorType>(step.getArgumentTypes()[i]);
      dist::Sharding sharding;
      sharding.dims.assign(type.getRank(), dist::DimSharding({}, false));
      if (auto attr = step.getArgAttrOfType<dist::ShardingAttr>(
              i, dist::DistDialect::kShardingAttrName)) {
        FailureOr<dist::Sharding> have = dist::shardingFromAttr(
            attr, *mesh, [&] { return step.emitError(); });
        if (failed(have))
          return signalPassFailure();
        sharding = *have;
      }
      sharding.dims[0].axes.push_back(
          dist::AxisRef(pipeline::kMicrobatchAxis.str()));
      step.setArgAttr(i, dist::DistDialect::kShardingAttrName,
                      dist::shardingToAttr(ctx, sharding, meshName));
    }
    step->setAttr(pipeline::kMicrobatchesAttrName,
                  IntegerAttr::get(IntegerType::get(ctx, 64), microbatches));
  }
};

} // namespace
