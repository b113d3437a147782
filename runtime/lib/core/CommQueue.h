//===- CommQueue.h - a rank's asynchronous collectives ---------*- C++ -*-===//
//
// The executor issues a gradient bucket's communicator call here and goes on
// with the backward pass; the call runs on the queue's thread. Calls run one
// at a time, in the order they were queued, so every rank issues its
// collectives in program order (all ranks queue the same sequence) and the
// communicator still has one caller at a time. The executor never calls the
// communicator itself while work is queued: it drains the queue first.
//
// A call that throws records its Error; the calls queued after it are
// skipped, and wait() rethrows the first error (the communicator is unusable
// after an error anyway). Destruction skips what has not started and joins
// the thread once the running call returns (a collective gives up after the
// communicator's timeout, so this is bounded).
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_LIB_CORE_COMMQUEUE_H
#define PARTITA_RUNTIME_LIB_CORE_COMMQUEUE_H

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace partita::runtime {

class CommQueue {
public:
  CommQueue();
  ~CommQueue();
  CommQueue(const CommQueue &) = delete;
  CommQueue &operator=(const CommQueue &) = delete;

  /// Queues `call`; returns its ticket (1, 2, ...).
  uint64_t enqueue(std::function<void()> call);
  /// Returns once the call with `ticket` (and every earlier one) has run;
  /// rethrows the first error of any call so far.
  void wait(uint64_t ticket);
  /// wait() for everything queued so far.
  void drain();

private:
  void loop();

  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::function<void()>> queue;
  uint64_t queued = 0, finished = 0;
  std::exception_ptr error;
  bool stopping = false;
  std::thread worker;
};

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_LIB_CORE_COMMQUEUE_H
