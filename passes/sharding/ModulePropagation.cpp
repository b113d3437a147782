//===- ModulePropagation.cpp - dist-propagate on a module -----------------===//
//
// IR side of sharding propagation: one graph tensor per ranked-tensor value
// (function arguments, op results) and per function result; one edge per op
// with a rule, per dist.constraint (identity), per returned value (identity
// to the function result) and per call boundary (identity between operand
// and callee argument, and between callee result and call result).
//
//===----------------------------------------------------------------------===//

#include "passes/sharding/ModulePropagation.h"

#include "dialects/dist/IR/DistOps.h"
#include "dialects/dist/IR/ShardingAdapters.h"
#include "dialects/nn/IR/NNAttributes.h"
#include "passes/sharding/Propagation.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Path.h"

#include <map>

using namespace mlir;
using namespace partita;
using namespace partita::sharding;

namespace {
constexpr StringLiteral kShardingAttr = "dist.sharding";
constexpr StringLiteral kOriginAttr = "dist.origin";

/// What the IR knows about one graph tensor.
struct NodeInfo {
  Location loc;
  /// Names the value in diagnostics: "argument #0 of @f".
  std::string what;
  /// Names the value as a source in dist.origin: "param wte".
  std::string origin;
  /// The annotation as written, and the mesh it names (-1 none).
  dist::ShardingAttr annotation;
  int32_t annotationMesh = -1;
};

std::string fileLine(Location loc) {
  if (auto file = LocationAttr(loc).findInstanceOf<FileLineColLoc>())
    return (llvm::sys::path::filename(file.getFilename().getValue()) + ":" +
            Twine(file.getLine()))
        .str();
  return "unknown location";
}

int64_t byteSize(RankedTensorType type) {
  int64_t elements = 1;
  for (int64_t d : type.getShape())
    if (!ShapedType::isDynamic(d))
      elements *= d;
  Type element = type.getElementType();
  int64_t bits = element.isIntOrFloat() ? element.getIntOrFloatBitWidth() : 32;
  return elements * ((bits + 7) / 8);
}

class ModulePropagator {
public:
  ModulePropagator(ModuleOp module, const PropagateOptions &options)
      : module(module), options(options), ctx(module.getContext()) {}

  FailureOr<int64_t> run();

private:
  LogicalResult collectMeshes();
  LogicalResult createNodes();
  /// Creates a node for a value of `type` (none when it is not a ranked
  /// tensor: returns -1) and reads `annotation` when non-null.
  FailureOr<int32_t> addNode(Type type, Operation *anchor, Location loc,
                             std::string what, std::string origin,
                             Attribute annotation);
  FailureOr<TensorAnnotation> convert(dist::ShardingAttr sharding,
                                      RankedTensorType type,
                                      mlir::Operation *anchor,
                                      const NodeInfo &info, int32_t &meshIdx);
  LogicalResult createEdges();
  LogicalResult assignMeshes();
  void numberOrigins();
  void write(const PropagationResult &result);
  dist::ShardingAttr toAttr(int32_t node, const PropagatedTensor &tensor);
  StringAttr toOrigin(int32_t node, const PropagatedTensor &tensor);

  int32_t nodeOf(Value value) const {
    auto it = valueNodes.find(value);
    return it == valueNodes.end() ? -1 : it->second;
  }

  ModuleOp module;
  const PropagateOptions &options;
  MLIRContext *ctx;
  Graph graph;
  std::vector<NodeInfo> infos;
  std::vector<RankedTensorType> types;
  llvm::StringMap<int32_t> meshIndex;
  llvm::DenseMap<Value, int32_t> valueNodes;
  llvm::DenseMap<Operation *, SmallVector<int32_t>> argNodes, resultNodes;
  std::vector<std::string> originNames;
};
} // namespace

