//===- ThreadPool.cpp - intra-op threads for the cpu backend's kernels ----===//

#include "ThreadPool.h"

#include <algorithm>

namespace partita::runtime::cpu {

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
    if (begin < end)
      (*body)(begin, end);
  } catch (...) {
    errors[chunk] = std::current_exception();
  }
}

void ThreadPool::workerLoop(int index) {
  uint64_t seen = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex);
      wake.wait(lock, [&] { return stopping || generation != seen; });
      if (stopping)
        return;
      seen = generation;
      if (index >= chunks)
        continue;
    }
    runChunk(index);
    std::lock_guard<std::mutex> lock(mutex);
    if (--pending == 0)
      finished.notify_one();
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
  {
    std::lock_guard<std::mutex> lock(mutex);
    body = &fn;
    n = count;
    chunks = int(wanted);
    chunkSize = (count + wanted - 1) / wanted;
    pending = chunks - 1;
    errors.assign(chunks, nullptr);
    ++generation;
  }
  wake.notify_all();
  runChunk(0);
  std::unique_lock<std::mutex> lock(mutex);
  finished.wait(lock, [&] { return pending == 0; });
  body = nullptr;
  for (std::exception_ptr &e : errors)
    if (e)
      std::rethrow_exception(e);
}

namespace {
thread_local ThreadPool *current = nullptr;
} // namespace

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
