//===- Fibers.cpp - cooperative threads on one host thread ----------------===//
//
// Fibers on mmap'd stacks with a guard page below each (an overflow faults
// instead of overwriting a neighbour), switched by a few instructions of
// assembly on x86-64 or by makecontext/swapcontext. Stacks are kept per
// host thread between launches, so a launch maps none once the thread has
// run one as wide.
//
//===----------------------------------------------------------------------===//

#include "runtime/lib/cuda/Fibers.h"

#include "partita/runtime/Tensor.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define PARTITA_FIBERS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PARTITA_FIBERS_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define PARTITA_FIBERS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PARTITA_FIBERS_TSAN 1
#endif
#endif

#ifdef PARTITA_FIBERS_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef PARTITA_FIBERS_TSAN
#include <sanitizer/tsan_interface.h>
#endif

// The assembly switch on x86-64, except under AddressSanitizer: ASan's
// swapcontext interceptor clears the shadow of the stack it switches to,
// and a fiber's frames that never returned (it left them by a switch) leave
// their redzones poisoned in a pooled stack's shadow, which the next fiber
// on that stack would trip over; user unpoisoning is off in CI's ASan runs
// (allow_user_poisoning=0), so only the interceptor clears them.
#if defined(__x86_64__) && !defined(PARTITA_FIBERS_ASAN)
#define PARTITA_FIBERS_ASM 1
#include <xmmintrin.h>

// partita_fiber_swap(save, to): pushes the callee-saved registers (System V
// x86-64: rbp, rbx, r12-r15) and the MXCSR and x87 control words on the
// current stack, stores the stack pointer to *save, and resumes the stack
// `to` (saved the same way, or laid out by initialFrame) by the reverse.
// No CFI: unwinders stop here (exceptions never cross a switch; each
// fiber's are caught in fiberEntry).
asm(R"(
  .text
  .p2align 4
  .globl partita_fiber_swap
  .hidden partita_fiber_swap
  .type partita_fiber_swap, @function
partita_fiber_swap:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size partita_fiber_swap, .-partita_fiber_swap
)");
extern "C" void partita_fiber_swap(void **save, void *to);
#endif

namespace partita::runtime::gpu {

namespace {

std::atomic<FiberSwitch> switchKind{
#ifdef PARTITA_FIBERS_ASM
    FiberSwitch::Assembly
#else
    FiberSwitch::Ucontext
#endif
};

/// Usable bytes of a fiber's stack. The kernels' frames are small; this
/// leaves room for sanitizer-instrumented frames and exception unwinding.
constexpr size_t kStackBytes = size_t(256) << 10;

size_t pageBytes() {
  static const size_t bytes = size_t(sysconf(_SC_PAGESIZE));
  return bytes;
}

struct Stack {
  char *mapping = nullptr; // the guard page, then the usable bytes
  char *bottom() const { return mapping + pageBytes(); }
};

/// The stacks this host thread has mapped and is not using.
class StackPool {
public:
  ~StackPool() {
    for (Stack &s : free)
      munmap(s.mapping, pageBytes() + kStackBytes);
  }

  Stack take() {
    if (!free.empty()) {
      Stack s = free.back();
      free.pop_back();
      return s;
    }
    void *mapping =
        mmap(nullptr, pageBytes() + kStackBytes, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mapping == MAP_FAILED)
      throw Error("block emulator: cannot map a simulated thread's stack of " +
                  std::to_string(kStackBytes >> 10) +
                  " KiB: " + std::strerror(errno));
    Stack s{static_cast<char *>(mapping)};
    if (mprotect(s.mapping, pageBytes(), PROT_NONE) != 0) {
      int error = errno;
      munmap(mapping, pageBytes() + kStackBytes);
      throw Error(std::string("block emulator: cannot protect a simulated "
                              "thread's stack guard page: ") +
                  std::strerror(error));
    }
    return s;
  }

