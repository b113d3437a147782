//===- Propagation.cpp - sharding propagation over factor rules -----------===//
//
// The algorithm
// -------------
// State: per tensor, per dimension an ordered list of mesh axes (each axis
// with the priority and origin of the annotation it came from) and a closed
// flag; plus partial axes. Annotated dimensions start as annotated; all
// others start open and empty.
//
// An edge is an op with a factor rule (or an identity link: a constraint, a
// call boundary, a function result). Evaluating an edge:
//  1. project every operand/result dimension onto its factors (projectDim:
//     a factor takes axes while their product divides its size; the next
//     factor of the dimension starts only once this one is fully split);
//  2. per factor, resolve the candidates (resolveCandidates): priority
//     levels strongest first, each extending the stronger choice; within a
//     level prefixes are compatible (longest wins), real conflicts go to the
//     choice that makes fewer bytes of tensors carrying the factor reshard,
//     then to the lexicographically smaller axis-name list; factors choose
//     one at a time and an axis one factor took is not offered to another;
//  3. project back: each open dimension whose axes are a prefix of the
//     concatenation of its factors' choices (up to the first factor not fully
//     split) proposes that extension, cut at the first axis the tensor
//     already uses elsewhere (another dimension or a partial axis). Whole
//     factors take no axes; reduction factors flow between operands only.
//
// Sweeps are Jacobi-style: every edge of the frontier is evaluated against
// the same state, then the proposals for each dimension are merged
// (resolveCandidates again, on the new suffixes) and applied. The next
// frontier is the edges touching a tensor that changed. The result is thus
// a function of the graph, never of the order of ops in the file or of the
// order of the frontier. A dimension only gains axes within a round, so each
// round ends after at most (total axes) changes; an edge is re-evaluated
// only when one of its tensors changed, so the work is linear in the number
// of ops times the number of mesh axes.
//
// Rounds, as in Shardy's user priorities: round k lets only annotations of
// priority <= p_k act; weaker annotated dimensions are open and empty until
// their round, when they are reset to the annotation (kept, if the open
// annotation is a prefix of what propagation put there). The last round adds
// the unprioritised annotations. Afterwards, each op whose reduction factor
// got axes makes its results partial over those axes (sum or max, as the
// factor says; axes the result uses, or of another partial kind, skipped).
//
// Known limits
// ------------
//  - Sub-axes are never created: an axis that does not divide the factor it
//    would fall on is dropped from the projection (no propagation through it).
//  - An op's factors choose one at a time (strongest candidate first, then in
//    rule order), each cutting the axes taken before it from its candidates;
//    a better joint assignment may exist.
//  - Conflicts between proposals from two edges for one dimension are settled
//    by priority then axis names; the byte cost is only weighed among the
//    tensors of one op.
//  - Partial values do not propagate (a partial sum stays where the
//    reduction produced it; the partitioner decides when to reduce), except
//    through additive ops (add, sub): operands that share a partial sum give
//    a partial sum, reduced once after the local additions.
//  - Different dimensions of one tensor competing for one axis in the same
//    sweep: the dimension whose new axis has the stronger priority wins, then
//    the lower dimension.
//
//===----------------------------------------------------------------------===//

#include "passes/sharding/Propagation.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <tuple>

using namespace partita;
using namespace partita::sharding;
using dist::FactorKind;
using dist::ShardingRule;
using dist::TensorFactors;

//===----------------------------------------------------------------------===//
// Graph
//===----------------------------------------------------------------------===//

int32_t Graph::addTensor(TensorNode node) {
  tensors.push_back(std::move(node));
  return tensors.size() - 1;
}

void Graph::addIdentityEdge(int32_t from, int32_t to) {
  Edge edge;
  TensorFactors dims;
  for (int64_t size : tensors[from].shape) {
    if (mlir::ShapedType::isDynamic(size)) {
      dims.push_back({edge.rule.addFactor(1, FactorKind::Whole)});
      continue;
    }
    dims.push_back({edge.rule.addFactor(size, FactorKind::Parallel)});
  }
  edge.rule.addOperand(dims);
  edge.rule.addResult(dims);
  edge.operands.push_back(from);
  edge.results.push_back(to);
  edges.push_back(std::move(edge));
}

