//===- DeviceLayerTest.cpp - the emulated device layer's streams and events ===//
//
// The emulated device layer with a compute stream that runs ahead (as a
// CUDA stream does): work on two streams is ordered only by events, and an
// event wait is a real dependency; a failing item fails its stream, and
// waits on it rethrow; copies and fills through the runtime's Device.
//
//===----------------------------------------------------------------------===//

#include "runtime/lib/cuda/GpuApi.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace partita::runtime::gpu {
namespace {

std::unique_ptr<GpuApi> asyncApi() {
  EmulatedApiOptions options;
  options.synchronousCompute = false;
  return createEmulatedApi(options);
}

// Tests that a stream waiting for another stream's event runs its later work
// only after the event's point, however slow the other stream is.
TEST(DeviceLayerTest, EventWaitOrdersTwoStreams) {
  std::unique_ptr<GpuApi> api = asyncApi();
  std::unique_ptr<Stream> other = api->createStream();
  std::atomic<int> value{0};
  int seen = -1;
  other->enqueue([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    value = 1;
  });
  std::unique_ptr<Event> done = other->createEvent();
  other->record(*done);
  api->computeStream().wait(*done);
  api->computeStream().enqueue([&] { seen = value; });
  api->computeStream().synchronize();
  EXPECT_EQ(seen, 1);
}

// Tests that work queued on the compute stream runs after enqueue returns
// (it runs ahead of the host), in order.
TEST(DeviceLayerTest, StreamRunsItsWorkInOrder) {
  std::unique_ptr<GpuApi> api = asyncApi();
  std::vector<int> order;
  for (int i = 0; i < 5; ++i)
    api->computeStream().enqueue([&order, i] { order.push_back(i); });
  api->computeStream().synchronize();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

// Tests the failure model: a throwing item fails its stream, later items
// are skipped, and synchronize and waits on its events rethrow.
TEST(DeviceLayerTest, FailureFailsTheStream) {
  std::unique_ptr<GpuApi> api = asyncApi();
  std::unique_ptr<Stream> stream = api->createStream();
  bool ran = false;
  stream->enqueue([] { throw Error("kernel failed"); });
  stream->enqueue([&] { ran = true; });
  std::unique_ptr<Event> event = stream->createEvent();
  stream->record(*event);
  EXPECT_THROW(event->synchronize(), Error);
  EXPECT_THROW(stream->synchronize(), Error);
  EXPECT_FALSE(ran);
}

// Tests the synchronous compute stream the backend uses: an item's error
// reaches the caller of enqueue, and the stream stays usable.
TEST(DeviceLayerTest, SynchronousComputeStreamThrowsToTheCaller) {
  std::unique_ptr<GpuApi> api = createEmulatedApi({});
  EXPECT_THROW(api->computeStream().enqueue([] { throw Error("x"); }), Error);
  int v = 0;
  api->computeStream().enqueue([&] { v = 3; });
  EXPECT_EQ(v, 3);
}

// Tests copies and fills through the runtime's Device over the layer: the
// device is not host-accessible, and bytes arrive through copyToHost.
TEST(DeviceLayerTest, DeviceCopiesAndFills) {
  std::unique_ptr<GpuApi> api = asyncApi();
  std::unique_ptr<Device> dev = createGpuDevice(*api);
  EXPECT_FALSE(dev->isHostAccessible());
  Stream &s = dev->computeStream();
  DeviceBuffer a = dev->allocateBuffer(40), b = dev->allocateBuffer(40);
  float host[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  dev->copyFromHost(a.get(), host, sizeof host, s);
  dev->copy(b.get(), a.get(), 40, s);
  float two = 2.5f;
  dev->fill(b.get() + 8, &two, 4, 3, s);
  float out[10];
  dev->copyToHost(out, b.get(), sizeof out, s);
  float want[10] = {0, 1, 2.5f, 2.5f, 2.5f, 5, 6, 7, 8, 9};
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(out[i], want[i]) << i;
  unsigned char odd = 7;
  EXPECT_THROW(dev->fill(b.get(), &odd, 3, 1, s), Error);
}

} // namespace
} // namespace partita::runtime::gpu
