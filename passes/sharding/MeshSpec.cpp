//===- MeshSpec.cpp - mesh specs such as "dp=2,tp=4" ----------------------===//

#include "passes/sharding/MeshSpec.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/raw_ostream.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"

#include <map>
#include <vector>

using namespace mlir;
using namespace partita;
using namespace partita::sharding;

static bool isIdentifier(StringRef name) {
  if (name.empty() || !(llvm::isAlpha(name.front()) || name.front() == '_'))
    return false;
  return llvm::all_of(name,
                      [](char c) { return llvm::isAlnum(c) || c == '_'; });
}

FailureOr<SmallVector<dist::MeshAxisAttr>>
sharding::parseMeshSpec(StringRef spec, MLIRContext *ctx,
                        function_ref<InFlightDiagnostic()> emitError) {
  if (spec.trim().empty()) {
    emitError() << "mesh spec is empty; expected axes like \"dp=2,tp=4\"";
    return failure();
  }
  SmallVector<StringRef> entries;
  spec.split(entries, ',');
  SmallVector<dist::MeshAxisAttr> axes;
  llvm::StringSet<> seen;
  for (StringRef entry : entries) {
    entry = entry.trim();
    auto [name, sizeText] = entry.split('=');
    name = name.trim();
    sizeText = sizeText.trim();
    if (entry.empty()) {
      emitError() << "mesh spec \"" << spec
                  << "\" has an empty axis entry; expected axes like "
                     "\"dp=2,tp=4\"";
      return failure();
    }
    if (!entry.contains('=')) {
      emitError() << "mesh axis '" << entry << "' in mesh spec \"" << spec
                  << "\" has no size; expected name=size, e.g. \"" << entry
                  << "=2\"";
      return failure();
    }
    if (!isIdentifier(name)) {
      emitError() << "mesh axis name '" << name << "' in mesh spec \"" << spec
                  << "\" is not an identifier (letters, digits and '_', "
                     "not starting with a digit)";
      return failure();
    }
    int64_t size;
    if (sizeText.getAsInteger(10, size)) {
      emitError() << "mesh axis '" << name << "' has size '" << sizeText
                  << "', which is not an integer";
      return failure();
    }
    if (size < 1) {
      emitError() << "mesh axis '" << name << "' has size " << size
                  << "; axis sizes must be at least 1";
      return failure();
    }
    if (!seen.insert(name).second) {
      emitError() << "mesh axis '" << name << "' appears twice in mesh spec \""
                  << spec << "\"";
      return failure();
    }
    axes.push_back(dist::MeshAxisAttr::get(ctx, name, size));
  }
  return axes;
}

std::string sharding::printMeshSpec(ArrayRef<dist::MeshAxisAttr> axes) {
  std::string out;
  llvm::raw_string_ostream os(out);
  llvm::interleave(
      axes, os,
      [&](dist::MeshAxisAttr axis) {
        os << axis.getName() << "=" << axis.getSize();
      },
      ",");
  return out;
}

FailureOr<dist::MeshOp> sharding::getOrCreateMesh(ModuleOp module,
                                                  StringRef meshName,
                                                  StringRef spec) {
  if (meshName.empty()) {
    module.emitError() << "mesh-name is empty; name the mesh to annotate for";
    return failure();
  }
  // A blank spec is no spec: the option parser strips quotes and blanks.
  bool hasSpec = !spec.trim().empty();
  SmallVector<dist::MeshAxisAttr> wanted;
  if (hasSpec) {
    auto axes = parseMeshSpec(spec, module.getContext(),
                              [&] { return module.emitError(); });
    if (failed(axes))
      return failure();
    wanted = std::move(*axes);
  }

  Operation *symbol = SymbolTable::lookupSymbolIn(module, meshName);
  if (symbol) {
    auto meshOp = dyn_cast<dist::MeshOp>(symbol);
    if (!meshOp) {
      symbol->emitError() << "symbol @" << meshName
                          << " is not a dist.mesh; mesh-name must name one";
      return failure();
    }
    ArrayRef<dist::MeshAxisAttr> have = meshOp.getMesh().getAxes();
    if (hasSpec && ArrayRef<dist::MeshAxisAttr>(wanted) != have) {
      meshOp.emitError() << "mesh @" << meshName << " has axes \""
                         << printMeshSpec(have)
                         << "\" but the mesh option asks for \""
                         << printMeshSpec(wanted) << "\"";
      return failure();
    }
    return meshOp;
  }
  if (!hasSpec) {
    module.emitError() << "module has no mesh @" << meshName
                       << "; declare one or pass the mesh option "
                          "(e.g. mesh=dp=2,tp=4) to create it";
    return failure();
  }
  auto builder = OpBuilder::atBlockBegin(module.getBody());
  auto meshAttr =
      dist::MeshAttr::get(module.getContext(), wanted, /*deviceIds=*/{});
  return dist::MeshOp::create(builder, module.getLoc(), meshName, meshAttr);
}

bool sharding::groupSpansNodes(ArrayRef<std::pair<std::string, int64_t>> axes,
                     ArrayRef<std::string> groupAxes, int64_t devicesPerNode) {
  int64_t devices = 1;
  for (const auto &axis : axes)
    devices *= axis.second;
  if (devicesPerNode <= 0 || devicesPerNode >= devices)
    return false;
  // A device's group is named by its coordinates along the other axes; the
  // group spans nodes when two of its devices are on different nodes.
  std::map<std::vector<int64_t>, int64_t> nodeOfGroup;
  for (int64_t device = 0; device < devices; ++device) {
    std::vector<int64_t> key;
    int64_t rest = device;
    for (size_t i = axes.size(); i-- > 0;) {
      int64_t coordinate = rest % axes[i].second;
      rest /= axes[i].second;
      if (!llvm::is_contained(groupAxes, axes[i].first))
        key.push_back(coordinate);
    }
    int64_t node = device / devicesPerNode;
    auto [it, inserted] = nodeOfGroup.try_emplace(key, node);
    if (!inserted && it->second != node)
      return true;
  }
  return false;
}
