//===- InitAllPasses.h - register Partita's passes --------------*- C++ -*-===//

#ifndef PARTITA_PASSES_INITALLPASSES_H
#define PARTITA_PASSES_INITALLPASSES_H

#include "passes/sharding/Passes.h"

namespace partita {
inline void registerAllPasses() { sharding::registerShardingPasses(); }
} // namespace partita

#endif // PARTITA_PASSES_INITALLPASSES_H
