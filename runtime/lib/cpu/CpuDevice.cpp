//===- CpuDevice.cpp - the host as a Device, with its streams -------------===//
//
// Both memory spaces are 64-byte aligned host memory. The compute stream is
// inline: work runs on the thread that queues it, so a kernel or copy is done
// when enqueue returns and its events are reached at once. A worker stream
// (the executor's communication stream) runs its items in order on its own
// thread; its events are tickets, reached when that many items have run.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Device.h"
#include "partita/runtime/Tensor.h"
#include "runtime/lib/core/HostStream.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace partita::runtime {

const char *toString(MemorySpace space) {
  return space == MemorySpace::Host ? "host" : "device";
}

void DeviceFree::operator()(void *p) const {
  if (p)
    device->deallocate(p, space);
}

void Stream::beginCapture() {
  throw Error("this stream cannot capture its work into a graph (a CUDA "
              "stream can; the cpu device's cannot)");
}

std::unique_ptr<Graph> Stream::endCapture() {
  throw Error("endCapture without beginCapture");
}

DeviceBuffer Device::allocateBuffer(size_t bytes, MemorySpace space) {
  return DeviceBuffer(static_cast<unsigned char *>(allocate(bytes, space)),
                      DeviceFree{this, space});
}

namespace {

using host::HostEvent;
using host::StreamState;

/// Runs work at once on the queuing thread; nothing is ever pending.
class InlineStream final : public Stream {
public:
  InlineStream() : state(std::make_shared<StreamState>()) {}
  void enqueue(std::function<void()> work) override { work(); }
  std::unique_ptr<Event> createEvent() override {
    return std::make_unique<HostEvent>(state);
  }
  void record(Event &) override {}
  void wait(Event &event) override { event.synchronize(); }
  void synchronize() override {}

private:
  std::shared_ptr<StreamState> state;
};

class CpuDevice final : public Device {
public:
  const char *name() const override { return "cpu"; }
  bool isHostAccessible() const override { return true; }

  void *allocate(size_t bytes, MemorySpace) override {
    size_t size = ((std::max<size_t>(bytes, 1) + 63) / 64) * 64;
    void *p = std::aligned_alloc(64, size);
    if (!p)
      throw Error("cpu device: cannot allocate " + std::to_string(bytes) +
                  " bytes");
    std::memset(p, 0, size);
    return p;
  }
  void deallocate(void *p, MemorySpace) override { std::free(p); }

  Stream &computeStream() override { return compute; }
  std::unique_ptr<Stream> createStream() override {
    // Skips what has not started when destroyed (a collective gives up
    // after its deadline, so the join is bounded).
    return std::make_unique<host::HostStream>();
  }

  // On the inline compute stream the work runs now; on a worker stream it
  // waits its turn.
  void copy(void *dst, const void *src, size_t bytes, Stream &stream) override {
    if (&stream == &compute) {
      std::memcpy(dst, src, bytes);
      return;
    }
    stream.enqueue([=] { std::memcpy(dst, src, bytes); });
  }
  void copyFromHost(void *dst, const void *hostSrc, size_t bytes,
                    Stream &stream) override {
    copy(dst, hostSrc, bytes, stream);
    stream.synchronize();
  }
  void copyToHost(void *hostDst, const void *src, size_t bytes,
                  Stream &stream) override {
    copy(hostDst, src, bytes, stream);
    stream.synchronize();
  }
  void fill(void *dst, const void *hostValue, size_t elementBytes,
            size_t count, Stream &stream) override {
    uint64_t value = 0;
    std::memcpy(&value, hostValue, elementBytes);
    auto work = [=] { fillNow(dst, value, elementBytes, count); };
    if (&stream == &compute)
      work();
    else
      stream.enqueue(work);
  }

private:
  static void fillNow(void *dst, uint64_t value, size_t elementBytes,
                      size_t count) {
    switch (elementBytes) {
    case 1:
      std::memset(dst, int(value & 0xff), count);
      return;
    case 2:
      std::fill_n(static_cast<uint16_t *>(dst), count, uint16_t(value));
      return;
    case 4:
      std::fill_n(static_cast<uint32_t *>(dst), count, uint32_t(value));
      return;
    case 8:
      std::fill_n(static_cast<uint64_t *>(dst), count, value);
      return;
    default:
      throw Error("cpu device: fill with " + std::to_string(elementBytes) +
                  "-byte elements (1, 2, 4 or 8)");
    }
  }

  InlineStream compute;
};

} // namespace

std::unique_ptr<Device> createCpuDevice() {
  return std::make_unique<CpuDevice>();
}

} // namespace partita::runtime