  void give(Stack s) {
#ifdef PARTITA_FIBERS_ASAN
    // A fiber that unwound leaves no frames, but clear any poison its
    // frames' redzones left, for the next fiber on this stack.
    ASAN_UNPOISON_MEMORY_REGION(s.bottom(), kStackBytes);
#endif
    free.push_back(s);
  }

private:
  std::vector<Stack> free;
};

StackPool &stackPool() {
  thread_local StackPool pool;
  return pool;
}

/// Where a fiber (or the host thread) resumes: its saved stack pointer
/// (the assembly switch) or its ucontext.
struct Context {
  void *sp = nullptr;
  ucontext_t uc;
};

struct Fiber {
  Context context;
  Stack stack;
  bool done = false;
  void *fakeStack = nullptr; // ASan's, while switched out
  void *tsan = nullptr;      // TSan's context
};

struct Scheduler {
  const std::function<void(int)> *body = nullptr;
  std::vector<Fiber> fibers;
  int current = -1;
  bool assembly = false; // the switch this launch uses
  Context host;
  // The host thread's stack (ASan), learned at the first switch into a
  // fiber; its fake stack while a fiber runs; TSan's context for it.
  const void *hostBottom = nullptr;
  size_t hostSize = 0;
  void *hostFakeStack = nullptr;
  void *hostTsan = nullptr;
  std::exception_ptr escaped;
  int finishedInRound = 0;
  bool fromHost = false; // the switch under way started on the host's stack
};

thread_local Scheduler *running = nullptr;

/// Saves where the caller is into `from` and resumes `to`; returns when
/// something resumes `from`.
void swapTo(const Scheduler &s, Context &from, Context &to) {
#ifdef PARTITA_FIBERS_ASM
  if (s.assembly)
    return partita_fiber_swap(&from.sp, to.sp);
#endif
  swapcontext(&from.uc, &to.uc);
}

/// Resumes `to`, leaving the caller's stack for good; returns only if the
/// switch failed (setcontext). Deliberately neither [[noreturn]] nor
/// ending in a noreturn call: ASan instruments a call to a noreturn
/// function with __asan_handle_no_return before it, which here would run
/// on a fiber stack already being left (start_switch_fiber has run) and
/// fail a CHECK in ASan's stack bookkeeping.
void jumpTo(const Scheduler &s, Context &to) {
#ifdef PARTITA_FIBERS_ASM
  if (s.assembly) {
    void *abandoned;
    partita_fiber_swap(&abandoned, to.sp);
    return;
  }
#endif
  setcontext(&to.uc);
}

void fiberEntry();

/// Writes the frame partita_fiber_swap pops to start fiberEntry below
/// `top` and returns the stack pointer to resume: from the stack pointer
/// up, the control words, r15 r14 r13 r12 rbx rbp (zero), then fiberEntry
/// as the return address, above it a null one so fiberEntry starts with
/// the stack aligned as after a call (rsp + 8 a multiple of 16).
#ifdef PARTITA_FIBERS_ASM
void *initialFrame(uint64_t *top) {
  uint16_t x87;
  asm volatile("fnstcw %0" : "=m"(x87));
  top[-1] = 0;
  top[-2] = reinterpret_cast<uint64_t>(&fiberEntry);
  for (int i = 3; i <= 8; ++i)
    top[-i] = 0;
  top[-9] = uint64_t(_mm_getcsr()) | (uint64_t(x87) << 32);
  return &top[-9];
}
#endif

/// Makes `c` start fiberEntry on `stack` when resumed.
void makeFiberContext(const Scheduler &s, Context &c, const Stack &stack) {
#ifdef PARTITA_FIBERS_ASM
  if (s.assembly) {
    c.sp = initialFrame(
        reinterpret_cast<uint64_t *>(stack.bottom() + kStackBytes));
    return;
  }
#endif
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack.bottom();
  c.uc.uc_stack.ss_size = kStackBytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, fiberEntry, 0);
}

// The sanitizers' side of a switch: `startSwitch` just before leaving a
// stack (save == nullptr: leaving it for good), `finishSwitch` first thing
// on the stack switched to.
void startSwitch([[maybe_unused]] void **save,
                 [[maybe_unused]] const void *bottom,
                 [[maybe_unused]] size_t size, [[maybe_unused]] void *tsanTo) {
#ifdef PARTITA_FIBERS_ASAN
  __sanitizer_start_switch_fiber(save, bottom, size);
#endif
#ifdef PARTITA_FIBERS_TSAN
  __tsan_switch_to_fiber(tsanTo, 0);
#endif
}

void finishSwitch([[maybe_unused]] void *saved,
                  [[maybe_unused]] const void **fromBottom,
                  [[maybe_unused]] size_t *fromSize) {
#ifdef PARTITA_FIBERS_ASAN
  __sanitizer_finish_switch_fiber(saved, fromBottom, fromSize);
#endif
}

/// The fiber after `from` in this round that has not finished; -1: the
/// round is over (the host thread is next).
int nextInRound(const Scheduler &s, int from) {
  for (int i = from + 1; i < int(s.fibers.size()); ++i)
    if (!s.fibers[i].done)
      return i;
  return -1;
}

/// Leaves fiber `from` (for good when `finished`) for the next fiber of the
/// round, or for the host thread at the round's end: one switch, not two
/// through the host.
void switchOnward(Scheduler &s, int from, bool finished) {
  Fiber &f = s.fibers[from];
  int to = nextInRound(s, from);
  void **save = finished ? nullptr : &f.fakeStack;
  if (to < 0) {
    s.current = -1;
    startSwitch(save, s.hostBottom, s.hostSize, s.hostTsan);
    if (finished)
      jumpTo(s, s.host);
    else
      swapTo(s, f.context, s.host);
  } else {
    Fiber &next = s.fibers[to];
    s.current = to;
    startSwitch(save, next.stack.bottom(), kStackBytes, next.tsan);
    if (finished)
      jumpTo(s, next.context);
    else
      swapTo(s, f.context, next.context);
  }
  if (finished)
    std::terminate(); // a switch away for good came back: setcontext failed
  // Resumed, by the previous fiber of a round or by the host thread; the
  // host's stack bounds are learned from the host's switches only.
  finishSwitch(f.fakeStack, nullptr, nullptr);
}

void fiberEntry() {
  Scheduler &s = *running;
  int index = s.current;
  finishSwitch(nullptr, s.fromHost ? &s.hostBottom : nullptr,
               s.fromHost ? &s.hostSize : nullptr);
  s.fromHost = false;
  try {
    (*s.body)(index);
  } catch (...) {
    if (!s.escaped)
      s.escaped = std::current_exception();
  }
  s.fibers[index].done = true;
  ++s.finishedInRound;
  switchOnward(s, index, /*finished=*/true);
}

/// Runs one round: every unfinished fiber, in index order, until it yields
/// or finishes.
void runRound(Scheduler &s) {
  int first = nextInRound(s, -1);
  Fiber &f = s.fibers[first];
  s.current = first;
  s.fromHost = true;
  startSwitch(&s.hostFakeStack, f.stack.bottom(), kStackBytes, f.tsan);
  swapTo(s, s.host, f.context);
  finishSwitch(s.hostFakeStack, nullptr, nullptr);
  s.fromHost = false;
}

} // namespace

