//===- Device.h - memory and streams of one accelerator (or the CPU) -*- C++ -*-===//
//
// Where the executor's buffers live and how bytes move between them. The
// executor takes every buffer (the arena, parameters, optimizer state,
// inputs, collective scratch) from a Device and moves bytes only through it,
// so the same executor runs on the CPU (host memory, memcpy) and, with a
// CUDA device, on a GPU (cudaMallocAsync, cudaMemcpyAsync on a stream).
//
// Memory spaces: Device memory is where kernels read and write (the arena);
// Host memory is memory the host reads directly (on a GPU, pinned host
// memory for staging and offloaded state). On the cpu device both are host
// memory, and isHostAccessible() says that callers may read and write
// Device memory directly, skipping staging copies.
//
// Copies and fills are ordered on a stream (complete when the stream reaches
// them); copyToHost and copyFromHost block the host until done, since their
// host side is the caller's memory.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_DEVICE_H
#define PARTITA_RUNTIME_DEVICE_H

#include "partita/runtime/Stream.h"

#include <cstddef>
#include <cstdint>
#include <memory>

namespace partita::runtime {

/// Which arena a buffer lives in (plan.proto's MemorySpace).
enum class MemorySpace : uint8_t { Device, Host };

/// "device", "host".
const char *toString(MemorySpace space);

class Device;

/// Frees a device allocation (the deleter of DeviceBuffer).
struct DeviceFree {
  Device *device = nullptr;
  MemorySpace space = MemorySpace::Device;
  void operator()(void *p) const;
};
/// An owned allocation of one device.
using DeviceBuffer = std::unique_ptr<unsigned char, DeviceFree>;

class Device {
public:
  virtual ~Device() = default;
  /// "cpu", "cuda:0".
  virtual const char *name() const = 0;
  /// Whether the host may read and write Device-space memory directly (the
  /// cpu device: yes; a GPU: no).
  virtual bool isHostAccessible() const = 0;

  /// `bytes` (at least 1) of zeroed memory in `space`, aligned to 64 bytes;
  /// throws Error naming the size when it cannot.
  virtual void *allocate(size_t bytes, MemorySpace space) = 0;
  virtual void deallocate(void *p, MemorySpace space) = 0;
  /// allocate() owned by a DeviceBuffer.
  DeviceBuffer allocateBuffer(size_t bytes,
                              MemorySpace space = MemorySpace::Device);

  /// The stream kernels and the executor's copies run on.
  virtual Stream &computeStream() = 0;
  /// A new stream whose work may run concurrently with the compute stream
  /// (the executor's communication stream).
  virtual std::unique_ptr<Stream> createStream() = 0;

  /// Device to device (either space), ordered on `stream`. The ranges must
  /// not overlap.
  virtual void copy(void *dst, const void *src, size_t bytes,
                    Stream &stream) = 0;
  /// Host memory of the caller to the device; returns once `hostSrc` may be
  /// reused (everything queued on `stream` before it has run).
  virtual void copyFromHost(void *dst, const void *hostSrc, size_t bytes,
                            Stream &stream) = 0;
  /// The device to host memory of the caller; returns when the bytes are
  /// there.
  virtual void copyToHost(void *hostDst, const void *src, size_t bytes,
                          Stream &stream) = 0;
  /// Writes `count` copies of the `elementBytes` (1, 2, 4 or 8) at
  /// `hostValue` from `dst` on, ordered on `stream`.
  virtual void fill(void *dst, const void *hostValue, size_t elementBytes,
                    size_t count, Stream &stream) = 0;
  /// fill() with zero bytes.
  void zero(void *dst, size_t bytes, Stream &stream) {
    unsigned char z = 0;
    fill(dst, &z, 1, bytes, stream);
  }
};

/// The host as a device: 64-byte aligned host memory for both spaces, an
/// inline compute stream, worker-thread streams from createStream(). One
/// per process is enough; it holds no state besides its compute stream, which
/// runs work on whichever thread queues it.
std::unique_ptr<Device> createCpuDevice();

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_DEVICE_H
