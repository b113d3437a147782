//===- CommBench.cpp - local communicator bandwidth against memcpy --------===//
//
// For all_reduce and all_gather of f32 over every rank of the local
// communicator (ranks as threads), at message sizes from 4 KiB to 256 MiB
// (powers of 4), prints the time per call, the algorithm bandwidth
// (size / time), the bus bandwidth (NCCL's definitions: all_reduce
// 2(n-1)/n * algbw, all_gather (n-1)/n * algbw, with `size` the all_gather's
// whole output, as nccl-tests count it), the memcpy bandwidth of one thread
// copying `size` bytes measured in the same run, and busbw / memcpy.
//
//   partita-bench-comm [--ranks N] [--min-bytes B] [--max-bytes B]
//                      [--bytes-per-size B]
//
// Each size runs max(3, min(2000, bytes-per-size / size)) calls (1 GiB by
// default) after 2 warm-up calls; every rank makes the same calls, and rank
// 0 times them between two barriers. Results are checked once per size.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

using namespace partita::runtime;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  int ranks = 4;
  size_t minBytes = size_t(4) << 10;
  size_t maxBytes = size_t(256) << 20;
  size_t bytesPerSize = size_t(1) << 30;
};

std::string formatSize(size_t bytes) {
  if (bytes >= (size_t(1) << 20))
    return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (size_t(1) << 10))
    return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

int iterationsFor(const Options &o, size_t bytes) {
  return static_cast<int>(
      std::max<size_t>(3, std::min<size_t>(2000, o.bytesPerSize / bytes)));
}

/// Seconds per copy of `bytes` by one thread (best of three timed batches).
double memcpySeconds(size_t bytes, int iterations) {
  std::vector<char> from(bytes, 1), to(bytes, 0);
  std::memcpy(to.data(), from.data(), bytes); // fault the pages in
  double best = 1e30;
  for (int batch = 0; batch < 3; ++batch) {
    Clock::time_point start = Clock::now();
    for (int i = 0; i < iterations; ++i) {
      std::memcpy(to.data(), from.data(), bytes);
      // Keep the copies from being merged or dropped.
      asm volatile("" : : "r"(to.data()) : "memory");
    }
    best = std::min(
        best, std::chrono::duration<double>(Clock::now() - start).count() /
                  iterations);
  }
  return best;
}

struct Row {
  const char *collective;
  size_t bytes;
  int iterations;
  double seconds; // per call
  bool correct;
};

/// Runs one collective at one size on every rank; returns rank 0's timing.
Row measure(const Options &o, const char *collective, size_t bytes) {
  Row row{collective, bytes, iterationsFor(o, bytes), 0, true};
  int n = o.ranks;
  bool isAllReduce = std::strcmp(collective, "all_reduce") == 0;
  // collective_permute: a ring shift, each rank sends `bytes` to the next.
  bool isPermute = std::strcmp(collective, "collective_permute") == 0;
  // all_gather: `bytes` is the gathered output; each rank sends bytes / n.
  size_t count = isAllReduce || isPermute
                     ? bytes / sizeof(float)
                     : bytes / sizeof(float) / static_cast<size_t>(n);
  std::vector<std::pair<int, int>> ring;
  for (int p = 0; p < n; ++p)
    ring.emplace_back(p, (p + 1) % n);
  std::vector<int> world(n);
  std::iota(world.begin(), world.end(), 0);
  std::vector<char> ok(n, 1);
  runLocalRanks(n, [&](Communicator &c) {
    int r = c.rank();
    std::vector<float> send(count, static_cast<float>(r + 1));
    std::vector<float> recv(isAllReduce ? 0 : isPermute ? count : count * n,
                            0.0f);
    auto call = [&] {
      if (isAllReduce)
        c.allReduce(send.data(), count, DType::F32, ReduceOp::Sum, world);
      else if (isPermute)
        c.collectivePermute(send.data(), recv.data(), count, DType::F32, ring,
                            world);
      else
        c.allGather(send.data(), recv.data(), count, DType::F32, world);
    };
    call();
    // Check: the sum of 1..n everywhere, block q holding q + 1, or the
    // previous rank's r + 1.
    float sum = static_cast<float>(n * (n + 1) / 2);
    float previous = static_cast<float>((r + n - 1) % n + 1);
    for (size_t i = 0; i < count; ++i) {
      bool good = isAllReduce ? send[i] == sum
                  : isPermute ? recv[i] == previous
                              : recv[i] == 1.0f && recv[(n - 1) * count + i] == n;
      if (!good) {
        ok[r] = 0;
        break;
      }
    }
    if (isAllReduce) // zeros stay zeros however often they are summed
      std::fill(send.begin(), send.end(), 0.0f);
    call();
    c.barrier(world);
    Clock::time_point start = Clock::now();
    for (int i = 0; i < row.iterations; ++i)
      call();
    c.barrier(world);
    if (r == 0)
      row.seconds =
          std::chrono::duration<double>(Clock::now() - start).count() /
          row.iterations;
  });
  row.correct = std::all_of(ok.begin(), ok.end(), [](char b) { return b; });
  return row;
}

