//===- DistOps.cpp - dist operations --------------------------------------===//
//
// Verifiers of the mesh, the constraint and the collectives, and the helpers
// that read and write `dist.sharding` annotations.
//
// Collectives check what needs no mesh (dimension indices, ranks, element
// types, repeated axes, pair counts) in verify(), and what needs the mesh
// (axes, group size, shapes) in verifySymbolUses, the one place where MLIR
// lets an op look at symbols. Dynamic sizes are not checked.
//
//===----------------------------------------------------------------------===//

#include "dialects/dist/IR/DistOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace partita::dist;

#include "dialects/dist/IR/DistInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "dialects/dist/IR/DistOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Lookup and annotation helpers
//===----------------------------------------------------------------------===//

MeshOp partita::dist::lookupMesh(Operation *from, FlatSymbolRefAttr symbol) {
  if (!from || !symbol)
    return {};
  return SymbolTable::lookupNearestSymbolFrom<MeshOp>(from, symbol);
}

MeshAttr partita::dist::lookupMeshAttr(Operation *from, ShardingAttr sharding) {
  if (!sharding)
    return {};
  MeshOp mesh = lookupMesh(from, sharding.getMeshName());
  return mesh ? mesh.getMesh() : MeshAttr();
}

namespace {

/// The function whose entry block `arg` belongs to, or null.
FunctionOpInterface getEntryArgFunction(BlockArgument arg) {
  Block *block = arg.getOwner();
  auto func = dyn_cast_or_null<FunctionOpInterface>(block->getParentOp());
  if (!func || block->getParent() != &func.getFunctionBody() ||
      !block->isEntryBlock())
    return {};
  return func;
}

ShardingAttr getOpenReplicated(FlatSymbolRefAttr mesh, Type type) {
  auto shaped = dyn_cast<ShapedType>(type);
  int64_t rank = shaped && shaped.hasRank() ? shaped.getRank() : 0;
  return ShardingAttr::getReplicated(mesh.getContext(), mesh.getValue(), rank,
                                     /*closed=*/false);
}

} // namespace

ShardingAttr partita::dist::getSharding(Value value) {
  if (!value)
    return {};
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    FunctionOpInterface func = getEntryArgFunction(arg);
    if (!func)
      return {};
    return func.getArgAttrOfType<ShardingAttr>(arg.getArgNumber(),
                                               DistDialect::kShardingAttrName);
  }
  auto result = cast<OpResult>(value);
  Operation *op = result.getOwner();
  auto array = op->getAttrOfType<ArrayAttr>(DistDialect::kShardingAttrName);
  if (!array || array.size() != op->getNumResults())
    return {};
  return dyn_cast<ShardingAttr>(array[result.getResultNumber()]);
}

void partita::dist::setSharding(Value value, ShardingAttr sharding) {
  if (!value)
    return;
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    FunctionOpInterface func = getEntryArgFunction(arg);
    if (!func)
      return;
    if (sharding)
      func.setArgAttr(arg.getArgNumber(), DistDialect::kShardingAttrName,
                      sharding);
    else
      func.removeArgAttr(arg.getArgNumber(), DistDialect::kShardingAttrName);
    return;
  }
  auto result = cast<OpResult>(value);
  Operation *op = result.getOwner();
  unsigned numResults = op->getNumResults();
  auto existing = op->getAttrOfType<ArrayAttr>(DistDialect::kShardingAttrName);
  if (existing && existing.size() != numResults)
    existing = {};
  if (!sharding && numResults == 1) {
    op->removeAttr(DistDialect::kShardingAttrName);
    return;
  }
  // The mesh for the placeholders of the other results.
  FlatSymbolRefAttr mesh = sharding ? sharding.getMeshName() : nullptr;
  if (!mesh && existing)
    for (Attribute entry : existing)
      if (auto s = dyn_cast<ShardingAttr>(entry))
        mesh = s.getMeshName();
  if (!mesh)
    return; // Nothing to remove.
  SmallVector<Attribute> entries;
  for (unsigned i = 0; i < numResults; ++i) {
    Type type = op->getResult(i).getType();
    if (i == result.getResultNumber())
      entries.push_back(sharding ? sharding : getOpenReplicated(mesh, type));
    else if (existing && isa<ShardingAttr>(existing[i]))
      entries.push_back(existing[i]);
    else
      entries.push_back(getOpenReplicated(mesh, type));
  }
  op->setAttr(DistDialect::kShardingAttrName,
              ArrayAttr::get(op->getContext(), entries));
}

