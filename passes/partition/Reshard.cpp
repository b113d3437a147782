//===- Reshard.cpp - resharding planner -----------------------------------===//
//
// Resharding as a search, not a pattern match.
//
// States. A state is a sharding of the tensor: per dimension an ordered list
// of mesh axes (major to minor) and a set of partial axes. An axis appears at
// most once in a state. Axes of size 1 change no device's data, so they are
// dropped from both shardings before the search: no step names them, and two
// shardings that differ only in them need the empty plan.
//
// Steps (edges), each costed as the bytes one device sends in NCCL's ring
// algorithms, times the largest weight among the step's axes (a ring over a
// group that spans several axes runs at the pace of its slowest link). With
// L the local bytes before the step and g the product of the step's axis
// sizes:
//   local_slice(d, a)        append an unused axis as minor-most of d;   0
//   all_gather(d, axes)      remove a minor-most suffix of d;            (g-1)/g * gL
//                                                                        (the result's local bytes)
//   all_to_all(axes, s->t)   move a minor-most suffix of s to the minor
//                            end of t;                                   (g-1)/g * L
//   reduce_scatter(d, axes)  turn partial axes into minor-most axes of d; (g-1)/g * L
//   all_reduce(axes)         clear partial axes;                         2(g-1)/g * L
//   collective_permute       to any state with the same shard count per
//                            dimension and the same partial axes: both
//                            tile the tensor alike, so a bijection of
//                            devices moves every block where it belongs;  L
//                            its axes are those whose place (dimension
//                            and stride) differs between the two states.
// Multi-axis variants are generated for all_gather (any suffix),
// all_to_all (any suffix), reduce_scatter (any ordered subset of the
// partial axes) and all_reduce (any subset): one ring over g devices is
// cheaper than a ring per axis for all_reduce and all_to_all, and never
// dearer for the others. local_slice appends one axis at a time (it is free)
// and consecutive slices of one dimension are merged in the returned plan.
// Partial axes that the target keeps partial are never resolved; a
// dimension not divisible by the product of its axes is never entered.
//
// Search. A* over states from the source; a label is (cost, steps, path)
// compared lexicographically, where paths compare step by step (kind in
// StepKind order, then dimensions, then axes in mesh order, then the
// permute's target state). The heuristic is (0, h) with h the number of the
// target's axes not yet in place (in place: the dimension's list agrees with
// the target's up to and including that axis). Only local_slice is free and
// it places at most one axis, so h is consistent; cost is compared first, so
// the plan has minimal cost, then fewest steps, then the smallest path: ties
// never depend on hash or insertion order. Costs are sums of products of
// integers (bytes, group sizes) with the weights, so with integral weights
// equal plans have bit-identical costs.
//
// Bounds. Axis sets are 32-bit masks (at most 16 axes of size > 1 are
// accepted). The state space grows like the number of ways to place the
// axes in ordered per-dimension lists (tens of thousands for 6 axes and rank
// 4); the search stops with an error after ReshardOptions::maxStates
// expansions instead of running long. Realistic meshes (<= 6 axes) finish in
// far fewer: the heuristic drives free slices straight to the target, and
// the queue is cost-ordered.
//
// Known limits. Costs model bandwidth only: no latency term, no overlap, no
// topology beyond per-axis weights, and a collective_permute is charged the
// whole local tensor even when some devices keep their block. The planner
// never makes a value partial (a replicated value could be, for free), never
// pads uneven dimensions, and does not support sub-axes or tensors with
// dynamic dimensions. A tensor with no elements has cost 0 for every step,
// so among its plans only the step count decides.
//
//===----------------------------------------------------------------------===//

#include "passes/partition/Reshard.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>
#include <cstdio>
#include <queue>
#include <set>
#include <tuple>

using llvm::ArrayRef;
using llvm::Expected;
using llvm::SmallVector;
using llvm::StringRef;
using llvm::Twine;

