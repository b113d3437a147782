//===- DistAttrs.cpp - dist attributes ------------------------------------===//
//
// Parsing, printing and verification of meshes and shardings.
//
// The textual forms (each printed canonically, so printing what was parsed
// gives the same text up to whitespace and optional defaults):
//   mesh:          <["dp"=2, "tp"=4], devices=[7, 6, 5, 4, 3, 2, 1, 0]>
//   axis:          "tp"  or the sub-axis  "tp":(2)2
//   dim sharding:  {"dp", "tp"}  {}  {"dp", ?}  {?}  {"dp"}p1
//   sharding:      <@mesh, [{"dp"}, {}], partial=max{"tp"}>
// Inside a sharding the axis and dimension forms appear without the `<...>`
// that wraps them when they are written alone (`#dist.axis<"tp">`).
//
//===----------------------------------------------------------------------===//

#include "dialects/dist/IR/DistDialect.h"
#include "dialects/dist/IR/ShardingAdapters.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace partita::dist;

#include "dialects/dist/IR/DistEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/dist/IR/DistAttrs.cpp.inc"

void DistDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/dist/IR/DistAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Parsing helpers
//===----------------------------------------------------------------------===//

namespace {

/// Parses an integer, reporting "expected <what>" at the current token when
/// there is none.
ParseResult parseIntegerNamed(AsmParser &parser, int64_t &value,
                              const Twine &what) {
  SMLoc loc = parser.getCurrentLocation();
  OptionalParseResult result = parser.parseOptionalInteger(value);
  if (!result.has_value())
    return parser.emitError(loc, "expected ") << what;
  return *result;
}

/// Parses `"name"` or `"name":(pre)size`.
FailureOr<AxisRefAttr>
parseAxisRefBody(AsmParser &parser, StringRef expected = "axis name string") {
  SMLoc loc = parser.getCurrentLocation();
  std::string name;
  if (failed(parser.parseOptionalString(&name)))
    return parser.emitError(loc, "expected ") << expected;
  if (failed(parser.parseOptionalColon()))
    return AxisRefAttr::get(parser.getContext(), name, 1, 0);
  int64_t preSize = 0, subSize = 0;
  if (parser.parseLParen())
    return failure();
  SMLoc preLoc = parser.getCurrentLocation();
  if (parseIntegerNamed(parser, preSize, "sub-axis pre-size integer"))
    return failure();
  if (preSize < 1)
    return parser.emitError(preLoc, "sub-axis pre-size must be >= 1, got ")
           << preSize;
  if (parser.parseRParen())
    return failure();
  SMLoc subLoc = parser.getCurrentLocation();
  if (parseIntegerNamed(parser, subSize, "sub-axis size integer"))
    return failure();
  if (subSize < 1)
    return parser.emitError(subLoc, "sub-axis size must be >= 1, got ")
           << subSize;
  return AxisRefAttr::get(parser.getContext(), name, preSize, subSize);
}

/// Parses `{axes[, ?]}` followed by an optional priority `p<N>`.
FailureOr<DimShardingAttr> parseDimShardingBody(AsmParser &parser) {
  SMLoc loc = parser.getCurrentLocation();
  if (failed(parser.parseOptionalLBrace()))
    return parser.emitError(loc, "expected '{' starting a dimension sharding");
  SmallVector<AxisRefAttr> axes;
  bool closed = true;
  if (failed(parser.parseOptionalRBrace())) {
    while (true) {
      if (succeeded(parser.parseOptionalQuestion())) {
        closed = false;
        SMLoc afterLoc = parser.getCurrentLocation();
        if (failed(parser.parseOptionalRBrace()))
          return parser.emitError(afterLoc,
                                  "expected '}' after '?': '?' must be the "
                                  "last entry of a dimension");
        break;
      }
      FailureOr<AxisRefAttr> axis =
          parseAxisRefBody(parser, "axis name string or '?'");
      if (failed(axis))
        return failure();
      axes.push_back(*axis);
      if (succeeded(parser.parseOptionalRBrace()))
        break;
      SMLoc sepLoc = parser.getCurrentLocation();
      if (failed(parser.parseOptionalComma()))
        return parser.emitError(sepLoc, "expected ',' or '}' after an axis");
    }
  }
  std::optional<int64_t> priority;
  SMLoc priorityLoc = parser.getCurrentLocation();
  StringRef keyword;
  if (succeeded(parser.parseOptionalKeyword(&keyword))) {
    int64_t value = 0;
    if (!keyword.consume_front("p") || keyword.empty() ||
        !llvm::all_of(keyword, [](char c) { return llvm::isDigit(c); }))
      return parser.emitError(priorityLoc,
                              "expected a priority such as 'p0' after a "
                              "dimension sharding");
    if (keyword.getAsInteger(10, value))
      return parser.emitError(priorityLoc, "priority is too large");
    priority = value;
  }
  return DimShardingAttr::get(parser.getContext(), axes, closed, priority);
}

/// Parses `{"a", "b"}`, a non-empty list of axis references.
ParseResult parseAxisList(AsmParser &parser, SmallVectorImpl<AxisRefAttr> &axes,
                          StringRef what) {
  SMLoc loc = parser.getCurrentLocation();
  if (failed(parser.parseOptionalLBrace()))
    return parser.emitError(loc, "expected '{' starting the ") << what;
  if (succeeded(parser.parseOptionalRBrace()))
    return parser.emitError(loc, "expected at least one axis in the ")
           << what << "; leave out 'partial=' when there is none";
  if (parser.parseCommaSeparatedList([&]() -> ParseResult {
        FailureOr<AxisRefAttr> axis = parseAxisRefBody(parser);
        if (failed(axis))
          return failure();
        axes.push_back(*axis);
        return success();
      }))
    return failure();
  return parser.parseRBrace();
}

void printAxisRefBody(AsmPrinter &printer, AxisRefAttr axis) {
  printer.printString(axis.getName());
  if (axis.isSubAxis())
    printer << ":(" << axis.getPreSize() << ")" << axis.getSubSize();
}

void printDimShardingBody(AsmPrinter &printer, DimShardingAttr dim) {
  printer << "{";
  llvm::interleaveComma(dim.getAxes(), printer, [&](AxisRefAttr axis) {
    printAxisRefBody(printer, axis);
  });
  if (!dim.getIsClosed())
    printer << (dim.getAxes().empty() ? "?" : ", ?");
  printer << "}";
  if (dim.getPriority())
    printer << "p" << *dim.getPriority();
}

} // namespace

