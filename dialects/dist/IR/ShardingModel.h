//===- ShardingModel.h - one C++ model of a mesh and a sharding -*- C++ -*-===//
//
// A plain value model of what `dist.mesh` and `#dist.sharding` say, used by
// every pass that reasons about shardings (propagation, resharding, the
// partitioner, strategies, the plan lowering). The attributes are the IR
// form; this is the form algorithms work on; ShardingAdapters.h converts
// between the two, with diagnostics for invalid input.
//
// Why standard containers (std::string, std::vector, std::optional) and not
// llvm ADT: a future search or cost model may run without LLVM (beside the
// runtime, or in the Python package), and it should share this header, not
// a copy of it. The header therefore includes only the standard library; the
// reduction kind is the dialect's own enum (declared opaquely here, defined
// by ODS in DistEnums.h.inc), so that the attribute, the collectives and the
// model share one enum and never cast between copies. An LLVM-free user
// would define that one enum; nothing else here needs LLVM.
//
// What the model holds (the same as the attributes, field by field):
// - Mesh: a name and named axes with sizes, major to minor; an optional
//   explicit device order.
// - AxisRef: a whole axis, or a sub-axis "x":(pre)size -- the part of axis x
//   of `size` devices that follows a major part of `pre` devices (an axis
//   split into factors, as in Shardy). Sub-axes are representable and
//   verified; passes that do not handle them yet reject them by name.
// - DimSharding: the axes splitting one tensor dimension, major to minor,
//   whether the dimension is closed (propagation may not add axes), and the
//   user's priority.
// - Sharding: a DimSharding per dimension, the partial axes (the value is an
//   unreduced partial result over them) and how partials combine
//   (ReductionKind: sum, max, min; a log-sum-exp merge, for attention over
//   split keys, would be one more kind plus the carried log-sum-exp tensor).
//   Axes named nowhere mean replication.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_DIST_IR_SHARDINGMODEL_H
#define PARTITA_DIALECTS_DIST_IR_SHARDINGMODEL_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace partita::dist {

/// How partial values combine; defined by ODS (DistEnums.h.inc, through
/// DistDialect.h). Value 0 is Sum, so a value-initialized kind is a sum.
enum class ReductionKind : uint32_t;

/// "sum", "max" or "min": the dialect's own spelling (ODS's
/// stringifyReductionKind) as a std::string, so this header needs no LLVM.
std::string reductionKindName(ReductionKind kind);

struct MeshAxis {
  std::string name;
  int64_t size = 1;

  bool operator==(const MeshAxis &other) const {
    return name == other.name && size == other.size;
  }
  bool operator!=(const MeshAxis &other) const { return !(*this == other); }
};

/// A logical device mesh: named axes, major to minor.
struct Mesh {
  /// The symbol name of the `dist.mesh` op (empty for a mesh that has none).
  std::string name;
  std::vector<MeshAxis> axes;
  /// The device id of every mesh position in row-major order; empty for the
  /// default order 0..N-1.
  std::vector<int64_t> deviceIds;

  /// The index of the axis named `name`.
  std::optional<size_t> findAxis(std::string_view axisName) const;
  /// The size of the axis named `name`; 1 for an unknown name (a verified
  /// sharding names none).
  int64_t axisSize(std::string_view axisName) const;
  /// The product of the axis sizes.
  int64_t numDevices() const;
  /// The reason this mesh is invalid (an empty or repeated name, a size < 1,
  /// too many devices, a device order that is not a permutation), or none.
  std::optional<std::string> verify() const;
  /// E.g. `@mesh ["dp"=2, "tp"=4]`.
  std::string toString() const;

  bool operator==(const Mesh &other) const {
    return name == other.name && axes == other.axes &&
           deviceIds == other.deviceIds;
  }
  bool operator!=(const Mesh &other) const { return !(*this == other); }
};

/// A whole mesh axis, or a sub-axis of it.
struct AxisRef {
  std::string name;
  /// The product of the sizes of the parts of the axis major to this one.
  int64_t preSize = 1;
  /// The sub-axis size; 0 for the whole axis.
  int64_t subSize = 0;

  AxisRef() = default;
  /// The whole axis `name` (implicit, so that {"x", "y"} lists axes).
  AxisRef(std::string name) : name(std::move(name)) {}
  AxisRef(const char *name) : name(name) {}
  AxisRef(std::string name, int64_t preSize, int64_t subSize)
      : name(std::move(name)), preSize(preSize), subSize(subSize) {}