namespace partita::partition {

StringRef stringifyReductionKind(ReductionKind kind) {
  switch (kind) {
  case ReductionKind::Sum:
    return "sum";
  case ReductionKind::Max:
    return "max";
  case ReductionKind::Min:
    return "min";
  }
  return "unknown";
}

StringRef stringifyStepKind(StepKind kind) {
  switch (kind) {
  case StepKind::LocalSlice:
    return "local_slice";
  case StepKind::AllReduce:
    return "all_reduce";
  case StepKind::ReduceScatter:
    return "reduce_scatter";
  case StepKind::AllGather:
    return "all_gather";
  case StepKind::AllToAll:
    return "all_to_all";
  case StepKind::CollectivePermute:
    return "collective_permute";
  }
  return "unknown";
}

std::optional<unsigned> Mesh::findAxis(StringRef name) const {
  for (auto [i, axis] : llvm::enumerate(axes))
    if (axis.name == name)
      return i;
  return std::nullopt;
}

static std::string joinAxes(ArrayRef<std::string> axes) {
  return "[" + llvm::join(axes, ", ") + "]";
}

std::string Sharding::toString() const {
  std::string s = "[";
  for (auto [i, dim] : llvm::enumerate(dims)) {
    if (i)
      s += ", ";
    s += "{" + llvm::join(dim, ", ") + "}";
  }
  s += "]";
  if (!partialAxes.empty())
    s += " partial=" + stringifyReductionKind(partialKind).str() + "{" +
         llvm::join(partialAxes, ", ") + "}";
  return s;
}

bool Sharding::operator==(const Sharding &other) const {
  return dims == other.dims && partialAxes == other.partialAxes &&
         (partialAxes.empty() || partialKind == other.partialKind);
}

std::string formatCost(double cost) {
  char buf[64];
  if (std::isfinite(cost) && std::fabs(cost) < 1e15 &&
      cost == std::floor(cost)) {
    std::snprintf(buf, sizeof(buf), "%.0f", cost);
    return buf;
  }
  std::snprintf(buf, sizeof(buf), "%.3f", cost);
  std::string s = buf;
  while (!s.empty() && s.back() == '0')
    s.pop_back();
  if (!s.empty() && s.back() == '.')
    s.pop_back();
  return s;
}

std::string ReshardStep::toString() const {
  std::string s = stringifyStepKind(kind).str() + "(";
  switch (kind) {
  case StepKind::LocalSlice:
  case StepKind::AllGather:
    s += "dim=" + std::to_string(dim) + ", axes=" + joinAxes(axes);
    break;
  case StepKind::ReduceScatter:
    s += "dim=" + std::to_string(dim) + ", axes=" + joinAxes(axes) + ", " +
         stringifyReductionKind(reduction).str();
    break;
  case StepKind::AllReduce:
    s += "axes=" + joinAxes(axes) + ", " + stringifyReductionKind(reduction).str();
    break;
  case StepKind::AllToAll:
    s += "axes=" + joinAxes(axes) + ", " + std::to_string(dim) + "->" +
         std::to_string(dstDim);
    break;
  case StepKind::CollectivePermute:
    s += "axes=" + joinAxes(axes);
    break;
  }
  return s + ")";
}

std::string ReshardPlan::toString() const {
  std::string s;
  for (auto [i, step] : llvm::enumerate(steps)) {
    if (i)
      s += " ; ";
    s += step.toString();
  }
  if (steps.empty())
    s = "no-op";
  return s + " (cost " + formatCost(cost) + ")";
}

namespace {

/// Masks of axes are uint32_t; only axes of size > 1 take part in the search.
constexpr unsigned kMaxSearchAxes = 16;

using AxisList = SmallVector<uint8_t, 4>;

struct State {
  SmallVector<AxisList, 4> dims;
  uint32_t partial = 0;

  uint32_t usedMask() const {
    uint32_t mask = 0;
    for (const AxisList &dim : dims)
      for (uint8_t a : dim)
        mask |= 1u << a;
    return mask;
  }
  /// A byte string identifying the state, for maps and ordering.
  std::string key() const {
    std::string k;
    for (const AxisList &dim : dims) {
      k.append(dim.begin(), dim.end());
      k.push_back('\xff');
    }
    for (int i = 0; i < 4; ++i)
      k.push_back(static_cast<char>((partial >> (8 * i)) & 0xff));
    return k;
  }
};

/// One edge of the search.
struct Move {
  StepKind kind = StepKind::LocalSlice;
  int64_t dim = -1;
  int64_t dstDim = -1;
  AxisList axes;
  /// CollectivePermute: key of the state it reaches, so that two permutes
  /// from one state compare.
  std::string permuteKey;
  double cost = 0;
  State after;

