//===- Fibers.cpp - cooperative threads on one host thread ----------------===//
//
// makecontext/swapcontext fibers on mmap'd stacks with a guard page below
// each (an overflow faults instead of overwriting a neighbour). Stacks are
// kept per host thread between launches, so a launch maps none once the
// thread has run one as wide.
//
//===----------------------------------------------------------------------===//

#include "runtime/lib/cuda/Fibers.h"

#include "partita/runtime/Tensor.h"

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

namespace partita::runtime::gpu {

namespace {

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

struct Fiber {
  ucontext_t context;
  Stack stack;
  bool done = false;
  void *fakeStack = nullptr; // ASan's, while switched out
  void *tsan = nullptr;      // TSan's context
};

struct Scheduler {
  const std::function<void(int)> *body = nullptr;
  std::vector<Fiber> fibers;
  int current = -1;
  ucontext_t host;
  // The host thread's stack (ASan), learned at the first switch into a
  // fiber; its fake stack while a fiber runs; TSan's context for it.
  const void *hostBottom = nullptr;
  size_t hostSize = 0;
  void *hostFakeStack = nullptr;
  void *hostTsan = nullptr;
  std::exception_ptr escaped;
};

thread_local Scheduler *running = nullptr;

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

void fiberEntry() {
  Scheduler &s = *running;
  int index = s.current;
  finishSwitch(nullptr, &s.hostBottom, &s.hostSize);
  try {
    (*s.body)(index);
  } catch (...) {
    if (!s.escaped)
      s.escaped = std::current_exception();
  }
  s.fibers[index].done = true;
  startSwitch(nullptr, s.hostBottom, s.hostSize, s.hostTsan);
  setcontext(&s.host);
  std::terminate(); // setcontext returns only on failure
}

/// Runs fiber `index` until it yields or finishes.
void resume(Scheduler &s, int index) {
  Fiber &f = s.fibers[index];
  s.current = index;
  startSwitch(&s.hostFakeStack, f.stack.bottom(), kStackBytes, f.tsan);
  swapcontext(&s.host, &f.context);
  finishSwitch(s.hostFakeStack, nullptr, nullptr);
  s.current = -1;
}

} // namespace

void yieldFiber() {
  Scheduler *s = running;
  if (!s || s->current < 0)
    throw Error("block emulator: yieldFiber called outside a fiber");
  Fiber &f = s->fibers[s->current];
  startSwitch(&f.fakeStack, s->hostBottom, s->hostSize, s->hostTsan);
  swapcontext(&f.context, &s->host);
  finishSwitch(f.fakeStack, &s->hostBottom, &s->hostSize);
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
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack.bottom();
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = nullptr;
    makecontext(&f.context, fiberEntry, 0);
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
    int finished = 0;
    for (int i = 0; i < n; ++i) {
      if (s.fibers[i].done)
        continue;
      resume(s, i);
      finished += s.fibers[i].done;
    }
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