LogicalResult ModulePropagator::collectMeshes() {
  for (dist::MeshOp meshOp : module.getOps<dist::MeshOp>()) {
    // The adapter rejects what the mesh verifier would (IR built in C++ may
    // not have been verified), so no size below 1 reaches the solver.
    FailureOr<dist::Mesh> mesh = dist::meshFromOp(meshOp);
    if (failed(mesh))
      return failure();
    meshIndex[mesh->name] = graph.meshes.size();
    graph.meshes.push_back(std::move(*mesh));
  }
  return success();
}

FailureOr<TensorAnnotation>
ModulePropagator::convert(dist::ShardingAttr sharding, RankedTensorType type,
                          Operation *anchor, const NodeInfo &info,
                          int32_t &meshIdx) {
  // The dist verifiers have checked this already when the IR came from text;
  // IR built in C++ may not have been verified, so check again here.
  if (failed(dist::verifyShardingOfValue(
          anchor, sharding, type, Twine(kShardingAttr) + " of " + info.what)))
    return failure();
  auto err = [&]() {
    return emitError(info.loc) << "sharding of " << info.what << " ";
  };
  auto it = meshIndex.find(sharding.getMeshName().getValue());
  if (it == meshIndex.end())
    return err() << "names a mesh that is not declared at module level";
  meshIdx = it->second;
  const dist::Mesh &mesh = graph.meshes[meshIdx];
  FailureOr<dist::Sharding> model =
      dist::shardingFromAttr(sharding, mesh, [&] { return err(); });
  if (failed(model))
    return failure();
  std::variant<TensorAnnotation, dist::AxisRef> ann =
      annotationFromSharding(*model, mesh);
  if (auto *subAxis = std::get_if<dist::AxisRef>(&ann))
    return err() << "uses sub-axis " << subAxis->toIRString()
                 << ", which dist-propagate does not support yet";
  return std::get<TensorAnnotation>(std::move(ann));
}

FailureOr<int32_t> ModulePropagator::addNode(Type type, Operation *anchor,
                                             Location loc, std::string what,
                                             std::string origin,
                                             Attribute annotation) {
  auto tensorType = dyn_cast<RankedTensorType>(type);
  if (!tensorType) {
    // Only reachable on unverified IR: the dist verifier rejects this.
    if (auto sharding = dyn_cast_if_present<dist::ShardingAttr>(annotation))
      return dist::verifyShardingOfValue(anchor, sharding, type,
                                         Twine(kShardingAttr) + " of " + what);
    return -1;
  }
  NodeInfo info{loc, std::move(what), std::move(origin), {}, -1};
  TensorNode node;
  node.shape.assign(tensorType.getShape().begin(), tensorType.getShape().end());
  node.bytes = byteSize(tensorType);
  if (annotation) {
    auto sharding = dyn_cast<dist::ShardingAttr>(annotation);
    if (!sharding)
      return emitError(loc) << kShardingAttr << " of " << info.what
                            << " must be a #dist.sharding, not " << annotation;
    FailureOr<TensorAnnotation> ann =
        convert(sharding, tensorType, anchor, info, info.annotationMesh);
    if (failed(ann))
      return failure();
    node.annotation = std::move(*ann);
    info.annotation = sharding;
  }
  infos.push_back(std::move(info));
  types.push_back(tensorType);
  return graph.addTensor(std::move(node));
}

