//===- OpShardingSearch.cpp - every op's sharding, chosen by an ILP -------===//
//
// See OpShardingSearch.h. The function becomes a ChoiceProblem: a node per
// argument, per op and per function result that no argument takes back
// (a train step's updated parameters and state are read by their
// argument's node instead), each with its choices (the shardings it reads
// and writes, its compute and memory); an edge per value read, whose cost
// table is the reshard between the producer's written and the consumer's
// read layouts, by classes of equal layouts.
//
//===----------------------------------------------------------------------===//

#include "passes/autoshard/OpShardingSearch.h"
#include "passes/autoshard/ChoiceILP.h"
#include "passes/partition/Reshard.h"
#include "passes/sharding/MeshSpec.h"

#include "dialects/dist/IR/CostInterface.h"
#include "dialects/dist/IR/DistOps.h"
#include "dialects/dist/IR/ShardingAdapters.h"
#include "dialects/nn/IR/NNAttributes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"

#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

using namespace mlir;

namespace partita::autoshard {

namespace {
using dist::AxisRef;
using dist::Mesh;
using dist::Sharding;

/// One way to run a node: the layout of each value it reads and writes (an
/// empty Sharding where the value is no tensor), its compute, the
/// communication of its own local form (a split collective factor's
/// all-reduces), and memory.
struct Choice {
  std::vector<Sharding> reads, writes;
  double seconds = 0;
  double commSeconds = 0;
  double memory = 0;
  /// The axes on each factor of the op's rule, kept only when a collective
  /// factor is split (the op's partition hook then builds its local form
  /// from them).
  std::vector<dist::AxisNames> factorAxes;
};

/// How the collective factors of an op may be split: those its partition
/// hook (PartitionOpInterface::canSplitCollectiveFactor) takes split, and
/// whether that leaves the results partial over their axes.
struct CollectiveFactors {
  std::vector<char> splittable, partial;

