//===- ThreadPool.cpp - intra-op threads for the cpu backend's kernels ----===//

#include "ThreadPool.h"
#include "CpuKernels.h"

#include <algorithm>
#include <chrono>

namespace partita::runtime::cpu {

namespace {
/// How long a thread spins for the next loop (a worker) or for the last
/// chunk (the caller) before it blocks: a step's kernels follow each other
/// within microseconds, and waking a blocked thread took tens of them on a
/// virtual machine, as long as a small kernel's whole loop.
constexpr auto kSpin = std::chrono::microseconds(100);

/// Spins until done() or kSpin passed; returns done().
template <typename Pred> bool spinFor(Pred done) {
  auto until = std::chrono::steady_clock::now() + kSpin;
  for (int i = 1;; ++i) {
    if (done())
      return true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (i % 64 == 0 && std::chrono::steady_clock::now() > until)
      return done();
  }
}
} // namespace

ThreadPool::ThreadPool(int threads) {
  for (int w = 1; w < std::max(threads, 1); ++w)
    workers.emplace_back([this, w] { workerLoop(w); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
  }
  wake.notify_all();
  for (std::thread &t : workers)
    t.join();
}

void ThreadPool::runChunk(int chunk) {
  int64_t begin = chunk * chunkSize, end = std::min(n, begin + chunkSize);
  try {
    KernelPartCountersScope timing(counters);
    if (begin < end)
      (*body)(begin, end);
  } catch (...) {
    errors[chunk] = std::current_exception();
  }
}

void ThreadPool::workerLoop(int index) {
  uint64_t seen = 0;
  while (true) {
    if (!spinFor([&] {
          return generation.load(std::memory_order_acquire) != seen;
        })) {
      std::unique_lock<std::mutex> lock(mutex);
      wake.wait(lock, [&] {
        return stopping || generation.load(std::memory_order_acquire) != seen;
      });
      if (stopping)
        return;
    }
    seen = generation.load(std::memory_order_acquire);
    if (index < chunks)
      runChunk(index);
    // Every worker acknowledges every loop, with a chunk or without, so
    // none can still be reading this loop's fields when the next is set.
    if (pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mutex);
      finished.notify_one();
    }
  }
}

void ThreadPool::parallelFor(int64_t count, int64_t minChunk,
                             const std::function<void(int64_t, int64_t)> &fn) {
  if (count <= 0)
    return;
  minChunk = std::max<int64_t>(minChunk, 1);
  int64_t wanted = std::min<int64_t>(size(), (count + minChunk - 1) / minChunk);
  if (wanted <= 1) {
    fn(0, count);
    return;
  }
  // Chunks may call GEMMs at once: OpenBLAS must run each on its calling
  // thread (the backend keeps it so; this holds it if the process changed
  // it since).
  SerialBlasScope serialBlas;
  // The loop's fields are written before the generation moves on (release)
  // and read by a worker after it saw the move (acquire); no worker reads
  // them between loops.
  body = &fn;
  counters = kernelPartCounters();
  n = count;
  chunks = int(wanted);
  chunkSize = (count + wanted - 1) / wanted;
  errors.assign(chunks, nullptr);
  pending.store(int(workers.size()), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mutex);
    generation.fetch_add(1, std::memory_order_release);
  }
  wake.notify_all();
  {
    // Chunk 0 runs here, where this pool is current: a kernel's loop nested
    // in the chunk (a GEMM inside attention's pairs) runs serially, as it
    // does on the workers, which have no pool.
    PoolScope serial(nullptr);
    runChunk(0);
  }
  auto done = [&] { return pending.load(std::memory_order_acquire) == 0; };
  if (!spinFor(done)) {
    std::unique_lock<std::mutex> lock(mutex);
    finished.wait(lock, done);
  }
  body = nullptr;
  for (std::exception_ptr &e : errors)
    if (e)
      std::rethrow_exception(e);
}

namespace {
thread_local ThreadPool *current = nullptr;
thread_local KernelPartCounters *currentCounters = nullptr;
} // namespace

KernelPartCounters *kernelPartCounters() { return currentCounters; }

KernelPartCountersScope::KernelPartCountersScope(KernelPartCounters *counters)
    : previous(currentCounters) {
  currentCounters = counters;
}
KernelPartCountersScope::~KernelPartCountersScope() {
  currentCounters = previous;
}

ThreadPool *currentPool() { return current; }

PoolScope::PoolScope(ThreadPool *pool) : previous(current) { current = pool; }
PoolScope::~PoolScope() { current = previous; }

void parallelFor(int64_t n, int64_t minChunk,
                 const std::function<void(int64_t, int64_t)> &body) {
  if (ThreadPool *pool = current)
    pool->parallelFor(n, minChunk, body);
  else if (n > 0)
    body(0, n);
}

} // namespace partita::runtime::cpu
