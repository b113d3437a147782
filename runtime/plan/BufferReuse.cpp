//===- BufferReuse.cpp - outputs that take over a dying input's bytes -----===//

#include "runtime/plan/BufferReuse.h"

#include "runtime/plan/plan.pb.h"

namespace partita::plan {

bool mayWriteOverInput(const Instruction &inst) {
  if (inst.has_collective())
    return inst.collective().kind() == Collective::ALL_REDUCE &&
           inst.collective().bucket() > 0;
  if (!inst.has_kernel() || inst.kernel().outputs_size() != 1)
    return false;
  switch (inst.kernel().kind()) {
  case Kernel::ADD:
  case Kernel::SUB:
  case Kernel::MUL:
    return true;
  default:
    return false;
  }
}

} // namespace partita::plan