  bool splits(int64_t f) const {
    return f < static_cast<int64_t>(splittable.size()) && splittable[f];
  }
  bool leavesPartial(int64_t f) const {
    return f < static_cast<int64_t>(partial.size()) && partial[f];
  }
};

struct Node {
  /// The op; null for an argument's, a result's or a shared value's node.
  Operation *op = nullptr;
  int64_t argument = -1, result = -1;
  /// The values it reads: an op's operands; the returned values an argument
  /// takes back; an unpaired result's returned value; a shared value.
  std::vector<Value> reads;
  std::vector<Choice> choices;
};

/// A key that tells layouts apart: dimensions' axes and the partial axes.
std::string layoutKey(const Sharding &sharding) {
  std::string key;
  for (const dist::DimSharding &dim : sharding.dims) {
    key += '[';
    for (const AxisRef &axis : dim.axes)
      key += axis.name + ",";
    key += ']';
  }
  if (sharding.isPartial()) {
    key += "p" + std::to_string(static_cast<uint32_t>(sharding.partialKind));
    for (const AxisRef &axis : sharding.partialAxes)
      key += axis.name + ",";
  }
  return key;
}

/// What tells two choices of a node apart: the layouts read and written.
std::string choiceKey(const Choice &choice) {
  std::string key;
  for (const Sharding &s : choice.reads)
    key += layoutKey(s) + ";";
  key += "->";
  for (const Sharding &s : choice.writes)
    key += layoutKey(s) + ";";
  return key;
}

RankedTensorType staticTensor(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && tensor.hasStaticShape() ? tensor : RankedTensorType();
}

/// A tensor of `type` as `sharding` lays it out on `mesh`: its local shape.
dist::TensorShape localTensor(RankedTensorType type, const Sharding &sharding,
                              const Mesh &mesh) {
  std::vector<int64_t> global(type.getShape().begin(), type.getShape().end());
  std::vector<int64_t> shape = sharding.localShape(mesh, global);
  return {SmallVector<int64_t, 4>(shape.begin(), shape.end()),
          type.getElementType()};
}

/// The seconds of a kernel of cost `cost` at `rates`.
double kernelSeconds(const dist::OpCost &cost, const CostRates &rates) {
  return rates.kernelSeconds(cost.flops, cost.bytesRead + cost.bytesWritten);
}

/// The seconds of `op` at the local shapes of `choice` (0 when the op has no
/// cost model or it fails).
double computeSeconds(Operation *op, const Choice &choice, const Mesh &mesh,
                      const CostRates &rates) {
  auto costOp = dyn_cast<dist::CostOpInterface>(op);
  if (!costOp)
    return 0;
  auto local = [&](Value value, const Sharding &sharding) {
    auto type = staticTensor(value.getType());
    return type ? localTensor(type, sharding, mesh)
                : dist::TensorShape{{}, value.getType()};
  };
  SmallVector<dist::TensorShape> operands, results;
  for (auto [value, sharding] : llvm::zip(op->getOperands(), choice.reads))
    operands.push_back(local(value, sharding));
  for (auto [value, sharding] : llvm::zip(op->getResults(), choice.writes))
    results.push_back(local(value, sharding));
  FailureOr<dist::OpCost> cost = costOp.getCost(operands, results);
  return succeeded(cost) ? kernelSeconds(*cost, rates) : 0;
}

/// Every non-empty set of the mesh axes (of size > 1) that `used` does not
/// name, each in mesh order: the axes a value may also be partial over.
std::vector<std::vector<AxisRef>>
freeAxisSets(const Mesh &mesh, function_ref<bool(StringRef)> used) {
  std::vector<AxisRef> free;
  for (const dist::MeshAxis &axis : mesh.axes)
    if (axis.size > 1 && !used(axis.name))
      free.push_back(axis.name);
  std::vector<std::vector<AxisRef>> sets;
  for (uint64_t subset = 1; subset < (uint64_t{1} << free.size()); ++subset) {
    std::vector<AxisRef> &set = sets.emplace_back();
    for (size_t a = 0; a < free.size(); ++a)
      if (subset & (uint64_t{1} << a))
        set.push_back(free[a]);
  }
  return sets;
}

/// The choices of an op with sharding rule `rule`: every assignment of each
/// mesh axis (of size > 1) to a parallel or reduction factor, or to one
/// collective factor that `collective` marks splittable, or to none, where
/// each factor's axes divide it and a factor that is not its dimension's
/// major one splits only once the factors before it are split whole.
/// Results are partial over the axes of reduction factors and of a split
/// collective factor that leaves them partial (the embedding's vocabulary).
std::vector<Choice> enumerateOpChoices(const dist::ShardingRule &rule,
                                       const Mesh &mesh,
                                       const CollectiveFactors &collective) {
  int64_t numFactors = rule.getNumFactors();
  std::vector<std::vector<AxisRef>> factorAxes(numFactors);
  std::vector<int64_t> factorSplit(numFactors, 1);
  // The collective factor split so far, or -1.
  int64_t collectiveSplit = -1;
  std::vector<Choice> choices;
  std::map<std::string, size_t> seen;

  auto layoutOf = [&](const dist::TensorFactors &dims,
                      bool withPartial) -> std::optional<Sharding> {
    std::vector<std::vector<AxisRef>> axes(dims.size());
    for (size_t d = 0; d < dims.size(); ++d) {
      bool wholeBefore = true;
      for (int64_t f : dims[d]) {
        if (!factorAxes[f].empty() && !wholeBefore)
          return std::nullopt;
        wholeBefore = factorSplit[f] == rule.getFactor(f).size;
        llvm::append_range(axes[d], factorAxes[f]);
      }
    }
    std::vector<AxisRef> partial;
    std::optional<dist::ReductionKind> kind;
    if (withPartial)
      for (int64_t f = 0; f < numFactors; ++f) {
        const dist::Factor &factor = rule.getFactor(f);
        bool partialFactor =
            factor.kind == dist::FactorKind::Reduction ||
            (factor.kind == dist::FactorKind::Collective &&
             collective.leavesPartial(f));
        if (!partialFactor || factorAxes[f].empty())
          continue;
        if (kind && *kind != factor.partialKind)
          return std::nullopt; // two kinds of partial sums: not one value
        kind = factor.partialKind;
        llvm::append_range(partial, factorAxes[f]);
      }
    // Partial axes in mesh order, as propagation writes them.
    llvm::sort(partial, [&](const AxisRef &a, const AxisRef &b) {
      return *mesh.findAxis(a.name) < *mesh.findAxis(b.name);
    });
    return Sharding(std::move(axes), std::move(partial),
                    kind.value_or(dist::ReductionKind{}));
  };

  std::function<void(size_t)> visit = [&](size_t axis) {
    if (axis == mesh.axes.size()) {
      Choice choice;
      for (const dist::TensorFactors &dims : rule.getOperands()) {
        std::optional<Sharding> layout = layoutOf(dims, false);
        if (!layout)
          return;
        choice.reads.push_back(std::move(*layout));
      }
      for (const dist::TensorFactors &dims : rule.getResults()) {
        std::optional<Sharding> layout = layoutOf(dims, true);
        if (!layout)
          return;
        choice.writes.push_back(std::move(*layout));
      }
      if (!seen.emplace(choiceKey(choice), choices.size()).second)
        return;
      if (collectiveSplit >= 0)
        for (const std::vector<AxisRef> &axes : factorAxes) {
          dist::AxisNames &names = choice.factorAxes.emplace_back();
          for (const AxisRef &axis : axes)
            names.push_back(axis.name);
        }
      choices.push_back(std::move(choice));
      return;
    }
    visit(axis + 1);
    const dist::MeshAxis &meshAxis = mesh.axes[axis];
    if (meshAxis.size <= 1)
      return;
    for (int64_t f = 0; f < numFactors; ++f) {
      const dist::Factor &factor = rule.getFactor(f);
      // One collective factor at most: the hook's local form takes one.
      bool collectiveFactor = factor.kind == dist::FactorKind::Collective &&
                              collective.splits(f) &&
                              (collectiveSplit < 0 || collectiveSplit == f);
      if (factor.kind != dist::FactorKind::Parallel &&
          factor.kind != dist::FactorKind::Reduction && !collectiveFactor)
        continue;
      if (factor.size % (factorSplit[f] * meshAxis.size) != 0)
        continue;
      int64_t before = collectiveSplit;
      if (collectiveFactor)
        collectiveSplit = f;
      factorAxes[f].push_back(meshAxis.name);
      factorSplit[f] *= meshAxis.size;
      visit(axis + 1);
      factorSplit[f] /= meshAxis.size;
      factorAxes[f].pop_back();
      collectiveSplit = before;
    }
  };
  visit(0);
  if (!rule.isAdditive())
    return choices;
  // An additive op (add, sub) adds partial sums as they are: every operand
  // and the result partial over the same axes (any set of the axes a
  // choice leaves free), so that the sum is reduced once, after it.
  size_t numBase = choices.size();
  for (size_t c = 0; c < numBase; ++c) {
    auto used = [&](StringRef axis) {
      return llvm::any_of(choices[c].writes, [&](const Sharding &s) {
        return s.usesAxis(axis);
      });
    };
    for (const std::vector<AxisRef> &partial : freeAxisSets(mesh, used)) {
      Choice choice = choices[c];
      for (std::vector<Sharding> *tensors : {&choice.reads, &choice.writes})
        for (Sharding &tensor : *tensors) {
          tensor.partialAxes = partial;
          tensor.partialKind = dist::ReductionKind::Sum;
        }
      if (seen.emplace(choiceKey(choice), choices.size()).second)
        choices.push_back(std::move(choice));
    }
  }
  return choices;
}

/// Every layout of a tensor of `shape` on `mesh`: the choices of a rule that
/// makes each dimension a factor of its own (each axis of size > 1 on a
/// dimension whose size its axes' product divides, or on none; axes on one
/// dimension in mesh order). Never partial.
std::vector<Sharding> enumerateLayouts(ArrayRef<int64_t> shape,
                                       const Mesh &mesh) {
  dist::ShardingRule rule;
  dist::TensorFactors dims;
  for (int64_t size : shape)
    dims.push_back({rule.addFactor(size, dist::FactorKind::Parallel)});
  rule.addResult(std::move(dims));
  std::vector<Sharding> layouts;
  for (Choice &choice : enumerateOpChoices(rule, mesh, {}))
    layouts.push_back(std::move(choice.writes[0]));
  return layouts;
}

/// A value's producer: its node and which of the node's writes it is.
struct Producer {
  int64_t node = -1, write = -1;
};

class Search {
public:
  Search(func::FuncOp func, const Mesh &mesh, const CostRates &rates);

