//===- ShardingModel.cpp - the one C++ model of a mesh and a sharding -----===//
//
// Queries, verification and printing of the sharding model. Only the
// reduction kind's enumerators come from the dialect (DistDialect.h); the
// rest is standard C++.
//
//===----------------------------------------------------------------------===//

#include "dialects/dist/IR/ShardingModel.h"

#include "dialects/dist/IR/DistDialect.h"

#include <algorithm>
#include <limits>
#include <tuple>

namespace partita::dist {

namespace {

/// a * b, or none when it overflows int64_t.
std::optional<int64_t> multiply(int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product))
    return std::nullopt;
  return product;
}

std::string quoted(const AxisRef &axis) { return axis.toIRString(); }

} // namespace

std::string reductionKindName(ReductionKind kind) {
  return stringifyReductionKind(kind).str();
}

//===----------------------------------------------------------------------===//
// Mesh
//===----------------------------------------------------------------------===//

std::optional<size_t> Mesh::findAxis(std::string_view axisName) const {
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i].name == axisName)
      return i;
  return std::nullopt;
}

int64_t Mesh::axisSize(std::string_view axisName) const {
  std::optional<size_t> i = findAxis(axisName);
  return i ? axes[*i].size : 1;
}

int64_t Mesh::numDevices() const {
  int64_t n = 1;
  for (const MeshAxis &axis : axes)
    n *= axis.size;
  return n;
}

std::optional<std::string> Mesh::verify() const {
  int64_t devices = 1;
  for (size_t i = 0; i < axes.size(); ++i) {
    const MeshAxis &axis = axes[i];
    if (axis.name.empty())
      return "mesh axis " + std::to_string(i) + " has an empty name";
    for (size_t j = 0; j < i; ++j)
      if (axes[j].name == axis.name)
        return "mesh axis \"" + axis.name + "\" is declared twice";
    if (axis.size < 1)
      return "mesh axis \"" + axis.name + "\" has size " +
             std::to_string(axis.size) + "; sizes must be >= 1";
    std::optional<int64_t> next = multiply(devices, axis.size);
    if (!next)
      return std::string("mesh has too many devices: the product of the axis "
                         "sizes overflows 64 bits");
    devices = *next;
  }
  if (deviceIds.empty())
    return std::nullopt;
  if (static_cast<int64_t>(deviceIds.size()) != devices)
    return "devices lists " + std::to_string(deviceIds.size()) +
           " ids, but the mesh has " + std::to_string(devices) + " devices";
  std::vector<bool> seen(devices, false);
  for (int64_t id : deviceIds) {
    if (id < 0 || id >= devices)
      return "device id " + std::to_string(id) + " is out of range [0, " +
             std::to_string(devices) + ")";
    if (seen[id])
      return "device id " + std::to_string(id) + " is listed twice";
    seen[id] = true;
  }
  return std::nullopt;
}

std::string Mesh::toString() const {
  std::string s = name.empty() ? "[" : "@" + name + " [";
  for (size_t i = 0; i < axes.size(); ++i)
    s += (i ? ", \"" : "\"") + axes[i].name +
         "\"=" + std::to_string(axes[i].size);
  s += "]";
  if (!deviceIds.empty()) {
    s += " devices=[";
    for (size_t i = 0; i < deviceIds.size(); ++i)
      s += (i ? ", " : "") + std::to_string(deviceIds[i]);
    s += "]";
  }
  return s;
}

//===----------------------------------------------------------------------===//
// AxisRef, DimSharding
//===----------------------------------------------------------------------===//

int64_t AxisRef::size(const Mesh &mesh) const {
  return isSubAxis() ? subSize : mesh.axisSize(name);
}