bool parseSize(const char *text, size_t &out) {
  char *end = nullptr;
  unsigned long long v = std::strtoull(text, &end, 10);
  if (end == text)
    return false;
  std::string unit = end;
  if (unit == "K" || unit == "KiB")
    v <<= 10;
  else if (unit == "M" || unit == "MiB")
    v <<= 20;
  else if (unit == "G" || unit == "GiB")
    v <<= 30;
  else if (!unit.empty())
    return false;
  out = static_cast<size_t>(v);
  return true;
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    bool ok = i + 1 < argc;
    if (ok && arg == "--ranks")
      o.ranks = std::atoi(argv[++i]);
    else if (ok && arg == "--min-bytes")
      ok = parseSize(argv[++i], o.minBytes);
    else if (ok && arg == "--max-bytes")
      ok = parseSize(argv[++i], o.maxBytes);
    else if (ok && arg == "--bytes-per-size")
      ok = parseSize(argv[++i], o.bytesPerSize);
    else
      ok = false;
    if (!ok) {
      std::fprintf(stderr,
                   "usage: partita-bench-comm [--ranks N] [--min-bytes B] "
                   "[--max-bytes B] [--bytes-per-size B] (B: 4096, 4K, 256M, "
                   "1G)\n");
      return 2;
    }
  }
  if (o.ranks < 2 || o.minBytes < 4 * sizeof(float) * o.ranks ||
      o.minBytes > o.maxBytes) {
    std::fprintf(stderr, "partita-bench-comm: needs --ranks >= 2 and "
                         "min-bytes <= max-bytes, min-bytes >= 16 * ranks\n");
    return 2;
  }

  std::printf("# local communicator: %d ranks (threads) on %u hardware "
              "threads; f32; time = mean per call\n",
              o.ranks, std::thread::hardware_concurrency());
  std::printf("# busbw: all_reduce 2(n-1)/n, all_gather (n-1)/n, "
              "collective_permute (ring shift, size per rank) 1 x algbw; "
              "memcpy: one thread copying size bytes, this run\n");
  std::printf("%-18s %8s %6s %11s %12s %12s %13s %8s\n", "collective", "size",
              "calls", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "memcpy(GB/s)",
              "bus/mem");
  double n = o.ranks;
  bool allCorrect = true;
  for (const char *collective :
       {"all_reduce", "all_gather", "collective_permute"})
    for (size_t bytes = o.minBytes; bytes <= o.maxBytes; bytes *= 4) {
      Row row = measure(o, collective, bytes);
      double copy = memcpySeconds(bytes, row.iterations);
      double algbw = bytes / row.seconds / 1e9;
      double factor = std::strcmp(collective, "all_reduce") == 0 ? 2 * (n - 1) / n
                      : std::strcmp(collective, "all_gather") == 0 ? (n - 1) / n
                                                                   : 1.0;
      double busbw = algbw * factor, membw = bytes / copy / 1e9;
      std::printf("%-18s %8s %6d %11.1f %12.2f %12.2f %13.2f %8.2f%s\n",
                  collective, formatSize(bytes).c_str(), row.iterations,
                  row.seconds * 1e6, algbw, busbw, membw, busbw / membw,
                  row.correct ? "" : "  WRONG RESULT");
      std::fflush(stdout);
      allCorrect &= row.correct;
    }
  return allCorrect ? 0 : 1;
}
