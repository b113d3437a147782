//===- BlockEmulator.h - runs context kernels as fibers ---------*- C++ -*-===//
//
// The CPU block emulator: a launch of `grid` blocks of `block` threads runs
// each simulated thread of a block as a fiber on the launching host thread
// (Fibers.h); the blocks run one after another (the same fibers, shared
// memory refilled with NaN bytes between blocks, so a read of shared memory
// no thread wrote shows up in the results). barrier() is a real barrier of
// the block's threads (none passes it before all have arrived) and
// shuffleXor() a real exchange among the 32 lanes of a warp. Between
// barriers the threads run one at a time (the one that completed the
// barrier first, then the others in index order), so a kernel that forgets
// a barrier reads what threads yet to run have not written; the race check
// also catches reads of what threads that ran before wrote.
//
// Checks the GPU would leave undefined:
//   - a barrier or shuffle that some threads reach while others of the
//     block (or warp) have returned (divergent __syncthreads);
//   - with EmulatorOptions::checkRaces, shared-memory races: two threads
//     touching the same bytes between two barriers, one of them writing
//     (what compute-sanitizer's racecheck reports). A launch's fibers share
//     one host thread, so even a racy kernel is free of data races in the
//     C++ sense and ThreadSanitizer stays quiet about the emulator itself;
//   - threads that wait for each other at different barriers (a stall);
//   - a 16-byte shared access at an address that is not a multiple of 16
//     (with either option below).
// A failed check, or an exception in a simulated thread, stops the launch
// and emulateLaunch throws Error naming the block and thread.
//
// With EmulatorOptions::bankStats the launch also counts what its shared
// memory accesses cost in bank wavefronts (ncu's "shared wavefronts"): the
// accesses of a warp's lanes that one instruction makes are one request,
// found as the n-th access from the same place in the kernel's source (its
// file and line) by each lane since the warp's last barrier, shuffle or
// mma. Banks are 32, 4 bytes wide; a request of 4-byte accesses takes as
// many wavefronts as the most distinct words any bank holds (lanes reading
// one word share it), 8- and 16-byte ones the same for each half or
// quarter warp in turn; the ideal is the distinct words over 32 (each
// phase's). So a kernel's layouts of shared memory can be measured, and
// kept free of conflicts, without a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_LIB_CUDA_BLOCKEMULATOR_H
#define PARTITA_RUNTIME_LIB_CUDA_BLOCKEMULATOR_H

#include "partita/runtime/CudaBackend.h"
#include "runtime/lib/cuda/KernelContext.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

