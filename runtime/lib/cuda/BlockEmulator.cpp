//===- BlockEmulator.cpp - simulated GPU threads as fibers ----------------===//
//
// A launch's simulated threads are fibers on the launching host thread
// (Fibers.h): a thread runs until it waits at a barrier or in a shuffle,
// then the next one runs. The state they share (barriers, warp exchange
// slots, the race checker's shadow of shared memory) is therefore touched
// by one host thread at a time, and needs no lock; concurrent launches (one
// per emulated stream) run on their own host threads with their own state.
// A barrier orders the kernel's shared- and global-memory accesses before
// it with those after it, as __syncthreads does: no thread passes it before
// every thread of the block has arrived.
//
// A barrier remembers what its first arrival came for (a barrier() call, a
// shuffle, or the end of the thread's block); a later arrival for anything
// else is a divergent barrier, which the launch reports and aborts.
//
// Bank counts: each thread numbers its shared accesses by source line
// since its last arrival at a barrier or warp exchange; the accesses of a
// warp's lanes with the same line and number are one request. When the
// last lane of a warp arrives at a barrier or exchange (before any lane
// goes on), the warp's requests are complete: they are counted and
// dropped.
//
//===----------------------------------------------------------------------===//

#include "runtime/lib/cuda/BlockEmulator.h"

#include "runtime/lib/cuda/Fibers.h"

#include "runtime/lib/core/HalfFloat.h"

#include "partita/runtime/Tensor.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <map>
#include <string>
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
    return "waits in a warp exchange (a shuffle or an mma)";
  case Arrival::BlockEnd:
    return "has returned";
  }
  return "?";
}

struct BarrierState {
  int expected = 0, arrived = 0;
  uint64_t generation = 0;
  Arrival kind = Arrival::Barrier;
  int firstThread = -1;
  int warp = -1; // a warp's exchange; -1: the block's barrier
};

/// A shared access's place among its thread's since the thread's last
/// arrival at a barrier or exchange: the source line, and how many accesses
/// from that line came before it.
struct SiteKey {
  const char *file;
  int line;
  uint32_t n;
  bool operator<(const SiteKey &o) const {
    if (line != o.line)
      return line < o.line;
    if (int c = std::strcmp(file, o.file))
      return c < 0;
    return n < o.n;
  }
};

/// One instruction's accesses by the lanes of a warp: each lane's byte
/// offset in shared memory (-1: the lane made none).
struct BankRequest {
  size_t bytes = 0;
  bool write = false;
  int64_t offset[kWarpSize];
  BankRequest() {
    for (int64_t &o : offset)
      o = -1;
  }
};

/// A request's wavefronts: its lanes in phases (all 32 for 4-byte
/// accesses, half warps for 8, quarter warps for 16), each phase taking as
/// many as the most distinct 4-byte words one of the 32 banks holds.
void countRequest(const BankRequest &r, SharedBankCounts &c) {
  int words = std::max<int>(1, int(r.bytes / 4));
  int perPhase = kWarpSize / std::min(words, 4);
  ++c.requests;
  for (int p0 = 0; p0 < kWarpSize; p0 += perPhase) {
    std::vector<int64_t> seen;
    for (int lane = p0; lane < p0 + perPhase; ++lane)
      if (r.offset[lane] >= 0)
        for (int64_t w = r.offset[lane] / 4;
             w <= (r.offset[lane] + int64_t(r.bytes) - 1) / 4; ++w)
          seen.push_back(w);
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    if (seen.empty())
      continue;
    int perBank[32] = {};
    int most = 0;
    for (int64_t w : seen)
      most = std::max(most, ++perBank[w % 32]);
    c.wavefronts += uint64_t(most);
    c.ideal += (seen.size() + 31) / 32;
  }
}

