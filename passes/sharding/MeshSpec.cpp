//===- MeshSpec.cpp - mesh specs such as "dp=2,tp=4" ----------------------===//

#include "passes/sharding/MeshSpec.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/raw_ostream.h"

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
