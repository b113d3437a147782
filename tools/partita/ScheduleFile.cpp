//===- ScheduleFile.cpp - a hand-written pipeline schedule for the driver -===//

#include "tools/partita/ScheduleFile.h"

#include "partita/runtime/Tensor.h"

namespace partita::driver {

std::shared_ptr<const runtime::pipeline::Schedule>
readScheduleFile(const std::string &path, int ranks, int microbatches,
                 int chunks, bool &splitBackward, std::string &error) {
  namespace pl = runtime::pipeline;
  try {
    auto schedule = std::make_shared<pl::Schedule>(
        pl::parseScheduleFile(path, ranks, microbatches, chunks));
    if (std::optional<pl::ScheduleError> invalid = pl::validate(*schedule)) {
      error = "invalid pipeline schedule (" + path + "): " +
              pl::toString(*invalid);
      return nullptr;
    }
    bool full = false;
    splitBackward = false;
    for (const std::vector<pl::Action> &actions : schedule->actions)
      for (const pl::Action &a : actions) {
        full |= a.kind == pl::ActionKind::Backward;
        splitBackward |= a.kind == pl::ActionKind::BackwardInput ||
                         a.kind == pl::ActionKind::BackwardWeight;
      }
    if (full && splitBackward) {
      error = path + ": mixes BACKWARD with BACKWARD_INPUT and "
                     "BACKWARD_WEIGHT actions; a plan's stages run either "
                     "full backwards or B and W";
      return nullptr;
    }
    return schedule;
  } catch (const runtime::Error &e) {
    error = e.what();
    return nullptr;
  }
}

} // namespace partita::driver