//===----------------------------------------------------------------------===//
// Conversions to and from the sharding model
//===----------------------------------------------------------------------===//

std::variant<TensorAnnotation, dist::AxisRef>
sharding::annotationFromSharding(const dist::Sharding &sharding,
                                 const dist::Mesh &mesh) {
  for (const dist::AxisRef &axis : sharding.axesUsed())
    if (axis.isSubAxis())
      return axis;
  // A verified sharding names mesh axes only.
  auto entries = [&](const std::vector<dist::AxisRef> &axes, int64_t priority) {
    AxisList out;
    for (const dist::AxisRef &axis : axes)
      out.push_back({static_cast<int32_t>(mesh.findAxis(axis.name).value_or(0)),
                     priority, -1});
    return out;
  };
  TensorAnnotation ann;
  for (const dist::DimSharding &dim : sharding.dims) {
    DimAnnotation d;
    d.closed = dim.closed;
    d.priority = dim.priority.value_or(kUnprioritized);
    d.axes = entries(dim.axes, d.priority);
    ann.dims.push_back(std::move(d));
  }
  ann.partial = entries(sharding.partialAxes, 0);
  ann.partialKind = sharding.partialKind;
  return ann;
}

//===----------------------------------------------------------------------===//
// Axis lists
//===----------------------------------------------------------------------===//

namespace {
/// The solver's state of one dimension: its axes, with provenance.
struct DimState {
  /// Axes splitting the dimension, major to minor.
  AxisList axes;
  /// A closed dimension never gains axes.
  bool closed = false;
};

/// The solver's state of one tensor.
struct TensorState {
  llvm::SmallVector<DimState, 4> dims;
  /// Axes over which the value is an unreduced partial result.
  AxisList partial;
  dist::ReductionKind partialKind{};
};

/// The model form of `state` on `mesh`, and where its axes came from.
PropagatedTensor toPropagated(const TensorState &state,
                              const dist::Mesh &mesh) {
  PropagatedTensor out;
  auto refs = [&](llvm::ArrayRef<AxisEntry> axes) {
    std::vector<dist::AxisRef> names;
    for (const AxisEntry &e : axes) {
      names.emplace_back(mesh.axes[e.axis].name);
      out.sources.push_back(e);
    }
    return names;
  };
  for (const DimState &dim : state.dims)
    out.sharding.dims.emplace_back(refs(dim.axes), dim.closed);
  out.sharding.partialAxes = refs(state.partial);
  if (out.sharding.isPartial())
    out.sharding.partialKind = state.partialKind;
  return out;
}

/// Whether `prefix` is a prefix of `of`, comparing axes only.
bool isAxisPrefix(llvm::ArrayRef<AxisEntry> prefix,
                  llvm::ArrayRef<AxisEntry> of) {
  if (prefix.size() > of.size())
    return false;
  for (auto [a, b] : llvm::zip(prefix, of))
    if (a.axis != b.axis)
      return false;
  return true;
}

bool areCompatible(llvm::ArrayRef<AxisEntry> a, llvm::ArrayRef<AxisEntry> b) {
  return isAxisPrefix(a, b) || isAxisPrefix(b, a);
}

int64_t shardCount(llvm::ArrayRef<AxisEntry> axes, const dist::Mesh &mesh) {
  int64_t n = 1;
  for (const AxisEntry &e : axes)
    n *= mesh.axes[e.axis].size;
  return n;
}

/// Lexicographic order of axis names: the fixed, order-free tie-break.
bool namesLess(llvm::ArrayRef<AxisEntry> a, llvm::ArrayRef<AxisEntry> b,
               const dist::Mesh &mesh) {
  return std::lexicographical_compare(
      a.begin(), a.end(), b.begin(), b.end(),
      [&](const AxisEntry &x, const AxisEntry &y) {
        return mesh.axes[x.axis].name < mesh.axes[y.axis].name;
      });
}

/// Stronger priority first, then smaller origin (-1, none, last).
bool strongerEntry(const AxisEntry &a, const AxisEntry &b) {
  return std::make_tuple(a.priority, static_cast<uint32_t>(a.origin)) <
         std::make_tuple(b.priority, static_cast<uint32_t>(b.origin));
}

bool tensorUsesAxis(const TensorState &state, int32_t axis,
                    int64_t exceptDim) {
  for (auto [d, dim] : llvm::enumerate(state.dims)) {
    if (static_cast<int64_t>(d) == exceptDim)
      continue;
    for (const AxisEntry &e : dim.axes)
      if (e.axis == axis)
        return true;
  }
  return llvm::any_of(state.partial,
                      [&](const AxisEntry &e) { return e.axis == axis; });
}
} // namespace

