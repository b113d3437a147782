//===- DeviceLayerTest.cpp - the emulated device layer's streams and events ===//
//
// The emulated device layer with a compute stream that runs ahead (as a
// CUDA stream does): work on two streams is ordered only by events, and an
// event wait is a real dependency; a failing item fails its stream, and
// waits on it rethrow; copies and fills through the runtime's Device.
//
//===----------------------------------------------------------------------===//

#include "runtime/lib/core/HalfFloat.h"
#include "runtime/lib/cuda/GpuApi.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
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

// Tests the guard of emulated device memory: the address handed out faults
// on a host read or write (as a GPU's would), while copies, fills and
// kernels through the layer reach the bytes behind it.
TEST(DeviceLayerTest, HostAccessToDeviceMemoryFaults) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  std::unique_ptr<GpuApi> api = createEmulatedApi({});
  std::unique_ptr<Device> dev = createGpuDevice(*api);
  DeviceBuffer buffer = dev->allocateBuffer(64);
  float in[16] = {1, 2, 3}, out[16] = {};
  dev->copyFromHost(buffer.get(), in, sizeof in, dev->computeStream());
  dev->copyToHost(out, buffer.get(), sizeof out, dev->computeStream());
  EXPECT_EQ(out[2], 3);
  volatile unsigned char *p = buffer.get();
  // The layer's note, or a sanitizer's own report where one has the signal.
  EXPECT_DEATH((void)p[8], "(SIGSEGV at 0x.*host access to device memory|"
                           "AddressSanitizer: SEGV)");
  EXPECT_DEATH(p[0] = 1, "SEGV");
  // Host-space (pinned) memory stays host memory.
  DeviceBuffer pinned = dev->allocateBuffer(64, MemorySpace::Host);
  pinned.get()[3] = 7;
  EXPECT_EQ(pinned.get()[3], 7);
}

// Tests the translation of guarded addresses: an interior address maps to
// the same offset of the bytes behind it; a range past the allocation's end
// is an error naming it; other addresses pass unchanged.
TEST(DeviceLayerTest, GuardedAddressesTranslateWithinBounds) {
  std::unique_ptr<GpuApi> api = createEmulatedApi({});
  void *d = api->allocate(100, MemorySpace::Device);
  auto *base = static_cast<unsigned char *>(emulatedHostAddress(d, 100, "x"));
  EXPECT_NE(static_cast<void *>(base), d);
  EXPECT_EQ(emulatedHostAddress(static_cast<unsigned char *>(d) + 40, 60, "x"),
            base + 40);
  try {
    emulatedHostAddress(static_cast<unsigned char *>(d) + 40, 61, "a copy");
    ADD_FAILURE() << "no error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find(
                  "a copy of 61 bytes at offset 40 reaches past the end of a "
                  "100-byte device allocation"),
              std::string::npos)
        << e.what();
  }
  int local = 0;
  EXPECT_EQ(emulatedHostAddress(&local, 4, "x"), &local);
  // A copy through the layer past the end fails the same way.
  char host[128] = {};
  EXPECT_THROW(api->copy(d, host, 101, api->computeStream()), Error);
  api->deallocate(d, MemorySpace::Device);
}

// Tests TF32 rounding (10-bit mantissa, to nearest even) on values worked
// out by hand: ties go to the even neighbour, a carry reaches the next
// binade or inf, NaN and inf are kept, tiny subnormals round to zero.
TEST(DeviceLayerTest, Tf32RoundsToNearestEven) {
  using half::roundToTF32;
  EXPECT_EQ(roundToTF32(1.0f), 1.0f);
  EXPECT_EQ(roundToTF32(1.0f + 0x1p-11f), 1.0f); // tie, 1 is even
  EXPECT_EQ(roundToTF32(1.0f + 0x1p-10f + 0x1p-11f),
            1.0f + 0x1p-9f); // tie, odd goes up
  EXPECT_EQ(roundToTF32(1.0f + 0x1p-11f + 0x1p-23f), 1.0f + 0x1p-10f);
  EXPECT_EQ(roundToTF32(-1.5f), -1.5f);
  EXPECT_EQ(roundToTF32(2.0f - 0x1p-23f), 2.0f); // carry into the exponent
  EXPECT_EQ(roundToTF32(std::numeric_limits<float>::max()), INFINITY);
  EXPECT_EQ(roundToTF32(-INFINITY), -INFINITY);
  EXPECT_TRUE(std::isnan(roundToTF32(NAN)));
  EXPECT_EQ(roundToTF32(0x1p-149f), 0.0f);
  // Every result has its low 13 bits clear and is within half a TF32 ulp.
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
  for (int i = 0; i < 1000; ++i) {
    float v = dist(rng), r = roundToTF32(v);
    uint32_t bits;
    std::memcpy(&bits, &r, 4);
    EXPECT_EQ(bits & 0x1fffu, 0u) << v;
    EXPECT_LE(std::fabs(double(r) - v), std::ldexp(std::fabs(double(v)), -11))
        << v;
  }
}