struct WarpState {
  BarrierState barrier;
  int atBlock = 0; // lanes waiting at the block barrier (or returned)
  uint64_t slots[kWarpSize] = {};
  // mmaTf32's operands: each lane's A and B fragments (up to 3 pairs; a
  // lane's C is its own D), and the matrices they make.
  uint32_t mmaA[kWarpSize][12] = {}, mmaB[kWarpSize][6] = {};
  double matA[3][16][8] = {}, matB[3][8][8] = {};
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
    for (size_t i = 0; i < warps.size(); ++i) {
      warps[i].barrier.expected = kWarpSize;
      warps[i].barrier.warp = int(i);
    }
    if (options.checkRaces)
      shadow.resize(dims.sharedBytes);
    if (options.bankStats) {
      threadSites.resize(dims.block);
      pending.resize(warps.size());
    }
    poisonShared();
  }

  /// Arrives at `b` for `why`; returns when every expected thread arrived
  /// (the last one runs `complete` first), throws Aborted when the launch
  /// fails meanwhile. Waiting lets the other simulated threads run.
  template <typename Complete>
  void arrive(BarrierState &b, Arrival why, int thread, const char *scope,
              Complete &&complete) {
    if (aborted)
      throw Aborted{};
    if (options.bankStats) // the thread's next accesses start anew
      threadSites[thread].clear();
    if (b.arrived == 0) {
      b.kind = why;
      b.firstThread = thread;
    } else if (b.kind != why) {
      fail("divergent " + std::string(scope) + " in block " +
           std::to_string(blockIdx) + ": thread " +
           std::to_string(b.firstThread) + " " + describe(b.kind) +
           " while thread " + std::to_string(thread) + " " + describe(why));
      throw Aborted{};
    }
    ++arrivals;
    if (++b.arrived == b.expected) {
      b.arrived = 0;
      ++b.generation;
      if (options.bankStats) // every lane of these warps has arrived
        for (size_t w = 0; w < warps.size(); ++w)
          if (b.warp < 0 || b.warp == int(w))
            countPending(w);
      complete();
      return;
    }
    uint64_t generation = b.generation;
    while (b.generation == generation && !aborted)
      yieldFiber();
    if (aborted && b.generation == generation)
      throw Aborted{};
  }

  void barrier(int thread) {
    arriveAtBlock(Arrival::Barrier, thread, [] {});
  }

  void shuffle(int thread, const void *in, void *out, size_t bytes,
               int source, bool xorMode) {
    if (bytes > sizeof(uint64_t) || source < 0 || source >= kWarpSize) {
      fail(std::string(xorMode ? "shuffleXor" : "shuffle") + " of " +
           std::to_string(bytes) + " bytes with lane " +
           (xorMode ? "mask " : "") + std::to_string(source) +
           " (at most 8 bytes, a lane below 32)");
      throw Aborted{};
    }
    WarpState &w = enterWarpExchange(thread);
    int lane = thread % kWarpSize;
    std::memcpy(&w.slots[lane], in, bytes);
    arrive(w.barrier, Arrival::Shuffle, thread, "warp shuffle", [] {});
    std::memcpy(out, &w.slots[xorMode ? lane ^ source : source], bytes);
    // Nobody writes a slot again before every lane has read.
    arrive(w.barrier, Arrival::Shuffle, thread, "warp shuffle", [] {});
  }

  /// d += A B for this lane's elements of D (MmaTf32Layout), for each of
  /// `count` (A, B) pairs: the TF32 operands (low 13 bits dropped, as the
  /// tensor cores read them) multiply exactly in double, the 8 products
  /// and C add in double, and each result rounds to f32 once a pair.
  void mmaTf32(int thread, float *d, const uint32_t *a, const uint32_t *b,
               int count) {
    WarpState &w = enterWarpExchange(thread);
    int lane = thread % kWarpSize;
    std::memcpy(w.mmaA[lane], a, sizeof(uint32_t) * 4 * count);
    std::memcpy(w.mmaB[lane], b, sizeof(uint32_t) * 2 * count);
    // The last lane in places every lane's fragments in the matrices.
    arrive(w.barrier, Arrival::Shuffle, thread, "warp shuffle", [&] {
      auto tf32 = [](uint32_t u) {
        return double(half::floatOf(u & 0xffffe000u));
      };
      for (int l = 0; l < kWarpSize; ++l)
        for (int i = 0; i < count; ++i) {
          for (int r = 0; r < 4; ++r)
            w.matA[i][MmaTf32Layout::aRow(l, r)][MmaTf32Layout::aCol(l, r)] =
                tf32(w.mmaA[l][4 * i + r]);
          for (int r = 0; r < 2; ++r)
            w.matB[i][MmaTf32Layout::bRow(l, r)][MmaTf32Layout::bCol(l, r)] =
                tf32(w.mmaB[l][2 * i + r]);
        }
    });
    for (int i = 0; i < count; ++i)
      for (int r = 0; r < 4; ++r) {
        int row = MmaTf32Layout::cRow(lane, r),
            col = MmaTf32Layout::cCol(lane, r);
        double sum = d[r];
        for (int k = 0; k < 8; ++k)
          sum += w.matA[i][row][k] * w.matB[i][k][col];
        d[r] = float(sum);
      }
    // Nobody writes the matrices again before every lane has read.
    arrive(w.barrier, Arrival::Shuffle, thread, "warp shuffle", [] {});
  }

  /// The warp of `thread`, which is entering a warp exchange: a lane of it
  /// at the block barrier (or returned) never comes to this exchange (on a
  /// GPU, undefined; here, reported).
  WarpState &enterWarpExchange(int thread) {
    WarpState &w = warps[thread / kWarpSize];
    if (w.atBlock > 0) {
      fail("divergent warp shuffle in block " + std::to_string(blockIdx) +
           ": thread " + std::to_string(thread) + " " +
           describe(Arrival::Shuffle) + " while a lane of its warp " +
           describe(block.kind));
      throw Aborted{};
    }
    return w;
  }

  void endBlock(int thread) {
    arriveAtBlock(Arrival::BlockEnd, thread, [&] {
      ++blockIdx;
      poisonShared();
    });
  }

  /// The block barrier, for barrier() or the end of the block; a lane whose
  /// warp is inside a shuffle is a divergence.
  template <typename Complete>
  void arriveAtBlock(Arrival why, int thread, Complete &&complete) {
    WarpState &w = warps[thread / kWarpSize];
    if (w.barrier.arrived > 0 && !aborted) {
      fail("divergent warp shuffle in block " + std::to_string(blockIdx) +
           ": thread " + std::to_string(w.barrier.firstThread) +
           " " + describe(Arrival::Shuffle) + " while thread " +
           std::to_string(thread) +
           " of its warp " + describe(why));
      throw Aborted{};
    }
    ++w.atBlock;
    arrive(block, why, thread, "barrier", [&] {
      for (WarpState &each : warps)
        each.atBlock = 0;
      complete();
    });
  }

  void sharedAccess(int thread, void *address, void *value, size_t bytes,
                    bool write, SourceSite site) {
    if (aborted)
      throw Aborted{};
    auto *base = reinterpret_cast<unsigned char *>(shared.data());
    auto *at = static_cast<unsigned char *>(address);
    if (at < base || at + bytes > base + dims.sharedBytes) {
      fail("block " + std::to_string(blockIdx) + ", thread " +
           std::to_string(thread) + ": shared-memory " +
           (write ? "write" : "read") + " of " + std::to_string(bytes) +
           " bytes at offset " + std::to_string(at - base) +
           " is outside the launch's " + std::to_string(dims.sharedBytes) +
           " bytes");
      throw Aborted{};
    }
    size_t offset = at - base;
    if (offset % bytes != 0) { // a GPU faults: misaligned address
      fail("block " + std::to_string(blockIdx) + ", thread " +
           std::to_string(thread) + ": shared-memory " +
           (write ? "write" : "read") + " of " + std::to_string(bytes) +
           " bytes at offset " + std::to_string(offset) +
           ", not a multiple of " + std::to_string(bytes));
      throw Aborted{};
    }
    if (options.bankStats) {
      uint32_t &n = threadSites[thread][{site.file, site.line, 0}];
      BankRequest &r = pending[thread / kWarpSize][{site.file, site.line, n++}];
      r.bytes = bytes;
      r.write = write;
      r.offset[thread % kWarpSize] = int64_t(offset);
    }
    if (options.checkRaces)
      checkRace(thread, offset, bytes, write);
    if (write)
      std::memcpy(address, value, bytes);
    else
      std::memcpy(value, address, bytes);
  }

  /// Records the access in the shadow; fails on a race.
  void checkRace(int thread, size_t offset, size_t bytes, bool write) {
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
        fail("shared-memory race in block " + std::to_string(blockIdx) +
             ": thread " + std::to_string(thread) +
             (write ? " writes" : " reads") + " bytes [" +
             std::to_string(offset) + ", " + std::to_string(offset + bytes) +
             ") that " +
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
  }

  /// Counts warp w's requests (all complete: its lanes have arrived at a
  /// barrier or exchange since making them).
  void countPending(size_t w) {
    for (const auto &[key, request] : pending[w])
      countRequest(request, request.write ? bankStats.stores : bankStats.loads);
    pending[w].clear();
  }

  /// The first failure wins; every waiting thread unwinds when it next
  /// runs.
  void fail(const std::string &message) {
    if (!aborted) {
      aborted = true;
      error = message;
    }
  }

  int currentBlock() const { return blockIdx; }

  /// Arrivals at barriers so far: the fibers' progress.
  uint64_t progress() const { return arrivals; }

  unsigned char *sharedBase() {
    return reinterpret_cast<unsigned char *>(shared.data());
  }

  const LaunchDims dims;
  const EmulatorOptions options;
  std::string error; // read after the threads joined
  SharedBankTraffic bankStats; // options.bankStats: this launch's counts

private:
  /// NaN in every double (and a NaN or huge value in narrower types), so a
  /// read of shared memory that no thread of this block wrote is visible.
  void poisonShared() {
    std::memset(shared.data(), 0xff, shared.size() * sizeof(double));
  }

  std::vector<double> shared;
  BarrierState block;
  std::vector<WarpState> warps;
  std::vector<Shadow> shadow;
  /// Bank counts: each thread's accesses per line since its last arrival
  /// (n = 0 in the keys), and each warp's requests not yet counted.
  std::vector<std::map<SiteKey, uint32_t>> threadSites;
  std::vector<std::map<SiteKey, BankRequest>> pending;
  int blockIdx = 0;
  uint64_t arrivals = 0;
  bool aborted = false;
};