void setFiberSwitch(FiberSwitch how) {
#ifndef PARTITA_FIBERS_ASM
  how = FiberSwitch::Ucontext;
#endif
  switchKind = how;
}

FiberSwitch fiberSwitch() { return switchKind; }

void yieldFiber() {
  Scheduler *s = running;
  if (!s || s->current < 0)
    throw Error("block emulator: yieldFiber called outside a fiber");
  switchOnward(*s, s->current, /*finished=*/false);
}

void runFibers(int n, const std::function<void(int)> &body,
               const std::function<uint64_t()> &progress,
               const std::function<void()> &onStall) {
  if (running)
    throw Error("block emulator: a launch from inside a simulated thread");
  if (n <= 0)
    return;
  Scheduler s;
  s.body = &body;
  s.assembly = fiberSwitch() == FiberSwitch::Assembly;
  s.fibers.resize(n);
  StackPool &pool = stackPool();
  int mapped = 0;
  try {
    for (; mapped < n; ++mapped)
      s.fibers[mapped].stack = pool.take();
  } catch (...) {
    for (int i = 0; i < mapped; ++i)
      pool.give(s.fibers[i].stack);
    throw;
  }
  for (Fiber &f : s.fibers) {
    makeFiberContext(s, f.context, f.stack);
#ifdef PARTITA_FIBERS_TSAN
    f.tsan = __tsan_create_fiber(0);
#endif
  }
#ifdef PARTITA_FIBERS_TSAN
  s.hostTsan = __tsan_get_current_fiber();
#endif
  running = &s;
  int live = n;
  bool stalled = false;
  while (live > 0) {
    uint64_t before = progress();
    s.finishedInRound = 0;
    runRound(s);
    int finished = s.finishedInRound;
    live -= finished;
    if (live == 0 || finished > 0 || progress() != before) {
      stalled = false;
      continue;
    }
    if (stalled) {
      // onStall did not make them return: their stacks hold live frames
      // that cannot be unwound from here, so they are left mapped.
      running = nullptr;
      throw Error("block emulator: " + std::to_string(live) +
                  " simulated threads neither return nor get past their "
                  "barriers");
    }
    onStall();
    stalled = true;
  }
  running = nullptr;
  for (Fiber &f : s.fibers) {
#ifdef PARTITA_FIBERS_TSAN
    __tsan_destroy_fiber(f.tsan);
#endif
    pool.give(f.stack);
  }
  if (s.escaped)
    std::rethrow_exception(s.escaped);
}

} // namespace partita::runtime::gpu
