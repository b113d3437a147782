//===- Propagation.h - sharding propagation over factor rules ---*- C++ -*-===//
//
// The core of dist-propagate, independent of the IR: tensors with shapes and
// annotations, edges (ops) with factor rules, and the fixed-point solver.
// ModulePropagation.h builds this graph from a module and writes it back.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_SHARDING_PROPAGATION_H
#define PARTITA_PASSES_SHARDING_PROPAGATION_H

#include "dialects/dist/IR/ShardingModel.h"
#include "dialects/dist/IR/ShardingRule.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace partita::sharding {

/// Priority of what no prioritised annotation produced: weaker than any pN.
constexpr int64_t kUnprioritized = std::numeric_limits<int64_t>::max();

/// One mesh axis in a tensor's sharding, with where it came from.
struct AxisEntry {
  /// Index of the axis in its mesh.
  int32_t axis = 0;
  /// Priority of the annotation that put it there (0 strongest).
  int64_t priority = kUnprioritized;
  /// Index of that annotation in the caller's table of origins; -1 none.
  /// Ties between equally strong sources go to the smaller index, so callers
  /// number origins in an order independent of the IR's op order.
  int32_t origin = -1;
};
using AxisList = llvm::SmallVector<AxisEntry, 2>;

// Propagation reads annotations and returns shardings as the sharding model
// (dialects/dist/IR/ShardingModel.h), plus, per axis, what the model does not
// carry: a mesh index and the provenance above (priority, origin).
// annotationFromSharding and the result's construction are its only
// conversions; the module driver reads and writes attributes through the
// model's adapters. The solver's working state is private to Propagation.cpp.

/// A user annotation of one dimension.
struct DimAnnotation {
  /// Entries carry the annotation's priority and origin.
  AxisList axes;
  bool closed = true;
  int64_t priority = kUnprioritized;
};

struct TensorAnnotation {
  llvm::SmallVector<DimAnnotation, 4> dims;
  AxisList partial;
  dist::ReductionKind partialKind{};
};

/// The annotation that `sharding` (verified on `mesh`, whole axes only) makes:
/// each dimension's axes carry its priority, partial axes the strongest
/// priority (0); no origin yet. Returns the first sub-axis instead when there
/// is one, which propagation does not support.
std::variant<TensorAnnotation, dist::AxisRef>
annotationFromSharding(const dist::Sharding &sharding, const dist::Mesh &mesh);

struct TensorNode {
  llvm::SmallVector<int64_t, 4> shape;
  /// Size in bytes, the weight of the tensor in conflict resolution.
  int64_t bytes = 0;
  /// Index into Graph::meshes.
  int32_t mesh = 0;
  std::optional<TensorAnnotation> annotation;
  /// Every dimension closed from the start (results of ops without a rule):
  /// the tensor keeps its annotation, or stays replicated.
  bool frozen = false;
};

/// An op, or a link between two names of one tensor (identity rule).
struct Edge {
  dist::ShardingRule rule;
  /// Tensor index per operand and per result of the rule; -1 where the value
  /// is not a tensor (the rule gives it no dimensions).
  llvm::SmallVector<int32_t, 4> operands;
  llvm::SmallVector<int32_t, 2> results;
};

struct Graph {
  llvm::SmallVector<dist::Mesh> meshes;
  std::vector<TensorNode> tensors;
  std::vector<Edge> edges;

  int32_t addTensor(TensorNode node);
  /// Links two tensors of one shape so that they propagate as one: every
  /// dimension a parallel factor (a dynamic one a whole factor).
  void addIdentityEdge(int32_t from, int32_t to);
};

/// Projects one dimension's axes onto the factors composing it (sizes major
/// to minor): each factor takes axes while their product still divides its
/// size, and the next factor starts only once the previous one is fully
/// split. Axes that fit no factor (a sub-axis would be needed) are dropped.
llvm::SmallVector<AxisList> projectDim(llvm::ArrayRef<AxisEntry> axes,
                                       llvm::ArrayRef<int64_t> factorSizes,
                                       const dist::Mesh &mesh);

/// One tensor's bid for a factor: the axes it projects onto it, and the
/// bytes to reshard if another choice wins.
struct Candidate {
  AxisList axes;
  int64_t bytes = 0;
};

/// Picks the axes of one factor from its candidates: priority levels from
/// strongest to weakest, each extending the choice of the stronger ones;
/// within a level a candidate that is a prefix of another is compatible
/// (the longer wins); a real conflict goes to the choice that reshards fewer
/// bytes, then to the lexicographically smaller list of axis names. Each
/// chosen axis carries the strongest priority and origin that supports it.
AxisList resolveCandidates(llvm::ArrayRef<Candidate> candidates,
                           const dist::Mesh &mesh);

/// One tensor's propagated sharding.
struct PropagatedTensor {
  /// Whole axes; dimensions as open or closed as propagation left them; no
  /// priorities; the partial kind only where there are partial axes.
  dist::Sharding sharding;
  /// Where each axis of `sharding` came from, in Sharding::axesUsed() order
  /// (dimensions major to minor, then the partial axes).
  AxisList sources;
};

struct PropagationResult {
  std::vector<PropagatedTensor> tensors;
  /// Sweeps over the frontier, summed over all priority rounds.
  int64_t sweeps = 0;
};

/// Runs propagation to its fixed point, one round per priority level, and
/// finally marks the results of sharded reduction factors partial. Every
/// dimension of the result is still as open or closed as the propagation
/// left it; callers close them when writing.
PropagationResult propagate(const Graph &graph);

} // namespace partita::sharding

#endif // PARTITA_PASSES_SHARDING_PROPAGATION_H