bool AxisRef::overlaps(const AxisRef &other, const Mesh &mesh) const {
  if (name != other.name)
    return false;
  // Identical references always collide, even size-1 sub-axes that cover
  // no factor.
  if (*this == other)
    return true;
  // A reference covers the factors [pre, pre*size) of its axis, counted
  // multiplicatively from the major end; a whole axis covers [1, size).
  auto range = [&](const AxisRef &ref) -> std::pair<int64_t, int64_t> {
    if (ref.isSubAxis())
      return {ref.preSize, multiply(ref.preSize, ref.subSize)
                               .value_or(std::numeric_limits<int64_t>::max())};
    return {1, std::max<int64_t>(mesh.axisSize(ref.name), 2)};
  };
  auto [lo1, hi1] = range(*this);
  auto [lo2, hi2] = range(other);
  return std::max(lo1, lo2) < std::min(hi1, hi2);
}

std::string AxisRef::toString() const {
  if (!isSubAxis())
    return name;
  return name + ":(" + std::to_string(preSize) + ")" + std::to_string(subSize);
}

std::string AxisRef::toIRString() const {
  std::string s = "\"" + name + "\"";
  if (isSubAxis())
    s += ":(" + std::to_string(preSize) + ")" + std::to_string(subSize);
  return s;
}

bool AxisRef::operator<(const AxisRef &other) const {
  return std::tie(name, preSize, subSize) <
         std::tie(other.name, other.preSize, other.subSize);
}

int64_t DimSharding::shardCount(const Mesh &mesh) const {
  int64_t n = 1;
  for (const AxisRef &axis : axes)
    n *= axis.size(mesh);
  return n;
}

//===----------------------------------------------------------------------===//
// Sharding
//===----------------------------------------------------------------------===//

Sharding::Sharding(std::vector<std::vector<AxisRef>> dimAxes,
                   std::vector<AxisRef> partial, ReductionKind kind)
    : partialAxes(std::move(partial)), partialKind(kind) {
  for (std::vector<AxisRef> &axes : dimAxes)
    dims.emplace_back(std::move(axes));
}

Sharding Sharding::replicated(size_t rank, bool closed) {
  Sharding sharding;
  sharding.dims.assign(rank, DimSharding({}, closed));
  return sharding;
}

bool Sharding::isReplicated() const {
  if (isPartial())
    return false;
  for (const DimSharding &dim : dims)
    if (!dim.axes.empty())
      return false;
  return true;
}

bool Sharding::hasSubAxes() const {
  for (const AxisRef &axis : axesUsed())
    if (axis.isSubAxis())
      return true;
  return false;
}

std::vector<AxisRef> Sharding::axesUsed() const {
  std::vector<AxisRef> used;
  for (const DimSharding &dim : dims)
    used.insert(used.end(), dim.axes.begin(), dim.axes.end());
  used.insert(used.end(), partialAxes.begin(), partialAxes.end());
  return used;
}

bool Sharding::usesAxis(std::string_view name) const {
  for (const AxisRef &axis : axesUsed())
    if (axis.name == name)
      return true;
  return false;
}

int64_t Sharding::shardCount(size_t dim, const Mesh &mesh) const {
  return dim < dims.size() ? dims[dim].shardCount(mesh) : 1;
}

int64_t Sharding::shardCount(const Mesh &mesh) const {
  int64_t n = 1;
  for (const DimSharding &dim : dims)
    n *= dim.shardCount(mesh);
  return n;
}

std::vector<int64_t>
Sharding::localShape(const Mesh &mesh,
                     const std::vector<int64_t> &globalShape) const {
  std::vector<int64_t> local = globalShape;
  for (size_t d = 0; d < local.size() && d < dims.size(); ++d) {
    if (local[d] < 0)
      continue;
    int64_t count = std::max<int64_t>(dims[d].shardCount(mesh), 1);
    local[d] = (local[d] + count - 1) / count;
  }
  return local;
}

void Sharding::clearPartial() {
  partialAxes.clear();
  partialKind = ReductionKind::Sum;
}

Sharding Sharding::layoutOnly() const {
  Sharding layout = *this;
  for (DimSharding &dim : layout.dims) {
    dim.closed = true;
    dim.priority.reset();
  }
  return layout;
}

