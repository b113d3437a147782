//===- AnnotatePass.cpp - dist-annotate -----------------------------------===//
//
// Wires the strategy tables of Strategies.h to a module: finds or creates the
// mesh (MeshSpec.h), checks it has the axes the strategy needs, annotates
// every function (RecipeAnnotation.h, then SequenceParallel.h).
//
//===----------------------------------------------------------------------===//

#include "passes/sharding/Passes.h"
#include "passes/sharding/MeshSpec.h"
#include "passes/sharding/RecipeAnnotation.h"
#include "passes/sharding/SequenceParallel.h"
#include "passes/sharding/Strategies.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/STLExtras.h"

#include <iterator>

namespace partita::sharding {
#define GEN_PASS_DEF_DISTANNOTATE
#include "passes/sharding/Passes.h.inc"

namespace {
using namespace mlir;

struct DistAnnotatePass : public impl::DistAnnotateBase<DistAnnotatePass> {
  using Base::Base;

  void runOnOperation() final {
    ModuleOp module = getOperation();
    const Strategy *recipe = lookupStrategy(strategy);
    if (!recipe) {
      InFlightDiagnostic diag = module.emitError()
                                << "unknown strategy '" << strategy
                                << "'; known strategies: ";
      llvm::interleaveComma(getStrategies(), diag,
                            [&](const Strategy &s) { diag << s.name; });
      return signalPassFailure();
    }
    if (sequenceParallel && !recipe->needsTensorAxis()) {
      module.emitError() << "sequence-parallel splits the sequence over the "
                            "tensor axis, but strategy '"
                         << strategy
                         << "' has none; use megatron or dp+megatron";
      return signalPassFailure();
    }
    FailureOr<dist::MeshOp> meshOp = getOrCreateMesh(module, meshName, mesh);
    if (failed(meshOp) || failed(checkAxes(*recipe, *meshOp)))
      return signalPassFailure();

    AnnotateOptions options{meshName,   meshOp->getMesh(), dataAxis,
                            tensorAxis, contextAxis,       regatherNormOutputs};
    for (auto func : module.getOps<FunctionOpInterface>())
      if (failed(annotateFunction(func, *recipe, options)))
        return signalPassFailure();
    if (!sequenceParallel)
      return;
    for (auto func : module.getOps<FunctionOpInterface>())
      if (failed(applySequenceParallel(func, *recipe, options)))
        return signalPassFailure();
  }

private:
  /// Checks that `meshOp` has the axes `recipe` splits over.
  LogicalResult checkAxes(const Strategy &recipe, dist::MeshOp meshOp) {
    dist::MeshAttr meshAttr = meshOp.getMesh();
    auto need = [&](StringRef axis, StringRef option) -> LogicalResult {
      if (axis.empty()) {
        meshOp.emitError() << "strategy '" << recipe.name << "' needs a "
                           << option << " but the option is empty";
        return failure();
      }
      if (meshAttr.getAxis(axis))
        return success();
      meshOp.emitError() << "strategy '" << recipe.name
                         << "' needs mesh axis \"" << axis << "\" (" << option
                         << "), which mesh @" << meshName
                         << " lacks; its axes are \""
                         << printMeshSpec(meshAttr.getAxes()) << "\"";
      return failure();
    };
    if (recipe.needsDataAxis() && failed(need(dataAxis, "data-axis")))
      return failure();
    if (recipe.needsTensorAxis() && failed(need(tensorAxis, "tensor-axis")))
      return failure();
    if (recipe.needsContextAxis() && failed(need(contextAxis, "context-axis")))
      return failure();
    // Two roles of one strategy need two axes.
    struct Role {
      bool needed;
      StringRef option, axis;
    } roles[] = {{recipe.needsDataAxis(), "data-axis", dataAxis},
                 {recipe.needsTensorAxis(), "tensor-axis", tensorAxis},
                 {recipe.needsContextAxis(), "context-axis", contextAxis}};
    for (size_t i = 0; i < std::size(roles); ++i)
      for (size_t j = i + 1; j < std::size(roles); ++j)
        if (roles[i].needed && roles[j].needed &&
            roles[i].axis == roles[j].axis) {
          meshOp.emitError()
              << "strategy '" << recipe.name << "' needs two different axes, "
              << "but " << roles[i].option << " and " << roles[j].option
              << " are both \"" << roles[i].axis << "\"";
          return failure();
        }
    return success();
  }
};
} // namespace
} // namespace partita::sharding
