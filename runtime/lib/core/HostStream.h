//===- HostStream.h - a stream run by a host thread, and its events -*- C++ -*-===//
//
// The cpu device's worker stream (its communication stream) and the emulated
// cuda device layer's streams are the same thing: one host thread runs the
// items in order, an event is a ticket on its stream (reached when that many
// items have run), and waiting for another stream's event queues an item that
// blocks until that ticket has run, a real dependency. One copy here, with the
// two behaviours that differ as options. Internal to libpartita_runtime.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_LIB_CORE_HOSTSTREAM_H
#define PARTITA_RUNTIME_LIB_CORE_HOSTSTREAM_H

#include "partita/runtime/Stream.h"
#include "partita/runtime/Tensor.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace partita::runtime::host {

/// Shared by a stream and its events, so an event outlives nothing it reads.
struct StreamState {
  std::mutex mutex;
  std::condition_variable changed;
  uint64_t queued = 0, finished = 0;
  std::exception_ptr error;
};

class HostEvent final : public Event {
public:
  explicit HostEvent(std::shared_ptr<StreamState> state)
      : state(std::move(state)) {}
  void synchronize() override {
    std::unique_lock<std::mutex> lock(state->mutex);
    state->changed.wait(
        lock, [&] { return state->finished >= ticket || state->error; });
    if (state->error)
      std::rethrow_exception(state->error);
  }
  std::shared_ptr<StreamState> state;
  uint64_t ticket = 0; // 0: never recorded
};

struct HostStreamOptions {
  /// enqueue() returns once its item has run and rethrows the item's error
  /// itself (the stream stays usable, as an inline stream); otherwise a
  /// failing item fails the stream (later items are skipped, waits rethrow).
  bool synchronous = false;
  /// On destruction, run what is still queued (the emulated device: queued
  /// work may write memory its owner reads after a synchronize); otherwise
  /// skip what has not started (the cpu device's communication stream: a
  /// collective gives up after its deadline, so the join is bounded).
  bool drainOnDestroy = false;
  /// beginCapture records work instead of running it (the emulated
  /// device's compute stream, standing in for a CUDA stream's capture).
  bool canCapture = false;
  /// Testing: the worker waits this long before each item (a slow device),
  /// so that what is queued stays queued while the host goes on.
  std::chrono::microseconds itemDelay{0};
};

/// What a HostStream recorded: launch() queues each item again.
class HostGraph final : public Graph {
public:
  explicit HostGraph(std::vector<std::function<void()>> items)
      : items(std::move(items)) {}
  void launch(Stream &stream) override {
    for (const std::function<void()> &item : items)
      stream.enqueue(item);
  }

private:
  std::vector<std::function<void()>> items;
};

