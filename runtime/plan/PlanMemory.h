//===- PlanMemory.h - what a plan's memory plan may share ---------*- C++ -*-===//
//
// Facts about a plan's buffers that the compiler (plan lowering, explain)
// and the runtime (the loader, the executor) must agree on, so each is
// written once, here:
// - a buffer's local byte size;
// - which instructions may write their output over an input they read for
//   the last time (Buffer.reuses in plan.proto: only those whose every
//   output element depends on the input element at the same position, and
//   that read it there before they write it);
// - which instruction may write a donated update (Buffer.in_place) over
//   the old value it reads;
// - which gradient buckets reduce in their own output and so need none of
//   the executor's recycled packing buffers (explain bounds the memory
//   outside the arena by those buffers).
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_PLAN_PLANMEMORY_H
#define PARTITA_RUNTIME_PLAN_PLANMEMORY_H

#include <cstdint>

namespace partita::plan {

class Buffer;
class Instruction;
class Program;

/// Bytes of one element of plan dtype `dtype` (4 for an unknown one).
int64_t dtypeBytes(int dtype);

/// Bytes of `buffer`'s local shape (no overflow check: for plans the
/// compiler wrote; the loader checks sizes itself).
int64_t localBytes(const Buffer &buffer);

/// Whether `inst` may write its one output over buffer `input`, one of its
/// inputs of the output's size: the elementwise add, sub and mul kernels
/// (every backend computes each element from the same position of its
/// inputs; bf16 and f16 run on widened copies) over any input; an einsum
/// over its addend (its third input, which it copies into the output before
/// the GEMM accumulates there) when the operands are other buffers; and an
/// all_reduce of a gradient bucket over its input (the executor packs the
/// input before the call, or, alone in its bucket, reduces in the output
/// itself).
bool mayWriteOverInput(const Instruction &inst, int64_t input);

/// Whether instruction `inst` of `program`, which reads persistent buffer
/// `target` exactly once and writes buffer `output` replacing it, may
/// write `output` straight over `target` (Buffer.in_place): an update
/// kernel reading the old value at the position of the new one (AdamW's
/// parameter and moments, SGD's parameter and momentum: the cpu and cuda
/// kernels read every input of an element before they write it), or a
/// kernel that mayWriteOverInput the target, whose output has the target's
/// size (a gradient accumulator's `acc + g`, or an einsum accumulating
/// onto it).
bool writesOverOldValue(const Program &program, const Instruction &inst,
                        int64_t output, int64_t target);

/// Whether the output of a gradient bucket whose last member comes before
/// instruction `end` is read after the bucket: a persistent buffer, or an
/// activation live at `end` or later. (One that is not may already share
/// its bytes with another buffer when the bucket is unpacked.)
bool readAfterBucket(const Buffer &output, int64_t end);

/// Whether the gradient bucket of instructions [first, end) of `program`
/// reduces in its own output: one all_reduce whose output is read after it.
/// Its input is copied there (or already is, by Buffer.reuses), and it
/// takes none of the recycled packing buffers.
bool reducesInItsOutput(const Program &program, int64_t first, int64_t end);

} // namespace partita::plan

#endif // PARTITA_RUNTIME_PLAN_PLANMEMORY_H