//===----------------------------------------------------------------------===//
// Projection and resolution
//===----------------------------------------------------------------------===//

llvm::SmallVector<AxisList>
sharding::projectDim(llvm::ArrayRef<AxisEntry> axes,
                     llvm::ArrayRef<int64_t> factorSizes,
                     const dist::Mesh &mesh) {
  llvm::SmallVector<AxisList> out(factorSizes.size());
  size_t f = 0;
  int64_t used = 1;
  for (const AxisEntry &e : axes) {
    while (f < factorSizes.size() && used >= factorSizes[f]) {
      ++f;
      used = 1;
    }
    if (f == factorSizes.size())
      break;
    int64_t size = mesh.axes[e.axis].size;
    // A dimension of one factor may take axes that do not divide it, as
    // long as every shard keeps an element: dist-partition pads it.
    bool padded = factorSizes.size() == 1 && used * size <= factorSizes[f];
    if (size < 1 || (factorSizes[f] % (used * size) != 0 && !padded))
      break;
    out[f].push_back(e);
    used *= size;
  }
  return out;
}

AxisList sharding::resolveCandidates(llvm::ArrayRef<Candidate> candidates,
                                     const dist::Mesh &mesh) {
  llvm::SmallVector<int64_t, 4> levels;
  for (const Candidate &c : candidates)
    for (const AxisEntry &e : c.axes)
      levels.push_back(e.priority);
  llvm::sort(levels);
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());

  // `chosen` holds axes only; entries are filled in at the end.
  AxisList chosen;
  llvm::SmallVector<llvm::ArrayRef<AxisEntry>, 4> relevant, options;
  for (int64_t level : levels) {
    relevant.clear();
    for (const Candidate &c : candidates) {
      size_t n = 0;
      while (n < c.axes.size() && c.axes[n].priority <= level)
        ++n;
      llvm::ArrayRef<AxisEntry> view = llvm::ArrayRef(c.axes).take_front(n);
      if (view.size() > chosen.size() && isAxisPrefix(chosen, view))
        relevant.push_back(view);
    }
    if (relevant.empty())
      continue;
    // The maximal views, each once: one means they form a chain.
    options.clear();
    for (llvm::ArrayRef<AxisEntry> v : relevant) {
      bool dominated = llvm::any_of(relevant, [&](llvm::ArrayRef<AxisEntry> w) {
        return w.size() > v.size() && isAxisPrefix(v, w);
      });
      bool seen = llvm::any_of(options, [&](llvm::ArrayRef<AxisEntry> w) {
        return w.size() == v.size() && isAxisPrefix(v, w);
      });
      if (!dominated && !seen)
        options.push_back(v);
    }
    auto cost = [&](llvm::ArrayRef<AxisEntry> x) {
      int64_t bytes = 0;
      for (const Candidate &c : candidates)
        if (!areCompatible(c.axes, x))
          bytes += c.bytes;
      return bytes;
    };
    llvm::ArrayRef<AxisEntry> best = options.front();
    int64_t bestCost = options.size() > 1 ? cost(best) : 0;
    for (llvm::ArrayRef<AxisEntry> x : llvm::drop_begin(options)) {
      int64_t c = cost(x);
      if (c < bestCost || (c == bestCost && namesLess(x, best, mesh))) {
        best = x;
        bestCost = c;
      }
    }
    chosen.assign(best.begin(), best.end());
  }

  // Each axis is justified by the strongest candidate that agrees up to it.
  for (size_t i = 0; i < chosen.size(); ++i) {
    llvm::ArrayRef<AxisEntry> prefix = llvm::ArrayRef(chosen).take_front(i + 1);
    bool first = true;
    for (const Candidate &c : candidates) {
      if (c.axes.size() <= i || !isAxisPrefix(prefix, c.axes))
        continue;
      if (first || strongerEntry(c.axes[i], chosen[i]))
        chosen[i] = c.axes[i];
      first = false;
    }
  }
  return chosen;
}

