//===- BufferReuse.h - outputs that take over a dying input's bytes -*- C++ -*-===//
//
// The memory plan may give an instruction's output the arena bytes of an
// input that instruction reads last (Buffer.reuses in plan.proto): the
// output is then written over the input as it is read. Only instructions
// whose every output element depends on the input element at the same
// position allow it, and the compiler (plan lowering) and the loader
// (PlanFile.cpp) ask this one function which those are.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_PLAN_BUFFERREUSE_H
#define PARTITA_RUNTIME_PLAN_BUFFERREUSE_H

namespace partita::plan {

class Instruction;

/// Whether `inst` may write its one output over an input of the same size:
/// the elementwise add, sub and mul kernels (every backend computes each
/// element from the same position of its inputs; bf16 and f16 run on
/// widened copies), and an all_reduce of a gradient bucket (the executor
/// packs the input before the call, or, alone in its bucket, reduces in
/// the output itself).
bool mayWriteOverInput(const Instruction &inst);

} // namespace partita::plan

#endif // PARTITA_RUNTIME_PLAN_BUFFERREUSE_H
