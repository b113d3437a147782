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
// cheaper than a ring per axis for all_reduce and all_to_all; for
// all_gather and reduce_scatter it costs the same as one ring per axis
// when the weights are equal (and more otherwise), but is one step, which
// wins the tie. local_slice appends one axis at a time (it is free)
// and consecutive slices of one dimension are merged in the returned plan.
// Partial axes that the target keeps partial are never resolved; a
// dimension not divisible by the product of its axes is never entered.
//
// Search. A* over states from the source. A label is (cost, steps, path),
// compared lexicographically; paths compare step by step (kind in StepKind
// order, then dimensions, then axes in mesh order, then the permute's target
// state). The heuristic is (lowerBound, 1 unless at the target), where
// lowerBound (see there) bounds the remaining cost from the bytes devices
// must still receive and the partial sums still to resolve; it is
// consistent, so the plan has minimal cost, then fewest steps, then the
// smallest path, and ties never depend on hash or insertion order. Nodes
// whose cost plus bound exceed the cost of a known plan (gather everything,
// all_reduce, slice; or any path to the target found so far) are not
// queued. Costs are sums of products of integers (bytes, group sizes) with
// the weights, so with integral weights equal plans have identical costs.
//
// Bounds. Axis sets are 32-bit masks: at most 16 axes of size > 1 are
// accepted. The state space grows like the number of ways to place the
// axes in ordered per-dimension lists (about 10^5 for 6 axes and rank 4),
// and each state has up to hundreds of permute targets; the search stops
// with an error after ReshardOptions::maxStates expansions instead of
// running long. Measured on random problems (Release build): meshes of up to
// 4 axes plan in milliseconds; 6 axes and rank 4 in well under a second
// unweighted, and up to ~75000 states (~5 s) when one axis weighs 8.
//
// Latency. ReshardOptions::stepCost adds a fixed cost to every
// communicating step (the partitioner's default: kReshardStepCost in
// Partitioner.cpp), so a plan of more collectives must save that much
// traffic per extra one. The bounds stay valid: the lower bound ignores it
// (it only makes steps dearer), and the fallback plan's upper bound counts
// it once per step.
//
// Known limits. Costs model bandwidth and a fixed cost per step only: no
// overlap, no topology beyond per-axis weights, and a collective_permute is charged the
// whole local tensor even when some devices keep their block. The planner
// never makes a value partial (a replicated value could be, for free), never
// pads uneven dimensions, and does not support sub-axes (it rejects them
// by name) or tensors with dynamic dimensions. A tensor with no elements has
// cost 0 for every step, so among its plans only the step count decides.
//
//===----------------------------------------------------------------------===//

#include "passes/partition/Reshard.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
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