//===----------------------------------------------------------------------===//
// The solver
//===----------------------------------------------------------------------===//

namespace {
struct Proposal {
  int32_t tensor;
  int32_t dim;
  AxisList axes;
};

class Solver {
public:
  explicit Solver(const Graph &graph) : graph(graph) {
    states.resize(graph.tensors.size());
    edgesOf.resize(graph.tensors.size());
    for (auto [i, edge] : llvm::enumerate(graph.edges)) {
      for (int32_t t : llvm::concat<const int32_t>(edge.operands, edge.results))
        if (t >= 0)
          edgesOf[t].push_back(i);
    }
  }

  PropagationResult run();

private:
  void initialize();
  /// Resets the annotated dimensions whose priority is at most `threshold`
  /// and that are not active yet.
  void activate(int64_t threshold);
  void sweepToFixedPoint();
  /// The chosen axes of every factor of `edge` in the current state.
  llvm::SmallVector<AxisList> chooseFactors(const Edge &edge) const;
  void evaluate(const Edge &edge, std::vector<Proposal> &out) const;
  /// Applies the proposals for one tensor (all with that tensor index);
  /// returns whether the tensor changed.
  bool apply(int32_t tensor, llvm::ArrayRef<Proposal> proposals);
  void markPartials();

  const dist::Mesh &meshOf(const Edge &edge) const {
    for (int32_t t : llvm::concat<const int32_t>(edge.operands, edge.results))
      if (t >= 0)
        return graph.meshes[graph.tensors[t].mesh];
    return graph.meshes.front();
  }

  const Graph &graph;
  std::vector<TensorState> states;
  std::vector<llvm::SmallVector<int32_t, 4>> edgesOf;
  /// Per tensor, per dimension: whether its annotation is active.
  std::vector<llvm::SmallVector<bool, 4>> active;
  int64_t sweeps = 0;
};
} // namespace

void Solver::initialize() {
  active.resize(graph.tensors.size());
  for (auto [t, node] : llvm::enumerate(graph.tensors)) {
    TensorState &state = states[t];
    state.dims.resize(node.shape.size());
    active[t].assign(node.shape.size(), false);
    if (node.annotation) {
      state.partial = node.annotation->partial;
      state.partialKind = node.annotation->partialKind;
    }
    if (!node.frozen)
      continue;
    for (auto [d, dim] : llvm::enumerate(state.dims)) {
      dim.closed = true;
      if (node.annotation && d < node.annotation->dims.size())
        dim.axes = node.annotation->dims[d].axes;
      active[t][d] = true;
    }
  }
}

void Solver::activate(int64_t threshold) {
  for (auto [t, node] : llvm::enumerate(graph.tensors)) {
    if (!node.annotation || node.frozen)
      continue;
    TensorState &state = states[t];
    bool any = false;
    for (auto [d, ann] : llvm::enumerate(node.annotation->dims)) {
      if (d >= state.dims.size() || active[t][d] || ann.priority > threshold)
        continue;
      active[t][d] = true;
      any = true;
      DimState &dim = state.dims[d];
      if (!ann.closed && isAxisPrefix(ann.axes, dim.axes)) {
        // Propagation already extended what the open annotation says.
        std::copy(ann.axes.begin(), ann.axes.end(), dim.axes.begin());
        dim.closed = false;
        continue;
      }
      dim.axes = ann.axes;
      dim.closed = ann.closed;
    }
    if (!any)
      continue;
    // Axes that propagation put elsewhere yield to the active annotations.
    llvm::SmallVector<int32_t, 8> annotated;
    for (const AxisEntry &e : state.partial)
      annotated.push_back(e.axis);
    for (auto [d, ann] : llvm::enumerate(node.annotation->dims))
      if (d < state.dims.size() && active[t][d])
        for (const AxisEntry &e : ann.axes)
          annotated.push_back(e.axis);
    for (auto [d, dim] : llvm::enumerate(state.dims)) {
      size_t keep = active[t][d] && d < node.annotation->dims.size()
                        ? node.annotation->dims[d].axes.size()
                        : 0;
      for (size_t i = keep; i < dim.axes.size(); ++i) {
        if (llvm::is_contained(annotated, dim.axes[i].axis)) {
          dim.axes.resize(i);
          break;
        }
      }
    }
  }
}