/// One thread runs the items in order.
class HostStream final : public Stream {
public:
  explicit HostStream(HostStreamOptions options = {})
      : state(std::make_shared<StreamState>()), options(options),
        worker([this] { loop(); }) {}
  ~HostStream() override {
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      stopping = true;
    }
    state->changed.notify_all();
    worker.join();
  }

  void enqueue(std::function<void()> work) override {
    if (capturing) {
      captured.push_back(std::move(work));
      return;
    }
    if (!options.synchronous) {
      push(std::move(work));
      return;
    }
    auto failure = std::make_shared<std::exception_ptr>();
    uint64_t ticket = push([work = std::move(work), failure] {
      try {
        work();
      } catch (...) {
        *failure = std::current_exception();
      }
    });
    std::unique_lock<std::mutex> lock(state->mutex);
    state->changed.wait(lock, [&] { return state->finished >= ticket; });
    lock.unlock();
    if (*failure)
      std::rethrow_exception(*failure);
  }
  std::unique_ptr<Event> createEvent() override {
    return std::make_unique<HostEvent>(state);
  }
  void record(Event &event) override {
    refuseWhileCapturing("records an event");
    auto &e = static_cast<HostEvent &>(event);
    std::lock_guard<std::mutex> lock(state->mutex);
    e.state = state;
    e.ticket = state->queued;
  }
  void wait(Event &event) override {
    auto &e = static_cast<HostEvent &>(event);
    if (e.state == state || e.ticket == 0)
      return; // in order already, or never recorded
    {
      // Reached already (always so for an inline stream's events).
      std::lock_guard<std::mutex> lock(e.state->mutex);
      if (e.state->finished >= e.ticket && !e.state->error)
        return;
    }
    // An event of another stream: the worker blocks on it in turn.
    refuseWhileCapturing("waits for another stream's event");
    auto other = std::make_shared<HostEvent>(e.state);
    other->ticket = e.ticket;
    enqueue([other] { other->synchronize(); });
  }
  void synchronize() override {
    refuseWhileCapturing("makes the host wait for the stream");
    HostEvent end(state);
    record(end);
    end.synchronize();
  }

  bool canCapture() const override { return options.canCapture; }
  /// Whether the caller is this stream's own thread (running one of its
  /// items), which must not wait for the stream.
  bool onWorkerThread() const {
    return std::this_thread::get_id() == worker.get_id();
  }
  /// Whether a capture is under way (the emulated device refuses to
  /// allocate or free meanwhile, as CUDA does on the capturing thread).
  bool isCapturing() const { return capturing; }
  /// Fails the capture under way without throwing (for a call that must
  /// not throw, a free): endCapture then throws, naming `what`.
  void failCapture(const std::string &what) {
    if (capturing && captureError.empty())
      captureError = what + ", which a graph cannot hold";
  }
  void beginCapture() override {
    if (!options.canCapture)
      Stream::beginCapture();
    if (capturing)
      throw Error("beginCapture while a capture is under way");
    capturing = true;
    captured.clear();
    captureError.clear();
  }
  std::unique_ptr<Graph> endCapture() override {
    if (!capturing)
      Stream::endCapture();
    capturing = false;
    std::vector<std::function<void()>> items = std::move(captured);
    captured.clear();
    if (!captureError.empty())
      throw Error("the captured work " + captureError);
    return std::make_unique<HostGraph>(std::move(items));
  }

private:
  /// Fails what a CUDA stream under capture fails (cudaStreamSynchronize,
  /// a host-blocking wait): throws, and the capture ends in error.
  void refuseWhileCapturing(const char *what) {
    if (!capturing)
      return;
    failCapture(what);
    throw Error("during a capture, the stream's user " + std::string(what) +
                " (a graph cannot hold that)");
  }

  uint64_t push(std::function<void()> work) {
    uint64_t ticket;
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      queue.push_back(std::move(work));
      ticket = ++state->queued;
    }
    state->changed.notify_all();
    return ticket;
  }

  void loop() {
    std::unique_lock<std::mutex> lock(state->mutex);
    while (true) {
      state->changed.wait(lock, [&] { return stopping || !queue.empty(); });
      if (stopping && (queue.empty() || !options.drainOnDestroy)) {
        // Skipped work never finishes: a wait for it (another stream's, or
        // an event's) fails instead of blocking for ever.
        if (!queue.empty() && !state->error) {
          state->error = std::make_exception_ptr(
              Error("a stream destroyed before its queued work ran"));
          state->changed.notify_all();
        }
        return;
      }
      std::function<void()> work = std::move(queue.front());
      queue.pop_front();
      if (!state->error) {
        lock.unlock();
        if (options.itemDelay.count() > 0)
          std::this_thread::sleep_for(options.itemDelay);
        std::exception_ptr failure;
        try {
          work();
        } catch (...) {
          failure = std::current_exception();
        }
        lock.lock();
        if (failure && !state->error)
          state->error = failure;
      }
      ++state->finished;
      state->changed.notify_all();
    }
  }

  std::shared_ptr<StreamState> state;
  HostStreamOptions options;
  std::deque<std::function<void()>> queue;
  bool stopping = false;
  /// Capture (options.canCapture): the items queued since beginCapture,
  /// and what failed it (empty: nothing).
  bool capturing = false;
  std::vector<std::function<void()>> captured;
  std::string captureError;
  std::thread worker; // last: starts once the members above exist
};

} // namespace partita::runtime::host

#endif // PARTITA_RUNTIME_LIB_CORE_HOSTSTREAM_H
