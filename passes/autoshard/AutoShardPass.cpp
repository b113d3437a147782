//===- AutoShardPass.cpp - dist-auto-shard --------------------------------===//
//
// Finds or creates the mesh (MeshSpec.h), runs the per-op sharding search
// (OpShardingSearch.h) on every function with a body, and records its
// report on the function as `dist.auto_shard`.
//
//===----------------------------------------------------------------------===//

#include "passes/autoshard/Passes.h"
#include "passes/autoshard/OpShardingSearch.h"
#include "passes/sharding/MeshSpec.h"

#include "dialects/dist/IR/ShardingAdapters.h"

#include "mlir/IR/Builders.h"

namespace partita::autoshard {
#define GEN_PASS_DEF_DISTAUTOSHARD
#include "passes/autoshard/Passes.h.inc"

namespace {
using namespace mlir;

struct DistAutoShardPass : public impl::DistAutoShardBase<DistAutoShardPass> {
  using Base::Base;

  void runOnOperation() final {
    ModuleOp module = getOperation();
    FailureOr<CostRates> rates = readRates(module);
    if (failed(rates))
      return signalPassFailure();
    FailureOr<dist::MeshOp> meshOp =
        sharding::getOrCreateMesh(module, meshName, mesh);
    if (failed(meshOp))
      return signalPassFailure();
    FailureOr<dist::Mesh> meshModel = dist::meshFromOp(*meshOp);
    if (failed(meshModel))
      return signalPassFailure();
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      FailureOr<AutoShardReport> report =
          autoShardFunction(func, *meshModel, *rates);
      if (failed(report))
        return signalPassFailure();
      func->setAttr(dist::DistDialect::kAutoShardAttrName,
                    toAttr(*report, func.getContext()));
    }
  }

private:
  FailureOr<CostRates> readRates(ModuleOp module) {
    struct Positive {
      const char *option;
      double value;
    } positives[] = {{"device-tflops", deviceTflops},
                     {"memory-gbytes", memoryGbytes},
                     {"link-gbytes", linkGbytes},
                     {"node-link-gbytes", nodeLinkGbytes},
                     {"time-limit", timeLimit}};
    for (const Positive &p : positives)
      if (!(p.value > 0)) {
        module.emitError() << "dist-auto-shard: " << p.option
                           << " must be positive, got " << p.value;
        return failure();
      }
    if (!(overlapShare >= 0 && overlapShare <= 1)) {
      module.emitError() << "dist-auto-shard: overlap-share must lie between "
                            "0 and 1, got "
                         << overlapShare;
      return failure();
    }
    if (devicesPerNode < 0 || !(callUs >= 0) || !(memoryPerDeviceGib >= 0)) {
      module.emitError() << "dist-auto-shard: devices-per-node, call-us and "
                            "memory-per-device-gib must not be negative";
      return failure();
    }
    std::optional<CostRates::Solver> parsedSolver = parseSolver(solver);
    if (!parsedSolver) {
      module.emitError() << "dist-auto-shard: solver must be cbc, greedy or "
                            "one-axis, got '"
                         << solver << "'";
      return failure();
    }
    if (solver == "greedy" && memoryPerDeviceGib > 0) {
      module.emitError() << "dist-auto-shard: solver=greedy does not take "
                            "memory-per-device-gib (only the integer program "
                            "keeps a limit)";
      return failure();
    }
    CostRates rates;
    rates.solver = *parsedSolver;
    rates.deviceFlops = deviceTflops * 1e12;
    rates.memoryBytesPerSecond = memoryGbytes * 1e9;
    rates.linkBytesPerSecond = linkGbytes * 1e9;
    rates.nodeLinkBytesPerSecond = nodeLinkGbytes * 1e9;
    rates.devicesPerNode = devicesPerNode;
    rates.callSeconds = callUs * 1e-6;
    rates.memoryPerDevice = memoryPerDeviceGib * double(1ull << 30);
    rates.timeLimitSeconds = timeLimit;
    rates.partitionHooks.vocabParallelCrossEntropy = vocabParallelCrossEntropy;
    rates.partitionHooks.splitKeyAttention = splitKeyAttention;
    rates.keepPartialResults = keepPartialResults;
    rates.overlapShare = overlapShare;
    return rates;
  }

  static DictionaryAttr toAttr(const AutoShardReport &report,
                               MLIRContext *ctx) {
    Builder b(ctx);
    return b.getDictionaryAttr({
        b.getNamedAttr("nodes", b.getI64IntegerAttr(report.nodes)),
        b.getNamedAttr("choices", b.getI64IntegerAttr(report.choices)),
        b.getNamedAttr("solved_nodes",
                       b.getI64IntegerAttr(report.program.solvedNodes)),
        b.getNamedAttr("programs",
                       b.getI64IntegerAttr(report.program.programs)),
        b.getNamedAttr("binary_variables",
                       b.getI64IntegerAttr(report.program.binaryVariables)),
        b.getNamedAttr("continuous_variables",
                       b.getI64IntegerAttr(report.program.continuousVariables)),
        b.getNamedAttr("constraints",
                       b.getI64IntegerAttr(report.program.constraints)),
        b.getNamedAttr("method", b.getStringAttr(report.method)),
        b.getNamedAttr("compute_seconds",
                       b.getF64FloatAttr(report.computeSeconds)),
        b.getNamedAttr("comm_seconds", b.getF64FloatAttr(report.commSeconds)),
        b.getNamedAttr("hidden_seconds",
                       b.getF64FloatAttr(report.hiddenSeconds)),
        b.getNamedAttr("gap_seconds", b.getF64FloatAttr(report.gapSeconds)),
        b.getNamedAttr("argument_bytes",
                       b.getF64FloatAttr(report.argumentBytes)),
        b.getNamedAttr("reshards", b.getI64IntegerAttr(report.reshards)),
    });
  }
};
} // namespace
} // namespace partita::autoshard
