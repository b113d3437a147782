//===- Pricing.h - the cost model applied to a compiled plan ------*- C++ -*-===//
//
// What the strategy search knows of a candidate once it compiled: its plan's
// work measured as `partita explain` measures it (PlanExplain.h) and priced
// by the cost model; a pipelined plan's schedule simulated with its stages'
// times (PipelineSchedule.h). Internal to the search library.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_SEARCH_PRICING_H
#define PARTITA_PASSES_SEARCH_PRICING_H

#include "passes/search/StrategySearch.h"

#include "runtime/plan/plan.pb.h"

#include "llvm/ADT/StringRef.h"

#include <string>

namespace partita::search {

/// Sets `candidate`'s numbers (work, memory, compute, comm, hidden, bubble,
/// seconds, stages, crossesNodes) from its compiled `plan`, whose step
/// program is named `stepProgram` (a train step when `train`: its bucketed
/// gradient reductions may hide behind the backward). A pipelined
/// candidate's are its stages' and its simulated schedule's. Returns why it
/// cannot be priced, or empty.
std::string pricePlan(Candidate &candidate, const plan::Plan &plan,
                      llvm::StringRef stepProgram, bool train,
                      const CostModel &cost);

} // namespace partita::search

#endif // PARTITA_PASSES_SEARCH_PRICING_H