//===----------------------------------------------------------------------===//
// MeshAttr
//===----------------------------------------------------------------------===//

Attribute MeshAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  MLIRContext *ctx = parser.getContext();
  if (parser.parseLess())
    return {};
  SmallVector<MeshAxisAttr> axes;
  SMLoc listLoc = parser.getCurrentLocation();
  if (failed(parser.parseOptionalLSquare())) {
    parser.emitError(listLoc, "expected '[' starting the list of mesh axes");
    return {};
  }
  if (failed(parser.parseOptionalRSquare())) {
    if (parser.parseCommaSeparatedList([&]() -> ParseResult {
          SMLoc nameLoc = parser.getCurrentLocation();
          std::string name;
          if (failed(parser.parseOptionalString(&name)))
            return parser.emitError(nameLoc, "expected axis name string");
          int64_t size = 0;
          if (parser.parseEqual() ||
              parseIntegerNamed(parser, size, "axis size integer"))
            return failure();
          axes.push_back(MeshAxisAttr::get(ctx, name, size));
          return success();
        }) ||
        parser.parseRSquare())
      return {};
  }
  SmallVector<int64_t> deviceIds;
  if (succeeded(parser.parseOptionalComma())) {
    SMLoc kwLoc = parser.getCurrentLocation();
    if (failed(parser.parseOptionalKeyword("devices"))) {
      parser.emitError(kwLoc, "expected 'devices' after ',' in a mesh");
      return {};
    }
    SMLoc idsLoc;
    if (parser.parseEqual())
      return {};
    idsLoc = parser.getCurrentLocation();
    if (parser.parseCommaSeparatedList(
            AsmParser::Delimiter::Square, [&]() -> ParseResult {
              int64_t id = 0;
              if (parseIntegerNamed(parser, id, "device id integer"))
                return failure();
              deviceIds.push_back(id);
              return success();
            }))
      return {};
    // An empty list would read back as "no list": reject it here, where the
    // verifier can still tell the two apart.
    if (deviceIds.empty()) {
      parser.emitError(idsLoc, "devices=[] lists no device ids; leave out "
                               "'devices=' for the default order");
      return {};
    }
  }
  if (parser.parseGreater())
    return {};
  return MeshAttr::getChecked([&] { return parser.emitError(loc); }, ctx, axes,
                              deviceIds);
}