llvm::SmallVector<AxisList> Solver::chooseFactors(const Edge &edge) const {
  const ShardingRule &rule = edge.rule;
  const dist::Mesh &mesh = meshOf(edge);
  llvm::SmallVector<llvm::SmallVector<Candidate, 2>, 4> candidates(
      rule.getNumFactors());
  llvm::SmallVector<int64_t, 4> sizes;
  auto collect = [&](int32_t t, const TensorFactors &dims) {
    if (t < 0)
      return;
    const TensorState &state = states[t];
    for (auto [d, factors] : llvm::enumerate(dims)) {
      if (d >= state.dims.size() || state.dims[d].axes.empty())
        continue;
      sizes.clear();
      for (int64_t f : factors)
        sizes.push_back(rule.getFactor(f).size);
      llvm::SmallVector<AxisList> projected =
          projectDim(state.dims[d].axes, sizes, mesh);
      for (auto [f, axes] : llvm::zip(factors, projected))
        if (!axes.empty())
          candidates[f].push_back({std::move(axes), graph.tensors[t].bytes});
    }
  };
  for (auto [t, dims] : llvm::zip(edge.operands, rule.getOperands()))
    collect(t, dims);
  for (auto [t, dims] : llvm::zip(edge.results, rule.getResults()))
    collect(t, dims);

  // Factors choose one after another, strongest first (then in rule order),
  // and an axis one factor took is cut from the others' candidates: two
  // factors of one op never take the same axis, so a tensor carrying both
  // does not lose one of them to the one-axis-per-tensor rule.
  llvm::SmallVector<int64_t, 8> order;
  llvm::SmallVector<int64_t, 8> strongest(rule.getNumFactors(), kUnprioritized);
  for (int64_t f = 0; f < rule.getNumFactors(); ++f) {
    if (rule.getFactor(f).kind == FactorKind::Whole || candidates[f].empty())
      continue;
    order.push_back(f);
    for (const Candidate &c : candidates[f])
      strongest[f] = std::min(strongest[f], c.axes.front().priority);
  }
  llvm::stable_sort(order, [&](int64_t a, int64_t b) {
    return strongest[a] < strongest[b];
  });
  llvm::SmallVector<AxisList> chosen(rule.getNumFactors());
  llvm::SmallVector<int32_t, 8> taken;
  for (int64_t f : order) {
    llvm::SmallVector<Candidate, 2> &cands = candidates[f];
    for (Candidate &c : cands) {
      auto it = llvm::find_if(c.axes, [&](const AxisEntry &e) {
        return llvm::is_contained(taken, e.axis);
      });
      c.axes.erase(it, c.axes.end());
    }
    llvm::erase_if(cands, [](const Candidate &c) { return c.axes.empty(); });
    if (cands.empty())
      continue;
    chosen[f] = resolveCandidates(cands, mesh);
    for (const AxisEntry &e : chosen[f])
      taken.push_back(e.axis);
  }
  return chosen;
}

void Solver::evaluate(const Edge &edge, std::vector<Proposal> &out) const {
  const ShardingRule &rule = edge.rule;
  const dist::Mesh &mesh = meshOf(edge);
  llvm::SmallVector<AxisList> chosen = chooseFactors(edge);

  auto projectBack = [&](int32_t t, const TensorFactors &dims, bool isResult) {
    if (t < 0)
      return;
    const TensorState &state = states[t];
    for (auto [d, factors] : llvm::enumerate(dims)) {
      if (d >= state.dims.size() || state.dims[d].closed)
        continue;
      AxisList desired;
      for (int64_t f : factors) {
        const dist::Factor &factor = rule.getFactor(f);
        if (isResult && factor.kind == FactorKind::Reduction)
          break;
        desired.append(chosen[f].begin(), chosen[f].end());
        if (shardCount(chosen[f], mesh) != factor.size)
          break;
      }
      const AxisList &current = state.dims[d].axes;
      if (desired.size() <= current.size() || !isAxisPrefix(current, desired))
        continue;
      AxisList next(current);
      for (size_t i = current.size(); i < desired.size(); ++i) {
        int32_t axis = desired[i].axis;
        if (tensorUsesAxis(state, axis, d) ||
            llvm::any_of(next, [&](const AxisEntry &e) { return e.axis == axis; }))
          break;
        next.push_back(desired[i]);
      }
      if (next.size() > current.size())
        out.push_back({t, static_cast<int32_t>(d), std::move(next)});
    }
  };
  for (auto [t, dims] : llvm::zip(edge.operands, rule.getOperands()))
    projectBack(t, dims, /*isResult=*/false);
  for (auto [t, dims] : llvm::zip(edge.results, rule.getResults()))
    projectBack(t, dims, /*isResult=*/true);
}

