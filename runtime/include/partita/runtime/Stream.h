//===- Stream.h - ordered queues of device work and their events -*- C++ -*-===//
//
// A Stream runs the work given to it in the order given, one item after the
// other; an Event marks a point in one stream that another stream (or the
// host) can wait for. The executor runs kernels and copies on its device's
// compute stream and gradient-bucket collectives on a communication stream,
// and orders the two only through events: it records an event on the
// communication stream after a bucket's call and makes the compute stream
// wait for it before the first instruction that reads the bucket.
//
// These map one to one onto CUDA's cudaStream_t / cudaEvent_t
// (cudaEventRecord, cudaStreamWaitEvent, cudaEventSynchronize) and NCCL
// calls enqueued on a stream. The cpu device has two kinds: an inline stream
// (work runs on the calling thread at once; the compute stream) and a worker
// stream (one thread runs the items in order; the communication stream).
//
// Capture. A stream that can (canCapture) records the work queued between
// beginCapture and endCapture as a Graph, which launch() queues again in
// one call: a GPU's CUDA graph, which spares the host the per-kernel
// launches of a whole step (ExecutorOptions::captureGraph).
//
// Failure model. Work that throws fails its stream: the items queued after
// it are skipped, and every later wait on an event of that stream (or
// synchronize) rethrows the first Error. A stream is unusable after a
// failure, as the communicator that failed in it is.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_STREAM_H
#define PARTITA_RUNTIME_STREAM_H

#include <functional>
#include <memory>

namespace partita::runtime {

/// A point in one stream, set by Stream::record. Reusable: recording it
/// again moves it to the stream's current end (as cudaEventRecord does).
class Event {
public:
  virtual ~Event() = default;
  /// Blocks the host until the recorded point has been reached; rethrows
  /// the stream's first failure. Returns at once for a never-recorded event.
  virtual void synchronize() = 0;
};

class Stream;

/// Work recorded from a stream by Stream::beginCapture / endCapture (a
/// GPU's CUDA graph): launch() queues all of it again, in order, in one
/// call.
class Graph {
public:
  virtual ~Graph() = default;
  /// Queues the recorded work on `stream`, the stream it was captured on.
  virtual void launch(Stream &stream) = 0;
};

class Stream {
public:
  virtual ~Stream() = default;
  /// Queues host work behind everything queued so far (a CUDA stream runs
  /// it with cudaLaunchHostFunc). The cpu device's streams run every copy,
  /// kernel and collective this way.
  virtual void enqueue(std::function<void()> work) = 0;
  /// An event of this stream, not recorded yet.
  virtual std::unique_ptr<Event> createEvent() = 0;
  /// Moves `event` (one of this stream's) to the end of what is queued now.
  virtual void record(Event &event) = 0;
  /// Work queued on this stream from now on starts only after `event`
  /// (recorded on any stream of the same device) has been reached; rethrows
  /// that stream's failure when it is known at once (an inline stream).
  virtual void wait(Event &event) = 0;
  /// Blocks the host until everything queued so far has run; rethrows the
  /// stream's first failure.
  virtual void synchronize() = 0;

  /// Whether beginCapture works on this stream (a CUDA stream, and the
  /// emulated device's; not the cpu device's).
  virtual bool canCapture() const { return false; }
  /// Starts recording: until endCapture, work queued on this stream
  /// (kernels, copies, GEMMs, host work) is recorded instead of run.
  /// Anything that would make the host wait for the stream meanwhile
  /// (synchronize, a blocking copy, waiting for another stream's event)
  /// throws Error, as CUDA fails it. Throws Error where !canCapture().
  virtual void beginCapture();
  /// Stops recording and returns what was recorded; always ends the
  /// capture, and throws Error when the capture failed (nothing is then
  /// kept). A caller whose capture threw midway calls it and drops it.
  virtual std::unique_ptr<Graph> endCapture();
};

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_STREAM_H