namespace partita::runtime::gpu {

struct EmulatorOptions {
  /// Track every shared-memory access and fail on a race between barriers.
  bool checkRaces = false;
  /// Add the launch's shared-memory requests and their wavefronts here
  /// (see the file comment); null: not counted.
  SharedBankTraffic *bankStats = nullptr;
};

struct LaunchDims {
  int grid = 1;            // blocks
  int block = kWarpSize;   // threads per block, a multiple of 32, <= 1024
  size_t sharedBytes = 0;  // dynamic shared memory per block
};

class EmuLaunch; // the state threads of one launch share (BlockEmulator.cpp)

/// Where in a kernel's source a shared access is made (its request's
/// identity in the bank counts).
struct SourceSite {
  const char *file;
  int line;
};

/// A checked shared-memory access: copies `bytes` between `address` and
/// `value` (to `address` when `write`), after recording it; throws
/// (unwinding the simulated thread) when it races or is misaligned.
void emuSharedAccess(EmuLaunch *launch, int thread, void *address,
                     void *value, size_t bytes, bool write, SourceSite site);
/// The block barrier and the warp exchange of an emulated thread.
void emuBarrier(EmuLaunch *launch, int thread);
/// `lane` is a lane mask (xorMode) or the lane to read.
void emuShuffle(EmuLaunch *launch, int thread, const void *in, void *out,
                size_t bytes, int lane, bool xorMode);
/// d += A B for each of `count` (A, B) pairs in turn (a[4 i], b[2 i]),
/// rounding to f32 after each, as that many mma.sync instructions do.
void emuMmaTf32(EmuLaunch *launch, int thread, float *d, const uint32_t *a,
                const uint32_t *b, int count);
/// Whether the launch records shared accesses (races or bank counts).
bool emuTracksShared(const EmuLaunch *launch);
unsigned char *emuSharedBase(EmuLaunch *launch);

/// Shared memory in the emulator: each load and store is recorded when the
/// launch checks races or counts banks. The default arguments name the
/// caller's line (GCC's and Clang's builtins, evaluated where called).
template <typename T> struct EmuShared {
  T *base;
  EmuLaunch *launch;
  int thread;
  bool checked;
  T load(int64_t i, const char *file = __builtin_FILE(),
         int line = __builtin_LINE()) const {
    T v;
    access(i, &v, sizeof(T), false, file, line);
    return v;
  }
  void store(int64_t i, T v, const char *file = __builtin_FILE(),
             int line = __builtin_LINE()) const {
    access(i, &v, sizeof(T), true, file, line);
  }
  void load16(int64_t i, T (&out)[16 / sizeof(T)],
              const char *file = __builtin_FILE(),
              int line = __builtin_LINE()) const {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
    access(i, out, 16, false, file, line);
  }
  void store16(int64_t i, const T (&v)[16 / sizeof(T)],
               const char *file = __builtin_FILE(),
               int line = __builtin_LINE()) const {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
    T copy[16 / sizeof(T)];
    std::memcpy(copy, v, 16);
    access(i, copy, 16, true, file, line);
  }

private:
  void access(int64_t i, void *value, size_t bytes, bool write,
              const char *file, int line) const {
    if (checked) {
      emuSharedAccess(launch, thread, base + i, value, bytes, write,
                      SourceSite{file, line});
      return;
    }
    if (write)
      std::memcpy(base + i, value, bytes);
    else
      std::memcpy(value, base + i, bytes);
  }
};

/// The context of one simulated thread.
class EmuContext {
public:
  template <typename T> using Shared = EmuShared<T>;
  EmuContext(EmuLaunch *launch, int thread, int block, int gridSize)
      : launch(launch), thread(thread), blockDim(block), grid(gridSize) {}

  int threadIndex() const { return thread; }
  int blockIndex() const { return blockIdx; }
  int blockSize() const { return blockDim; }
  int gridSize() const { return grid; }
  template <typename T> EmuShared<T> shared() const {
    return EmuShared<T>{reinterpret_cast<T *>(emuSharedBase(launch)), launch,
                        thread, emuTracksShared(launch)};
  }
  void barrier() const { emuBarrier(launch, thread); }
  template <typename T> T shuffleXor(T v, int laneMask) const {
    T out;
    emuShuffle(launch, thread, &v, &out, sizeof(T), laneMask, true);
    return out;
  }
  template <typename T> T shuffle(T v, int lane) const {
    T out;
    emuShuffle(launch, thread, &v, &out, sizeof(T), lane, false);
    return out;
  }
  void mmaTf32(float (&d)[4], const uint32_t (&a)[4],
               const uint32_t (&b)[2]) const {
    emuMmaTf32(launch, thread, d, a, b, 1);
  }
  void mmaTf32x3(float (&d)[4], const uint32_t (&aBig)[4],
                 const uint32_t (&aSmall)[4], const uint32_t (&bBig)[2],
                 const uint32_t (&bSmall)[2]) const {
    const uint32_t a[12] = {aSmall[0], aSmall[1], aSmall[2], aSmall[3],
                            aBig[0],   aBig[1],   aBig[2],   aBig[3],
                            aBig[0],   aBig[1],   aBig[2],   aBig[3]};
    const uint32_t b[6] = {bBig[0], bBig[1], bSmall[0], bSmall[1],
                           bBig[0], bBig[1]};
    emuMmaTf32(launch, thread, d, a, b, 3);
  }

  int blockIdx = 0; // set by the emulator per block

private:
  EmuLaunch *launch;
  int thread, blockDim, grid;
};

/// Runs `body` for every thread of every block; throws Error on a failed
/// check or when `body` throws in any simulated thread.
void emulateLaunch(const LaunchDims &dims,
                   const std::function<void(EmuContext &)> &body,
                   const EmulatorOptions &options = {});

} // namespace partita::runtime::gpu

#endif // PARTITA_RUNTIME_LIB_CUDA_BLOCKEMULATOR_H
