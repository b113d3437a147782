//===- Checkpoint.h - training checkpoints ----------------------*- C++ -*-===//
//
// A checkpoint is a directory: every parameter and optimizer state buffer of
// a train step as DIR/<name>.npy (global arrays, named as in the model IR),
// and DIR/checkpoint.txt with the number of steps trained. Any plan of the
// same model and optimizer loads it, whatever its mesh or strategy.
// Plain C++17; errors are runtime::Error naming the directory and file.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_CHECKPOINT_H
#define PARTITA_RUNTIME_CHECKPOINT_H

#include "partita/runtime/Train.h"

#include <string>
#include <utility>
#include <vector>

namespace partita::runtime {

/// Reads checkpoint `dir` for `program`: every persistent buffer must be
/// there with its global shape and dtype.
TrainState readCheckpoint(const PlanFile &plan, const std::string &program,
                          const std::string &dir);

/// Writes `state` (TrainRun::finalState) and `steps` as checkpoint `dir`.
void writeCheckpoint(const std::string &dir,
                     const std::vector<std::pair<std::string, Tensor>> &state,
                     int64_t steps);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_CHECKPOINT_H
