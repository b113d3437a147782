//===- EmulatedApi.cpp - the device layer on the host, for CI -------------===//
//
// Host memory for both spaces; each stream is a thread that runs its items
// in order; an event is a ticket on its stream, and a stream waiting for
// another's event queues an item that blocks until that ticket has run (a
// real dependency, so a missing wait shows up as a race). Kernels run on
// the block emulator; GEMMs on the CPU's BLAS with the descriptor the real
// implementation hands cuBLASLt.
//
//===----------------------------------------------------------------------===//

#include "runtime/lib/cpu/CpuKernels.h"
#include "runtime/lib/cuda/BlockEmulator.h"
#include "runtime/lib/cuda/GpuApi.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

namespace partita::runtime::gpu {

namespace {

struct StreamState {
  std::mutex mutex;
  std::condition_variable changed;
  uint64_t queued = 0, finished = 0;
  std::exception_ptr error;
};

class EmuEvent final : public Event {
public:
  explicit EmuEvent(std::shared_ptr<StreamState> state)
      : state(std::move(state)) {}
  void synchronize() override {
    std::unique_lock<std::mutex> lock(state->mutex);
    state->changed.wait(
        lock, [&] { return state->finished >= ticket || state->error; });
    if (state->error)
      std::rethrow_exception(state->error);
  }
  std::shared_ptr<StreamState> state;
  uint64_t ticket = 0; // 0: never recorded
};

/// One thread runs the items in order. In the synchronous mode enqueue
/// returns once its item has run and rethrows the item's error itself
/// (the stream stays usable, as an inline stream); otherwise a failing
/// item fails the stream (later items are skipped, waits rethrow).
class EmuStream final : public Stream {
public:
  explicit EmuStream(bool synchronous)
      : state(std::make_shared<StreamState>()), synchronous(synchronous),
        worker([this] { loop(); }) {}
  ~EmuStream() override {
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      stopping = true;
    }
    state->changed.notify_all();
    worker.join();
  }

  void enqueue(std::function<void()> work) override {
    if (!synchronous) {
      push(std::move(work));
      return;
    }
    auto failure = std::make_shared<std::exception_ptr>();
    uint64_t ticket = push([work = std::move(work), failure] {
      try {
        work();
      } catch (...) {
        *failure = std::current_exception();
      }
    });
    std::unique_lock<std::mutex> lock(state->mutex);
    state->changed.wait(lock, [&] { return state->finished >= ticket; });
    lock.unlock();
    if (*failure)
      std::rethrow_exception(*failure);
  }
  std::unique_ptr<Event> createEvent() override {
    return std::make_unique<EmuEvent>(state);
  }
  void record(Event &event) override {
    auto &e = static_cast<EmuEvent &>(event);
    std::lock_guard<std::mutex> lock(state->mutex);
    e.state = state;
    e.ticket = state->queued;
  }
  void wait(Event &event) override {
    auto &e = static_cast<EmuEvent &>(event);
    if (e.state == state || e.ticket == 0)
      return; // in order already, or never recorded
    auto other = std::make_shared<EmuEvent>(e.state);
    other->ticket = e.ticket;
    enqueue([other] { other->synchronize(); });
  }
  void synchronize() override {
    EmuEvent end(state);
    record(end);
    end.synchronize();
  }

private:
  uint64_t push(std::function<void()> work) {
    uint64_t ticket;
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      queue.push_back(std::move(work));
      ticket = ++state->queued;
    }
    state->changed.notify_all();
    return ticket;
  }

  void loop() {
    std::unique_lock<std::mutex> lock(state->mutex);
    while (true) {
      state->changed.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty())
        return; // stopping, and everything queued has run
      std::function<void()> work = std::move(queue.front());
      queue.pop_front();
      if (!state->error) {
        lock.unlock();
        std::exception_ptr failure;
        try {
          work();
        } catch (...) {
          failure = std::current_exception();
        }
        lock.lock();
        if (failure && !state->error)
          state->error = failure;
      }
      ++state->finished;
      state->changed.notify_all();
    }
  }

  std::shared_ptr<StreamState> state;
  std::deque<std::function<void()>> queue;
  bool stopping = false;
  bool synchronous;
  std::thread worker; // last: starts once the members above exist
};

class EmulatedApi final : public GpuApi {
public:
  explicit EmulatedApi(const EmulatedApiOptions &options)
      : options(options), compute(options.synchronousCompute) {}

  const char *name() const override { return "cuda (emulated)"; }
  bool hostAccessible() const override { return false; }

  void *allocate(size_t bytes, MemorySpace space) override {
    size_t size = ((std::max<size_t>(bytes, 1) + 63) / 64) * 64;
    void *p = std::aligned_alloc(64, size);
    if (!p)
      throw Error(std::string("cuda (emulated): cannot allocate ") +
                  std::to_string(bytes) + " bytes of " + toString(space) +
                  " memory");
    std::memset(p, 0, size);
    return p;
  }
  void deallocate(void *p, MemorySpace) override { std::free(p); }

  Stream &computeStream() override { return compute; }
  std::unique_ptr<Stream> createStream() override {
    return std::make_unique<EmuStream>(/*synchronous=*/false);
  }

  void copy(void *dst, const void *src, size_t bytes, Stream &stream) override {
    if (bytes)
      stream.enqueue([=] { std::memcpy(dst, src, bytes); });
  }

  void launch(const KernelLaunch &launch, Stream &stream) override {
    EmulatorOptions emu = options.emulator;
    stream.enqueue([launch, emu] {
      const KernelParams &p = launch.params;
      LaunchDims dims{launch.grid, launch.block, launch.sharedBytes};
      bool found = dispatchKernel(p, [&](auto tag, auto type) {
        using T = decltype(type);
        emulateLaunch(
            dims,
            [&](EmuContext &ctx) { runKernel<decltype(tag)::value, T>(ctx, p); },
            emu);
      });
      if (!found)
        throw Error("cuda (emulated): kernel " +
                    std::to_string(static_cast<int>(p.kernel)) +
                    " has no variant for element type " +
                    std::to_string(static_cast<int>(p.type)));
    });
  }

  void gemm(const GemmDesc &g, Stream &stream) override {
    stream.enqueue([g] {
      for (int64_t i = 0; i < g.batch; ++i) {
        if (g.type == ElemType::F32)
          cpu::gemm(KernelKind::Einsum, g.transA, g.transB, g.m, g.n, g.k,
                    float(g.alpha), static_cast<const float *>(g.a) + i * g.strideA,
                    g.lda, static_cast<const float *>(g.b) + i * g.strideB,
                    g.ldb, float(g.beta),
                    static_cast<float *>(g.c) + i * g.strideC, g.ldc);
        else if (g.type == ElemType::F64)
          cpu::gemm(KernelKind::Einsum, g.transA, g.transB, g.m, g.n, g.k,
                    g.alpha, static_cast<const double *>(g.a) + i * g.strideA,
                    g.lda, static_cast<const double *>(g.b) + i * g.strideB,
                    g.ldb, g.beta, static_cast<double *>(g.c) + i * g.strideC,
                    g.ldc);
        else
          throw Error("cuda (emulated): GEMM of a non-float element type");
      }
    });
  }

private:
  EmulatedApiOptions options;
  EmuStream compute;
};

} // namespace

std::unique_ptr<GpuApi> createEmulatedApi(const EmulatedApiOptions &options) {
  return std::make_unique<EmulatedApi>(options);
}

} // namespace partita::runtime::gpu
