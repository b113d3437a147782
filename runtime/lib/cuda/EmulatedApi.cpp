//===- EmulatedApi.cpp - the device layer on the host, for CI -------------===//
//
// Host memory for both spaces; each stream is a thread that runs its items
// in order; an event is a ticket on its stream, and a stream waiting for
// another's event queues an item that blocks until that ticket has run (a
// real dependency, so a missing wait shows up as a race). Kernels run on
// the block emulator; GEMMs on the CPU's BLAS with the descriptor the real
// implementation hands cuBLASLt.
//
// Device memory is guarded (EmulatedApiOptions::guardDeviceMemory, on by
// default): an allocation lives in host memory the caller never sees, and
// the address handed out is that of a PROT_NONE mapping of the same size.
// The layer translates the addresses it is given (copies, kernel
// parameters, GEMM operands, the emulated NCCL's buffers) before its
// threads touch the bytes; a host read or write of device memory anywhere
// else faults at once, as it would on a GPU, so CI shows that none is left.
// Host-space memory (pinned, on a GPU) is plain host memory.
//
//===----------------------------------------------------------------------===//

#include "runtime/lib/core/HalfFloat.h"
#include "runtime/lib/core/HostStream.h"
#include "runtime/lib/cpu/CpuKernels.h"
#include "runtime/lib/cuda/BlockEmulator.h"
#include "runtime/lib/cuda/GpuApi.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

namespace partita::runtime::gpu {

namespace {

/// The guarded allocations of every emulated device of the process (ranks
/// as threads each have one): guard address -> host bytes.
struct Guarded {
  size_t bytes;
  unsigned char *host;
};
std::mutex guardedMutex;
std::map<uintptr_t, Guarded> guarded;

size_t pageRounded(size_t bytes) {
  size_t page = size_t(sysconf(_SC_PAGESIZE));
  return (std::max<size_t>(bytes, 1) + page - 1) / page * page;
}

/// A fault on a guarded address reads as what it is before the process
/// dies (async-signal-safe: write(2) and a hand-made hex number only).
void onSegv(int, siginfo_t *info, void *) {
  char text[160] = "partita: SIGSEGV at 0x";
  size_t n = std::strlen(text);
  uintptr_t a = reinterpret_cast<uintptr_t>(info->si_addr);
  for (int i = 15; i >= 0; --i)
    text[n++] = "0123456789abcdef"[(a >> (4 * i)) & 15];
  const char *tail = ": with --emulate, device memory sits behind PROT_NONE "
                     "addresses, so this is likely a host access to device "
                     "memory (docs/gpu.md)\n";
  ssize_t ignored = write(2, text, n);
  ignored = write(2, tail, std::strlen(tail));
  (void)ignored;
  // SA_RESETHAND: returning re-runs the access, which now kills the process.
}

void installSegvNote() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old {};
    if (sigaction(SIGSEGV, nullptr, &old) != 0 || old.sa_handler != SIG_DFL ||
        (old.sa_flags & SA_SIGINFO))
      return; // someone else's handler (a sanitizer): leave it
    struct sigaction act {};
    act.sa_sigaction = onSegv;
    act.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigemptyset(&act.sa_mask);
    sigaction(SIGSEGV, &act, nullptr);
  });
}

using host::HostStream;
using host::HostStreamOptions;

/// A stream of the emulated device: its queued work runs to the end before
/// it is destroyed (it writes memory the device's owner reads afterwards).
HostStreamOptions emuStream(bool synchronous) {
  HostStreamOptions o;
  o.synchronous = synchronous;
  o.drainOnDestroy = true;
  return o;
}

/// The compute stream: as a CUDA stream, it can capture its work.
HostStreamOptions emuComputeStream(bool synchronous,
                                   std::chrono::microseconds delay) {
  HostStreamOptions o = emuStream(synchronous);
  o.canCapture = true;
  o.itemDelay = delay;
  return o;
}