LogicalResult ModulePropagator::createNodes() {
  for (func::FuncOp func : module.getOps<func::FuncOp>()) {
    std::string fname = ("@" + func.getSymName()).str();
    FunctionType ftype = func.getFunctionType();
    for (auto [i, type] : llvm::enumerate(ftype.getInputs())) {
      Location loc = func.isExternal() ? func.getLoc() : func.getArgument(i).getLoc();
      std::string origin = "arg " + std::to_string(i) + " of " + fname;
      if (auto name = nn::paramAttr.getArg(func, i))
        origin = ("param " + name.getValue()).str();
      else if (auto name = nn::inputAttr.getArg(func, i))
        origin = ("input " + name.getValue()).str();
      FailureOr<int32_t> node =
          addNode(type, func, loc, "argument #" + std::to_string(i) + " of " + fname,
                  origin, func.getArgAttr(i, kShardingAttr));
      if (failed(node))
        return failure();
      argNodes[func].push_back(*node);
      if (!func.isExternal() && *node >= 0)
        valueNodes[func.getArgument(i)] = *node;
    }
    for (auto [i, type] : llvm::enumerate(ftype.getResults())) {
      std::string origin = "result " + std::to_string(i) + " of " + fname;
      if (auto name = nn::outputAttr.getResult(func, i))
        origin = ("output " + name.getValue()).str();
      FailureOr<int32_t> node =
          addNode(type, func, func.getLoc(),
                  "result #" + std::to_string(i) + " of " + fname, origin,
                  func.getResultAttr(i, kShardingAttr));
      if (failed(node))
        return failure();
      resultNodes[func].push_back(*node);
    }
    WalkResult walk = func.walk([&](Operation *op) {
      if (op->getNumResults() == 0)
        return WalkResult::advance();
      std::string opName = op->getName().getStringRef().str();
      Attribute attr = op->getAttr(kShardingAttr);
      auto constraint = dyn_cast<dist::ConstraintOp>(op);
      ArrayAttr array;
      if (constraint) {
        attr = nullptr; // the constraint's own sharding is what counts
      } else if (attr) {
        array = dyn_cast<ArrayAttr>(attr);
        if (!array || array.size() != op->getNumResults()) {
          op->emitError() << kShardingAttr << " of '" << opName
                          << "' must be an array of " << op->getNumResults()
                          << " #dist.sharding (one per result), not " << attr;
          return WalkResult::interrupt();
        }
      }
      std::string where = fileLine(op->getLoc());
      for (auto [i, result] : llvm::enumerate(op->getResults())) {
        std::string what = "result #" + std::to_string(i) + " of '" + opName + "'";
        std::string origin =
            constraint ? "constraint at " + where
                       : "'" + opName + "' at " + where +
                             (op->getNumResults() > 1
                                  ? " result " + std::to_string(i)
                                  : std::string());
        Attribute annotation = constraint ? Attribute(constraint.getSharding())
                               : array    ? array[i]
                                          : Attribute();
        FailureOr<int32_t> node = addNode(result.getType(), op, op->getLoc(), what,
                                          origin, annotation);
        if (failed(node))
          return WalkResult::interrupt();
        if (*node >= 0)
          valueNodes[result] = *node;
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
  }
  return success();
}

LogicalResult ModulePropagator::createEdges() {
  auto link = [&](int32_t from, int32_t to) {
    if (from >= 0 && to >= 0 && types[from].getShape() == types[to].getShape())
      graph.addIdentityEdge(from, to);
  };
  for (func::FuncOp func : module.getOps<func::FuncOp>()) {
    WalkResult walk = func.walk([&](Operation *op) {
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        if (ret->getParentOp() != func.getOperation())
          return WalkResult::advance();
        for (auto [operand, result] :
             llvm::zip(ret.getOperands(), resultNodes[func]))
          link(nodeOf(operand), result);
        return WalkResult::advance();
      }
      if (auto call = dyn_cast<func::CallOp>(op)) {
        auto callee = module.lookupSymbol<func::FuncOp>(call.getCalleeAttr());
        if (!callee)
          return WalkResult::advance();
        for (auto [operand, arg] : llvm::zip(call.getOperands(), argNodes[callee]))
          link(nodeOf(operand), arg);
        for (auto [result, calleeResult] :
             llvm::zip(call.getResults(), resultNodes[callee]))
          link(calleeResult, nodeOf(result));
        return WalkResult::advance();
      }
      if (auto constraint = dyn_cast<dist::ConstraintOp>(op)) {
        link(nodeOf(constraint.getInput()), nodeOf(constraint.getResult()));
        return WalkResult::advance();
      }
      auto freezeResults = [&]() {
        for (Value result : op->getResults())
          if (int32_t node = nodeOf(result); node >= 0)
            graph.tensors[node].frozen = true;
      };
      if (auto ruleOp = dyn_cast<dist::ShardingRuleOpInterface>(op)) {
        FailureOr<dist::ShardingRule> rule = ruleOp.getShardingRule();
        if (succeeded(rule)) {
          if (failed(rule->verify(op)))
            return WalkResult::interrupt();
          Edge edge;
          edge.rule = std::move(*rule);
          for (Value operand : op->getOperands())
            edge.operands.push_back(nodeOf(operand));
          for (Value result : op->getResults())
            edge.results.push_back(nodeOf(result));
          graph.edges.push_back(std::move(edge));
          return WalkResult::advance();
        }
      }
      if (llvm::any_of(op->getResultTypes(), llvm::IsaPred<RankedTensorType>)) {
        op->emitWarning() << "op '" << op->getName()
                          << "' has no sharding rule; its results stay "
                             "replicated";
        freezeResults();
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
  }
  return success();
}

LogicalResult ModulePropagator::assignMeshes() {
  // Union-find over the tensors linked by edges.
  std::vector<int32_t> parent(graph.tensors.size());
  for (size_t i = 0; i < parent.size(); ++i)
    parent[i] = i;
  auto find = [&](int32_t x) {
    while (parent[x] != x) {
      parent[x] = parent[parent[x]];
      x = parent[x];
    }
    return x;
  };
  for (const Edge &edge : graph.edges) {
    int32_t first = -1;
    for (int32_t t : llvm::concat<const int32_t>(edge.operands, edge.results)) {
      if (t < 0)
        continue;
      if (first < 0)
        first = t;
      else
        parent[find(t)] = find(first);
    }
  }
  // The mesh of each component, from its first annotated tensor.
  std::vector<int32_t> componentMesh(graph.tensors.size(), -1);
  std::vector<int32_t> namedBy(graph.tensors.size(), -1);
  for (size_t t = 0; t < graph.tensors.size(); ++t) {
    int32_t mesh = infos[t].annotationMesh;
    if (mesh < 0)
      continue;
    int32_t root = find(t);
    if (componentMesh[root] < 0) {
      componentMesh[root] = mesh;
      namedBy[root] = t;
      continue;
    }
    if (componentMesh[root] != mesh)
      return emitError(infos[t].loc)
             << infos[t].what << " is sharded on mesh @"
             << graph.meshes[mesh].name << ", but it is linked through ops to "
             << infos[namedBy[root]].what << ", sharded on mesh @"
             << graph.meshes[componentMesh[root]].name;
  }
  for (size_t t = 0; t < graph.tensors.size(); ++t) {
    int32_t root = find(t);
    if (componentMesh[root] < 0) {
      if (graph.meshes.size() != 1)
        return emitError(infos[t].loc)
               << "cannot choose a mesh for " << infos[t].what
               << ": the module declares " << graph.meshes.size()
               << " meshes and no sharding linked to it names one";
      componentMesh[root] = 0;
    }
    graph.tensors[t].mesh = componentMesh[root];
  }
  return success();
}

void ModulePropagator::numberOrigins() {
  // Numbered in the order of their names, not of the IR, so that ties
  // between equally strong sources never depend on op order.
  std::map<std::string, int32_t> ids;
  for (size_t t = 0; t < graph.tensors.size(); ++t)
    if (graph.tensors[t].annotation)
      ids.emplace(infos[t].origin, 0);
  for (auto &[name, id] : ids) {
    id = originNames.size();
    originNames.push_back(name);
  }
  for (size_t t = 0; t < graph.tensors.size(); ++t) {
    std::optional<TensorAnnotation> &ann = graph.tensors[t].annotation;
    if (!ann)
      continue;
    int32_t id = ids[infos[t].origin];
    for (DimAnnotation &dim : ann->dims)
      for (AxisEntry &e : dim.axes)
        e.origin = id;
    for (AxisEntry &e : ann->partial)
      e.origin = id;
  }
}

dist::ShardingAttr ModulePropagator::toAttr(int32_t node,
                                            const PropagatedTensor &tensor) {
  const dist::Mesh &mesh = graph.meshes[graph.tensors[node].mesh];
  // Written closed: propagation is complete.
  return dist::shardingToAttr(ctx, tensor.sharding.layoutOnly(), mesh.name);
}

StringAttr ModulePropagator::toOrigin(int32_t node,
                                      const PropagatedTensor &tensor) {
  std::vector<dist::AxisRef> axes = tensor.sharding.axesUsed();
  size_t firstPartial = axes.size() - tensor.sharding.partialAxes.size();
  SmallVector<std::string> parts;
  for (auto [i, axis, e] : llvm::enumerate(axes, tensor.sources)) {
    std::string from = e.origin >= 0 && e.origin < (int32_t)originNames.size()
                           ? originNames[e.origin]
                           : std::string("unknown");
    parts.push_back((i >= firstPartial ? "partial " : "") + axis.name + "<-" +
                    from);
  }
  if (parts.empty())
    return StringAttr::get(ctx, "replicated");
  return StringAttr::get(ctx, llvm::join(parts, ", "));
}

void ModulePropagator::write(const PropagationResult &result) {
  auto sharding = [&](int32_t node) -> Attribute {
    return toAttr(node, result.tensors[node]);
  };
  auto origin = [&](int32_t node) -> Attribute {
    return toOrigin(node, result.tensors[node]);
  };
  // Attribute dictionaries are rebuilt once per function, not once per
  // argument: setArgAttr copies every argument's dictionary each time.
  auto update = [&](SmallVectorImpl<DictionaryAttr> &dicts,
                    ArrayRef<int32_t> nodes) {
    for (auto [dict, node] : llvm::zip(dicts, nodes)) {
      if (node < 0)
        continue;
      NamedAttrList attrs(dict);
      attrs.set(kShardingAttr, sharding(node));
      if (options.recordOrigins)
        attrs.set(kOriginAttr, origin(node));
      dict = attrs.getDictionary(ctx);
    }
  };
  for (func::FuncOp func : module.getOps<func::FuncOp>()) {
    SmallVector<DictionaryAttr> argDicts, resultDicts;
    func.getAllArgAttrs(argDicts);
    func.getAllResultAttrs(resultDicts);
    update(argDicts, argNodes[func]);
    update(resultDicts, resultNodes[func]);
    func.setAllArgAttrs(argDicts);
    func.setAllResultAttrs(resultDicts);
    func.walk([&](Operation *op) {
      if (op->getNumResults() == 0)
        return;
      SmallVector<Attribute> shardings, origins;
      for (Value result : op->getResults()) {
        int32_t node = nodeOf(result);
        if (node < 0)
          return; // not all results are tensors: nothing to attach
        shardings.push_back(sharding(node));
        if (options.recordOrigins)
          origins.push_back(origin(node));
      }
      op->setAttr(kShardingAttr, ArrayAttr::get(ctx, shardings));
      if (options.recordOrigins)
        op->setAttr(kOriginAttr, ArrayAttr::get(ctx, origins));
    });
  }
}

FailureOr<int64_t> ModulePropagator::run() {
  if (failed(collectMeshes()) || failed(createNodes()))
    return failure();
  // Without a mesh there is nothing to shard on (and no annotation, or
  // createNodes would have reported its unknown mesh).
  if (graph.meshes.empty())
    return 0;
  if (failed(createEdges()) || failed(assignMeshes()))
    return failure();
  numberOrigins();
  PropagationResult result = propagate(graph);
  write(result);
  return result.sweeps;
}

FailureOr<int64_t>
sharding::propagateModule(ModuleOp module, const PropagateOptions &options) {
  return ModulePropagator(module, options).run();
}
