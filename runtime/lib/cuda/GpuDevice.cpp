//===- GpuDevice.cpp - the runtime's Device over the device layer ---------===//
//
// Allocation, copies and streams go straight to the GpuApi; fill() is the
// Fill kernel (cudaMemset writes bytes only). copyFromHost and copyToHost
// return once the copy has run, as Device.h promises: the caller's host
// memory is theirs again.
//
//===----------------------------------------------------------------------===//

#include "runtime/lib/cuda/GpuApi.h"

#include "partita/runtime/Tensor.h"

#include <algorithm>
#include <cstring>

namespace partita::runtime::gpu {

namespace {

class GpuDevice final : public Device {
public:
  explicit GpuDevice(GpuApi &api) : api(api) {}
  const char *name() const override { return api.name(); }
  bool isHostAccessible() const override { return api.hostAccessible(); }
  void *allocate(size_t bytes, MemorySpace space) override {
    return api.allocate(bytes, space);
  }
  void deallocate(void *p, MemorySpace space) override {
    api.deallocate(p, space);
  }
  Stream &computeStream() override { return api.computeStream(); }
  std::unique_ptr<Stream> createStream() override {
    return api.createStream();
  }
  void copy(void *dst, const void *src, size_t bytes, Stream &stream) override {
    api.copy(dst, src, bytes, stream);
  }
  void copyFromHost(void *dst, const void *hostSrc, size_t bytes,
                    Stream &stream) override {
    api.copy(dst, hostSrc, bytes, stream);
    stream.synchronize();
  }
  void copyToHost(void *hostDst, const void *src, size_t bytes,
                  Stream &stream) override {
    api.copy(hostDst, src, bytes, stream);
    stream.synchronize();
  }
  void fill(void *dst, const void *hostValue, size_t elementBytes,
            size_t count, Stream &stream) override {
    KernelLaunch launch;
    KernelParams &p = launch.params;
    p.kernel = GpuKernel::Fill;
    switch (elementBytes) {
    case 1: p.type = ElemType::U8; break;
    case 2: p.type = ElemType::U16; break;
    case 4: p.type = ElemType::U32; break;
    case 8: p.type = ElemType::U64; break;
    default:
      throw Error(std::string(api.name()) + ": fill with " +
                  std::to_string(elementBytes) +
                  "-byte elements (1, 2, 4 or 8)");
    }
    if (count == 0)
      return;
    std::memcpy(&p.bits, hostValue, elementBytes);
    p.out[0] = dst;
    p.n = int64_t(count);
    launch.block = 256;
    launch.grid = int(std::min<size_t>((count + 255) / 256, 1024));
    api.launch(launch, stream);
  }

private:
  GpuApi &api;
};

} // namespace

std::unique_ptr<Device> createGpuDevice(GpuApi &api) {
  return std::make_unique<GpuDevice>(api);
}

} // namespace partita::runtime::gpu