void MeshAttr::print(AsmPrinter &printer) const {
  printer << "<[";
  llvm::interleaveComma(getAxes(), printer, [&](MeshAxisAttr axis) {
    printer.printString(axis.getName());
    printer << "=" << axis.getSize();
  });
  printer << "]";
  if (!getDeviceIds().empty()) {
    printer << ", devices=[";
    llvm::interleaveComma(getDeviceIds(), printer);
    printer << "]";
  }
  printer << ">";
}

LogicalResult MeshAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               ArrayRef<MeshAxisAttr> axes,
                               ArrayRef<int64_t> deviceIds) {
  llvm::SmallDenseSet<StringRef> names;
  int64_t numDevices = 1;
  for (MeshAxisAttr axis : axes) {
    if (!axis)
      return emitError() << "mesh axis is null";
    if (axis.getName().empty())
      return emitError() << "mesh axis name must not be empty";
    if (!names.insert(axis.getName()).second)
      return emitError() << "mesh axis \"" << axis.getName()
                         << "\" is declared twice";
    if (axis.getSize() < 1)
      return emitError() << "mesh axis \"" << axis.getName() << "\" has size "
                         << axis.getSize() << "; sizes must be >= 1";
    if (llvm::MulOverflow(numDevices, axis.getSize(), numDevices))
      return emitError() << "mesh has too many devices: the product of the "
                            "axis sizes overflows 64 bits";
  }
  if (deviceIds.empty())
    return success();
  if (static_cast<int64_t>(deviceIds.size()) != numDevices)
    return emitError() << "devices lists " << deviceIds.size()
                       << " ids, but the mesh has " << numDevices
                       << " devices";
  SmallVector<bool> seen(numDevices, false);
  for (int64_t id : deviceIds) {
    if (id < 0 || id >= numDevices)
      return emitError() << "device id " << id << " is out of range [0, "
                         << numDevices << "); devices must be a permutation "
                         << "of 0.." << numDevices - 1;
    if (seen[id])
      return emitError() << "device id " << id
                         << " is listed twice; devices must be a permutation "
                         << "of 0.." << numDevices - 1;
    seen[id] = true;
  }
  return success();
}

MeshAxisAttr MeshAttr::getAxis(StringRef name) const {
  for (MeshAxisAttr axis : getAxes())
    if (axis.getName() == name)
      return axis;
  return {};
}

int64_t MeshAttr::getNumDevices() const {
  int64_t n = 1;
  for (MeshAxisAttr axis : getAxes())
    n *= axis.getSize();
  return n;
}

//===----------------------------------------------------------------------===//
// AxisRefAttr
//===----------------------------------------------------------------------===//

Attribute AxisRefAttr::parse(AsmParser &parser, Type) {
  if (parser.parseLess())
    return {};
  FailureOr<AxisRefAttr> axis = parseAxisRefBody(parser);
  if (failed(axis) || parser.parseGreater())
    return {};
  return *axis;
}

void AxisRefAttr::print(AsmPrinter &printer) const {
  printer << "<";
  printAxisRefBody(printer, *this);
  printer << ">";
}

int64_t AxisRefAttr::getSize(MeshAttr mesh) const {
  if (isSubAxis())
    return getSubSize();
  MeshAxisAttr axis = mesh.getAxis(getName());
  return axis ? axis.getSize() : 1;
}

