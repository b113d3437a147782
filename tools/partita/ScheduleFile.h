//===- ScheduleFile.h - a hand-written pipeline schedule for the driver ---===//
//
// `partita plan --schedule-file`: reads a schedule file (PipelineSchedule.h's
// format) and proves it, reporting failures as the driver's messages (the
// runtime library throws; this file is compiled with exceptions, the plan
// command is not).
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_TOOLS_PARTITA_SCHEDULEFILE_H
#define PARTITA_TOOLS_PARTITA_SCHEDULEFILE_H

#include "partita/runtime/PipelineSchedule.h"

#include <memory>
#include <string>

namespace partita::driver {

/// The schedule in `path` for `ranks` x `chunks` stages and `microbatches`,
/// validated, with `splitBackward` set when its backwards are B and W
/// actions; null with `error` set (naming the file, and the line or the
/// rank and step; or that it mixes full backwards with B and W) otherwise.
std::shared_ptr<const runtime::pipeline::Schedule>
readScheduleFile(const std::string &path, int ranks, int microbatches,
                 int chunks, bool &splitBackward, std::string &error);

} // namespace partita::driver

#endif // PARTITA_TOOLS_PARTITA_SCHEDULEFILE_H
