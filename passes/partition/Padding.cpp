//===- Padding.cpp - padded dimensions of a function to partition ---------===//
//
// See Padding.h. Classes are found with a union-find over (value, dimension)
// nodes: an op's factor joins every operand and result dimension made of
// that factor alone (a dimension of several factors, e.g. a reshape's merged
// dimension, joins nothing, and the partitioner rejects it when padded); a
// dist.constraint joins its input and result dimension by dimension.
//
//===----------------------------------------------------------------------===//

#include "passes/partition/Padding.h"

#include "dialects/dist/IR/DistDialect.h"
#include "dialects/dist/IR/DistOps.h"
#include "dialects/dist/IR/ShardingAdapters.h"

#include "llvm/ADT/STLExtras.h"

#include <numeric>

using namespace mlir;

namespace partita::partition {

int64_t PaddingAnalysis::paddedSize(Value value, unsigned dim) const {
  auto it = padded.find({value, dim});
  if (it != padded.end())
    return it->second;
  return realType(value).getDimSize(dim);
}

RankedTensorType PaddingAnalysis::realType(Value value) const {
  if (RankedTensorType type = realTypes.lookup(value))
    return type;
  return cast<RankedTensorType>(value.getType());
}

RankedTensorType PaddingAnalysis::paddedType(Value value) const {
  RankedTensorType type = realType(value);
  if (padded.empty())
    return type;
  SmallVector<int64_t> shape(type.getShape());
  for (unsigned d = 0; d < shape.size(); ++d)
    shape[d] = paddedSize(value, d);
  return RankedTensorType::get(shape, type.getElementType());
}

std::string PaddingAnalysis::reason(Value value, unsigned dim) const {
  return reasons.lookup({value, dim});
}

FailureOr<PaddingAnalysis>
PaddingAnalysis::compute(func::FuncOp func, const Mesh &mesh,
                         const Rules &rules,
                         function_ref<std::string(Value)> describe) {
  PaddingAnalysis a;
  DenseMap<Node, unsigned> ids;
  SmallVector<Node> nodes;
  SmallVector<unsigned> parent;
  // Per node, the shard counts of the shardings it is seen with, and the
  // axes of each (for the reason).
  SmallVector<SmallVector<std::pair<int64_t, std::string>, 1>> counts;

  auto addValue = [&](Value value) {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    if (!type || a.realTypes.count(value))
      return;
    a.realTypes[value] = type;
    for (unsigned d = 0; d < type.getRank(); ++d) {
      ids[{value, d}] = nodes.size();
      nodes.push_back({value, d});
      parent.push_back(parent.size());
      counts.emplace_back();
    }
  };
  auto find = [&](unsigned x) {
    while (parent[x] != x)
      x = parent[x] = parent[parent[x]];
    return x;
  };
  auto unite = [&](Node x, Node y) {
    auto ix = ids.find(x), iy = ids.find(y);
    if (ix == ids.end() || iy == ids.end())
      return;
    if (a.realTypes[x.first].getDimSize(x.second) !=
        a.realTypes[y.first].getDimSize(y.second))
      return;
    parent[find(ix->second)] = find(iy->second);
  };
  auto addSharding = [&](Value value, dist::ShardingAttr attr) {
    if (!attr)
      return;
    // The partitioner has read every sharding already (and reported what it
    // could not read); the padding analysis only needs the layout.
    FailureOr<Sharding> sharding =
        dist::shardingFromAttr(attr, [&] { return emitError(value.getLoc()); });
    if (failed(sharding))
      return;
    for (auto [d, dim] : llvm::enumerate(sharding->dims)) {
      auto it = ids.find({value, unsigned(d)});
      if (it == ids.end())
        continue;
      std::string text = "{";
      for (auto [i, axis] : llvm::enumerate(dim.axes))
        text += (i ? ", \"" : "\"") + axis.toString() + "\"";
      counts[it->second].push_back({dim.shardCount(mesh), text + "}"});
    }
  };

  for (BlockArgument arg : func.getArguments()) {
    addValue(arg);
    addSharding(arg, dist::getSharding(arg));
  }
  Block &body = func.getBody().front();
  for (Operation &op : body) {
    for (Value result : op.getResults())
      addValue(result);
    if (auto constraint = dyn_cast<dist::ConstraintOp>(op)) {
      addSharding(constraint.getResult(), constraint.getSharding());
      auto type = cast<RankedTensorType>(constraint.getResult().getType());
      for (unsigned d = 0; d < type.getRank(); ++d)
        unite({constraint.getInput(), d}, {constraint.getResult(), d});
      continue;
    }
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      for (auto [i, operand] : llvm::enumerate(ret.getOperands()))
        addSharding(operand, dist::getFuncResultSharding(func, i));
      continue;
    }
    for (Value result : op.getResults())
      addSharding(result, dist::getSharding(result));
    auto rule = rules.find(&op);
    if (rule == rules.end() || failed(rule->second))
      continue;
    const dist::ShardingRule &r = *rule->second;
    SmallVector<SmallVector<Node, 4>> byFactor(r.getNumFactors());
    auto collect = [&](Value value, const dist::TensorFactors &dims) {
      for (auto [d, factors] : llvm::enumerate(dims))
        if (factors.size() == 1)
          byFactor[factors.front()].push_back({value, unsigned(d)});
    };
    for (auto [i, operand] : llvm::enumerate(op.getOperands()))
      if (i < r.getOperands().size())
        collect(operand, r.getOperand(i));
    for (auto [i, result] : llvm::enumerate(op.getResults()))
      if (i < r.getResults().size())
        collect(result, r.getResult(i));
    for (const SmallVector<Node, 4> &linked : byFactor)
      for (size_t i = 1; i < linked.size(); ++i)
        unite(linked.front(), linked[i]);
  }

  // Per class: the real size, the lcm of its counts, the first split that
  // does not divide it.
  struct Class {
    int64_t size = 0;
    int64_t lcm = 1;
    bool needsPadding = false;
    std::string reason;
  };
  DenseMap<unsigned, Class> classes;
  for (unsigned i = 0; i < nodes.size(); ++i) {
    auto [value, d] = nodes[i];
    Class &c = classes[find(i)];
    c.size = a.realTypes[value].getDimSize(d);
    for (auto [count, axes] : counts[i]) {
      if (count <= 1)
        continue;
      c.lcm = std::lcm(c.lcm, count);
      if (c.size % count != 0 && !c.needsPadding) {
        c.needsPadding = true;
        c.reason = "dimension " + std::to_string(d) + " of " +
                   describe(value) + " split over " + axes;
      }
    }
  }
  for (unsigned i = 0; i < nodes.size(); ++i) {
    const Class &c = classes[find(i)];
    if (!c.needsPadding)
      continue;
    int64_t paddedSize = (c.size + c.lcm - 1) / c.lcm * c.lcm;
    a.padded[nodes[i]] = paddedSize;
    a.reasons[nodes[i]] = c.reason;
  }
  return a;
}

} // namespace partita::partition
