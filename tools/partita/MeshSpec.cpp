//===- MeshSpec.cpp - parse `--mesh dp=2,tp=4` ----------------------------===//
//
// An adapter over sharding::parseMeshSpec, the one mesh-spec parser, for
// callers that want plain axes and an llvm::Error rather than attributes and
// a diagnostic.
//
//===----------------------------------------------------------------------===//

#include "tools/partita/MeshSpec.h"

#include "dialects/dist/IR/DistDialect.h"
#include "passes/sharding/MeshSpec.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

using namespace llvm;

namespace partita::driver {

static Error meshError(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

Expected<SmallVector<MeshAxisSpec>> parseMeshSpec(StringRef spec) {
  // The shared parser says that an entry is empty, not which one; a long
  // --mesh is easier to fix with the position.
  SmallVector<StringRef> entries;
  spec.split(entries, ',');
  if (!spec.trim().empty())
    for (auto [index, entry] : llvm::enumerate(entries))
      if (entry.trim().empty())
        return meshError(
            formatv("axis {0} of '{1}' is empty", index + 1, spec));

  mlir::MLIRContext ctx;
  ctx.loadDialect<dist::DistDialect>();
  std::string message;
  mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &diag) {
    message = diag.str();
    return mlir::success();
  });
  mlir::FailureOr<SmallVector<dist::MeshAxisAttr>> parsed =
      sharding::parseMeshSpec(spec, &ctx, [&] {
        return mlir::emitError(mlir::UnknownLoc::get(&ctx));
      });
  if (failed(parsed))
    return meshError(message);

  SmallVector<MeshAxisSpec> axes;
  int64_t devices = 1;
  for (dist::MeshAxisAttr axis : *parsed) {
    if (MulOverflow(devices, axis.getSize(), devices))
      return meshError(formatv("'{0}' has more than 2^63 - 1 devices", spec));
    axes.push_back({axis.getName().str(), axis.getSize()});
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
