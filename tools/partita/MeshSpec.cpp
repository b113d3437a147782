//===- MeshSpec.cpp - parse `--mesh dp=2,tp=4` ----------------------------===//

#include "tools/partita/MeshSpec.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

using namespace llvm;

namespace partita::driver {

static Error meshError(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

static bool isIdentifier(StringRef name) {
  if (name.empty() || !(isAlpha(name.front()) || name.front() == '_'))
    return false;
  return llvm::all_of(name, [](char c) { return isAlnum(c) || c == '_'; });
}

Expected<SmallVector<MeshAxisSpec>> parseMeshSpec(StringRef spec) {
  if (spec.trim().empty())
    return meshError("expected comma-separated name=size pairs such as "
                     "dp=2,tp=4, got an empty string");
  SmallVector<StringRef> pairs;
  spec.split(pairs, ',');
  SmallVector<MeshAxisSpec> axes;
  StringSet<> seen;
  int64_t devices = 1;
  for (auto [index, pair] : llvm::enumerate(pairs)) {
    StringRef trimmed = pair.trim();
    if (trimmed.empty())
      return meshError(formatv("axis {0} of '{1}' is empty", index + 1, spec));
    auto [name, size] = trimmed.split('=');
    name = name.trim();
    size = size.trim();
    if (!trimmed.contains('='))
      return meshError(
          formatv("expected name=size, got '{0}' (e.g. dp=2,tp=4)", trimmed));
    if (!isIdentifier(name))
      return meshError(formatv("axis name '{0}' in '{1}' is not an identifier "
                               "(letters, digits and _, not starting with a "
                               "digit)",
                               name, trimmed));
    int64_t value;
    if (size.getAsInteger(10, value) || value < 1)
      return meshError(formatv("size of axis '{0}' must be a whole number >= "
                               "1, got '{1}'",
                               name, size));
    if (MulOverflow(devices, value, devices))
      return meshError(formatv("'{0}' has more than 2^63 - 1 devices", spec));
    if (!seen.insert(name).second)
      return meshError(formatv("axis '{0}' appears more than once", name));
    axes.push_back({name.str(), value});
  }
  return axes;
}

std::string printMeshSpec(ArrayRef<MeshAxisSpec> axes) {
  std::string text;
  for (const MeshAxisSpec &axis : axes) {
    if (!text.empty())
      text += ",";
    text += axis.name + "=" + std::to_string(axis.size);
  }
  return text;
}

} // namespace partita::driver
