//===- PipelineSplitPass.cpp - every op of the step on a pipeline stage ---===//
//
// dist-pipeline-split: writes dist.stage on every op of the step function,
// from annotations, from layer indices or balanced by cost (see Passes.td);
// the balanced cut itself is StageAssignment.h.
//
//===----------------------------------------------------------------------===//

#include "passes/pipeline/Passes.h"
#include "passes/pipeline/StageAssignment.h"

#include "dialects/dist/IR/CostInterface.h"
#include "dialects/dist/IR/DistDialect.h"
#include "dialects/nn/IR/NNAttributes.h"
#include "passes/sharding/DeviceRates.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

#include <algorithm>

namespace partita::pipeline {
#define GEN_PASS_DEF_DISTPIPELINESPLIT
#include "passes/pipeline/Passes.h.inc"
} // namespace partita::pipeline

using namespace mlir;
using namespace partita;

namespace {

constexpr StringLiteral kStage = pipeline::kStageAttrName;

std::optional<int64_t> stageOf(Operation *op) { return pipeline::getStage(op); }

void setStage(Operation *op, int64_t stage) {
  op->setAttr(kStage, IntegerAttr::get(IntegerType::get(op->getContext(), 64),
                                       stage));
}

/// The latest stage among `op`'s operands' producers (none for arguments).
std::optional<int64_t> latestOperandStage(Operation *op) {
  std::optional<int64_t> latest;
  for (Value v : op->getOperands())
    if (Operation *def = v.getDefiningOp())
      if (std::optional<int64_t> s = stageOf(def))
        latest = std::max(latest.value_or(0), *s);
  return latest;
}

/// An op's seconds by the cost model every search prices kernels by
/// (DeviceRates::kernelSeconds at its default rates: only the ratio between
/// ops matters for the cut).
double opSeconds(Operation *op) {
  // (costOfOwnTypes fails for an op without a cost model.)
  FailureOr<dist::OpCost> c = dist::costOfOwnTypes(op);
  if (failed(c))
    return 0;
  return sharding::DeviceRates().kernelSeconds(c->flops,
                                               c->bytesRead + c->bytesWritten);
}

struct DistPipelineSplitPass
    : public pipeline::impl::DistPipelineSplitBase<DistPipelineSplitPass> {
  using DistPipelineSplitBase::DistPipelineSplitBase;

  LogicalResult assignForward(func::FuncOp func, ArrayRef<Operation *> fwd,
                              int64_t &numStages);
  void runOnOperation() final;
};

LogicalResult DistPipelineSplitPass::assignForward(func::FuncOp func,
                                                   ArrayRef<Operation *> fwd,
                                                   int64_t &numStages) {
  if (by == "annotation") {
    int64_t largest = -1;
    for (Operation *op : fwd) {
      Attribute attr = op->getAttr(kStage);
      auto stage = dyn_cast_or_null<IntegerAttr>(attr);
      if (attr && (!stage || !stage.getType().isInteger(64) ||
                   stage.getInt() < 0))
        return op->emitError() << "dist-pipeline-split: '" << kStage
                               << "' must be an i64 stage >= 0, got "
                               << attr;
      largest = std::max(largest, stageOf(op).value_or(-1));
    }
    if (largest < 0)
      return func.emitError()
             << "dist-pipeline-split: no forward op has a 'dist.stage' "
                "annotation to split by (annotate ops, or split by=layers "
                "or by=cost with a stage count)";
    if (numStages == 0)
      numStages = largest + 1;
    for (Operation *op : fwd) {
      if (std::optional<int64_t> s = stageOf(op)) {
        if (*s >= numStages)
          return op->emitError() << "dist-pipeline-split: stage " << *s
                                 << " is not below the stage count "
                                 << numStages;
        continue;
      }
      setStage(op, latestOperandStage(op).value_or(0));
    }
    return success();
  }
  if (numStages < 1)
    return func.emitError() << "dist-pipeline-split: by=" << by
                            << " needs a stage count (stages >= 1)";
  if (by == "layers") {
    int64_t layers = 0;
    for (Operation *op : fwd)
      if (std::optional<int64_t> l = nn::getLayerIndex(op))
        layers = std::max(layers, *l + 1);
    if (numStages > layers)
      return func.emitError()
             << "dist-pipeline-split: " << numStages
             << " stages but the model has " << layers
             << " layer" << (layers == 1 ? "" : "s")
             << " (nn.layer); a stage needs at least one layer";
    bool seenLayer = false;
    for (Operation *op : fwd) {
      if (std::optional<int64_t> l = nn::getLayerIndex(op)) {
        seenLayer = true;
        setStage(op, *l * numStages / layers);
      } else {
        setStage(op, seenLayer ? numStages - 1 : 0);
      }
    }
    return success();
  }
  if (by == "cost") {
    if (numStages > int64_t(fwd.size()))
      return func.emitError() << "dist-pipeline-split: " << numStages
                              << " stages but only " << fwd.size()
                              << " forward ops";
    SmallVector<double> costs;
    for (Operation *op : fwd)
      costs.push_back(3 * opSeconds(op));
    SmallVector<int> stage = pipeline::partitionByCost(costs, numStages);
    for (auto [op, s] : llvm::zip(fwd, stage))
      setStage(op, s);
    return success();
  }
  return func.emitError() << "dist-pipeline-split: unknown by='" << by
                          << "' (annotation, layers or cost)";
}

void DistPipelineSplitPass::runOnOperation() {
  ModuleOp module = getOperation();
  func::FuncOp func;
  for (func::FuncOp f : module.getOps<func::FuncOp>())
    for (unsigned i = 0; i < f.getNumArguments(); ++i)
      if (nn::inputAttr.onArg(f, i))
        func = f;
  if (!func || func.isExternal())
    return;
  Block &body = func.getBody().front();
  SmallVector<Operation *> fwd, rest;
  for (Operation &op : body.without_terminator())
    (nn::getGradKind(&op) ? rest : fwd).push_back(&op);
  int64_t numStages = stages;
  bool firstRun = true;
  if (auto have = func->getAttrOfType<IntegerAttr>(pipeline::kPipelineStagesAttrName)) {
    numStages = have.getInt(); // a second run (after nn-autodiff)
    firstRun = false;
  } else if (failed(assignForward(func, fwd, numStages))) {
    return signalPassFailure();
  }

  // Dataflow order: no forward op before one of its operands.
  for (Operation *op : fwd) {
    int64_t s = *stageOf(op);
    for (auto [i, v] : llvm::enumerate(op->getOperands())) {
      Operation *def = v.getDefiningOp();
      if (!def || nn::getGradKind(def))
        continue;
      std::optional<int64_t> ds = stageOf(def);
      if (ds && *ds > s) {
        op->emitError() << "dist-pipeline-split: stages out of dataflow "
                           "order: this op is on stage "
                        << s << " but operand #" << i << " comes from stage "
                        << *ds;
        return signalPassFailure();
      }
    }
  }
  // Backward ops keep their forward origin's stage (nn-autodiff copied
  // it); the rest follow their operands, or their users.
  for (Operation *op : rest)
    if (!stageOf(op))
      if (std::optional<int64_t> s = latestOperandStage(op))
        setStage(op, *s);
  for (Operation *op : llvm::reverse(rest)) {
    if (stageOf(op))
      continue;
    std::optional<int64_t> earliest;
    for (Operation *user : op->getUsers())
      if (std::optional<int64_t> s = stageOf(user))
        earliest = std::min(earliest.value_or(*s), *s);
    setStage(op, earliest.value_or(0));
  }

  // Parameters read on more than one stage (tied weights), and the values
  // that cross stages.
  Builder b(module.getContext());
  SmallVector<Attribute> shared;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    StringAttr name = nn::paramAttr.getArg(func, i);
    if (!name)
      continue;
    llvm::SmallSetVector<int64_t, 4> readers;
    for (Operation *user : func.getArgument(i).getUsers())
      if (!nn::getGradKind(user))
        readers.insert(*stageOf(user));
    if (readers.size() > 1)
      shared.push_back(name);
  }
  for (Operation &op : body.without_terminator())
    for (Value r : op.getResults())
      if (llvm::any_of(r.getUsers(), [&](Operation *user) {
            std::optional<int64_t> s = stageOf(user);
            return s && *s != *stageOf(&op);
          }))
        ++numCrossStageValues;
  func->setAttr(pipeline::kPipelineStagesAttrName, b.getI64IntegerAttr(numStages));
  // Each stage's predicted time (the cost split's measure, whatever split
  // was made): its forward ops' roofline seconds x 3 for forward and
  // backward. For comparing splits (`--emit differentiated` shows it).
  if (firstRun) {
    SmallVector<double> costs(size_t(std::max<int64_t>(numStages, 0)), 0.0);
    for (Operation *op : fwd)
      if (std::optional<int64_t> st = stageOf(op); st && *st < numStages)
        costs[size_t(*st)] += 3 * opSeconds(op);
    func->setAttr(pipeline::kStageCostsAttrName,
                  b.getArrayAttr(llvm::map_to_vector(costs, [&](double c) {
                    return Attribute(b.getF64FloatAttr(c));
                  })));
  }
  if (!shared.empty())
    func->setAttr("dist.shared_params", b.getArrayAttr(shared));
}

} // namespace