  auto tie() const {
    return std::tie(kind, dim, dstDim, axes, permuteKey);
  }
  bool operator<(const Move &other) const { return tie() < other.tie(); }
};

struct Label {
  double cost = 0;
  unsigned steps = 0;
  SmallVector<Move, 4> path;
};

/// (cost, steps + extraA vs extraB, path) lexicographically.
bool labelLess(const Label &a, unsigned extraA, const Label &b,
               unsigned extraB) {
  if (a.cost != b.cost)
    return a.cost < b.cost;
  if (a.steps + extraA != b.steps + extraB)
    return a.steps + extraA < b.steps + extraB;
  return std::lexicographical_compare(a.path.begin(), a.path.end(),
                                      b.path.begin(), b.path.end());
}

struct Entry {
  State state;
  std::string key;
  Label label;
  unsigned heuristic = 0;
};

llvm::Error fail(const Twine &message) {
  return llvm::createStringError(message);
}

class Planner {
public:
  Planner(const Mesh &mesh, const TensorInfo &tensor,
          const ReshardOptions &options)
      : mesh(mesh), tensor(tensor), options(options) {}

  Expected<ReshardPlan> run(const Sharding &source, const Sharding &target);

private:
  llvm::Error validateMeshAndTensor();
  Expected<State> toState(StringRef which, const Sharding &sharding);
  Sharding toSharding(const State &state) const;

  int64_t localBytes(const State &state) const;
  int64_t shardCount(const AxisList &axes) const;
  bool divisible(const State &state, size_t dim) const {
    return tensor.shape[dim] % shardCount(state.dims[dim]) == 0;
  }
  double maxWeight(ArrayRef<uint8_t> axes) const;
  unsigned heuristic(const State &state) const;

  void expand(const Entry &entry);
  void relax(const Label &from, Move move);
  void enumeratePermutes(const State &state, const Label &label, int64_t bytes);
  ReshardPlan buildPlan(const Label &label) const;

  const Mesh &mesh;
  const TensorInfo &tensor;
  const ReshardOptions &options;

  SmallVector<double, 8> weights;
  uint32_t searchMask = 0;
  int64_t globalBytes = 0;
  State targetState;
  std::string targetKey;
  ReductionKind partialKind = ReductionKind::Sum;

