//===- CommQueue.cpp - a rank's asynchronous collectives -----------------===//

#include "CommQueue.h"

namespace partita::runtime {

CommQueue::CommQueue() : worker([this] { loop(); }) {}

CommQueue::~CommQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
  }
  changed.notify_all();
  worker.join();
}

uint64_t CommQueue::enqueue(std::function<void()> call) {
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mutex);
    queue.push_back(std::move(call));
    ticket = ++queued;
  }
  changed.notify_all();
  return ticket;
}

void CommQueue::wait(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mutex);
  changed.wait(lock, [&] { return finished >= ticket || error; });
  if (error)
    std::rethrow_exception(error);
}

void CommQueue::drain() {
  uint64_t last;
  {
    std::lock_guard<std::mutex> lock(mutex);
    last = queued;
  }
  wait(last);
}

void CommQueue::loop() {
  std::unique_lock<std::mutex> lock(mutex);
  while (true) {
    changed.wait(lock, [&] { return stopping || !queue.empty(); });
    if (stopping)
      return;
    std::function<void()> call = std::move(queue.front());
    queue.pop_front();
    if (!error) {
      lock.unlock();
      std::exception_ptr failure;
      try {
        call();
      } catch (...) {
        failure = std::current_exception();
      }
      lock.lock();
      if (failure && !error)
        error = failure;
    }
    ++finished;
    changed.notify_all();
  }
}

} // namespace partita::runtime