  bool isSubAxis() const { return subSize != 0; }
  /// Devices it spans on `mesh`: the sub-axis size, else the axis size.
  int64_t size(const Mesh &mesh) const;
  /// Whether this and `other` share devices of one axis.
  bool overlaps(const AxisRef &other, const Mesh &mesh) const;
  /// `x`, or `x:(2)2` for a sub-axis.
  std::string toString() const;
  /// As written in #dist.sharding, for diagnostics: `"x"` or `"x":(2)2`.
  std::string toIRString() const;

  bool operator==(const AxisRef &other) const {
    return name == other.name && preSize == other.preSize &&
           subSize == other.subSize;
  }
  bool operator!=(const AxisRef &other) const { return !(*this == other); }
  bool operator<(const AxisRef &other) const;
};

/// The mesh axes splitting one tensor dimension.
struct DimSharding {
  /// Major to minor.
  std::vector<AxisRef> axes;
  /// A closed dimension does not gain axes during propagation.
  bool closed = true;
  /// The user's priority (0 strongest), if any.
  std::optional<int64_t> priority;

  DimSharding() = default;
  DimSharding(std::vector<AxisRef> axes, bool closed = true,
              std::optional<int64_t> priority = std::nullopt)
      : axes(std::move(axes)), closed(closed), priority(priority) {}

  /// The product of the sizes of its axes on `mesh`.
  int64_t shardCount(const Mesh &mesh) const;

  bool operator==(const DimSharding &other) const {
    return axes == other.axes && closed == other.closed &&
           priority == other.priority;
  }
  bool operator!=(const DimSharding &other) const { return !(*this == other); }
};

/// How one tensor is laid out over a mesh. Value semantics: two shardings
/// are equal when every field is (the partial kind included).
struct Sharding {
  std::vector<DimSharding> dims;
  /// Axes over which every device holds an unreduced partial value.
  std::vector<AxisRef> partialAxes;
  /// How the partial values combine; Sum when there are no partial axes.
  ReductionKind partialKind{};

  Sharding() = default;
  /// Closed dimensions with `dims` axes, partial over `partial`.
  Sharding(std::vector<std::vector<AxisRef>> dims,
           std::vector<AxisRef> partial = {}, ReductionKind kind = {});

  /// A fully replicated sharding of a tensor of `rank`.
  static Sharding replicated(size_t rank, bool closed = true);

  size_t rank() const { return dims.size(); }
  /// No dimension split and nothing partial.
  bool isReplicated() const;
  bool isPartial() const { return !partialAxes.empty(); }
  /// Whether any reference is a sub-axis.
  bool hasSubAxes() const;
  /// Every axis reference: dimensions in order, then the partial axes.
  std::vector<AxisRef> axesUsed() const;
  /// Whether any reference (dimension or partial) names axis `name`.
  bool usesAxis(std::string_view name) const;
  /// The number of shards of dimension `dim` (1 past the rank).
  int64_t shardCount(size_t dim, const Mesh &mesh) const;
  /// The number of shards of the whole tensor.
  int64_t shardCount(const Mesh &mesh) const;
  /// The per-device shape of a tensor of `globalShape`: each dimension
  /// ceil(size / shards) (padded, as in GSPMD). Negative (dynamic) sizes
  /// stay as they are.
  std::vector<int64_t>
  localShape(const Mesh &mesh, const std::vector<int64_t> &globalShape) const;
  /// Drops the partial axes (and resets the kind to sum).
  void clearPartial();
  /// Every dimension closed and without priority: the layout alone, as the
  /// partitioner and the plan see it.
  Sharding layoutOnly() const;

  /// The reason this sharding is invalid on `mesh` (an unknown axis, an axis
  /// or overlapping sub-axes used twice, a sub-axis that does not divide its
  /// axis, a negative priority, a partial kind without partial axes), or
  /// none.
  std::optional<std::string> verify(const Mesh &mesh) const;
  /// verify(mesh), then checks the rank against `shape` and that every
  /// static dimension either divides by its shard count or has at least one
  /// element per shard (then it is padded).
  std::optional<std::string> verifyFor(const Mesh &mesh,
                                       const std::vector<int64_t> &shape) const;

  /// For diagnostics, e.g. `[{x, y}, {}] partial=sum{z}`; an open dimension
  /// prints `{x, ?}`, a priority `{x}p1`, a sub-axis `x:(2)2`.
  std::string toString() const;

  bool operator==(const Sharding &other) const {
    return dims == other.dims && partialAxes == other.partialAxes &&
           partialKind == other.partialKind;
  }
  bool operator!=(const Sharding &other) const { return !(*this == other); }
};

} // namespace partita::dist

#endif // PARTITA_DIALECTS_DIST_IR_SHARDINGMODEL_H