void emuSharedAccess(EmuLaunch *launch, int thread, void *address, void *value,
                     size_t bytes, bool write, SourceSite site) {
  launch->sharedAccess(thread, address, value, bytes, write, site);
}
void emuBarrier(EmuLaunch *launch, int thread) { launch->barrier(thread); }
void emuShuffle(EmuLaunch *launch, int thread, const void *in, void *out,
                size_t bytes, int lane, bool xorMode) {
  launch->shuffle(thread, in, out, bytes, lane, xorMode);
}
void emuMmaTf32(EmuLaunch *launch, int thread, float *d, const uint32_t *a,
                const uint32_t *b, int count) {
  launch->mmaTf32(thread, d, a, b, count);
}
bool emuTracksShared(const EmuLaunch *launch) {
  return launch->options.checkRaces || launch->options.bankStats;
}
unsigned char *emuSharedBase(EmuLaunch *launch) { return launch->sharedBase(); }

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
                  std::to_string(thread) +
                  ": an exception that is not a "
                  "std::exception");
    }
  };
  runFibers(
      dims.block, run, [&] { return launch.progress(); },
      [&] {
        launch.fail("block " + std::to_string(launch.currentBlock()) +
                    ": its threads wait for each other at different "
                    "barriers");
      });
  if (!launch.error.empty())
    throw Error("block emulator: " + launch.error);
  if (options.bankStats)
    *options.bankStats += launch.bankStats;
}

} // namespace partita::runtime::gpu
