//===- BlockEmulator.cpp - one host thread per simulated GPU thread -------===//
//
// Every piece of state the simulated threads share (barriers, warp
// exchange slots, the race checker's shadow of shared memory) sits under
// one mutex, so the emulator's own synchronization is plain and
// ThreadSanitizer can follow it: a barrier is a mutex-protected count and a
// generation number, which orders the kernel's shared- and global-memory
// accesses before a barrier with those after it, as __syncthreads does.
//
// A barrier remembers what its first arrival came for (a barrier() call, a
// shuffle, or the end of the thread's block); a later arrival for anything
// else is a divergent barrier, which the launch reports and aborts.
//
//===----------------------------------------------------------------------===//

#include "runtime/lib/cuda/BlockEmulator.h"

#include "partita/runtime/Tensor.h"

#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace partita::runtime::gpu {

namespace {

/// Thrown in a simulated thread when the launch has failed elsewhere.
struct Aborted {};

enum class Arrival { Barrier, Shuffle, BlockEnd };

const char *describe(Arrival a) {
  switch (a) {
  case Arrival::Barrier:
    return "waits at barrier()";
  case Arrival::Shuffle:
    return "waits in shuffleXor()";
  case Arrival::BlockEnd:
    return "has returned";
  }
  return "?";
}

struct BarrierState {
  std::condition_variable changed;
  int expected = 0, arrived = 0;
  uint64_t generation = 0;
  Arrival kind = Arrival::Barrier;
  int firstThread = -1;
};

struct WarpState {
  BarrierState barrier;
  int atBlock = 0; // lanes waiting at the block barrier (or returned)
  uint64_t slots[kWarpSize] = {};
};

/// Per byte of shared memory: the last writer and the readers since the
/// last barrier (epoch = the block barrier's generation + 1; 0: never).
struct Shadow {
  uint64_t writeEpoch = 0, readEpoch = 0;
  int writer = -1, reader = -1; // reader -2: several threads
};

} // namespace

class EmuLaunch {
public:
  EmuLaunch(const LaunchDims &dims, const EmulatorOptions &options)
      : dims(dims), options(options),
        shared((dims.sharedBytes + sizeof(double) - 1) / sizeof(double) + 1),
        warps(dims.block / kWarpSize) {
    block.expected = dims.block;
    for (WarpState &w : warps)
      w.barrier.expected = kWarpSize;
    if (options.checkRaces)
      shadow.resize(dims.sharedBytes);
    poisonShared();
  }

  /// Arrives at `b` for `why`; returns when every expected thread arrived
  /// (running `complete` under the lock first), throws Aborted when the
  /// launch fails meanwhile.
  template <typename Complete>
  void arrive(std::unique_lock<std::mutex> &lock, BarrierState &b, Arrival why,
              int thread, const char *scope, Complete &&complete) {
    if (aborted)
      throw Aborted{};
    if (b.arrived == 0) {
      b.kind = why;
      b.firstThread = thread;
    } else if (b.kind != why) {
      failLocked("divergent " + std::string(scope) + " in block " +
                 std::to_string(blockIdx) + ": thread " +
                 std::to_string(b.firstThread) + " " + describe(b.kind) +
                 " while thread " + std::to_string(thread) + " " +
                 describe(why));
      throw Aborted{};
    }
    if (++b.arrived == b.expected) {
      b.arrived = 0;
      ++b.generation;
      complete();
      b.changed.notify_all();
      return;
    }
    uint64_t generation = b.generation;
    b.changed.wait(lock, [&] { return b.generation != generation || aborted; });
    if (aborted && b.generation == generation)
      throw Aborted{};
  }

  void barrier(int thread) {
    std::unique_lock<std::mutex> lock(mutex);
    arriveAtBlock(lock, Arrival::Barrier, thread, [] {});
  }

  void shuffle(int thread, const void *in, void *out, size_t bytes,
               int laneMask) {
    if (bytes > sizeof(uint64_t) || laneMask < 0 || laneMask >= kWarpSize) {
      fail("shuffleXor of " + std::to_string(bytes) + " bytes with lane mask " +
           std::to_string(laneMask) + " (at most 8 bytes, mask below 32)");
      throw Aborted{};
    }
    WarpState &w = warps[thread / kWarpSize];
    int lane = thread % kWarpSize;
    std::unique_lock<std::mutex> lock(mutex);
    if (w.atBlock > 0) {
      // A lane at the block barrier (or returned) never comes to this
      // shuffle: on a GPU, undefined; here, reported.
      failLocked("divergent warp shuffle in block " + std::to_string(blockIdx) +
                 ": thread " + std::to_string(thread) +
                 " waits in shuffleXor() while a lane of its warp " +
                 describe(block.kind));
      throw Aborted{};
    }
    std::memcpy(&w.slots[lane], in, bytes);
    arrive(lock, w.barrier, Arrival::Shuffle, thread, "warp shuffle", [] {});
    std::memcpy(out, &w.slots[lane ^ laneMask], bytes);
    // Nobody writes a slot again before every lane has read.
    arrive(lock, w.barrier, Arrival::Shuffle, thread, "warp shuffle", [] {});
  }