static std::string joinAxes(ArrayRef<std::string> axes) {
  return "[" + llvm::join(axes, ", ") + "]";
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
         dist::reductionKindName(reduction);
    break;
  case StepKind::AllReduce:
    s += "axes=" + joinAxes(axes) + ", " + dist::reductionKindName(reduction);
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

/// A search node: a state with the best label found for it so far. The
/// path is the chain of parents, so that labels are cheap to create.
struct Node {
  std::string key;
  /// Cost and steps from the source.
  double cost = 0;
  unsigned steps = 0;
  /// The heuristic: a lower bound on the remaining cost, and 1 step unless
  /// the node is the target.
  double boundCost = 0;
  unsigned boundSteps = 0;
  int parent = -1;
  /// The edge from the parent; its `after` is this node's state.
  Move move;
};

/// The indices of the set bits of `mask`, ascending.
AxisList axesOf(uint32_t mask) {
  AxisList axes;
  for (unsigned a = 0; mask; ++a, mask >>= 1)
    if (mask & 1)
      axes.push_back(a);
  return axes;
}

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
  int64_t shardCount(ArrayRef<uint8_t> axes) const;
  bool divisible(const State &state, size_t dim) const {
    return tensor.shape[dim] % shardCount(state.dims[dim]) == 0;
  }
  double maxWeight(ArrayRef<uint8_t> axes) const;

  void prepareBound();
  double lowerBound(const State &state) const;
  double upperBound(const State &source) const;

  void collectPath(int node, SmallVector<const Move *, 8> &path) const;
  bool pathLess(int a, const Move *extraA, int b) const;
  bool nodeLess(int a, int b) const;

  void expand(int node);
  /// Queues the state `move` reaches unless a label at least as good is
  /// known. `key` and `bound` may be passed when already computed.
  void relax(int from, Move move, const std::string *key = nullptr,
             std::optional<double> bound = std::nullopt);

  /// The place of an axis in a state: its dimension and stride (the product
  /// of the sizes of the axes minor to it), or (-1, 0) when unused.
  using Place = std::pair<int64_t, int64_t>;
  SmallVector<Place, 8> placesOf(const State &state) const;
  struct PermuteTarget {
    State state;
    std::string key;
    SmallVector<Place, 8> places;
    double bound;
  };
  /// The states a collective_permute can reach from `state` (and `state`
  /// itself), computed once per tiling.
  const std::vector<PermuteTarget> &permuteTargetsFor(const State &state);
  void enumeratePermutes(int from, const State &state, int64_t bytes);
  ReshardPlan buildPlan(int node) const;

  const Mesh &mesh;
  const TensorInfo &tensor;
  const ReshardOptions &options;

  SmallVector<double, 8> weights;
  uint32_t searchMask = 0;
  double minWeight = 1;
  int64_t globalBytes = 0;
  State targetState;
  std::string targetKey;
  ReductionKind partialKind = ReductionKind::Sum;

  /// Devices whose needs bound the remaining cost: per device its
  /// coordinate along every mesh axis, and its target block per dimension.
  SmallVector<SmallVector<int64_t, 8>, 0> boundDevices;
  SmallVector<SmallVector<std::pair<int64_t, int64_t>, 4>, 0> targetBlocks;
  int64_t targetBlockElements = 0;

  /// Sets of indices along one dimension, as sorted disjoint [lo, hi).
  using Intervals = SmallVector<std::pair<int64_t, int64_t>, 8>;
  /// The union of the blocks of dimension `d` that the devices agreeing
  /// with `coords` on the axes in `fixed` hold under `dim`.
  Intervals groupBlocks(const AxisList &dim, size_t d,
                        ArrayRef<int64_t> coords, uint32_t fixed) const;
  /// For each weight above the smallest: the axes at least that heavy, and
  /// per group of devices that agree on them (a representative's
  /// coordinates, the group size, and the union of the group's target blocks
  /// per dimension).
  struct HeavyClass {
    double weight;
    uint32_t axes;
    int64_t groupSize;
    SmallVector<SmallVector<int64_t, 8>, 0> groups;
    SmallVector<SmallVector<Intervals, 4>, 0> needs;
  };
  SmallVector<HeavyClass, 2> heavyClasses;
  /// Nodes whose cost plus bound exceed this are not queued.
  double costLimit = 0;

  std::vector<Node> nodes;
  std::priority_queue<int, std::vector<int>, std::function<bool(int, int)>>
      queue{[this](int a, int b) {
        // priority_queue pops the greatest: order by "b is better than a".
        return nodeLess(b, a);
      }};
  struct Visit {
    int node = -1;
    bool closed = false;
  };
  /// Looked up only, never iterated, so hash order cannot leak into plans.
  llvm::StringMap<Visit> visits;
  /// Looked up only; keyed by shard counts and partial axes.
  llvm::StringMap<std::vector<PermuteTarget>> permuteTargets;
};

