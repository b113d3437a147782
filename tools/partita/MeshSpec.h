//===- MeshSpec.h - parse `--mesh dp=2,tp=4` ---------------------*- C++ -*-===//

#ifndef PARTITA_TOOLS_PARTITA_MESHSPEC_H
#define PARTITA_TOOLS_PARTITA_MESHSPEC_H

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace partita::driver {

struct MeshAxisSpec {
  std::string name;
  int64_t size;
};

/// Parses comma-separated `name=size` pairs, major axis first. Names are
/// identifiers, sizes whole numbers >= 1, no name twice; the message of a
/// failure says which pair is wrong and why.
llvm::Expected<llvm::SmallVector<MeshAxisSpec>> parseMeshSpec(llvm::StringRef spec);

/// The canonical spelling, "dp=2,tp=4".
std::string printMeshSpec(llvm::ArrayRef<MeshAxisSpec> axes);

} // namespace partita::driver

#endif // PARTITA_TOOLS_PARTITA_MESHSPEC_H
