//===- PlanMemory.cpp - what a plan's memory plan may share ---------------===//

#include "runtime/plan/PlanMemory.h"

#include "runtime/plan/plan.pb.h"

#include <algorithm>

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

bool mayWriteOverInput(const Instruction &inst, int64_t input) {
  if (inst.has_collective())
    return inst.collective().kind() == Collective::ALL_REDUCE &&
           inst.collective().bucket() > 0 && inst.collective().input() == input;
  if (!inst.has_kernel() || inst.kernel().outputs_size() != 1)
    return false;
  const Kernel &k = inst.kernel();
  switch (k.kind()) {
  case Kernel::ADD:
  case Kernel::SUB:
  case Kernel::MUL:
    return std::find(k.inputs().begin(), k.inputs().end(), input) !=
           k.inputs().end();
  case Kernel::EINSUM:
    return k.inputs_size() == 3 && k.inputs(2) == input &&
           k.inputs(0) != input && k.inputs(1) != input;
  default:
    return false;
  }
}

bool writesOverOldValue(const Program &program, const Instruction &inst,
                        int64_t output, int64_t target) {
  if (!inst.has_kernel())
    return false;
  const Kernel &k = inst.kernel();
  int reads = 0;
  for (int64_t id : k.inputs())
    reads += id == target;
  if (reads != 1)
    return false;
  if (mayWriteOverInput(inst, target)) {
    auto valid = [&](int64_t id) {
      return id >= 0 && id < program.buffers_size();
    };
    return k.outputs(0) == output && valid(output) && valid(target) &&
           localBytes(program.buffers(int(output))) ==
               localBytes(program.buffers(int(target)));
  }
  // The input each output replaces.
  static const int kAdamw[] = {0, 2, 3}, kSgd[] = {0, 2};
  const int *inputOfOutput = nullptr;
  int outputs = 0;
  if (k.kind() == Kernel::ADAMW) {
    inputOfOutput = kAdamw;
    outputs = 3;
  } else if (k.kind() == Kernel::SGD) {
    inputOfOutput = kSgd;
    outputs = 2;
  }
  for (int o = 0; o < outputs && o < k.outputs_size(); ++o)
    if (k.outputs(o) == output && inputOfOutput[o] < k.inputs_size() &&
        k.inputs(inputOfOutput[o]) == target)
      return true;
  return false;
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