ShardingAttr partita::dist::getFuncResultSharding(FunctionOpInterface func,
                                                  unsigned index) {
  if (!func || index >= func.getNumResults())
    return {};
  return func.getResultAttrOfType<ShardingAttr>(index,
                                                DistDialect::kShardingAttrName);
}

void partita::dist::setFuncResultSharding(FunctionOpInterface func,
                                          unsigned index,
                                          ShardingAttr sharding) {
  if (!func || index >= func.getNumResults())
    return;
  if (sharding)
    func.setResultAttr(index, DistDialect::kShardingAttrName, sharding);
  else
    func.removeResultAttr(
        index, StringAttr::get(func->getContext(),
                               DistDialect::kShardingAttrName));
}

LogicalResult partita::dist::verifyShardingOfValue(Operation *op,
                                                   ShardingAttr sharding,
                                                   Type type,
                                                   const Twine &what) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return op->emitOpError() << what << ": expected a ranked tensor value, got "
                             << type;
  FlatSymbolRefAttr meshName = sharding.getMeshName();
  Operation *found = SymbolTable::lookupNearestSymbolFrom(op, meshName);
  if (!found)
    return op->emitOpError() << what << " names unknown mesh " << meshName;
  auto mesh = dyn_cast<MeshOp>(found);
  if (!mesh)
    return op->emitOpError() << what << " names " << meshName << ", a '"
                             << found->getName() << "', not a dist.mesh";
  return sharding.verifyFor(
      [&] { return op->emitOpError() << what << ": "; }, mesh.getMesh(),
      tensor);
}

//===----------------------------------------------------------------------===//
// MeshOp and ConstraintOp
//===----------------------------------------------------------------------===//

// Meshes parsed from text were verified by the parser; this catches meshes
// built in C++ with MeshAttr::get.
LogicalResult MeshOp::verify() {
  return MeshAttr::verify([&] { return emitOpError(); }, getMesh().getAxes(),
                          getMesh().getDeviceIds());
}

namespace {

/// The mesh that `symbol` names, or a diagnostic at `op`.
FailureOr<MeshAttr> verifyMeshSymbol(Operation *op, FlatSymbolRefAttr symbol,
                                     SymbolTableCollection &tables) {
  Operation *found = tables.lookupNearestSymbolFrom(op, symbol);
  if (!found)
    return op->emitOpError() << "names unknown mesh " << symbol;
  auto mesh = dyn_cast<MeshOp>(found);
  if (!mesh)
    return op->emitOpError() << "names " << symbol << ", a '"
                             << found->getName() << "', not a dist.mesh";
  return mesh.getMesh();
}

} // namespace