llvm::Error Planner::validateMeshAndTensor() {
  if (mesh.axes.empty())
    return fail("the mesh has no axes");
  if (!std::isfinite(options.stepCost) || options.stepCost < 0)
    return fail("the cost of a step must be a finite number of at least 0");
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
    std::optional<size_t> axis = mesh.findAxis(name);
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
    for (const dist::MeshAxis &axis : mesh.axes)
      names.push_back(axis.name);
    return joinAxes(names);
  };
  auto checkWhole = [&](const dist::AxisRef &axis) -> llvm::Error {
    if (axis.isSubAxis())
      return fail("sub-axis of '" + axis.name +
                  "' is not supported by the resharding planner");
    return llvm::Error::success();
  };
  State state;
  for (auto [d, dim] : llvm::enumerate(sharding.dims)) {
    AxisList axes;
    SmallVector<std::string, 2> names;
    int64_t count = 1;
    for (const dist::AxisRef &ref : dim.axes) {
      if (llvm::Error err = checkWhole(ref))
        return std::move(err);
      const std::string &name = ref.name;
      names.push_back(name);
      std::optional<size_t> axis = mesh.findAxis(name);
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
                  joinAxes(names));
    state.dims.push_back(std::move(axes));
  }
  for (const dist::AxisRef &ref : sharding.partialAxes) {
    if (llvm::Error err = checkWhole(ref))
      return std::move(err);
    const std::string &name = ref.name;
    std::optional<size_t> axis = mesh.findAxis(name);
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
    dist::DimSharding names;
    for (uint8_t a : dim)
      names.axes.push_back(mesh.axes[a].name);
    sharding.dims.push_back(std::move(names));
  }
  for (unsigned a = 0; a < mesh.axes.size(); ++a)
    if (state.partial & (1u << a))
      sharding.partialAxes.push_back(mesh.axes[a].name);
  // The model keeps the kind of a value that is no longer partial at sum.
  if (sharding.isPartial())
    sharding.partialKind = partialKind;
  return sharding;
}

int64_t Planner::shardCount(ArrayRef<uint8_t> axes) const {
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

/// At most this many devices feed the lower bound (a fixed, evenly strided
/// subset on larger meshes: the maximum over a fixed subset is still a
/// consistent lower bound).
constexpr int64_t kMaxBoundDevices = 4096;

void Planner::prepareBound() {
  int64_t devices = 1;
  for (const dist::MeshAxis &axis : mesh.axes)
    devices *= axis.size;
  int64_t stride = std::max<int64_t>(1, devices / kMaxBoundDevices);
  for (int64_t id = 0; id < devices; id += stride) {
    SmallVector<int64_t, 8> coords(mesh.axes.size());
    int64_t rest = id;
    for (size_t a = mesh.axes.size(); a-- > 0;) {
      coords[a] = rest % mesh.axes[a].size;
      rest /= mesh.axes[a].size;
    }
    boundDevices.push_back(std::move(coords));
  }
  targetBlockElements = 1;
  for (auto [d, dim] : llvm::enumerate(targetState.dims))
    targetBlockElements *= tensor.shape[d] / shardCount(dim);
  for (const SmallVector<int64_t, 8> &coords : boundDevices) {
    SmallVector<std::pair<int64_t, int64_t>, 4> blocks;
    for (auto [d, dim] : llvm::enumerate(targetState.dims)) {
      int64_t index = 0;
      for (uint8_t a : dim)
        index = index * mesh.axes[a].size + coords[a];
      int64_t size = tensor.shape[d] / shardCount(dim);
      blocks.push_back({index * size, index * size + size});
    }
    targetBlocks.push_back(std::move(blocks));
  }
  minWeight = 0;
  for (unsigned a = 0; a < mesh.axes.size(); ++a)
    if (searchMask & (1u << a))
      minWeight = minWeight == 0 ? weights[a] : std::min(minWeight, weights[a]);

  std::set<double> heavier;
  for (uint8_t a : axesOf(searchMask))
    if (weights[a] > minWeight)
      heavier.insert(weights[a]);
  for (double weight : heavier) {
    HeavyClass heavy{weight, 0, 1, {}, {}};
    for (uint8_t a : axesOf(searchMask))
      if (weights[a] >= weight)
        heavy.axes |= 1u << a;
    int64_t groups = shardCount(axesOf(heavy.axes));
    heavy.groupSize = devices / groups;
    int64_t groupStride = std::max<int64_t>(1, groups / kMaxBoundDevices);
    AxisList heavyAxes = axesOf(heavy.axes);
    for (int64_t id = 0; id < groups; id += groupStride) {
      SmallVector<int64_t, 8> coords(mesh.axes.size(), 0);
      int64_t rest = id;
      for (size_t i = heavyAxes.size(); i-- > 0;) {
        coords[heavyAxes[i]] = rest % mesh.axes[heavyAxes[i]].size;
        rest /= mesh.axes[heavyAxes[i]].size;
      }
      SmallVector<Intervals, 4> need;
      for (auto [d, dim] : llvm::enumerate(targetState.dims))
        need.push_back(groupBlocks(dim, d, coords, heavy.axes));
      heavy.groups.push_back(std::move(coords));
      heavy.needs.push_back(std::move(need));
    }
    heavyClasses.push_back(std::move(heavy));
  }
}

Planner::Intervals Planner::groupBlocks(const AxisList &dim, size_t d,
                                        ArrayRef<int64_t> coords,
                                        uint32_t fixed) const {
  SmallVector<int64_t, 8> indices{0};
  for (uint8_t a : dim) {
    SmallVector<int64_t, 8> next;
    int64_t size = mesh.axes[a].size;
    for (int64_t index : indices) {
      if (fixed & (1u << a)) {
        next.push_back(index * size + coords[a]);
        continue;
      }
      for (int64_t k = 0; k < size; ++k)
        next.push_back(index * size + k);
    }
    indices = std::move(next);
  }
  llvm::sort(indices);
  int64_t block = tensor.shape[d] / shardCount(dim);
  Intervals intervals;
  for (int64_t index : indices) {
    if (!intervals.empty() && intervals.back().second == index * block)
      intervals.back().second += block;
    else
      intervals.push_back({index * block, index * block + block});
  }
  return intervals;
}

static int64_t measure(ArrayRef<std::pair<int64_t, int64_t>> intervals) {
  int64_t total = 0;
  for (auto [lo, hi] : intervals)
    total += hi - lo;
  return total;
}

static int64_t overlap(ArrayRef<std::pair<int64_t, int64_t>> a,
                       ArrayRef<std::pair<int64_t, int64_t>> b) {
  int64_t total = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    int64_t lo = std::max(a[i].first, b[j].first);
    int64_t hi = std::min(a[i].second, b[j].second);
    total += std::max<int64_t>(0, hi - lo);
    if (a[i].second < b[j].second)
      ++i;
    else
      ++j;
  }
  return total;
}