  void endBlock(int thread) {
    std::unique_lock<std::mutex> lock(mutex);
    arriveAtBlock(lock, Arrival::BlockEnd, thread, [&] {
      ++blockIdx;
      poisonShared();
    });
  }

  /// The block barrier, for barrier() or the end of the block; a lane whose
  /// warp is inside a shuffle is a divergence.
  template <typename Complete>
  void arriveAtBlock(std::unique_lock<std::mutex> &lock, Arrival why,
                     int thread, Complete &&complete) {
    WarpState &w = warps[thread / kWarpSize];
    if (w.barrier.arrived > 0 && !aborted) {
      failLocked("divergent warp shuffle in block " + std::to_string(blockIdx) +
                 ": thread " + std::to_string(w.barrier.firstThread) +
                 " waits in shuffleXor() while thread " +
                 std::to_string(thread) + " of its warp " + describe(why));
      throw Aborted{};
    }
    ++w.atBlock;
    arrive(lock, block, why, thread, "barrier", [&] {
      for (WarpState &each : warps)
        each.atBlock = 0;
      complete();
    });
  }

  void sharedAccess(int thread, void *address, void *value, size_t bytes,
                    bool write) {
    std::unique_lock<std::mutex> lock(mutex);
    if (aborted)
      throw Aborted{};
    auto *base = reinterpret_cast<unsigned char *>(shared.data());
    auto *at = static_cast<unsigned char *>(address);
    if (at < base || at + bytes > base + dims.sharedBytes) {
      failLocked("block " + std::to_string(blockIdx) + ", thread " +
                 std::to_string(thread) + ": shared-memory " +
                 (write ? "write" : "read") + " of " + std::to_string(bytes) +
                 " bytes at offset " + std::to_string(at - base) +
                 " is outside the launch's " +
                 std::to_string(dims.sharedBytes) + " bytes");
      throw Aborted{};
    }
    size_t offset = at - base;
    uint64_t epoch = block.generation + 1;
    for (size_t k = offset; k < offset + bytes; ++k) {
      Shadow &s = shadow[k];
      int other = -1;
      const char *what = nullptr;
      if (s.writeEpoch == epoch && s.writer != thread) {
        other = s.writer;
        what = "wrote";
      } else if (write && s.readEpoch == epoch && s.reader != thread) {
        other = s.reader;
        what = "read";
      }
      if (what) {
        failLocked("shared-memory race in block " + std::to_string(blockIdx) +
                   ": thread " + std::to_string(thread) +
                   (write ? " writes" : " reads") + " bytes [" +
                   std::to_string(offset) + ", " +
                   std::to_string(offset + bytes) + ") that " +
                   (other == -2 ? std::string("other threads")
                                : "thread " + std::to_string(other)) +
                   " " + what + " since the last barrier");
        throw Aborted{};
      }
      if (write) {
        s.writeEpoch = epoch;
        s.writer = thread;
      } else if (s.readEpoch != epoch) {
        s.readEpoch = epoch;
        s.reader = thread;
      } else if (s.reader != thread) {
        s.reader = -2;
      }
    }
    if (write)
      std::memcpy(address, value, bytes);
    else
      std::memcpy(value, address, bytes);
  }

  void fail(const std::string &message) {
    std::lock_guard<std::mutex> lock(mutex);
    failLocked(message);
  }

  /// The first failure wins; every waiting thread wakes and unwinds.
  void failLocked(const std::string &message) {
    if (!aborted) {
      aborted = true;
      error = message;
    }
    block.changed.notify_all();
    for (WarpState &w : warps)
      w.barrier.changed.notify_all();
  }

  unsigned char *sharedBase() {
    return reinterpret_cast<unsigned char *>(shared.data());
  }

  const LaunchDims dims;
  const EmulatorOptions options;
  std::string error; // read after the threads joined

private:
  /// NaN in every double (and a NaN or huge value in narrower types), so a
  /// read of shared memory that no thread of this block wrote is visible.
  void poisonShared() {
    std::memset(shared.data(), 0xff, shared.size() * sizeof(double));
  }

  std::mutex mutex;
  std::vector<double> shared;
  BarrierState block;
  std::vector<WarpState> warps;
  std::vector<Shadow> shadow;
  int blockIdx = 0;
  bool aborted = false;
};

void emuSharedAccess(EmuLaunch *launch, int thread, void *address, void *value,
                     size_t bytes, bool write) {
  launch->sharedAccess(thread, address, value, bytes, write);
}
void emuBarrier(EmuLaunch *launch, int thread) { launch->barrier(thread); }
void emuShuffle(EmuLaunch *launch, int thread, const void *in, void *out,
                size_t bytes, int laneMask) {
  launch->shuffle(thread, in, out, bytes, laneMask);
}
bool emuChecksRaces(const EmuLaunch *launch) {
  return launch->options.checkRaces;
}
unsigned char *emuSharedBase(EmuLaunch *launch) {
  return launch->sharedBase();
}

