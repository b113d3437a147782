//===- InitAllPasses.h - register Partita's passes --------------*- C++ -*-===//

#ifndef PARTITA_PASSES_INITALLPASSES_H
#define PARTITA_PASSES_INITALLPASSES_H

#include "dialects/nn/Transforms/Passes.h"
#include "passes/autodiff/Passes.h"
#include "passes/autoshard/Passes.h"
#include "passes/comm/Passes.h"
#include "passes/partition/Passes.h"
#include "passes/pipeline/Passes.h"
#include "passes/plan/Passes.h"
#include "passes/sharding/Passes.h"

namespace partita {
inline void registerAllPasses() {
  autodiff::registerAutodiffPasses();
  autoshard::registerAutoShardPasses();
  sharding::registerShardingPasses();
  partition::registerPartitionPasses();
  plan_lowering::registerPlanPasses();
  comm::registerCommPasses();
  pipeline::registerPipelinePasses();
  nn::registerNNTransformsPasses();
}
} // namespace partita

#endif // PARTITA_PASSES_INITALLPASSES_H