  FailureOr<AutoShardReport> run();

private:
  /// Reads the function into nodes and builds the program.
  LogicalResult prepare(ChoiceProblem &problem);
  /// The optimum of the same function on the mesh's devices as one axis,
  /// mapped onto these nodes' choices (that axis on a factor or dimension
  /// becomes every mesh axis there, in mesh order), or empty when the mesh
  /// has fewer than two axes or that program has no solution.
  std::vector<int64_t> oneAxisChoices(ChoiceSolution *solved = nullptr);
  /// The one-axis answer improved by single moves (or as it is, when that
  /// fits the memory limit and the improved one does not), into `solution`
  /// if it is cheaper than `solution.cost`; whether it was.
  bool tryOneAxis(const ChoiceProblem &problem, ChoiceSolution &solution);
  LogicalResult checkFunction();
  LogicalResult addArguments();
  LogicalResult addOps();
  LogicalResult addResults();
  /// A node for each value read more than once: the layout it is resharded
  /// into once (any layout its producer writes or a reader reads), from
  /// which its readers read. So a reshard that several readers share is
  /// priced once, as dist-partition makes it once; a reader that wants yet
  /// another layout is priced, and written (write()), as a reshard from the
  /// shared one.
  void addSharedValues();
  /// Reserves the shared node of `value` (read more than once) right after
  /// its producer's, so that node order (which the greedy heuristic follows)
  /// keeps them together; addSharedValues gives it its choices.
  void reserveShared(Value value);
  ChoiceProblem buildProblem();
  /// Each annotated op result becomes a `dist.constraint` after the op (the
  /// reshard dist-partition would make from what the op writes to the
  /// annotation), its annotation removed.
  void pinAnnotatedResults();
  /// The one choice of a `dist.constraint` (a pinned value): its operand
  /// read, and its result written, in its layout (partial ones too); fails
  /// on sub-axes.
  LogicalResult addConstraint(dist::ConstraintOp op, Node &node);
  /// Which collective factors of `op` its partition hook splits, under the
  /// partitioner's options.
  CollectiveFactors collectiveFactorsOf(Operation *op,
                                        const dist::ShardingRule &rule);
  /// Prices `choice`, which splits a collective factor of `op`, by the local
  /// form the op's partition hook builds for it (in a scratch module, then
  /// dropped): each op's compute by its cost model, each all-reduce by the
  /// reshard planner (bytes over the axes' link, plus a call). False when
  /// the hook fails or builds another collective.
  bool priceLocalForm(Operation *op, const dist::ShardingRule &rule,
                      Choice &choice);
  /// The seconds of the cheapest reshard of `value` from `from` to `to`
  /// (kForbidden when there is none); `bucketed`: into an optimizer update,
  /// where its reductions ride the gradient bucket's call. Through
  /// `reductionSeconds`, the part of them its reductions' bytes take (0
  /// when it has none; what a bucket may hide).
  double reshardSeconds(Value value, const Sharding &from, const Sharding &to,
                        bool bucketed, double *reductionSeconds = nullptr);
  void write(const std::vector<int64_t> &chosen, AutoShardReport &report);
  dist::ShardingAttr toAttr(const Sharding &sharding);

