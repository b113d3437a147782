//===- PlanMemory.cpp - what a plan's memory plan may share ---------------===//

#include "runtime/plan/PlanMemory.h"

#include "runtime/plan/plan.pb.h"

namespace partita::plan {

int64_t dtypeBytes(int dtype) {
  switch (dtype) {
  case F64:
  case I64:
    return 8;
  case F16:
  case BF16:
    return 2;
  default:
    return 4;
  }
}

int64_t localBytes(const Buffer &buffer) {
  int64_t n = dtypeBytes(buffer.dtype());
  for (int64_t d : buffer.local_shape())
    n *= d;
  return n;
}

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

bool readAfterBucket(const Buffer &output, int64_t end) {
  return output.role() != ACTIVATION || output.last_use() >= end;
}

bool reducesInItsOutput(const Program &program, int64_t first, int64_t end) {
  if (end - first != 1 || first < 0 || first >= program.instructions_size())
    return false;
  const Instruction &inst = program.instructions(first);
  if (!inst.has_collective() ||
      inst.collective().kind() != Collective::ALL_REDUCE)
    return false;
  int64_t out = inst.collective().output();
  return out >= 0 && out < program.buffers_size() &&
         readAfterBucket(program.buffers(out), end);
}

} // namespace partita::plan
