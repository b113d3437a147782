//===- Fibers.h - cooperative threads on one host thread --------*- C++ -*-===//
//
// The block emulator's simulated threads are fibers: each has its own stack,
// and all of a launch's run on the host thread that launched it, switching
// only where a fiber yields. A barrier of 256 simulated threads is then 256
// user-space switches instead of 256 wake-ups of host threads.
//
// On x86-64 a switch is a few instructions of assembly (the callee-saved
// registers, the SSE control word and the x87 control word, then the stack
// pointer); elsewhere, under AddressSanitizer, or with
// setFiberSwitch(FiberSwitch::Ucontext),
// glibc's swapcontext, which also saves the signal mask with a system call
// each time (most of what the emulator spent before).
//
// The switches are annotated for the sanitizers: AddressSanitizer learns
// each fiber's stack bounds (exceptions unwinding a fiber's stack, fake
// stacks), ThreadSanitizer sees each fiber as its own context.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_LIB_CUDA_FIBERS_H
#define PARTITA_RUNTIME_LIB_CUDA_FIBERS_H

#include <cstdint>
#include <functional>

namespace partita::runtime::gpu {

/// Runs body(0) ... body(n-1) as n fibers on the calling thread, round
/// after round: in each round every unfinished fiber runs until it returns
/// or calls yieldFiber(). `progress` is a count the fibers advance as they
/// get on (the emulator: arrivals at its barriers); a round in which no
/// fiber finished and the count did not move is a stall: `onStall` is
/// called and must make the fibers return (throws Error if they still do
/// not). `body` must not throw; an exception escaping it is rethrown here
/// after every fiber has finished. Throws Error when a fiber stack cannot
/// be mapped or when called from inside a fiber.
void runFibers(int n, const std::function<void(int)> &body,
               const std::function<uint64_t()> &progress,
               const std::function<void()> &onStall);

/// From inside runFibers' body: lets the other fibers run, and returns in
/// the next round.
void yieldFiber();

/// How fibers switch: Assembly where it exists (x86-64, not under
/// AddressSanitizer: Fibers.cpp says why), else Ucontext.
enum class FiberSwitch { Assembly, Ucontext };
/// The switch later runFibers calls use (for tests: both run the same
/// fibers); Assembly where there is none falls back to Ucontext.
void setFiberSwitch(FiberSwitch how);
FiberSwitch fiberSwitch();

} // namespace partita::runtime::gpu

#endif // PARTITA_RUNTIME_LIB_CUDA_FIBERS_H