bool AxisRefAttr::overlaps(AxisRefAttr other, MeshAttr mesh) const {
  if (getName() != other.getName())
    return false;
  // A reference covers the factors [pre, pre*size) of its axis, counted
  // multiplicatively from the major end; a whole axis covers [1, size).
  auto range = [&](AxisRefAttr ref) -> std::pair<int64_t, int64_t> {
    if (ref.isSubAxis()) {
      int64_t end = 0;
      if (llvm::MulOverflow(ref.getPreSize(), ref.getSubSize(), end))
        end = std::numeric_limits<int64_t>::max();
      return {ref.getPreSize(), end};
    }
    MeshAxisAttr axis = mesh.getAxis(ref.getName());
    return {1, std::max<int64_t>(axis ? axis.getSize() : 1, 2)};
  };
  // Size-1 sub-axes cover nothing; still treat the identical reference as a
  // repeat so that `{"a":(1)1, "a":(1)1}` is not accepted.
  if (*this == other)
    return true;
  auto [lo1, hi1] = range(*this);
  auto [lo2, hi2] = range(other);
  return std::max(lo1, lo2) < std::min(hi1, hi2);
}

std::string AxisRefAttr::toString() const {
  std::string result;
  llvm::raw_string_ostream os(result);
  os << '"';
  llvm::printEscapedString(getName(), os);
  os << '"';
  if (isSubAxis())
    os << ":(" << getPreSize() << ")" << getSubSize();
  return result;
}

//===----------------------------------------------------------------------===//
// DimShardingAttr
//===----------------------------------------------------------------------===//

Attribute DimShardingAttr::parse(AsmParser &parser, Type) {
  if (parser.parseLess())
    return {};
  FailureOr<DimShardingAttr> dim = parseDimShardingBody(parser);
  if (failed(dim) || parser.parseGreater())
    return {};
  return *dim;
}

void DimShardingAttr::print(AsmPrinter &printer) const {
  printer << "<";
  printDimShardingBody(printer, *this);
  printer << ">";
}

int64_t DimShardingAttr::getShardCount(MeshAttr mesh) const {
  int64_t n = 1;
  for (AxisRefAttr axis : getAxes())
    n *= axis.getSize(mesh);
  return n;
}

//===----------------------------------------------------------------------===//
// ShardingAttr
//===----------------------------------------------------------------------===//

Attribute ShardingAttr::parse(AsmParser &parser, Type) {
  MLIRContext *ctx = parser.getContext();
  if (parser.parseLess())
    return {};
  SMLoc meshLoc = parser.getCurrentLocation();
  StringAttr meshName;
  if (failed(parser.parseOptionalSymbolName(meshName))) {
    parser.emitError(meshLoc, "expected mesh symbol name, such as @mesh");
    return {};
  }
  if (parser.parseComma())
    return {};
  SMLoc dimsLoc = parser.getCurrentLocation();
  if (failed(parser.parseOptionalLSquare())) {
    parser.emitError(dimsLoc,
                     "expected '[' starting the list of dimension shardings");
    return {};
  }
  SmallVector<DimShardingAttr> dims;
  if (failed(parser.parseOptionalRSquare())) {
    if (parser.parseCommaSeparatedList([&]() -> ParseResult {
          FailureOr<DimShardingAttr> dim = parseDimShardingBody(parser);
          if (failed(dim))
            return failure();
          dims.push_back(*dim);
          return success();
        }) ||
        parser.parseRSquare())
      return {};
  }
  SmallVector<AxisRefAttr> partialAxes;
  ReductionKind kind = ReductionKind::Sum;
  if (succeeded(parser.parseOptionalComma())) {
    SMLoc kwLoc = parser.getCurrentLocation();
    if (failed(parser.parseOptionalKeyword("partial"))) {
      parser.emitError(kwLoc, "expected 'partial' after ',' in a sharding");
      return {};
    }
    if (parser.parseEqual())
      return {};
    SMLoc kindLoc = parser.getCurrentLocation();
    StringRef kindName;
    if (succeeded(parser.parseOptionalKeyword(&kindName))) {
      std::optional<ReductionKind> parsed = symbolizeReductionKind(kindName);
      if (!parsed) {
        parser.emitError(kindLoc, "unknown partial kind '")
            << kindName << "'; expected sum, max or min";
        return {};
      }
      kind = *parsed;
    }
    if (parseAxisList(parser, partialAxes, "list of partial axes"))
      return {};
  }
  if (parser.parseGreater())
    return {};
  return ShardingAttr::get(ctx, FlatSymbolRefAttr::get(meshName), dims,
                           partialAxes, kind);
}