// Two lower bounds on the remaining cost, added because disjoint kinds of
// steps pay them. Data: every step costs at least minWeight times the bytes
// each device receives in it, and a device that holds only part of its
// target block must receive the rest (partial values count as held: that
// only lowers the bound). all_gather, all_to_all and permutes pay this.
// Partials: the all_reduces and reduce_scatters that resolve the partial
// axes the target does not keep, over groups g1, g2, ... (product G), each
// read a block of at least M / (g1...g(i-1)) bytes, M the smallest block
// the non-partial axes can make: together at least (1 - 1/G) * M, times the
// smallest weight among those axes. Both bounds are consistent: a step
// lowers neither by more than its cost.
double Planner::lowerBound(const State &state) const {
  int64_t worst = 0;
  for (auto [coords, target] : llvm::zip_equal(boundDevices, targetBlocks)) {
    int64_t overlap = 1;
    for (auto [d, dim] : llvm::enumerate(state.dims)) {
      int64_t index = 0;
      for (uint8_t a : dim)
        index = index * mesh.axes[a].size + coords[a];
      int64_t size = tensor.shape[d] / shardCount(dim);
      int64_t lo = std::max(index * size, target[d].first);
      int64_t hi = std::min(index * size + size, target[d].second);
      overlap *= std::max<int64_t>(0, hi - lo);
      if (overlap == 0)
        break;
    }
    worst = std::max(worst, targetBlockElements - overlap);
  }
  double bound = double(worst) * double(tensor.elementBytes) * minWeight;

  // Heavier axes: whatever a group of devices agreeing on the heavy axes
  // needs but none of them holds must enter the group through steps over a
  // heavy axis, each costing at least its weight times the bytes every
  // device receives; per device that is the missing volume over the group
  // size. Needs and holdings of a group are boxes (products of per-dimension
  // unions), so the missing volume is |need| - |need and held|.
  for (const HeavyClass &heavy : heavyClasses) {
    int64_t worstGroup = 0;
    for (auto [coords, need] : llvm::zip_equal(heavy.groups, heavy.needs)) {
      int64_t needed = 1, kept = 1;
      for (auto [d, dim] : llvm::enumerate(state.dims)) {
        needed *= measure(need[d]);
        kept *= overlap(need[d], groupBlocks(dim, d, coords, heavy.axes));
      }
      worstGroup = std::max(worstGroup, needed - kept);
    }
    bound = std::max(bound, double(worstGroup) / double(heavy.groupSize) *
                                double(tensor.elementBytes) * heavy.weight);
  }

  uint32_t resolvable = state.partial & ~targetState.partial;
  if (!resolvable)
    return bound;
  double weight = 0;
  for (uint8_t a : axesOf(resolvable))
    weight = weight == 0 ? weights[a] : std::min(weight, weights[a]);
  double g = double(shardCount(axesOf(resolvable)));
  double splits = double(shardCount(axesOf(searchMask & ~state.partial)));
  return bound + (g - 1) / g * (double(globalBytes) / splits) * weight;
}