  std::vector<Entry> entries;
  std::priority_queue<unsigned, std::vector<unsigned>,
                      std::function<bool(unsigned, unsigned)>>
      queue{[this](unsigned a, unsigned b) {
        // priority_queue pops the greatest: order by "b is better than a".
        const Entry &ea = entries[a], &eb = entries[b];
        return labelLess(eb.label, eb.heuristic, ea.label, ea.heuristic);
      }};
  std::map<std::string, Label> best;
  std::set<std::string> closed;
};

llvm::Error Planner::validateMeshAndTensor() {
  if (mesh.axes.empty())
    return fail("the mesh has no axes");
  int64_t devices = 1;
  unsigned searchAxes = 0;
  for (auto [i, axis] : llvm::enumerate(mesh.axes)) {
    if (axis.name.empty())
      return fail("mesh axis " + Twine(i) + " has an empty name");
    for (unsigned j = 0; j < i; ++j)
      if (mesh.axes[j].name == axis.name)
        return fail("mesh axis '" + axis.name + "' is declared twice");
    if (axis.size < 1)
      return fail("mesh axis '" + axis.name + "' has size " +
                  Twine(axis.size) + "; sizes must be at least 1");
    if (llvm::MulOverflow(devices, axis.size, devices))
      return fail("the mesh has too many devices to count in 64 bits");
    if (axis.size > 1) {
      if (++searchAxes > kMaxSearchAxes)
        return fail("the mesh has more than " + Twine(kMaxSearchAxes) +
                    " axes of size > 1; the resharding planner supports at "
                    "most " +
                    Twine(kMaxSearchAxes));
      searchMask |= 1u << i;
    }
  }
  weights.assign(mesh.axes.size(), 1.0);
  for (const auto &[name, weight] : options.axisWeights) {
    std::optional<unsigned> axis = mesh.findAxis(name);
    if (!axis)
      return fail("cost weight given for unknown mesh axis '" + name + "'");
    if (!std::isfinite(weight) || weight <= 0)
      return fail("cost weight of mesh axis '" + name +
                  "' must be a positive finite number");
    weights[*axis] = weight;
  }
  if (tensor.elementBytes < 1)
    return fail("element size " + Twine(tensor.elementBytes) +
                " bytes; it must be at least 1");
  globalBytes = tensor.elementBytes;
  for (auto [d, size] : llvm::enumerate(tensor.shape)) {
    if (size < 0)
      return fail("tensor dim " + Twine(d) + " has dynamic or negative size " +
                  Twine(size) + "; the planner needs static shapes");
    if (llvm::MulOverflow(globalBytes, size, globalBytes))
      return fail("the tensor's size in bytes does not fit in 64 bits");
  }
  return llvm::Error::success();
}

Expected<State> Planner::toState(StringRef which, const Sharding &sharding) {
  if (sharding.dims.size() != tensor.shape.size())
    return fail(which + " sharding has " + Twine(sharding.dims.size()) +
                " dims but the tensor has rank " + Twine(tensor.shape.size()));
  // Where each axis is used so far, to name both places of a duplicate.
  SmallVector<std::string, 8> usedAt(mesh.axes.size());
  auto meshAxes = [&] {
    SmallVector<std::string, 8> names;
    for (const MeshAxis &axis : mesh.axes)
      names.push_back(axis.name);
    return joinAxes(names);
  };
  State state;
  for (auto [d, dim] : llvm::enumerate(sharding.dims)) {
    AxisList axes;
    int64_t count = 1;
    for (const std::string &name : dim) {
      std::optional<unsigned> axis = mesh.findAxis(name);
      if (!axis)
        return fail(which + " sharding: unknown axis '" + name +
                    "' in tensor dim " + Twine(d) + " (mesh axes " +
                    meshAxes() + ")");
      std::string here = "tensor dim " + std::to_string(d);
      if (!usedAt[*axis].empty())
        return fail(which + " sharding: axis '" + name + "' is used twice (" +
                    usedAt[*axis] + " and " + here + ")");
      usedAt[*axis] = here;
      count *= mesh.axes[*axis].size; // Cannot overflow: the mesh's count fits.
      if (mesh.axes[*axis].size > 1)
        axes.push_back(*axis);
    }
    if (tensor.shape[d] % count != 0)
      return fail(which + " sharding: tensor dim " + Twine(d) + " of size " +
                  Twine(tensor.shape[d]) + " is not divisible by " +
                  Twine(count) + ", the product of the sizes of its axes " +
                  joinAxes(dim));
    state.dims.push_back(std::move(axes));
  }
  for (const std::string &name : sharding.partialAxes) {
    std::optional<unsigned> axis = mesh.findAxis(name);
    if (!axis)
      return fail(which + " sharding: unknown partial axis '" + name +
                  "' (mesh axes " + meshAxes() + ")");
    if (!usedAt[*axis].empty())
      return fail(which + " sharding: axis '" + name + "' is used twice (" +
                  usedAt[*axis] + " and the partial axes)");
    usedAt[*axis] = "the partial axes";
    if (mesh.axes[*axis].size > 1)
      state.partial |= 1u << *axis;
  }
  return state;
}

Sharding Planner::toSharding(const State &state) const {
  Sharding sharding;
  for (const AxisList &dim : state.dims) {
    SmallVector<std::string, 2> names;
    for (uint8_t a : dim)
      names.push_back(mesh.axes[a].name);
    sharding.dims.push_back(std::move(names));
  }
  for (unsigned a = 0; a < mesh.axes.size(); ++a)
    if (state.partial & (1u << a))
      sharding.partialAxes.push_back(mesh.axes[a].name);
  sharding.partialKind = partialKind;
  return sharding;
}

int64_t Planner::shardCount(const AxisList &axes) const {
  int64_t count = 1;
  for (uint8_t a : axes)
    count *= mesh.axes[a].size;
  return count;
}

int64_t Planner::localBytes(const State &state) const {
  int64_t shards = 1;
  for (const AxisList &dim : state.dims)
    shards *= shardCount(dim);
  return globalBytes / shards;
}

double Planner::maxWeight(ArrayRef<uint8_t> axes) const {
  double weight = 0;
  for (uint8_t a : axes)
    weight = std::max(weight, weights[a]);
  return weight;
}

unsigned Planner::heuristic(const State &state) const {
  unsigned missing = 0;
  for (auto [have, want] : llvm::zip_equal(state.dims, targetState.dims)) {
    size_t prefix = 0;
    while (prefix < have.size() && prefix < want.size() &&
           have[prefix] == want[prefix])
      ++prefix;
    missing += want.size() - prefix;
  }
  return missing;
}

void Planner::relax(const Label &from, Move move) {
  std::string key = move.after.key();
  if (closed.count(key))
    return;
  Label label;
  label.cost = from.cost + move.cost;
  label.steps = from.steps + 1;
  auto it = best.find(key);
  // Cheap rejection before copying the path.
  if (it != best.end() &&
      (label.cost > it->second.cost ||
       (label.cost == it->second.cost && label.steps > it->second.steps)))
    return;
  label.path = from.path;
  State after = move.after;
  label.path.push_back(std::move(move));
  if (it != best.end() && !labelLess(label, 0, it->second, 0))
    return;
  best[key] = label;
  unsigned h = heuristic(after);
  entries.push_back(Entry{std::move(after), std::move(key), std::move(label), h});
  queue.push(entries.size() - 1);
}

/// Collects the indices of the set bits of `mask`, ascending.
static AxisList axesOf(uint32_t mask) {
  AxisList axes;
  for (unsigned a = 0; mask; ++a, mask >>= 1)
    if (mask & 1)
      axes.push_back(a);
  return axes;
}

void Planner::expand(const Entry &entry) {
  const State &state = entry.state;
  const Label &label = entry.label;
  const int64_t bytes = localBytes(state);
  const uint32_t used = state.usedMask();
  const uint32_t unused = searchMask & ~used & ~state.partial;
  const uint32_t resolvable = state.partial & ~targetState.partial;
  const size_t rank = state.dims.size();

  // local_slice: one unused axis appended to one dimension.
  for (size_t d = 0; d < rank; ++d)
    for (uint8_t a : axesOf(unused)) {
      Move move{StepKind::LocalSlice, int64_t(d), -1, {a}, {}, 0, state};
      move.after.dims[d].push_back(a);
      if (divisible(move.after, d))
        relax(label, std::move(move));
    }

  // all_reduce: any non-empty subset of the resolvable partial axes.
  for (uint32_t subset = resolvable; subset; subset = (subset - 1) & resolvable) {
    AxisList axes = axesOf(subset);
    double g = double(shardCount(axes));
    Move move{StepKind::AllReduce, -1, -1, axes, {},
              2 * (g - 1) * double(bytes) / g * maxWeight(axes), state};
    move.after.partial &= ~subset;
    relax(label, std::move(move));
  }

  // reduce_scatter: an ordered sequence of resolvable partial axes appended
  // to one dimension. A prefix that does not divide cannot be extended.
  for (size_t d = 0; d < rank; ++d) {
    AxisList seq;
    std::function<void(uint32_t)> extend = [&](uint32_t taken) {
      for (uint8_t a : axesOf(resolvable & ~taken)) {
        seq.push_back(a);
        Move move{StepKind::ReduceScatter, int64_t(d), -1, seq, {}, 0, state};
        move.after.dims[d].append(seq.begin(), seq.end());
        move.after.partial &= ~(taken | (1u << a));
        if (divisible(move.after, d)) {
          int64_t g = shardCount(seq);
          move.cost = double(g - 1) * double(bytes / g) * maxWeight(seq);
          relax(label, std::move(move));
          extend(taken | (1u << a));
        }
        seq.pop_back();
      }
    };
    extend(0);
  }

  // all_gather: remove a minor-most suffix of one dimension.
  for (size_t d = 0; d < rank; ++d) {
    const AxisList &dim = state.dims[d];
    for (size_t k = 1; k <= dim.size(); ++k) {
      AxisList axes(dim.end() - k, dim.end());
      int64_t g = shardCount(axes);
      Move move{StepKind::AllGather, int64_t(d), -1, axes, {},
                double(g - 1) * double(bytes) * maxWeight(axes), state};
      move.after.dims[d].resize(dim.size() - k);
      relax(label, std::move(move));
    }
  }

  // all_to_all: move a minor-most suffix of one dimension to the minor end
  // of another.
  for (size_t s = 0; s < rank; ++s) {
    const AxisList &dim = state.dims[s];
    for (size_t k = 1; k <= dim.size(); ++k) {
      AxisList axes(dim.end() - k, dim.end());
      int64_t g = shardCount(axes);
      for (size_t t = 0; t < rank; ++t) {
        if (t == s)
          continue;
        Move move{StepKind::AllToAll, int64_t(s), int64_t(t), axes, {}, 0,
                  state};
        move.after.dims[s].resize(dim.size() - k);
        move.after.dims[t].append(axes.begin(), axes.end());
        if (!divisible(move.after, t))
          continue;
        move.cost = double(g - 1) * double(bytes / g) * maxWeight(axes);
        relax(label, std::move(move));
      }
    }
  }

  enumeratePermutes(state, label, bytes);
}

void Planner::enumeratePermutes(const State &state, const Label &label,
                                int64_t bytes) {
  const size_t rank = state.dims.size();
  const uint32_t available = searchMask & ~state.partial;
  SmallVector<int64_t, 4> counts;
  for (const AxisList &dim : state.dims)
    counts.push_back(shardCount(dim));

  // Where an axis sits: its dimension and its stride (the product of the
  // sizes of the axes minor to it), or (-1, 0) when unused.
  auto placeOf = [&](const State &s, uint8_t axis) {
    for (auto [d, dim] : llvm::enumerate(s.dims)) {
      int64_t stride = 1;
      for (size_t i = dim.size(); i-- > 0;) {
        if (dim[i] == axis)
          return std::make_pair(int64_t(d), stride);
        stride *= mesh.axes[dim[i]].size;
      }
    }
    return std::make_pair(int64_t(-1), int64_t(0));
  };

  State candidate;
  candidate.dims.resize(rank);
  candidate.partial = state.partial;
  std::function<void(size_t, uint32_t, int64_t)> fill =
      [&](size_t d, uint32_t taken, int64_t remaining) {
        if (remaining == 1) {
          if (d + 1 < rank) {
            fill(d + 1, taken, counts[d + 1]);
            return;
          }
          AxisList changed;
          for (uint8_t a : axesOf(available))
            if (placeOf(state, a) != placeOf(candidate, a))
              changed.push_back(a);
          if (changed.empty())
            return; // The state itself.
          Move move{StepKind::CollectivePermute, -1, -1, changed,
                    candidate.key(), double(bytes) * maxWeight(changed),
                    candidate};
          relax(label, std::move(move));
          return;
        }
        for (uint8_t a : axesOf(available & ~taken)) {
          int64_t size = mesh.axes[a].size;
          if (remaining % size != 0)
            continue;
          candidate.dims[d].push_back(a);
          fill(d, taken | (1u << a), remaining / size);
          candidate.dims[d].pop_back();
        }
      };
  if (rank > 0)
    fill(0, 0, counts[0]);
}

ReshardPlan Planner::buildPlan(const Label &label) const {
  ReshardPlan plan;
  plan.cost = label.cost;
  for (const Move &move : label.path) {
    // Slices of one dimension in a row are one step.
    if (move.kind == StepKind::LocalSlice && !plan.steps.empty() &&
        plan.steps.back().kind == StepKind::LocalSlice &&
        plan.steps.back().dim == move.dim) {
      for (uint8_t a : move.axes)
        plan.steps.back().axes.push_back(mesh.axes[a].name);
      plan.steps.back().result = toSharding(move.after);
      continue;
    }
    ReshardStep step;
    step.kind = move.kind;
    step.dim = move.dim;
    step.dstDim = move.dstDim;
    for (uint8_t a : move.axes)
      step.axes.push_back(mesh.axes[a].name);
    step.reduction = partialKind;
    step.cost = move.cost;
    step.result = toSharding(move.after);
    plan.steps.push_back(std::move(step));
  }
  return plan;
}

Expected<ReshardPlan> Planner::run(const Sharding &source,
                                   const Sharding &target) {
  if (llvm::Error err = validateMeshAndTensor())
    return std::move(err);
  Expected<State> sourceState = toState("source", source);
  if (!sourceState)
    return sourceState.takeError();
  Expected<State> maybeTarget = toState("target", target);
  if (!maybeTarget)
    return maybeTarget.takeError();
  targetState = std::move(*maybeTarget);
  targetKey = targetState.key();

  if (uint32_t extra = targetState.partial & ~sourceState->partial)
    return fail("target is partial over axis '" +
                mesh.axes[axesOf(extra).front()].name +
                "' where the source is not; the planner does not make values "
                "partial");
  if (targetState.partial && source.partialKind != target.partialKind)
    return fail("source is a partial " +
                stringifyReductionKind(source.partialKind) +
                " but the target a partial " +
                stringifyReductionKind(target.partialKind));
  partialKind = source.partialKind;

  Label start;
  std::string startKey = sourceState->key();
  best[startKey] = start;
  entries.push_back(Entry{*sourceState, startKey, start,
                          heuristic(*sourceState)});
  queue.push(0);
  unsigned expanded = 0;
  while (!queue.empty()) {
    unsigned index = queue.top();
    queue.pop();
    if (!closed.insert(entries[index].key).second)
      continue;
    if (entries[index].key == targetKey) {
      ReshardPlan plan = buildPlan(entries[index].label);
      plan.expandedStates = expanded;
      return plan;
    }
    if (++expanded > options.maxStates)
      return fail("no resharding plan found within " +
                  Twine(options.maxStates) +
                  " search states; raise the bound or simplify the mesh");
    // expand() appends to `entries`: work on a copy.
    Entry entry = entries[index];
    expand(entry);
  }
  return fail("no resharding plan from " + source.toString() + " to " +
              target.toString());
}

} // namespace

Expected<ReshardPlan> planReshard(const Mesh &mesh, const TensorInfo &tensor,
                                  const Sharding &source,
                                  const Sharding &target,
                                  const ReshardOptions &options) {
  Planner planner(mesh, tensor, options);
  return planner.run(source, target);
}

Expected<Mesh> meshFromAttr(dist::MeshAttr attr) {
  if (!attr)
    return fail("missing mesh");
  Mesh mesh;
  for (dist::MeshAxisAttr axis : attr.getAxes())
    mesh.axes.push_back(MeshAxis{axis.getName().str(), axis.getSize()});
  return mesh;
}

static Expected<std::string> axisName(dist::AxisRefAttr axis) {
  if (axis.isSubAxis())
    return fail("sub-axis of '" + axis.getName() +
                "' is not supported by the resharding planner");
  return axis.getName().str();
}

Expected<Sharding> shardingFromAttr(dist::ShardingAttr attr) {
  if (!attr)
    return fail("missing sharding");
  Sharding sharding;
  for (dist::DimShardingAttr dim : attr.getDims()) {
    SmallVector<std::string, 2> axes;
    for (dist::AxisRefAttr axis : dim.getAxes()) {
      Expected<std::string> name = axisName(axis);
      if (!name)
        return name.takeError();
      axes.push_back(std::move(*name));
    }
    sharding.dims.push_back(std::move(axes));
  }
  for (dist::AxisRefAttr axis : attr.getPartialAxes()) {
    Expected<std::string> name = axisName(axis);
    if (!name)
      return name.takeError();
    sharding.partialAxes.push_back(std::move(*name));
  }
  switch (attr.getPartialKind()) {
  case dist::ReductionKind::Sum:
    sharding.partialKind = ReductionKind::Sum;
    break;
  case dist::ReductionKind::Max:
    sharding.partialKind = ReductionKind::Max;
    break;
  case dist::ReductionKind::Min:
    sharding.partialKind = ReductionKind::Min;
    break;
  }
  return sharding;
}

} // namespace partita::partition