void ShardingAttr::print(AsmPrinter &printer) const {
  printer << "<";
  printer.printSymbolName(getMeshName().getValue());
  printer << ", [";
  llvm::interleaveComma(getDims(), printer, [&](DimShardingAttr dim) {
    printDimShardingBody(printer, dim);
  });
  printer << "]";
  if (!getPartialAxes().empty()) {
    printer << ", partial=";
    if (getPartialKind() != ReductionKind::Sum)
      printer << stringifyReductionKind(getPartialKind());
    printer << "{";
    llvm::interleaveComma(getPartialAxes(), printer, [&](AxisRefAttr axis) {
      printAxisRefBody(printer, axis);
    });
    printer << "}";
  }
  printer << ">";
}

LogicalResult
ShardingAttr::verifyFor(function_ref<InFlightDiagnostic()> emitError,
                        MeshAttr mesh, ShapedType type) const {
  if (!mesh)
    return emitError() << "no mesh to check the sharding against";
  if (!type || !type.hasRank())
    return emitError() << "expected a ranked tensor type, got " << type;
  if (getRank() != type.getRank())
    return emitError() << "sharding has " << getRank()
                       << " dimension(s), but " << type << " has rank "
                       << type.getRank();

  // Null parts only C++ can build; the model cannot hold them.
  for (auto [i, dim] : llvm::enumerate(getDims())) {
    if (!dim)
      return emitError() << "dimension " << i << " has a null sharding";
    for (AxisRefAttr axis : dim.getAxes())
      if (!axis)
        return emitError() << "null axis in dimension " << i;
  }
  for (AxisRefAttr axis : getPartialAxes())
    if (!axis)
      return emitError() << "null axis in the partial axes";

  // The rules on axes (known, used once, sub-axes that fit), priorities and
  // the partial kind are the sharding model's (ShardingModel.h), so the IR
  // and the passes check one set of rules.
  Mesh model;
  model.name = getMeshName().getValue().str();
  for (MeshAxisAttr axis : mesh.getAxes())
    model.axes.push_back({axis.getName().str(), axis.getSize()});
  FailureOr<Sharding> sharding = shardingFromAttr(*this, emitError);
  if (failed(sharding))
    return failure();
  if (std::optional<std::string> error = sharding->verify(model))
    return emitError() << *error;

  for (auto [i, dim] : llvm::enumerate(getDims())) {
    int64_t size = type.getDimSize(i);
    if (ShapedType::isDynamic(size))
      continue;
    int64_t count = dim.getShardCount(mesh);
    // A dimension the axes do not divide is padded (GSPMD): each shard holds
    // ceil(size / count) elements, the last ones padding. That is meaningful
    // only when the dimension has at least one element per shard.
    if (size % count == 0 || size >= count)
      continue;
    std::string axes;
    llvm::raw_string_ostream os(axes);
    os << "{";
    llvm::interleaveComma(dim.getAxes(), os,
                          [&](AxisRefAttr axis) { os << axis.toString(); });
    os << "}";
    return emitError() << "dimension " << i << " of size " << size << " in "
                       << type << " is not divisible by " << count
                       << ", the product of axes " << axes
                       << ", and is too small to pad: a padded dimension "
                          "needs at least one element per shard";
  }
  return success();
}

SmallVector<int64_t> ShardingAttr::getLocalShape(MeshAttr mesh,
                                                 ArrayRef<int64_t> shape) const {
  SmallVector<int64_t> local(shape);
  for (auto [i, dim] : llvm::enumerate(getDims())) {
    if (i >= local.size())
      break;
    if (ShapedType::isDynamic(local[i]))
      continue;
    int64_t count = std::max<int64_t>(dim.getShardCount(mesh), 1);
    local[i] = (local[i] + count - 1) / count; // padded: ceil(size / count)
  }
  return local;
}

int64_t ShardingAttr::getShardCount(MeshAttr mesh) const {
  int64_t n = 1;
  for (DimShardingAttr dim : getDims())
    n *= dim.getShardCount(mesh);
  return n;
}

ShardingAttr ShardingAttr::getReplicated(MLIRContext *ctx, StringRef meshName,
                                         int64_t rank, bool closed) {
  SmallVector<DimShardingAttr> dims(
      rank, DimShardingAttr::get(ctx, {}, closed, std::nullopt));
  return ShardingAttr::get(ctx, FlatSymbolRefAttr::get(ctx, meshName), dims,
                           {}, ReductionKind::Sum);
}