  func::FuncOp func;
  const Mesh &mesh;
  const CostRates &rates;
  std::vector<Node> nodes;
  llvm::DenseMap<Value, Producer> producers;
  /// The node of each value read more than once (addSharedValues).
  llvm::DenseMap<Value, int64_t> sharedValues;
  /// The node of each argument (-1: not a tensor), and the argument whose
  /// node takes each function result back (-1: none).
  std::vector<int64_t> argumentNodes, takenBackBy;
  /// (seconds, reductionSeconds) by tensor, layouts and bucketing.
  std::map<std::string, std::pair<double, double>> reshardCache;
  /// The planner's options: link weights, a call's cost a step.
  partition::ReshardOptions reshardOptions;
};

Search::Search(func::FuncOp func, const Mesh &mesh, const CostRates &rates)
    : func(func), mesh(mesh), rates(rates) {
  // A collective call's fixed cost, and a slower link for an axis whose
  // groups span nodes, both in bytes of the in-node link.
  reshardOptions.stepCost = rates.callSeconds * rates.linkBytesPerSecond;
  std::vector<std::pair<std::string, int64_t>> axes;
  for (const dist::MeshAxis &axis : mesh.axes)
    axes.push_back({axis.name, axis.size});
  for (const dist::MeshAxis &axis : mesh.axes)
    if (sharding::groupSpansNodes(axes, {axis.name}, rates.devicesPerNode))
      reshardOptions.axisWeights[axis.name] =
          rates.linkBytesPerSecond / rates.nodeLinkBytesPerSecond;
}

LogicalResult Search::checkFunction() {
  if (func.isExternal() || !func.getBody().hasOneBlock())
    return func.emitError() << "dist-auto-shard takes a function of one block";
  WalkResult walk = func.walk([&](Operation *op) -> WalkResult {
    if (op == func.getOperation())
      return WalkResult::advance();
    if (op->getNumRegions() != 0)
      return op->emitError()
             << "dist-auto-shard does not take ops with regions yet";
    if (isa<func::CallOp>(op))
      return op->emitError() << "dist-auto-shard does not take calls yet; "
                                "inline the callee first";
    for (Value value : op->getResults())
      if (auto tensor = dyn_cast<RankedTensorType>(value.getType());
          tensor && !tensor.hasStaticShape())
        return op->emitError()
               << "dist-auto-shard needs static shapes, but result #"
               << cast<OpResult>(value).getResultNumber() << " is " << tensor;
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

LogicalResult Search::addArguments() {
  for (BlockArgument arg : func.getArguments()) {
    unsigned i = arg.getArgNumber();
    auto type = staticTensor(arg.getType());
    if (!type) {
      argumentNodes.push_back(-1);
      continue;
    }
    Node node;
    node.argument = i;
    if (auto attr = func.getArgAttrOfType<dist::ShardingAttr>(
            i, dist::DistDialect::kShardingAttrName)) {
      FailureOr<Sharding> pinned = dist::shardingFromAttr(
          attr, mesh, [&] { return emitError(arg.getLoc()); });
      if (failed(pinned))
        return failure();
      if (pinned->isPartial() || pinned->hasSubAxes())
        return emitError(arg.getLoc())
               << "dist-auto-shard takes argument annotations without "
                  "partial axes or sub-axes";
      Choice choice;
      choice.writes.push_back(pinned->layoutOnly());
      node.choices.push_back(std::move(choice));
    } else {
      for (Sharding &layout : enumerateLayouts(type.getShape(), mesh)) {
        Choice choice;
        choice.writes.push_back(std::move(layout));
        node.choices.push_back(std::move(choice));
      }
    }
    int64_t elementBytes =
        dist::getElementBytes(type.getElementType()).value_or(4);
    for (Choice &choice : node.choices) {
      choice.memory =
          localTensor(type, choice.writes[0], mesh).getNumElements() *
          elementBytes;
      // A model input is written anew every step: its local bytes at the
      // memory rate (so a batch is split where nothing else decides).
      if (nn::inputAttr.getArg(func, i))
        choice.seconds = choice.memory / rates.memoryBytesPerSecond;
    }
    producers[arg] = {static_cast<int64_t>(nodes.size()), 0};
    argumentNodes.push_back(nodes.size());
    nodes.push_back(std::move(node));
    reserveShared(arg);
  }
  return success();
}

void Search::pinAnnotatedResults() {
  for (Operation &op :
       llvm::make_early_inc_range(func.getBody().front().without_terminator())) {
    auto attrs =
        op.getAttrOfType<ArrayAttr>(dist::DistDialect::kShardingAttrName);
    if (!attrs || isa<dist::ConstraintOp>(op) ||
        attrs.size() != op.getNumResults())
      continue;
    OpBuilder builder(op.getContext());
    builder.setInsertionPointAfter(&op);
    for (auto [attr, result] : llvm::zip(attrs, op.getResults())) {
      auto sharding = dyn_cast<dist::ShardingAttr>(attr);
      if (!sharding || !staticTensor(result.getType()))
        continue;
      auto pinned = dist::ConstraintOp::create(builder, op.getLoc(),
                                               result.getType(), result,
                                               sharding);
      result.replaceAllUsesExcept(pinned.getResult(), pinned);
    }
    op.removeAttr(dist::DistDialect::kShardingAttrName);
  }
}

LogicalResult Search::addConstraint(dist::ConstraintOp op, Node &node) {
  FailureOr<Sharding> pinned = dist::shardingFromAttr(
      op.getSharding(), mesh, [&] { return op.emitError(); });
  if (failed(pinned))
    return failure();
  if (pinned->hasSubAxes())
    return op.emitError()
           << "dist-auto-shard takes pinned layouts without sub-axes";
  Choice choice;
  choice.reads.push_back(*pinned);
  choice.writes.push_back(*pinned);
  node.choices.push_back(std::move(choice));
  return success();
}

LogicalResult Search::addOps() {
  for (Operation &op : func.getBody().front().without_terminator()) {
    Node node;
    node.op = &op;
    llvm::append_range(node.reads, op.getOperands());
    if (auto constraint = dyn_cast<dist::ConstraintOp>(op)) {
      if (failed(addConstraint(constraint, node)))
        return failure();
      producers[constraint.getResult()] = {static_cast<int64_t>(nodes.size()),
                                           0};
      nodes.push_back(std::move(node));
      reserveShared(constraint.getResult());
      continue;
    }
    std::optional<dist::ShardingRule> rule;
    if (auto ruleOp = dyn_cast<dist::ShardingRuleOpInterface>(&op)) {
      FailureOr<dist::ShardingRule> got = ruleOp.getShardingRule();
      if (succeeded(got)) {
        if (failed(got->verify(&op)))
          return failure();
        rule = std::move(*got);
      }
    }
    if (rule) {
      node.choices =
          enumerateOpChoices(*rule, mesh, collectiveFactorsOf(&op, *rule));
      // Values that are no tensors have no layout.
      for (Choice &choice : node.choices) {
        for (auto [value, layout] : llvm::zip(op.getOperands(), choice.reads))
          if (!staticTensor(value.getType()))
            layout = Sharding();
        for (auto [value, layout] : llvm::zip(op.getResults(), choice.writes))
          if (!staticTensor(value.getType()))
            layout = Sharding();
      }
    } else {
      // No rule: everything whole, as dist-propagate leaves it.
      Choice choice;
      for (Value value : op.getOperands()) {
        auto type = staticTensor(value.getType());
        choice.reads.push_back(type ? Sharding::replicated(type.getRank())
                                    : Sharding());
      }
      for (Value value : op.getResults()) {
        auto type = staticTensor(value.getType());
        choice.writes.push_back(type ? Sharding::replicated(type.getRank())
                                     : Sharding());
      }
      node.choices.push_back(std::move(choice));
    }
    // A choice that splits a collective factor runs the op's local form;
    // one whose form cannot be built or priced is no choice.
    llvm::erase_if(node.choices, [&](Choice &choice) {
      if (choice.factorAxes.empty()) {
        choice.seconds = computeSeconds(&op, choice, mesh, rates);
        return false;
      }
      return !priceLocalForm(&op, *rule, choice);
    });
    if (node.choices.empty())
      return op.emitError() << "dist-auto-shard found no way to run this op "
                               "on mesh "
                            << mesh.toString();
    for (OpResult result : op.getResults())
      producers[result] = {static_cast<int64_t>(nodes.size()),
                           result.getResultNumber()};
    nodes.push_back(std::move(node));
    for (OpResult result : op.getResults())
      reserveShared(result);
  }
  return success();
}

LogicalResult Search::addResults() {
  Operation *terminator = func.getBody().front().getTerminator();
  // A result named like an argument (nn.param / nn.state) is that
  // argument's next value: the argument's node reads it in its own layout.
  llvm::StringMap<int64_t> argumentByName;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    for (const nn::NameAttrDecl &decl : {nn::paramAttr, nn::stateAttr})
      if (StringAttr name = decl.getArg(func, i))
        argumentByName[(decl.getName() + ":" + name.getValue()).str()] = i;
  takenBackBy.assign(terminator->getNumOperands(), -1);
  for (auto [i, value] : llvm::enumerate(terminator->getOperands())) {
    auto type = staticTensor(value.getType());
    if (!type)
      continue;
    for (const nn::NameAttrDecl &decl : {nn::paramAttr, nn::stateAttr}) {
      StringAttr name = decl.getResult(func, i);
      if (!name)
        continue;
      auto it = argumentByName.find(
          (decl.getName() + ":" + name.getValue()).str());
      if (it == argumentByName.end() ||
          func.getArgument(it->second).getType() != type ||
          argumentNodes[it->second] < 0)
        continue;
      takenBackBy[i] = it->second;
      Node &node = nodes[argumentNodes[it->second]];
      node.reads.push_back(value);
      for (Choice &choice : node.choices)
        choice.reads.push_back(choice.writes[0]);
    }
    if (takenBackBy[i] >= 0)
      continue;
    Node node;
    node.result = i;
    node.reads.push_back(value);
    std::vector<Sharding> layouts;
    if (auto attr = dist::getFuncResultSharding(func, i)) {
      FailureOr<Sharding> pinned = dist::shardingFromAttr(
          attr, mesh, [&] { return emitError(terminator->getLoc()); });
      if (failed(pinned))
        return failure();
      if (pinned->isPartial() || pinned->hasSubAxes())
        return emitError(terminator->getLoc())
               << "dist-auto-shard takes result annotations without partial "
                  "axes or sub-axes";
      layouts.push_back(pinned->layoutOnly());
    } else {
      layouts = enumerateLayouts(type.getShape(), mesh);
    }
    for (const Sharding &layout : layouts) {
      Choice choice;
      choice.reads.push_back(layout);
      node.choices.push_back(std::move(choice));
      // dist-partition returns a partial value partial where the result's
      // layout differs only by that (the runtime reduces it as it reads the
      // output): read partial over any set of the axes left free, for free.
      if (!rates.keepPartialResults)
        continue;
      auto used = [&](StringRef axis) { return layout.usesAxis(axis); };
      for (const std::vector<AxisRef> &axes : freeAxisSets(mesh, used))
        for (dist::ReductionKind kind :
             {dist::ReductionKind::Sum, dist::ReductionKind::Max}) {
          Sharding partial = layout;
          partial.partialAxes = axes;
          partial.partialKind = kind;
          Choice kept;
          kept.reads.push_back(std::move(partial));
          node.choices.push_back(std::move(kept));
        }
    }
    nodes.push_back(std::move(node));
  }
  return success();
}

CollectiveFactors Search::collectiveFactorsOf(Operation *op,
                                             const dist::ShardingRule &rule) {
  CollectiveFactors collective;
  auto hook = dyn_cast<dist::PartitionOpInterface>(op);
  if (!hook || hook.runsWhole())
    return collective;
  int64_t n = rule.getNumFactors();
  collective.splittable.assign(n, 0);
  collective.partial.assign(n, 0);
  for (int64_t f = 0; f < n; ++f) {
    const dist::Factor &factor = rule.getFactor(f);
    // The partitioner keeps attention's value head dimension whole.
    if (factor.kind != dist::FactorKind::Collective ||
        factor.role == dist::FactorRole::ValueHeadDim)
      continue;
    // Split as an operand is (the embedding's vocabulary) or as the result
    // asks (softmax, the norms): the layouts are the same either way.
    if (!hook.canSplitCollectiveFactor(f, /*fromOperand=*/true,
                                       rates.partitionHooks) &&
        !hook.canSplitCollectiveFactor(f, /*fromOperand=*/false,
                                       rates.partitionHooks))
      continue;
    collective.splittable[f] = 1;
    collective.partial[f] = hook.leavesResultsPartial(rule, f);
  }
  return collective;
}

bool Search::priceLocalForm(Operation *op, const dist::ShardingRule &rule,
                            Choice &choice) {
  MLIRContext *ctx = op->getContext();
  auto localType = [&](Value value, const Sharding &layout) -> Type {
    auto type = staticTensor(value.getType());
    if (!type)
      return value.getType();
    return RankedTensorType::get(localTensor(type, layout, mesh).shape,
                                 type.getElementType());
  };
  // A function of its own in a module of its own, as the hooks expect.
  OwningOpRef<ModuleOp> scratchModule = ModuleOp::create(op->getLoc());
  OpBuilder builder = OpBuilder::atBlockEnd(scratchModule->getBody());
  auto scratchFunc = func::FuncOp::create(builder, op->getLoc(), "scratch",
                                          builder.getFunctionType({}, {}));
  Block &scratch = *scratchFunc.addEntryBlock();
  SmallVector<Value> operands;
  SmallVector<RankedTensorType> realTypes;
  for (auto [value, layout] : llvm::zip(op->getOperands(), choice.reads)) {
    operands.push_back(
        scratch.addArgument(localType(value, layout), op->getLoc()));
    realTypes.push_back(staticTensor(value.getType()));
  }
  SmallVector<Type> resultTypes;
  for (auto [value, layout] : llvm::zip(op->getResults(), choice.writes))
    resultTypes.push_back(localType(value, layout));
  int64_t meanShards = 1;
  for (int64_t f = 0; f < rule.getNumFactors(); ++f)
    if (rule.getFactor(f).kind == dist::FactorKind::Reduction)
      for (const std::string &axis : choice.factorAxes[f])
        meanShards *= mesh.axes[*mesh.findAxis(axis)].size;
  builder.setInsertionPointToEnd(&scratch);
  llvm::StringMap<Value> functionCache;
  dist::PartitionState state{builder,
                             FlatSymbolRefAttr::get(ctx, mesh.name),
                             mesh,
                             &rule,
                             choice.factorAxes,
                             operands,
                             resultTypes,
                             realTypes,
                             /*padded=*/false,
                             meanShards,
                             rates.partitionHooks,
                             functionCache};
  FailureOr<SmallVector<Value>> built;
  {
    // A form the hook refuses is no choice, not an error of the search.
    ScopedDiagnosticHandler quiet(ctx, [](Diagnostic &) { return success(); });
    built = cast<dist::PartitionOpInterface>(op).partition(state);
  }
  if (failed(built))
    return false;
  choice.seconds = choice.commSeconds = 0;
  for (Operation &local : scratch) {
    if (auto reduce = dyn_cast<dist::AllReduceOp>(&local)) {
      auto type = cast<RankedTensorType>(reduce.getType());
      Sharding whole = Sharding::replicated(type.getRank());
      Sharding partial = whole;
      for (StringRef axis : reduce.getAxes().getAsValueRange<StringAttr>())
        partial.partialAxes.push_back(axis.str());
      partial.partialKind = reduce.getKind();
      double seconds = reshardSeconds(reduce.getInput(), partial, whole,
                                      /*bucketed=*/false);
      if (seconds >= kForbidden)
        return false;
      choice.commSeconds += seconds;
      continue;
    }
    // Any other collective is not priced here: no such form is offered.
    if (isa<dist::DistDialect>(local.getDialect())) {
      if (isa<dist::AxisIndexOp>(local))
        continue;
      return false;
    }
    // (costOfOwnTypes fails for an op without a cost model.)
    if (FailureOr<dist::OpCost> cost = dist::costOfOwnTypes(&local);
        succeeded(cost))
      choice.seconds += kernelSeconds(*cost, rates);
  }
  return true;
}

double Search::reshardSeconds(Value value, const Sharding &from,
                              const Sharding &to, bool bucketed,
                              double *reductionSeconds) {
  if (reductionSeconds)
    *reductionSeconds = 0;
  std::string fromKey = layoutKey(from), toKey = layoutKey(to);
  if (fromKey == toKey)
    return 0;
  auto type = cast<RankedTensorType>(value.getType());
  partition::TensorInfo info;
  info.shape.assign(type.getShape().begin(), type.getShape().end());
  info.elementBytes =
      dist::getElementBytes(type.getElementType()).value_or(4);
  std::string key;
  for (int64_t d : info.shape)
    key += std::to_string(d) + "x";
  key += std::to_string(info.elementBytes) + ":" + fromKey + ">" + toKey +
         (bucketed ? "b" : "");
  auto [it, inserted] = reshardCache.try_emplace(key, kForbidden, 0.0);
  if (inserted) {
    llvm::Expected<partition::ReshardPlan> plan =
        partition::planReshard(mesh, info, from, to, reshardOptions);
    if (!plan) {
      llvm::consumeError(plan.takeError());
    } else {
      // dist-optimize-comm sends an update's gradient reductions (its
      // all-reduces and reduce-scatters) in buckets: those steps ride the
      // bucket's call, priced once for all (ChoiceProblem::sharedCost);
      // any other step (a gather) is a call of its own.
      // (A step's cost includes its call's.)
      double cost = plan->cost, reduction = 0;
      for (const partition::ReshardStep &step : plan->steps)
        if (step.kind == partition::StepKind::AllReduce ||
            step.kind == partition::StepKind::ReduceScatter) {
          reduction += step.cost - reshardOptions.stepCost;
          if (bucketed)
            cost -= reshardOptions.stepCost;
        }
      it->second = {cost / rates.linkBytesPerSecond,
                    std::max(0.0, reduction) / rates.linkBytesPerSecond};
    }
  }
  if (reductionSeconds)
    *reductionSeconds = it->second.second;
  return it->second.first;
}

void Search::reserveShared(Value value) {
  if (!staticTensor(value.getType()) || value.use_empty() ||
      value.hasOneUse())
    return;
  sharedValues[value] = nodes.size();
  Node node;
  node.reads.push_back(value);
  nodes.push_back(std::move(node));
}

void Search::addSharedValues() {
  // Every read of each shared value, but its own node's.
  llvm::DenseMap<Value, std::vector<std::pair<int64_t, size_t>>> reads;
  for (size_t v = 0; v < nodes.size(); ++v)
    for (auto [k, value] : llvm::enumerate(nodes[v].reads)) {
      auto shared = sharedValues.find(value);
      if (shared != sharedValues.end() &&
          shared->second != static_cast<int64_t>(v))
        reads[value].push_back({static_cast<int64_t>(v), k});
    }
  for (auto [value, index] : sharedValues) {
    Node &node = nodes[index];
    std::map<std::string, bool> seen;
    auto offer = [&](const Sharding &layout) {
      if (!seen.emplace(layoutKey(layout), true).second)
        return;
      Choice choice;
      choice.reads.push_back(layout);
      choice.writes.push_back(layout);
      node.choices.push_back(std::move(choice));
    };
    Producer producer = producers.find(value)->second;
    for (const Choice &choice : nodes[producer.node].choices)
      offer(choice.writes[producer.write]);
    for (auto [v, k] : reads[value])
      for (const Choice &choice : nodes[v].choices)
        offer(choice.reads[k]);
  }
}

ChoiceProblem Search::buildProblem() {
  ChoiceProblem problem;
  problem.memoryLimit = rates.memoryPerDevice;
  // The reshards into an optimizer update are gradient reductions, which
  // dist-optimize-comm sends in buckets: bytes each, and one call for all.
  problem.sharedCost = rates.callSeconds;
  for (const Node &node : nodes) {
    ChoiceNode choiceNode;
    for (const Choice &choice : node.choices) {
      choiceNode.costs.push_back(choice.seconds + choice.commSeconds);
      choiceNode.memory.push_back(choice.memory);
      // What the bucketed reductions may run behind (ChoiceNode::cover).
      if (rates.overlapShare > 0)
        choiceNode.cover.push_back(rates.overlapShare * choice.seconds);
    }
    problem.nodes.push_back(std::move(choiceNode));
  }
  for (size_t v = 0; v < nodes.size(); ++v) {
    const Node &consumer = nodes[v];
    for (size_t k = 0; k < consumer.reads.size(); ++k) {
      Value value = consumer.reads[k];
      if (!staticTensor(value.getType()))
        continue;
      auto it = producers.find(value);
      if (it == producers.end())
        continue;
      Producer producer = it->second;
      if (producer.node == static_cast<int64_t>(v))
        continue; // an argument returned as it is
      // A value read more than once is read from its shared node.
      if (auto shared = sharedValues.find(value);
          shared != sharedValues.end() &&
          shared->second != static_cast<int64_t>(v))
        producer = {shared->second, 0};
      ChoiceEdge edge;
      edge.from = producer.node;
      edge.to = v;
      std::map<std::string, int64_t> fromClasses, toClasses;
      std::vector<const Sharding *> fromLayouts, toLayouts;
      for (const Choice &choice : nodes[producer.node].choices) {
        const Sharding &layout = choice.writes[producer.write];
        auto [at, added] =
            fromClasses.try_emplace(layoutKey(layout), fromLayouts.size());
        if (added)
          fromLayouts.push_back(&layout);
        edge.fromClass.push_back(at->second);
      }
      for (const Choice &choice : consumer.choices) {
        const Sharding &layout = choice.reads[k];
        auto [at, added] =
            toClasses.try_emplace(layoutKey(layout), toLayouts.size());
        if (added)
          toLayouts.push_back(&layout);
        edge.toClass.push_back(at->second);
      }
      bool bucketed = consumer.op && nn::getGradKind(consumer.op) ==
                                         nn::GradKind::Update;
      edge.cost.assign(fromLayouts.size(),
                       std::vector<double>(toLayouts.size(), 0));
      if (bucketed) {
        edge.shared.assign(fromLayouts.size(),
                           std::vector<char>(toLayouts.size(), 0));
        edge.sharedSeconds.assign(fromLayouts.size(),
                                  std::vector<double>(toLayouts.size(), 0));
      }
      for (size_t a = 0; a < fromLayouts.size(); ++a)
        for (size_t b = 0; b < toLayouts.size(); ++b) {
          double reduction = 0;
          edge.cost[a][b] = reshardSeconds(value, *fromLayouts[a],
                                           *toLayouts[b], bucketed, &reduction);
          if (bucketed && reduction > 0 && !std::isinf(edge.cost[a][b])) {
            edge.shared[a][b] = true;
            edge.sharedSeconds[a][b] = std::min(reduction, edge.cost[a][b]);
          }
        }
      problem.edges.push_back(std::move(edge));
    }
  }
  return problem;
}

dist::ShardingAttr Search::toAttr(const Sharding &sharding) {
  Sharding closed = sharding;
  for (dist::DimSharding &dim : closed.dims) {
    dim.closed = true;
    dim.priority = 0;
  }
  return dist::shardingToAttr(func.getContext(), closed, mesh.name);
}

void Search::write(const std::vector<int64_t> &chosen,
                   AutoShardReport &report) {
  MLIRContext *ctx = func.getContext();
  auto layoutWritten = [&](Value value) -> const Sharding * {
    auto it = producers.find(value);
    if (it == producers.end())
      return nullptr;
    const Node &node = nodes[it->second.node];
    return &node.choices[chosen[it->second.node]].writes[it->second.write];
  };
  // One constraint per value and layout, before its first reader (so it
  // dominates every later one in the block), or after the value's
  // definition (`reader` null).
  std::map<std::pair<void *, std::string>, Value> constrained;
  auto constrain = [&](Value value, const Sharding &layout,
                       Operation *reader) -> Value {
    auto key = std::make_pair(value.getAsOpaquePointer(), layoutKey(layout));
    auto [it, inserted] = constrained.try_emplace(key, Value());
    if (inserted) {
      OpBuilder builder(ctx);
      if (reader)
        builder.setInsertionPoint(reader);
      else
        builder.setInsertionPointAfterValue(value);
      it->second = dist::ConstraintOp::create(builder, value.getLoc(),
                                              value.getType(), value,
                                              toAttr(layout))
                       .getResult();
      ++report.reshards;
    }
    return it->second;
  };
  // A value read more than once is resharded into its shared node's layout
  // once, after its definition, and read from there, as it was priced.
  auto readAs = [&](Value value, const Sharding &layout,
                    Operation *reader) -> Value {
    const Sharding *held = layoutWritten(value);
    if (!held)
      return value;
    if (auto shared = sharedValues.find(value); shared != sharedValues.end()) {
      const Sharding &sharedLayout =
          nodes[shared->second].choices[chosen[shared->second]].writes[0];
      if (layoutKey(sharedLayout) != layoutKey(*held)) {
        value = constrain(value, sharedLayout, nullptr);
        held = &sharedLayout;
      }
    }
    if (layoutKey(*held) == layoutKey(layout))
      return value;
    return constrain(value, layout, reader);
  };

  for (size_t u = 0; u < nodes.size(); ++u) {
    const Node &node = nodes[u];
    const Choice &choice = node.choices[chosen[u]];
    if (node.argument >= 0)
      func.setArgAttr(node.argument, dist::DistDialect::kShardingAttrName,
                      toAttr(choice.writes[0]));
    // A pinned value's constraint makes its own reshard.
    if (!node.op || isa<dist::ConstraintOp>(node.op))
      continue;
    if (node.op->getNumResults() > 0 &&
        llvm::all_of(node.op->getResults(),
                     [](Value v) { return staticTensor(v.getType()); })) {
      SmallVector<Attribute> attrs;
      for (const Sharding &layout : choice.writes)
        attrs.push_back(toAttr(layout));
      node.op->setAttr(dist::DistDialect::kShardingAttrName,
                       ArrayAttr::get(ctx, attrs));
    }
    for (auto [k, value] : llvm::enumerate(node.reads))
      if (staticTensor(value.getType()))
        node.op->setOperand(k, readAs(value, choice.reads[k], node.op));
  }

  // Function results: an argument's next value in the argument's layout,
  // any other in its node's.
  Operation *terminator = func.getBody().front().getTerminator();
  std::vector<const Sharding *> resultLayouts(terminator->getNumOperands());
  for (size_t u = 0; u < nodes.size(); ++u)
    if (nodes[u].result >= 0)
      resultLayouts[nodes[u].result] = &nodes[u].choices[chosen[u]].reads[0];
  for (auto [i, value] : llvm::enumerate(terminator->getOperands())) {
    const Sharding *layout = resultLayouts[i];
    if (takenBackBy[i] >= 0) {
      int64_t u = argumentNodes[takenBackBy[i]];
      layout = &nodes[u].choices[chosen[u]].writes[0];
    }
    if (!layout)
      continue;
    // A partial read is the value as written, returned partial.
    func.setResultAttr(i, dist::DistDialect::kShardingAttrName,
                       toAttr(layout->layoutOnly()));
    terminator->setOperand(i, readAs(value, *layout, terminator));
  }
}

LogicalResult Search::prepare(ChoiceProblem &problem) {
  if (failed(checkFunction()))
    return failure();
  pinAnnotatedResults();
  if (failed(addArguments()) || failed(addOps()) || failed(addResults()))
    return failure();
  addSharedValues();
  problem = buildProblem();
  return success();
}

std::vector<int64_t> Search::oneAxisChoices(ChoiceSolution *solved) {
  // The one axis is named so that no mesh axis can be: a layout key lists
  // axis names, each followed by a comma, and the one axis's name followed
  // by its comma becomes every split axis's.
  const std::string oneName = "<all>";
  std::string all;
  Mesh flat;
  flat.name = mesh.name;
  int64_t devices = 1, split = 0;
  for (const dist::MeshAxis &axis : mesh.axes)
    if (axis.size > 1) {
      all += axis.name + ",";
      devices *= axis.size;
      ++split;
    }
  if (split < 2)
    return {};
  flat.axes.push_back({oneName, devices});
  Search one(func, flat, rates);
  ChoiceProblem problem;
  if (failed(one.prepare(problem)) || one.nodes.size() != nodes.size())
    return {};
  ChoiceSolution solution;
  std::string error;
  ChoiceOptions options;
  options.timeLimitSeconds = rates.timeLimitSeconds;
  if (!solveChoices(problem, options, solution, error))
    return {};
  if (solved)
    *solved = solution;
  std::vector<int64_t> mapped(nodes.size(), -1);
  for (size_t u = 0; u < nodes.size(); ++u) {
    std::string key = choiceKey(one.nodes[u].choices[solution.choices[u]]);
    for (size_t at = key.find(oneName + ","); at != std::string::npos;
         at = key.find(oneName + ",", at + all.size()))
      key.replace(at, oneName.size() + 1, all);
    for (size_t s = 0; s < nodes[u].choices.size() && mapped[u] < 0; ++s)
      if (choiceKey(nodes[u].choices[s]) == key)
        mapped[u] = s;
    if (mapped[u] < 0)
      return {};
  }
  return mapped;
}

bool Search::tryOneAxis(const ChoiceProblem &problem,
                        ChoiceSolution &solution) {
  ChoiceSolution one;
  std::vector<int64_t> seed = oneAxisChoices(&one);
  if (seed.empty())
    return false;
  std::vector<int64_t> improved = improveChoices(problem, seed);
  double cost = 0;
  if (!fitsProblem(problem, improved, cost)) {
    improved = std::move(seed);
    if (!fitsProblem(problem, improved, cost))
      return false;
  }
  if (cost >= solution.cost)
    return false;
  solution.choices = std::move(improved);
  solution.cost = cost;
  // Nothing else was solved: the size is the one-axis program's.
  if (solution.size.programs == 0)
    solution.size = one.size;
  return true;
}

FailureOr<AutoShardReport> Search::run() {
  ChoiceProblem problem;
  if (failed(prepare(problem)))
    return failure();
  ChoiceSolution solution;
  solution.cost = kForbidden;
  bool fromOneAxis = rates.solver == CostRates::Solver::OneAxis &&
                     tryOneAxis(problem, solution);
  if (!fromOneAxis) {
    // (one-axis on a mesh of one axis is the program itself.)
    std::string error;
    ChoiceOptions options;
    options.timeLimitSeconds = rates.timeLimitSeconds;
    options.heuristicOnly = rates.solver == CostRates::Solver::Greedy;
    if (!solveChoices(problem, options, solution, error))
      return func.emitError() << "dist-auto-shard: " << error << " on mesh "
                              << mesh.toString();
    // CBC stopped early on a mesh of several axes: the one-axis optimum (a
    // smaller program) improved by single moves may do better.
    if (solution.method != ChoiceMethod::Optimal &&
        rates.solver == CostRates::Solver::CBC)
      fromOneAxis = tryOneAxis(problem, solution);
  }
  AutoShardReport report;
  report.nodes = nodes.size();
  for (const Node &node : nodes)
    report.choices += node.choices.size();
  report.program = solution.size;
  switch (solution.method) {
  case ChoiceMethod::Optimal:
    report.method = "optimal";
    break;
  case ChoiceMethod::TimeLimit:
    report.method = "time-limit";
    break;
  case ChoiceMethod::Heuristic:
    report.method = "heuristic";
    break;
  case ChoiceMethod::Rounded:
    report.method = "rounded";
    break;
  case ChoiceMethod::Bounded:
    report.method = "bounded";
    report.gapSeconds = solution.gap;
    break;
  }
  if (fromOneAxis)
    report.method = rates.solver == CostRates::Solver::OneAxis
                        ? "one-axis"
                        : "one-axis-fallback";
  for (size_t u = 0; u < nodes.size(); ++u) {
    report.computeSeconds += nodes[u].choices[solution.choices[u]].seconds;
    report.argumentBytes += problem.nodes[u].memory[solution.choices[u]];
  }
  // (tryOneAxis leaves what is hidden to be worked out.)
  evaluateChoices(problem, solution.choices, nullptr, &report.hiddenSeconds);
  report.commSeconds =
      solution.cost + report.hiddenSeconds - report.computeSeconds;
  write(solution.choices, report);
  return report;
}
} // namespace

std::optional<CostRates::Solver> parseSolver(std::string_view name) {
  if (name == "cbc")
    return CostRates::Solver::CBC;
  if (name == "greedy")
    return CostRates::Solver::Greedy;
  if (name == "one-axis")
    return CostRates::Solver::OneAxis;
  return std::nullopt;
}

FailureOr<AutoShardReport> autoShardFunction(func::FuncOp func,
                                             const Mesh &mesh,
                                             const CostRates &rates) {
  return Search(func, mesh, rates).run();
}

} // namespace partita::autoshard