// The cost of a plan that always works: gather every dimension whole, then
// all_reduce what must be resolved, then slice into the target. No optimal
// path costs more, so nodes whose bound exceeds it are never queued.
double Planner::upperBound(const State &source) const {
  double cost = 0;
  double bytes = double(localBytes(source));
  for (const AxisList &dim : source.dims) {
    if (dim.empty())
      continue;
    double g = double(shardCount(dim));
    cost += (g - 1) * bytes * maxWeight(dim) + options.stepCost;
    bytes *= g;
  }
  AxisList resolvable = axesOf(source.partial & ~targetState.partial);
  if (!resolvable.empty()) {
    double g = double(shardCount(resolvable));
    cost += 2 * (g - 1) * bytes / g * maxWeight(resolvable) + options.stepCost;
  }
  return cost;
}

void Planner::collectPath(int node, SmallVector<const Move *, 8> &path) const {
  for (; nodes[node].parent >= 0; node = nodes[node].parent)
    path.push_back(&nodes[node].move);
  std::reverse(path.begin(), path.end());
}

bool Planner::pathLess(int a, const Move *extraA, int b) const {
  SmallVector<const Move *, 8> pathA, pathB;
  collectPath(a, pathA);
  if (extraA)
    pathA.push_back(extraA);
  collectPath(b, pathB);
  return std::lexicographical_compare(
      pathA.begin(), pathA.end(), pathB.begin(), pathB.end(),
      [](const Move *x, const Move *y) { return *x < *y; });
}

bool Planner::nodeLess(int a, int b) const {
  const Node &na = nodes[a], &nb = nodes[b];
  double fa = na.cost + na.boundCost, fb = nb.cost + nb.boundCost;
  if (fa != fb)
    return fa < fb;
  if (na.steps + na.boundSteps != nb.steps + nb.boundSteps)
    return na.steps + na.boundSteps < nb.steps + nb.boundSteps;
  return pathLess(a, nullptr, b);
}

void Planner::expand(int node) {
  // relax() appends to `nodes`: work on a copy of the state.
  const State state = nodes[node].move.after;
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
        relax(node, std::move(move));
    }

  // all_reduce: any non-empty subset of the resolvable partial axes.
  for (uint32_t subset = resolvable; subset; subset = (subset - 1) & resolvable) {
    AxisList axes = axesOf(subset);
    double g = double(shardCount(axes));
    Move move{StepKind::AllReduce, -1, -1, axes, {},
              2 * (g - 1) * double(bytes) / g * maxWeight(axes), state};
    move.after.partial &= ~subset;
    relax(node, std::move(move));
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
          relax(node, std::move(move));
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
      relax(node, std::move(move));
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
        relax(node, std::move(move));
      }
    }
  }

  enumeratePermutes(node, state, bytes);
}

void Planner::relax(int from, Move move, const std::string *knownKey,
                    std::optional<double> knownBound) {
  std::string key = knownKey ? *knownKey : move.after.key();
  Visit &visit = visits[key];
  if (visit.closed)
    return;
  if (move.kind != StepKind::LocalSlice)
    move.cost += options.stepCost;
  double cost = nodes[from].cost + move.cost;
  unsigned steps = nodes[from].steps + 1;
  double bound;
  if (visit.node >= 0) {
    const Node &old = nodes[visit.node];
    if (cost > old.cost || (cost == old.cost && steps > old.steps))
      return;
    if (cost == old.cost && steps == old.steps &&
        !pathLess(from, &move, visit.node))
      return;
    bound = old.boundCost;
  } else {
    bound = knownBound ? *knownBound : lowerBound(move.after);
  }
  if (cost + bound > costLimit)
    return;
  unsigned boundSteps = 1;
  if (key == targetKey) {
    // A path to the target bounds every optimal path.
    boundSteps = 0;
    costLimit = std::min(costLimit, cost + 1e-9 * std::max(1.0, cost));
  }
  nodes.push_back(Node{std::move(key), cost, steps, bound, boundSteps, from,
                       std::move(move)});
  visit.node = nodes.size() - 1;
  queue.push(visit.node);
}