LogicalResult ConstraintOp::verifySymbolUses(SymbolTableCollection &tables) {
  FailureOr<MeshAttr> mesh =
      verifyMeshSymbol(*this, getSharding().getMeshName(), tables);
  if (failed(mesh))
    return failure();
  return getSharding().verifyFor(
      [&] { return emitOpError() << "sharding: "; }, *mesh,
      cast<ShapedType>(getResult().getType()));
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

namespace {

/// Mesh-independent: no axis named twice.
LogicalResult verifyAxesUnique(Operation *op, ArrayAttr axes) {
  llvm::SmallDenseSet<StringRef> seen;
  for (Attribute axis : axes) {
    StringRef name = cast<StringAttr>(axis).getValue();
    if (!seen.insert(name).second)
      return op->emitOpError() << "axis \"" << name << "\" is listed twice";
  }
  return success();
}

/// The product of the sizes of `axes` on `mesh`, or a diagnostic at `op` for
/// an axis the mesh lacks.
FailureOr<int64_t> verifyAxesOnMesh(Operation *op, MeshAttr mesh,
                                    FlatSymbolRefAttr meshName,
                                    ArrayRef<StringRef> axes) {
  int64_t groupSize = 1;
  for (StringRef name : axes) {
    MeshAxisAttr axis = mesh.getAxis(name);
    if (!axis)
      return op->emitOpError() << "axis \"" << name
                               << "\" is not an axis of mesh " << meshName;
    groupSize *= axis.getSize();
  }
  return groupSize;
}

SmallVector<StringRef> getAxisNames(ArrayAttr axes) {
  return llvm::to_vector(llvm::map_range(
      axes, [](Attribute a) { return cast<StringAttr>(a).getValue(); }));
}

/// Mesh and group size of a collective over `axes`.
FailureOr<int64_t> verifyCollectiveGroup(Operation *op,
                                         FlatSymbolRefAttr meshName,
                                         ArrayRef<StringRef> axes,
                                         SymbolTableCollection &tables) {
  FailureOr<MeshAttr> mesh = verifyMeshSymbol(op, meshName, tables);
  if (failed(mesh))
    return failure();
  return verifyAxesOnMesh(op, *mesh, meshName, axes);
}

/// Group size for getGroupSize(): unknown meshes and axes count as 1, so a
/// caller on unverified IR gets a number rather than a crash.
int64_t computeGroupSize(Operation *op, FlatSymbolRefAttr meshName,
                         ArrayRef<StringRef> axes) {
  MeshOp mesh = lookupMesh(op, meshName);
  if (!mesh)
    return 1;
  int64_t groupSize = 1;
  for (StringRef name : axes)
    if (MeshAxisAttr axis = mesh.getMesh().getAxis(name))
      groupSize *= axis.getSize();
  return groupSize;
}

LogicalResult verifyDimInRange(Operation *op, StringRef name, int64_t dim,
                               int64_t rank) {
  if (dim < 0 || dim >= rank)
    return op->emitOpError() << name << " " << dim
                             << " is out of range for rank " << rank;
  return success();
}

LogicalResult verifySameRankAndElementType(Operation *op, ShapedType input,
                                           ShapedType result) {
  if (input.getRank() != result.getRank())
    return op->emitOpError() << "result rank " << result.getRank()
                             << " differs from input rank " << input.getRank();
  if (input.getElementType() != result.getElementType())
    return op->emitOpError() << "result element type "
                             << result.getElementType()
                             << " differs from input element type "
                             << input.getElementType();
  return success();
}

/// Compares `result` with `expected` (dynamic entries are not checked);
/// `why(d)` explains the expected size of dimension d.
LogicalResult
verifyResultShape(Operation *op, ShapedType result, ArrayRef<int64_t> expected,
                  function_ref<std::string(int64_t)> why) {
  // A rank mismatch is verify()'s to report.
  if (result.getRank() != static_cast<int64_t>(expected.size()))
    return success();
  for (auto [d, size] : llvm::enumerate(result.getShape())) {
    int64_t want = expected[d];
    if (ShapedType::isDynamic(size) || ShapedType::isDynamic(want) ||
        size == want)
      continue;
    return op->emitOpError() << "result dimension " << d << " has size "
                             << size << ", expected " << want << " ("
                             << why(d) << ")";
  }
  return success();
}

std::string sameAsInput(int64_t) { return "the input's size"; }

/// Whether verify() accepted the dimension indices, so that the shape checks
/// may index with them. verifySymbolUses may be called on IR whose verify()
/// failed; the failure is reported there, not again here.
bool dimsInRange(ShapedType type, ArrayRef<int64_t> dims) {
  return llvm::all_of(
      dims, [&](int64_t d) { return d >= 0 && d < type.getRank(); });
}

} // namespace

/// The mesh-independent checks of the collectives that act along one `dim`
/// (all_gather, reduce_scatter, slice): unique axes, `dim` in range, and a
/// result of the input's rank and element type.
template <typename OpTy> static LogicalResult verifyOneDimOp(OpTy op) {
  auto input = cast<ShapedType>(op.getInput().getType());
  auto result = cast<ShapedType>(op.getResult().getType());
  if (failed(verifyAxesUnique(op, op.getAxes())) ||
      failed(verifyDimInRange(op, "dim", op.getDim(), input.getRank())) ||
      failed(verifySameRankAndElementType(op, input, result)))
    return failure();
  return success();
}

// all_gather

LogicalResult AllGatherOp::verify() { return verifyOneDimOp(*this); }

LogicalResult AllGatherOp::verifySymbolUses(SymbolTableCollection &tables) {
  FailureOr<int64_t> group = verifyCollectiveGroup(
      *this, getMeshAttr(), getAxisNames(getAxes()), tables);
  if (failed(group))
    return failure();
  auto input = cast<ShapedType>(getInput().getType());
  int64_t dim = getDim();
  if (!dimsInRange(input, {dim}))
    return success();
  SmallVector<int64_t> expected(input.getShape());
  if (!ShapedType::isDynamic(expected[dim]))
    expected[dim] *= *group;
  return verifyResultShape(
      *this, cast<ShapedType>(getResult().getType()), expected,
      [&](int64_t d) -> std::string {
        if (d != dim)
          return sameAsInput(d);
        return "input size " + std::to_string(input.getDimSize(d)) +
               " * group size " + std::to_string(*group);
      });
}

int64_t AllGatherOp::getGroupSize() {
  return computeGroupSize(*this, getMeshAttr(), getAxisNames(getAxes()));
}

// reduce_scatter

LogicalResult ReduceScatterOp::verify() { return verifyOneDimOp(*this); }

/// Shared by the ops that leave each device one block of `dim` (reduce_scatter
/// and slice): the group must be valid and the result's `dim` is the input's
/// divided by the group size, every other dimension unchanged.
template <typename OpTy>
static LogicalResult verifyBlockOfDim(OpTy op, SymbolTableCollection &tables) {
  FailureOr<int64_t> group = verifyCollectiveGroup(
      op, op.getMeshAttr(), getAxisNames(op.getAxes()), tables);
  if (failed(group))
    return failure();
  auto input = cast<ShapedType>(op.getInput().getType());
  int64_t dim = op.getDim();
  if (!dimsInRange(input, {dim}))
    return success();
  SmallVector<int64_t> expected(input.getShape());
  if (!ShapedType::isDynamic(expected[dim])) {
    if (expected[dim] % *group != 0)
      return op.emitOpError() << "input dimension " << dim << " of size "
                              << expected[dim]
                              << " is not divisible by the group size "
                              << *group;
    expected[dim] /= *group;
  }
  return verifyResultShape(
      op, cast<ShapedType>(op.getResult().getType()), expected,
      [&](int64_t d) -> std::string {
        if (d != dim)
          return sameAsInput(d);
        return "input size " + std::to_string(input.getDimSize(d)) +
               " / group size " + std::to_string(*group);
      });
}

LogicalResult
ReduceScatterOp::verifySymbolUses(SymbolTableCollection &tables) {
  return verifyBlockOfDim(*this, tables);
}

int64_t ReduceScatterOp::getGroupSize() {
  return computeGroupSize(*this, getMeshAttr(), getAxisNames(getAxes()));
}

// all_reduce

LogicalResult AllReduceOp::verify() {
  return verifyAxesUnique(*this, getAxes());
}

LogicalResult AllReduceOp::verifySymbolUses(SymbolTableCollection &tables) {
  return verifyCollectiveGroup(*this, getMeshAttr(), getAxisNames(getAxes()),
                               tables);
}

int64_t AllReduceOp::getGroupSize() {
  return computeGroupSize(*this, getMeshAttr(), getAxisNames(getAxes()));
}

// all_to_all

LogicalResult AllToAllOp::verify() {
  auto input = cast<ShapedType>(getInput().getType());
  auto result = cast<ShapedType>(getResult().getType());
  if (failed(verifyAxesUnique(*this, getAxes())) ||
      failed(verifyDimInRange(*this, "split_dim", getSplitDim(),
                              input.getRank())) ||
      failed(verifyDimInRange(*this, "concat_dim", getConcatDim(),
                              input.getRank())) ||
      failed(verifySameRankAndElementType(*this, input, result)))
    return failure();
  return success();
}

LogicalResult AllToAllOp::verifySymbolUses(SymbolTableCollection &tables) {
  FailureOr<int64_t> group = verifyCollectiveGroup(
      *this, getMeshAttr(), getAxisNames(getAxes()), tables);
  if (failed(group))
    return failure();
  auto input = cast<ShapedType>(getInput().getType());
  int64_t split = getSplitDim(), concat = getConcatDim();
  if (!dimsInRange(input, {split, concat}))
    return success();
  SmallVector<int64_t> expected(input.getShape());
  if (!ShapedType::isDynamic(expected[split])) {
    if (expected[split] % *group != 0)
      return emitOpError() << "input split_dim " << split << " of size "
                           << expected[split]
                           << " is not divisible by the group size "
                           << *group;
    expected[split] /= *group;
  }
  if (!ShapedType::isDynamic(expected[concat]))
    expected[concat] *= *group;
  return verifyResultShape(
      *this, cast<ShapedType>(getResult().getType()), expected,
      [&](int64_t d) -> std::string {
        std::string in = std::to_string(input.getDimSize(d));
        std::string g = std::to_string(*group);
        if (d == split && d == concat)
          return "split_dim and concat_dim coincide, so the input's size";
        if (d == split)
          return "split_dim: input size " + in + " / group size " + g;
        if (d == concat)
          return "concat_dim: input size " + in + " * group size " + g;
        return sameAsInput(d);
      });
}

int64_t AllToAllOp::getGroupSize() {
  return computeGroupSize(*this, getMeshAttr(), getAxisNames(getAxes()));
}

// collective_permute

LogicalResult CollectivePermuteOp::verify() {
  if (failed(verifyAxesUnique(*this, getAxes())))
    return failure();
  if (getPairs().size() % 2 != 0)
    return emitOpError() << "pairs must list (source, target) positions, an "
                            "even number of entries, but has "
                         << getPairs().size();
  return success();
}

LogicalResult
CollectivePermuteOp::verifySymbolUses(SymbolTableCollection &tables) {
  FailureOr<int64_t> group = verifyCollectiveGroup(
      *this, getMeshAttr(), getAxisNames(getAxes()), tables);
  if (failed(group))
    return failure();
  ArrayRef<int64_t> pairs = getPairs();
  for (auto [i, position] : llvm::enumerate(pairs))
    if (position < 0 || position >= *group)
      return emitOpError() << "pairs entry #" << i << " (" << position
                           << ") is out of range [0, " << *group
                           << ") of the group";
  llvm::SmallDenseSet<int64_t> sources, targets;
  for (size_t i = 0; i + 1 < pairs.size(); i += 2) {
    if (!sources.insert(pairs[i]).second)
      return emitOpError() << "source position " << pairs[i]
                           << " appears in more than one pair";
    if (!targets.insert(pairs[i + 1]).second)
      return emitOpError() << "target position " << pairs[i + 1]
                           << " appears in more than one pair";
  }
  return success();
}

int64_t CollectivePermuteOp::getGroupSize() {
  return computeGroupSize(*this, getMeshAttr(), getAxisNames(getAxes()));
}

// slice

LogicalResult SliceOp::verify() { return verifyOneDimOp(*this); }

LogicalResult SliceOp::verifySymbolUses(SymbolTableCollection &tables) {
  return verifyBlockOfDim(*this, tables);
}

int64_t SliceOp::getGroupSize() {
  return computeGroupSize(*this, getMeshAttr(), getAxisNames(getAxes()));
}

// axis_index

LogicalResult AxisIndexOp::verify() {
  return verifyAxesUnique(*this, getAxes());
}

LogicalResult AxisIndexOp::verifySymbolUses(SymbolTableCollection &tables) {
  return verifyCollectiveGroup(*this, getMeshAttr(), getAxisNames(getAxes()),
                               tables);
}

int64_t AxisIndexOp::getGroupSize() {
  return computeGroupSize(*this, getMeshAttr(), getAxisNames(getAxes()));
}

// mask

LogicalResult MaskOp::verify() {
  if (failed(verifyAxesUnique(*this, getAxes())))
    return failure();
  auto type = cast<ShapedType>(getInput().getType());
  if (!type.getElementType().isIntOrFloat())
    return emitOpError() << "expects integer or float elements, got "
                         << type.getElementType();
  int64_t dim = getDim();
  if (dim < 0 || dim >= type.getRank())
    return emitOpError() << "dim " << dim << " is out of range for rank "
                         << type.getRank();
  if (getSize() < 1)
    return emitOpError() << "size " << getSize() << " must be >= 1";
  return success();
}

LogicalResult MaskOp::verifySymbolUses(SymbolTableCollection &tables) {
  FailureOr<int64_t> group = verifyCollectiveGroup(
      *this, getMeshAttr(), getAxisNames(getAxes()), tables);
  if (failed(group))
    return failure();
  auto type = cast<ShapedType>(getInput().getType());
  int64_t local = type.getDimSize(getDim());
  if (ShapedType::isDynamic(local))
    return success();
  if (local * *group < getSize())
    return emitOpError() << "size " << getSize() << " exceeds dimension "
                         << getDim() << "'s " << local
                         << " elements times the group size " << *group;
  return success();
}

int64_t MaskOp::getGroupSize() {
  return computeGroupSize(*this, getMeshAttr(), getAxisNames(getAxes()));
}

// send / recv

namespace {
LogicalResult verifyPeer(Operation *op, FlatSymbolRefAttr meshName,
                         StringRef axisName, int64_t peer,
                         SymbolTableCollection &tables) {
  FailureOr<int64_t> axisSize =
      verifyCollectiveGroup(op, meshName, {axisName}, tables);
  if (failed(axisSize))
    return failure();
  if (peer < 0 || peer >= *axisSize)
    return op->emitOpError() << "peer " << peer << " is out of range [0, "
                             << *axisSize << ") of axis \"" << axisName
                             << "\"";
  return success();
}
} // namespace

LogicalResult SendOp::verifySymbolUses(SymbolTableCollection &tables) {
  return verifyPeer(*this, getMeshAttr(), getAxis(), getPeer(), tables);
}

int64_t SendOp::getGroupSize() {
  return computeGroupSize(*this, getMeshAttr(), {getAxis()});
}

LogicalResult RecvOp::verifySymbolUses(SymbolTableCollection &tables) {
  return verifyPeer(*this, getMeshAttr(), getAxis(), getPeer(), tables);
}

int64_t RecvOp::getGroupSize() {
  return computeGroupSize(*this, getMeshAttr(), {getAxis()});
}