namespace {

/// Threads kept between launches, so a launch of B threads usually starts
/// none: a launch takes B idle workers (starting more when there are fewer;
/// concurrent launches, one per emulated stream, take disjoint ones), gives
/// each one simulated thread, and returns them when all are done. Every
/// simulated thread of a launch needs its own worker, since they meet at
/// barriers.
class WorkerPool {
  struct Worker {
    std::mutex mutex;
    std::condition_variable changed;
    std::function<void()> job;
    bool stopping = false;
    std::thread thread;
    void loop() {
      std::unique_lock<std::mutex> lock(mutex);
      while (true) {
        changed.wait(lock, [&] { return stopping || job; });
        if (!job)
          return;
        std::function<void()> work = std::move(job);
        // Cleared now: once `work` returns this worker may be handed the
        // next launch's job, which must not be overwritten.
        job = nullptr;
        lock.unlock();
        work();
        lock.lock();
      }
    }
  };

public:
  ~WorkerPool() {
    for (auto &w : idle) {
      {
        std::lock_guard<std::mutex> lock(w->mutex);
        w->stopping = true;
      }
      w->changed.notify_all();
      w->thread.join();
    }
  }

  void run(int n, const std::function<void(int)> &fn,
           const std::function<void(const std::string &)> &onStartFailure) {
    std::vector<std::unique_ptr<Worker>> mine;
    {
      std::lock_guard<std::mutex> lock(mutex);
      while (int(mine.size()) < n && !idle.empty()) {
        mine.push_back(std::move(idle.back()));
        idle.pop_back();
      }
    }
    std::exception_ptr startFailure;
    try {
      while (int(mine.size()) < n) {
        auto w = std::make_unique<Worker>();
        Worker *raw = w.get();
        w->thread = std::thread([raw] { raw->loop(); });
        mine.push_back(std::move(w));
      }
    } catch (...) {
      startFailure = std::current_exception();
    }
    std::mutex doneMutex;
    std::condition_variable doneChanged;
    int remaining = int(mine.size());
    for (int i = 0; i < int(mine.size()); ++i) {
      Worker &w = *mine[i];
      {
        std::lock_guard<std::mutex> lock(w.mutex);
        w.job = [&, i] {
          fn(i);
          std::lock_guard<std::mutex> done(doneMutex);
          if (--remaining == 0)
            doneChanged.notify_all();
        };
      }
      w.changed.notify_all();
    }
    if (startFailure) {
      // The started ones wait for the missing ones at their first barrier:
      // release them.
      try {
        std::rethrow_exception(startFailure);
      } catch (const std::exception &e) {
        onStartFailure(e.what());
      } catch (...) {
        onStartFailure("unknown error");
      }
    }
    {
      std::unique_lock<std::mutex> lock(doneMutex);
      doneChanged.wait(lock, [&] { return remaining == 0; });
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (auto &w : mine)
        idle.push_back(std::move(w));
    }
  }

private:
  std::mutex mutex;
  std::vector<std::unique_ptr<Worker>> idle;
};

WorkerPool &workerPool() {
  static WorkerPool pool;
  return pool;
}

/// Runs fn(0..n-1) concurrently, each on its own thread. When not every
/// thread can start, `onStartFailure` gets the reason while the started
/// ones run (it must make them return).
void runConcurrently(
    int n, const std::function<void(int)> &fn,
    const std::function<void(const std::string &)> &onStartFailure) {
  workerPool().run(n, fn, onStartFailure);
}

} // namespace

void emulateLaunch(const LaunchDims &dims,
                   const std::function<void(EmuContext &)> &body,
                   const EmulatorOptions &options) {
  if (dims.grid < 0 || dims.block <= 0 || dims.block % kWarpSize != 0 ||
      dims.block > 1024)
    throw Error("block emulator: a launch of " + std::to_string(dims.grid) +
                " blocks of " + std::to_string(dims.block) +
                " threads (blocks are whole warps of 32, at most 1024 "
                "threads)");
  if (dims.grid == 0)
    return;
  EmuLaunch launch(dims, options);
  auto run = [&](int thread) {
    EmuContext ctx(&launch, thread, dims.block, dims.grid);
    try {
      for (int b = 0; b < dims.grid; ++b) {
        ctx.blockIdx = b;
        body(ctx);
        launch.endBlock(thread);
      }
    } catch (const Aborted &) {
    } catch (const std::exception &e) {
      launch.fail("block " + std::to_string(ctx.blockIdx) + ", thread " +
                  std::to_string(thread) + ": " + e.what());
    } catch (...) {
      launch.fail("block " + std::to_string(ctx.blockIdx) + ", thread " +
                  std::to_string(thread) + ": an exception that is not a "
                  "std::exception");
    }
  };
  runConcurrently(dims.block, run, [&](const std::string &why) {
    launch.fail("cannot start a simulated thread: " + why);
  });
  if (!launch.error.empty())
    throw Error("block emulator: " + launch.error);
}

} // namespace partita::runtime::gpu
