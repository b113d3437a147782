//===- StageAssignment.h - cutting a sequence into pipeline stages -*- C++ -*-===//
//
// The balanced split of dist-pipeline-split, apart from the IR so that it is
// unit-tested alone.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_PIPELINE_STAGEASSIGNMENT_H
#define PARTITA_PASSES_PIPELINE_STAGEASSIGNMENT_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

namespace partita::pipeline {

/// Cuts `costs` (in order) into `stages` contiguous, non-empty runs so that
/// the largest run's sum is as small as possible, and returns each item's
/// run (0 .. stages-1, non-decreasing). Exact (the linear-partition dynamic
/// program, O(stages * n^2)); ties go to the earliest cut. Requires
/// 1 <= stages <= costs.size() and costs >= 0.
llvm::SmallVector<int> partitionByCost(llvm::ArrayRef<double> costs,
                                       int stages);

/// The largest run's sum of an assignment (as partitionByCost returns).
double slowestStage(llvm::ArrayRef<double> costs, llvm::ArrayRef<int> stage);

} // namespace partita::pipeline

#endif // PARTITA_PASSES_PIPELINE_STAGEASSIGNMENT_H
