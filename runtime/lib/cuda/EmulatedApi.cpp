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

#include "runtime/lib/core/HostStream.h"
#include "runtime/lib/cpu/CpuKernels.h"
#include "runtime/lib/cuda/BlockEmulator.h"
#include "runtime/lib/cuda/GpuApi.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

namespace partita::runtime::gpu {

namespace {

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

class EmulatedApi final : public GpuApi {
public:
  explicit EmulatedApi(const EmulatedApiOptions &options)
      : options(options), compute(emuStream(options.synchronousCompute)) {}

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
    return std::make_unique<HostStream>(emuStream(/*synchronous=*/false));
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

  void sortPairs(const uint32_t *keysIn, uint32_t *keysOut,
                 const uint32_t *valuesIn, uint32_t *valuesOut, int64_t count,
                 int keyBits, Stream &stream) override {
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
  EmulatedApiOptions options;
  HostStream compute;
};

} // namespace

std::unique_ptr<GpuApi> createEmulatedApi(const EmulatedApiOptions &options) {
  return std::make_unique<EmulatedApi>(options);
}

} // namespace partita::runtime::gpu