std::optional<std::string> Sharding::verify(const Mesh &mesh) const {
  std::vector<AxisRef> used;
  auto check = [&](const AxisRef &axis,
                   const std::string &where) -> std::optional<std::string> {
    std::optional<size_t> index = mesh.findAxis(axis.name);
    if (!index)
      return where + " names axis " + quoted(axis) + ", which mesh " +
             (mesh.name.empty() ? std::string("") : "@" + mesh.name + " ") +
             "does not have";
    int64_t axisSize = mesh.axes[*index].size;
    if (axis.isSubAxis()) {
      if (axis.preSize < 1 || axis.subSize < 1)
        return "sub-axis " + quoted(axis) + " needs a pre-size and a size >= 1";
      std::optional<int64_t> span = multiply(axis.preSize, axis.subSize);
      if (!span || axisSize % *span != 0)
        return "sub-axis " + quoted(axis) + " does not fit axis \"" +
               axis.name + "\" of size " + std::to_string(axisSize) + ": " +
               std::to_string(axis.preSize) + "*" +
               std::to_string(axis.subSize) + " does not divide " +
               std::to_string(axisSize);
    } else if (axis.preSize != 1) {
      return "axis " + quoted(axis) + " has a pre-size but no sub-axis size";
    }
    for (const AxisRef &earlier : used) {
      if (!axis.overlaps(earlier, mesh))
        continue;
      if (earlier == axis)
        return "axis " + quoted(axis) + " is used twice in the sharding";
      return "axis " + quoted(axis) + " overlaps " + quoted(earlier) +
             ", used earlier in the sharding";
    }
    used.push_back(axis);
    return std::nullopt;
  };
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d].priority && *dims[d].priority < 0)
      return "dimension " + std::to_string(d) + " has priority " +
             std::to_string(*dims[d].priority) + "; priorities must be >= 0";
    for (const AxisRef &axis : dims[d].axes)
      if (std::optional<std::string> error =
              check(axis, "dimension " + std::to_string(d)))
        return error;
  }
  for (const AxisRef &axis : partialAxes)
    if (std::optional<std::string> error = check(axis, "the partial axes"))
      return error;
  if (partialAxes.empty() && partialKind != ReductionKind::Sum)
    return "partial kind " + reductionKindName(partialKind) +
           " is given without any partial axis";
  return std::nullopt;
}

std::optional<std::string>
Sharding::verifyFor(const Mesh &mesh, const std::vector<int64_t> &shape) const {
  if (dims.size() != shape.size())
    return "sharding has " + std::to_string(dims.size()) +
           " dimension(s), but the tensor has rank " +
           std::to_string(shape.size());
  if (std::optional<std::string> error = verify(mesh))
    return error;
  for (size_t d = 0; d < dims.size(); ++d) {
    int64_t size = shape[d];
    if (size < 0)
      continue;
    int64_t count = dims[d].shardCount(mesh);
    // Padded (GSPMD): each shard holds ceil(size / count) elements, which is
    // meaningful only with at least one element per shard.
    if (size % count == 0 || size >= count)
      continue;
    std::string axes;
    for (size_t i = 0; i < dims[d].axes.size(); ++i)
      axes += (i ? ", " : "") + quoted(dims[d].axes[i]);
    return "dimension " + std::to_string(d) + " of size " +
           std::to_string(size) + " is not divisible by " +
           std::to_string(count) + ", the product of axes {" + axes +
           "}, and is too small to pad: a padded dimension needs at least "
           "one element per shard";
  }
  return std::nullopt;
}

std::string Sharding::toString() const {
  auto join = [](const std::vector<AxisRef> &axes) {
    std::string s;
    for (size_t i = 0; i < axes.size(); ++i)
      s += (i ? ", " : "") + axes[i].toString();
    return s;
  };
  std::string s = "[";
  for (size_t d = 0; d < dims.size(); ++d) {
    const DimSharding &dim = dims[d];
    s += (d ? ", {" : "{") + join(dim.axes);
    if (!dim.closed)
      s += dim.axes.empty() ? "?" : ", ?";
    s += "}";
    if (dim.priority)
      s += "p" + std::to_string(*dim.priority);
  }
  s += "]";
  if (isPartial())
    s += " partial=" + reductionKindName(partialKind) + "{" +
         join(partialAxes) + "}";
  return s;
}

} // namespace partita::dist