SmallVector<Planner::Place, 8> Planner::placesOf(const State &state) const {
  SmallVector<Place, 8> places(mesh.axes.size(), Place{-1, 0});
  for (auto [d, dim] : llvm::enumerate(state.dims)) {
    int64_t stride = 1;
    for (size_t i = dim.size(); i-- > 0;) {
      places[dim[i]] = Place{int64_t(d), stride};
      stride *= mesh.axes[dim[i]].size;
    }
  }
  return places;
}

const std::vector<Planner::PermuteTarget> &
Planner::permuteTargetsFor(const State &state) {
  const size_t rank = state.dims.size();
  SmallVector<int64_t, 4> counts;
  std::string signature;
  for (const AxisList &dim : state.dims) {
    counts.push_back(shardCount(dim));
    signature += std::to_string(counts.back()) + ",";
  }
  signature += std::to_string(state.partial);
  auto [it, inserted] = permuteTargets.try_emplace(signature);
  std::vector<PermuteTarget> &targets = it->second;
  if (!inserted)
    return targets;

  // Every state with these shard counts and partial axes.
  const uint32_t available = searchMask & ~state.partial;
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
          targets.push_back(PermuteTarget{candidate, candidate.key(),
                                          placesOf(candidate),
                                          lowerBound(candidate)});
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
  return targets;
}

void Planner::enumeratePermutes(int from, const State &state,
                                int64_t bytes) {
  SmallVector<Place, 8> places = placesOf(state);
  const uint32_t available = searchMask & ~state.partial;
  double cost = nodes[from].cost;
  const AxisList candidates = axesOf(available);
  for (const PermuteTarget &target : permuteTargetsFor(state)) {
    // The axes whose place differs are those the permute exchanges over.
    double weight = 0;
    for (uint8_t a : candidates)
      if (places[a] != target.places[a])
        weight = std::max(weight, weights[a]);
    if (weight == 0)
      continue; // The state itself.
    double stepCost = double(bytes) * weight;
    if (cost + stepCost + target.bound > costLimit)
      continue;
    AxisList changed;
    for (uint8_t a : candidates)
      if (places[a] != target.places[a])
        changed.push_back(a);
    Move move{StepKind::CollectivePermute, -1, -1, std::move(changed),
              target.key, stepCost, target.state};
    relax(from, std::move(move), &target.key, target.bound);
  }
}

ReshardPlan Planner::buildPlan(int node) const {
  ReshardPlan plan;
  plan.cost = nodes[node].cost;
  SmallVector<const Move *, 8> path;
  collectPath(node, path);
  for (const Move *edge : path) {
    const Move &move = *edge;
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
                dist::reductionKindName(source.partialKind) +
                " but the target a partial " +
                dist::reductionKindName(target.partialKind));
  partialKind = source.partialKind;

  prepareBound();
  double limit = upperBound(*sourceState);
  costLimit = limit + 1e-9 * std::max(1.0, limit);

  Node start;
  start.key = sourceState->key();
  start.boundCost = lowerBound(*sourceState);
  start.boundSteps = start.key == targetKey ? 0 : 1;
  start.move.after = *sourceState;
  visits[start.key].node = 0;
  nodes.push_back(std::move(start));
  queue.push(0);
  unsigned expanded = 0;
  while (!queue.empty()) {
    int index = queue.top();
    queue.pop();
    Visit &visit = visits[nodes[index].key];
    if (visit.closed || visit.node != index)
      continue; // Superseded by a better label for the same state.
    visit.closed = true;
    if (nodes[index].key == targetKey) {
      ReshardPlan plan = buildPlan(index);
      plan.expandedStates = expanded;
      return plan;
    }
    if (++expanded > options.maxStates)
      return fail("no resharding plan found within " +
                  Twine(options.maxStates) +
                  " search states; raise the bound or simplify the mesh");
    expand(index);
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

} // namespace partita::partition