class EmulatedApi final : public GpuApi {
public:
  explicit EmulatedApi(const EmulatedApiOptions &options)
      : options(options), compute(emuComputeStream(options.synchronousCompute,
                                 options.computeDelay)) {
    if (options.guardDeviceMemory)
      installSegvNote();
  }

  const char *name() const override { return "cuda (emulated)"; }
  bool hostAccessible() const override { return false; }

  void *allocate(size_t bytes, MemorySpace space) override {
    // cudaMalloc fails on a thread whose stream is capturing (thread-local
    // capture mode).
    if (compute.isCapturing())
      throw Error("cuda (emulated): the step allocates device memory while "
                  "its work is being recorded as a graph (CUDA refuses "
                  "cudaMalloc during a capture)");
    size_t size = ((std::max<size_t>(bytes, 1) + 63) / 64) * 64;
    void *p = std::aligned_alloc(64, size);
    if (!p)
      throw Error(std::string("cuda (emulated): cannot allocate ") +
                  std::to_string(bytes) + " bytes of " + toString(space) +
                  " memory");
    std::memset(p, 0, size);
    if (space == MemorySpace::Host || !options.guardDeviceMemory)
      return p;
    void *guard = mmap(nullptr, pageRounded(size), PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (guard == MAP_FAILED) {
      std::free(p);
      throw Error(
          "cuda (emulated): cannot reserve " + std::to_string(bytes) +
          " bytes of guarded device addresses: " + std::strerror(errno));
    }
    std::lock_guard<std::mutex> lock(guardedMutex);
    guarded[reinterpret_cast<uintptr_t>(guard)] = {
        bytes, static_cast<unsigned char *>(p)};
    return guard;
  }
  void deallocate(void *p, MemorySpace space) override {
    // Frees run in destructors, so this one fails the capture quietly
    // (as cudaFree's error invalidates a CUDA capture) and frees.
    compute.failCapture("frees device memory");
    // cudaFree waits for the device first: work still queued (a failed
    // step's kernels on a stream that runs ahead) may read these bytes.
    // A failed stream has skipped what it had; its error was the step's.
    if (!compute.isCapturing() && !compute.onWorkerThread()) {
      try {
        compute.synchronize();
      } catch (const std::exception &) {
      }
    }
    if (space == MemorySpace::Device && options.guardDeviceMemory) {
      std::unique_lock<std::mutex> lock(guardedMutex);
      auto it = guarded.find(reinterpret_cast<uintptr_t>(p));
      if (it != guarded.end()) {
        Guarded g = it->second;
        guarded.erase(it);
        lock.unlock();
        munmap(p, pageRounded(((std::max<size_t>(g.bytes, 1) + 63) / 64) * 64));
        std::free(g.host);
        return;
      }
    }
    std::free(p);
  }

  Stream &computeStream() override { return compute; }
  std::unique_ptr<Stream> createStream() override {
    return std::make_unique<HostStream>(emuStream(/*synchronous=*/false));
  }

  void copy(void *dst, const void *src, size_t bytes, Stream &stream) override {
    if (!bytes)
      return;
    void *to = emulatedHostAddress(dst, bytes, "a copy's destination");
    const void *from = emulatedHostAddress(src, bytes, "a copy's source");
    stream.enqueue([=] { std::memcpy(to, from, bytes); });
  }

  void launch(const KernelLaunch &original, Stream &stream) override {
    // What a GPU refuses at launch: more threads than the kernel's
    // __launch_bounds__, more than 48 KiB of dynamic shared memory (the
    // backend never raises cudaFuncAttributeMaxDynamicSharedMemorySize).
    if (original.block > maxBlockOf(original.params.kernel) ||
        original.sharedBytes > kMaxDynamicSharedBytes)
      throw Error("cuda (emulated): kernel " +
                  std::string(kernelName(original.params.kernel)) +
                  " launched with " + std::to_string(original.block) +
                  " threads a block (at most " +
                  std::to_string(maxBlockOf(original.params.kernel)) +
                  ") and " + std::to_string(original.sharedBytes) +
                  " bytes of shared memory (at most " +
                  std::to_string(kMaxDynamicSharedBytes) + ")");
    EmulatorOptions emu = options.emulator;
    KernelLaunch launch = original;
    for (const void *&p : launch.params.in)
      p = emulatedHostAddress(p, 0, "a kernel's input");
    for (void *&p : launch.params.out)
      p = emulatedHostAddress(p, 0, "a kernel's output");
    stream.enqueue([launch, emu, report = options.bankReport]() mutable {
      const KernelParams &p = launch.params;
      LaunchDims dims{launch.grid, launch.block, launch.sharedBytes};
      SharedBankTraffic banks;
      if (report)
        emu.bankStats = &banks;
      bool found = dispatchKernel(p, [&](auto tag, auto type) {
        using T = decltype(type);
        emulateLaunch(
            dims,
            [&](EmuContext &ctx) { runKernel<decltype(tag)::value, T>(ctx, p); },
            emu);
      });
      if (!found)
        throw Error("cuda (emulated): kernel " +
                    std::string(kernelName(p.kernel)) +
                    " has no variant for element type " +
                    std::to_string(static_cast<int>(p.type)));
      if (report) {
        std::lock_guard<std::mutex> lock(report->mutex);
        report->kernels[kernelName(p.kernel)] += banks;
      }
    });
  }

  void gemm(const GemmDesc &original, Stream &stream) override {
    GemmDesc g = original;
    g.a = emulatedHostAddress(g.a, 0, "a GEMM operand");
    g.b = emulatedHostAddress(g.b, 0, "a GEMM operand");
    g.c = emulatedHostAddress(g.c, 0, "a GEMM result");
    if (g.type != DType::F32 && g.type != DType::F64 && g.type != DType::BF16 &&
        g.type != DType::F16)
      throw Error(std::string("cuda (emulated): GEMM of element type ") +
                  toString(g.type) + " (f32, f64, bf16 or f16)");
    stream.enqueue([g] { runGemm(g); });
  }

  void sortPairs(const uint32_t *keysInDev, uint32_t *keysOutDev,
                 const uint32_t *valuesInDev, uint32_t *valuesOutDev,
                 int64_t count, int keyBits, Stream &stream) override {
    if (count <= 0)
      return;
    // The guarded device addresses, translated as a launch's are.
    size_t bytes = size_t(count) * sizeof(uint32_t);
    auto *keysIn = static_cast<const uint32_t *>(
        emulatedHostAddress(keysInDev, bytes, "a sort's keys"));
    auto *keysOut = static_cast<uint32_t *>(
        emulatedHostAddress(keysOutDev, bytes, "a sort's sorted keys"));
    auto *valuesIn = static_cast<const uint32_t *>(
        emulatedHostAddress(valuesInDev, bytes, "a sort's values"));
    auto *valuesOut = static_cast<uint32_t *>(
        emulatedHostAddress(valuesOutDev, bytes, "a sort's sorted values"));
    stream.enqueue([=] {
      uint32_t mask = keyBits >= 32 ? ~0u : (1u << keyBits) - 1u;
      std::vector<std::pair<uint32_t, uint32_t>> pairs(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i)
        pairs[i] = {keysIn[i] & mask, valuesIn[i]};
      std::stable_sort(pairs.begin(), pairs.end(),
                       [](const auto &x, const auto &y) {
                         return x.first < y.first;
                       });
      for (int64_t i = 0; i < count; ++i) {
        keysOut[i] = pairs[i].first;
        valuesOut[i] = pairs[i].second;
      }
    });
  }

private:
  /// Elements from the first of `matrix` (rows x cols, leading dimension
  /// ld) to the last of batch item `batch` - 1.
  static int64_t extent(int64_t batch, int64_t stride, int64_t rows,
                        int64_t cols, int64_t ld) {
    return (batch - 1) * stride + (rows - 1) * ld + cols;
  }

  /// The GEMM on the CPU's BLAS, with what cuBLASLt does to the operands:
  /// TF32 rounding (to nearest even; tensor cores may round otherwise, see
  /// docs/gpu.md), or bf16/f16 widened to f32 and the result rounded once.
  static void runGemm(const GemmDesc &g) {
    if (g.type == DType::F64) {
      for (int64_t i = 0; i < g.batch; ++i)
        cpu::gemm(KernelKind::Einsum, g.transA, g.transB, g.m, g.n, g.k,
                  g.alpha, static_cast<const double *>(g.a) + i * g.strideA,
                  g.lda, static_cast<const double *>(g.b) + i * g.strideB,
                  g.ldb, g.beta, static_cast<double *>(g.c) + i * g.strideC,
                  g.ldc);
      return;
    }
    int64_t na = extent(g.batch, g.strideA, g.transA ? g.k : g.m,
                        g.transA ? g.m : g.k, g.lda);
    int64_t nb = extent(g.batch, g.strideB, g.transB ? g.n : g.k,
                        g.transB ? g.k : g.n, g.ldb);
    int64_t nc = extent(g.batch, g.strideC, g.m, g.n, g.ldc);
    // f32 copies of the operands and result where they are not f32 or are
    // rounded first; else the caller's own.
    std::vector<float> a, b, c;
    auto widen = [&](const void *p, int64_t n, std::vector<float> &out) {
      out.resize(size_t(n));
      for (int64_t e = 0; e < n; ++e)
        switch (g.type) {
        case DType::BF16:
          out[e] = half::fromBF16(static_cast<const uint16_t *>(p)[e]);
          break;
        case DType::F16:
          out[e] = half::fromF16(static_cast<const uint16_t *>(p)[e]);
          break;
        default: {
          float v = static_cast<const float *>(p)[e];
          out[e] = g.tf32 ? half::roundToTF32(v) : v;
        }
        }
      return out.data();
    };
    bool widened = g.type != DType::F32;
    const float *pa =
        widened || g.tf32 ? widen(g.a, na, a) : static_cast<const float *>(g.a);
    const float *pb =
        widened || g.tf32 ? widen(g.b, nb, b) : static_cast<const float *>(g.b);
    float *pc = static_cast<float *>(g.c);
    if (widened) {
      if (g.beta != 0)
        widen(g.c, nc, c);
      else
        c.assign(size_t(nc), 0.0f);
      pc = c.data();
    }
    for (int64_t i = 0; i < g.batch; ++i)
      cpu::gemm(KernelKind::Einsum, g.transA, g.transB, g.m, g.n, g.k,
                float(g.alpha), pa + i * g.strideA, g.lda, pb + i * g.strideB,
                g.ldb, float(g.beta), pc + i * g.strideC, g.ldc);
    if (!widened)
      return;
    auto *out = static_cast<uint16_t *>(g.c);
    for (int64_t i = 0; i < g.batch; ++i)
      for (int64_t r = 0; r < g.m; ++r)
        for (int64_t col = 0; col < g.n; ++col) {
          int64_t e = i * g.strideC + r * g.ldc + col;
          out[e] =
              g.type == DType::BF16 ? half::toBF16(c[e]) : half::toF16(c[e]);
        }
  }

  EmulatedApiOptions options;
  HostStream compute;
};

} // namespace

void *emulatedHostAddress(const void *p, size_t bytes, const char *what) {
  auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(guardedMutex);
  auto it = guarded.upper_bound(a);
  if (p == nullptr || it == guarded.begin())
    return const_cast<void *>(p);
  --it;
  uintptr_t base = it->first;
  const Guarded &g = it->second;
  if (a > base + g.bytes)
    return const_cast<void *>(p); // not emulated device memory
  if (a + bytes > base + g.bytes)
    throw Error(std::string("cuda (emulated): ") + what + " of " +
                std::to_string(bytes) + " bytes at offset " +
                std::to_string(a - base) + " reaches past the end of a " +
                std::to_string(g.bytes) + "-byte device allocation");
  return g.host + (a - base);
}

std::unique_ptr<GpuApi> createEmulatedApi(const EmulatedApiOptions &options) {
  return std::make_unique<EmulatedApi>(options);
}

} // namespace partita::runtime::gpu