bool Solver::apply(int32_t tensor, llvm::ArrayRef<Proposal> proposals) {
  TensorState &state = states[tensor];
  const dist::Mesh &mesh = graph.meshes[graph.tensors[tensor].mesh];
  // Per dimension, merge the proposals' new suffixes.
  llvm::SmallVector<AxisList, 4> suffix(state.dims.size());
  llvm::SmallVector<Candidate, 4> candidates;
  for (size_t d = 0; d < state.dims.size(); ++d) {
    candidates.clear();
    size_t have = state.dims[d].axes.size();
    for (const Proposal &p : proposals)
      if (p.dim == static_cast<int32_t>(d))
        candidates.push_back(
            {AxisList(llvm::ArrayRef(p.axes).drop_front(have)), 0});
    if (!candidates.empty())
      suffix[d] = resolveCandidates(candidates, mesh);
  }
  // Dimensions whose new axis is stronger claim contested axes first.
  llvm::SmallVector<size_t, 4> order;
  for (size_t d = 0; d < suffix.size(); ++d)
    if (!suffix[d].empty())
      order.push_back(d);
  llvm::sort(order, [&](size_t a, size_t b) {
    return std::make_tuple(suffix[a].front().priority, a) <
           std::make_tuple(suffix[b].front().priority, b);
  });
  bool changed = false;
  for (size_t d : order) {
    for (const AxisEntry &e : suffix[d]) {
      if (tensorUsesAxis(state, e.axis, d) ||
          llvm::any_of(state.dims[d].axes,
                       [&](const AxisEntry &x) { return x.axis == e.axis; }))
        break;
      state.dims[d].axes.push_back(e);
      changed = true;
    }
  }
  return changed;
}

void Solver::sweepToFixedPoint() {
  std::vector<int32_t> frontier(graph.edges.size());
  for (size_t i = 0; i < frontier.size(); ++i)
    frontier[i] = i;
  std::vector<bool> queued(graph.edges.size(), false);
  std::vector<Proposal> proposals;
  while (!frontier.empty()) {
    ++sweeps;
    proposals.clear();
    for (int32_t e : frontier)
      evaluate(graph.edges[e], proposals);
    llvm::sort(proposals, [](const Proposal &a, const Proposal &b) {
      return std::make_pair(a.tensor, a.dim) < std::make_pair(b.tensor, b.dim);
    });
    frontier.clear();
    for (size_t i = 0; i < proposals.size();) {
      size_t j = i;
      while (j < proposals.size() && proposals[j].tensor == proposals[i].tensor)
        ++j;
      int32_t t = proposals[i].tensor;
      if (apply(t, llvm::ArrayRef(proposals).slice(i, j - i))) {
        for (int32_t e : edgesOf[t]) {
          if (!queued[e]) {
            queued[e] = true;
            frontier.push_back(e);
          }
        }
      }
      i = j;
    }
    for (int32_t e : frontier)
      queued[e] = false;
  }
}

