//===- ThreadPool.h - intra-op threads for the cpu backend's kernels -*- C++
//-*-===//
//
// The kernels of one rank (elementwise loops, norms, softmax rows,
// cross-entropy rows, AdamW, column sums, strided copies, the slices of a
// large GEMM, attention's and attention_grad's head pairs) split their loops
// over a small pool owned by the rank's CpuBackend: the backend's
// numThreads, or OpenBLAS's thread count when that is 0
// (OPENBLAS_NUM_THREADS). A loop of several chunks runs its GEMMs on one
// OpenBLAS thread each (SerialBlasScope in CpuKernels.h). A rank of N local
// ranks gets numThreads 1 from the training library, so N ranks never run
// more compute threads than N x that.
//
// Deterministic by construction: a loop of n items is cut into
// min(threads, ceil(n / minChunk)) contiguous chunks of equal size (the
// last one shorter), fixed by n and the pool size alone, and chunk c always
// runs on worker c (chunk 0 on the calling thread). Kernels only parallelize
// loops whose items are independent (elements, rows); any sum across items
// is taken after the loop, in item order, so results do not depend on the
// thread count either. Between loops a worker spins for about 100 us, then
// blocks on a condition variable.
// A loop nested in a chunk runs serially on that chunk's thread.
//
// The pool is the rank's only compute threads: the backend keeps OpenBLAS at
// one thread and splits large GEMMs over the pool itself (gemm in
// CpuKernels.h). OpenBLAS's own workers, once used, spin for about 2^28
// cycles after each GEMM before they sleep, so on a 2-core machine they held
// the second core while the pool's worker wanted it: the non-GEMM kernels
// ran no faster at 2 threads than at 1.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_LIB_CPU_THREADPOOL_H
#define PARTITA_RUNTIME_LIB_CPU_THREADPOOL_H

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace partita::runtime::cpu {

/// Where parts of a kernel that a profile times on their own
/// (Backend::setTimeKernelParts) add their nanoseconds.
struct KernelPartCounters {
  /// GEMMs inside a kernel of another kind (attention's), summed over the
  /// threads that run them.
  std::atomic<int64_t> innerGemmNanos{0};
  /// An einsum's copy of its addend into its output (wall time).
  std::atomic<int64_t> einsumAddendNanos{0};
};

/// Adds the nanoseconds since `start` to a KernelPartCounters counter.
inline void addNanosSince(std::atomic<int64_t> &counter,
                          std::chrono::steady_clock::time_point start) {
  counter.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count(),
                    std::memory_order_relaxed);
}

class ThreadPool {
public:
  /// `threads` >= 1 compute threads: the caller and threads - 1 workers.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  int size() const { return int(workers.size()) + 1; }

  /// Runs body(begin, end) over [0, n) in the fixed chunks described above
  /// and returns when all are done; rethrows the exception of the lowest
  /// chunk that threw.
  void parallelFor(int64_t n, int64_t minChunk,
                   const std::function<void(int64_t, int64_t)> &body);

private:
  void workerLoop(int index);
  void runChunk(int chunk);

  std::vector<std::thread> workers;
  std::mutex mutex;
  std::condition_variable wake, finished;
  // Moves on once per loop; workers spin on it, then block on `wake`.
  std::atomic<uint64_t> generation{0};
  bool stopping = false; // under `mutex`
  // The loop in flight, and its caller's kernelPartCounters().
  const std::function<void(int64_t, int64_t)> *body = nullptr;
  KernelPartCounters *counters = nullptr;
  int64_t n = 0, chunkSize = 0;
  int chunks = 0;
  std::atomic<int> pending{0}; // workers not yet done with the loop
  std::vector<std::exception_ptr> errors;
};

/// The pool of the backend whose kernel runs on this thread, or null
/// (kernels then run serially): set by CpuBackend::run for its call.
ThreadPool *currentPool();

/// Sets currentPool() for its lifetime.
class PoolScope {
public:
  explicit PoolScope(ThreadPool *pool);
  ~PoolScope();

private:
  ThreadPool *previous;
};

/// The counters of the current kernel call while a profile wants them, or
/// null: set by CpuBackend::run for its call, and by the pool on its
/// workers for the loop of a caller that had them.
KernelPartCounters *kernelPartCounters();

/// Sets kernelPartCounters() for its lifetime.
class KernelPartCountersScope {
public:
  explicit KernelPartCountersScope(KernelPartCounters *counters);
  ~KernelPartCountersScope();

private:
  KernelPartCounters *previous;
};

/// The minChunk for parallelFor over items of `perItem` units of work each
/// (elements, multiply-adds) so that a chunk holds about `work` units: at
/// least 1 item, and an item of no work counts as 1 unit (a zero-width row
/// must not divide by zero).
inline int64_t itemsForWork(int64_t perItem, int64_t work) {
  return std::max<int64_t>(1, work / std::max<int64_t>(perItem, 1));
}

/// currentPool()->parallelFor, or body(0, n) when there is no pool, or one
/// chunk would do.
void parallelFor(int64_t n, int64_t minChunk,
                 const std::function<void(int64_t, int64_t)> &body);

} // namespace partita::runtime::cpu

#endif // PARTITA_RUNTIME_LIB_CPU_THREADPOOL_H