// Tests the emulated TF32 GEMM: it is the GEMM of the operands rounded to
// TF32 (a reference rounding them and summing in double agrees within fp32
// accumulation), and it differs from the exact fp32 GEMM.
TEST(DeviceLayerTest, EmulatedTf32GemmRoundsItsOperands) {
  std::unique_ptr<GpuApi> api = createEmulatedApi({});
  std::unique_ptr<Device> dev = createGpuDevice(*api);
  Stream &s = dev->computeStream();
  const int64_t m = 5, n = 7, k = 64;
  std::vector<float> a(m * k), b(k * n);
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> dist(-2, 2);
  for (float &v : a)
    v = dist(rng);
  for (float &v : b)
    v = dist(rng);
  DeviceBuffer da = dev->allocateBuffer(a.size() * 4),
               db = dev->allocateBuffer(b.size() * 4),
               dc = dev->allocateBuffer(m * n * 4);
  dev->copyFromHost(da.get(), a.data(), a.size() * 4, s);
  dev->copyFromHost(db.get(), b.data(), b.size() * 4, s);
  GemmDesc g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = da.get();
  g.b = db.get();
  g.c = dc.get();
  g.lda = k;
  g.ldb = n;
  g.ldc = n;
  std::vector<float> exact(m * n), rough(m * n);
  api->gemm(g, s);
  dev->copyToHost(exact.data(), dc.get(), exact.size() * 4, s);
  g.tf32 = true;
  api->gemm(g, s);
  dev->copyToHost(rough.data(), dc.get(), rough.size() * 4, s);
  double differs = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0, mag = 0;
      for (int64_t l = 0; l < k; ++l) {
        double p = double(half::roundToTF32(a[i * k + l])) *
                   half::roundToTF32(b[l * n + j]);
        ref += p;
        mag += std::fabs(p);
      }
      EXPECT_LE(std::fabs(rough[i * n + j] - ref), k * 0x1p-24 * mag);
      differs = std::max(
          differs, double(std::fabs(rough[i * n + j] - exact[i * n + j])));
    }
  EXPECT_GT(differs, 0);
}

// Tests graph capture on the emulated compute stream (a CUDA stream's
// stand-in): queued work is recorded, not run, until the graph is launched,
// and each launch runs all of it again in order.
TEST(DeviceLayer, ComputeStreamRecordsAGraph) {
  std::unique_ptr<GpuApi> api = createEmulatedApi({});
  Stream &s = api->computeStream();
  ASSERT_TRUE(s.canCapture());
  int n = 0;
  s.beginCapture();
  s.enqueue([&] { ++n; });
  s.enqueue([&] { n *= 10; });
  EXPECT_EQ(n, 0);
  std::unique_ptr<Graph> graph = s.endCapture();
  EXPECT_EQ(n, 0);
  graph->launch(s);
  EXPECT_EQ(n, 10);
  graph->launch(s);
  EXPECT_EQ(n, 110);
  s.enqueue([&] { n = 0; }); // runs at once again
  EXPECT_EQ(n, 0);
}

// Tests that what a CUDA stream under capture fails fails here too: the
// host waiting for the stream throws, the capture then ends in an error
// (nothing kept), and the stream works as before afterwards.
TEST(DeviceLayer, ACaptureThatWaitsForTheStreamFails) {
  std::unique_ptr<GpuApi> api = createEmulatedApi({});
  Stream &s = api->computeStream();
  int n = 0;
  s.beginCapture();
  s.enqueue([&] { ++n; });
  try {
    s.synchronize();
    ADD_FAILURE() << "synchronize during a capture returned";
  } catch (const Error &e) {
    EXPECT_STREQ(e.what(), "during a capture, the stream's user makes the "
                           "host wait for the stream (a graph cannot hold "
                           "that)");
  }
  try {
    s.endCapture();
    ADD_FAILURE() << "a failed capture gave a graph";
  } catch (const Error &e) {
    EXPECT_STREQ(e.what(), "the captured work makes the host wait for the "
                           "stream, which a graph cannot hold");
  }
  EXPECT_EQ(n, 0);
  s.enqueue([&] { ++n; });
  s.synchronize();
  EXPECT_EQ(n, 1);
  // The cpu device's streams cannot record at all.
  std::unique_ptr<Device> cpu = createCpuDevice();
  EXPECT_FALSE(cpu->computeStream().canCapture());
  EXPECT_THROW(cpu->computeStream().beginCapture(), Error);
}

} // namespace
} // namespace partita::runtime::gpu