void Solver::markPartials() {
  // Decide every result's partial axes from the fixed point first, so that
  // no decision sees another's effect.
  std::vector<std::pair<int32_t, AxisList>> additions;
  std::vector<dist::ReductionKind> kinds;
  for (const Edge &edge : graph.edges) {
    const ShardingRule &rule = edge.rule;
    bool hasReduction = llvm::any_of(rule.getFactors(), [](const dist::Factor &f) {
      return f.kind == FactorKind::Reduction;
    });
    if (!hasReduction)
      continue;
    llvm::SmallVector<AxisList> chosen = chooseFactors(edge);
    for (int32_t r : edge.results) {
      if (r < 0 || graph.tensors[r].frozen)
        continue;
      const TensorState &state = states[r];
      std::optional<dist::ReductionKind> kind;
      if (!state.partial.empty())
        kind = state.partialKind;
      AxisList added;
      for (int64_t f = 0; f < rule.getNumFactors(); ++f) {
        const dist::Factor &factor = rule.getFactor(f);
        if (factor.kind != FactorKind::Reduction || chosen[f].empty())
          continue;
        if (kind && *kind != factor.partialKind)
          continue;
        for (const AxisEntry &e : chosen[f]) {
          if (tensorUsesAxis(state, e.axis, /*exceptDim=*/-1) ||
              llvm::any_of(added, [&](const AxisEntry &x) { return x.axis == e.axis; }))
            continue;
          added.push_back(e);
          kind = factor.partialKind;
        }
      }
      if (!added.empty()) {
        additions.emplace_back(r, std::move(added));
        kinds.push_back(*kind);
      }
    }
  }
  for (auto [addition, kind] : llvm::zip(additions, kinds)) {
    TensorState &state = states[addition.first];
    state.partial.append(addition.second.begin(), addition.second.end());
    state.partialKind = kind;
  }

  // Additive ops (add, sub) keep the partial sum all their operands share,
  // over the axes their result does not split: the shares are added
  // locally and reduced once. Only where the op is each operand's one
  // user: an operand read elsewhere is reduced for that reader anyway, and
  // the partitioner reuses that reduction (keeping the sum partial would
  // add one). A result only ever gains partial axes here, and only while
  // it has none, so this ends; chains of adds take one round each.
  // Value-initialized, a reduction kind is a sum (ShardingRule.h).
  const dist::ReductionKind sum{};
  std::vector<int32_t> userEdges(graph.tensors.size(), 0);
  for (const Edge &edge : graph.edges) {
    llvm::SmallVector<int32_t, 4> seen;
    for (int32_t o : edge.operands)
      if (o >= 0 && !llvm::is_contained(seen, o)) {
        seen.push_back(o);
        ++userEdges[o];
      }
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (const Edge &edge : graph.edges) {
      if (!edge.rule.isAdditive() || edge.results.size() != 1 ||
          edge.operands.empty())
        continue;
      int32_t r = edge.results.front();
      if (r < 0 || graph.tensors[r].frozen || !states[r].partial.empty())
        continue;
      AxisList shared;
      bool first = true;
      for (int32_t o : edge.operands) {
        const TensorState *in = o < 0 ? nullptr : &states[o];
        if (!in || in->partial.empty() || in->partialKind != sum ||
            userEdges[o] != 1) {
          shared.clear();
          break;
        }
        if (first) {
          shared = in->partial;
          first = false;
          continue;
        }
        llvm::erase_if(shared, [&](const AxisEntry &e) {
          return llvm::none_of(in->partial, [&](const AxisEntry &x) {
            return x.axis == e.axis;
          });
        });
      }
      TensorState &state = states[r];
      llvm::erase_if(shared, [&](const AxisEntry &e) {
        return tensorUsesAxis(state, e.axis, /*exceptDim=*/-1);
      });
      if (shared.empty())
        continue;
      state.partial = std::move(shared);
      state.partialKind = sum;
      changed = true;
    }
  }
}

PropagationResult Solver::run() {
  initialize();
  llvm::SmallVector<int64_t> thresholds;
  for (const TensorNode &node : graph.tensors)
    if (node.annotation)
      for (const DimAnnotation &dim : node.annotation->dims)
        if (dim.priority != kUnprioritized)
          thresholds.push_back(dim.priority);
  llvm::sort(thresholds);
  thresholds.erase(std::unique(thresholds.begin(), thresholds.end()),
                   thresholds.end());
  thresholds.push_back(kUnprioritized);
  for (int64_t threshold : thresholds) {
    activate(threshold);
    sweepToFixedPoint();
  }
  markPartials();
  PropagationResult result;
  result.sweeps = sweeps;
  for (auto [t, state] : llvm::enumerate(states))
    result.tensors.push_back(
        toPropagated(state, graph.meshes[graph.tensors[t].mesh]));
  return result;
}

PropagationResult sharding::propagate(const Graph &graph) {
  if (graph.tensors.empty())
    return {};
  return Solver(graph).run();
}
