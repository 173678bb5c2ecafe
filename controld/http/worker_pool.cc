#include "controld/http/worker_pool.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "common/log.h"

namespace ot::controld {

WorkerPool::WorkerPool(size_t threads, size_t maxQueued)
    : threadCount_(std::max<size_t>(threads, 1)), maxQueued_(maxQueued) {
  threads_.reserve(threadCount_);
  for (size_t i = 0; i < threadCount_; ++i) threads_.emplace_back([this] { run(); });
}

WorkerPool::~WorkerPool() {
  stop();
}

bool WorkerPool::submit(std::function<void()> task) {
  {
    const std::lock_guard lock(mutex_);
    if (stopping_ || queue_.size() >= maxQueued_) return false;
    queue_.push_back(std::move(task));
  }
  wake_.notify_one();
  return true;
}

void WorkerPool::stop() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
  threads_.clear();
}

size_t WorkerPool::queued() const {
  const std::lock_guard lock(mutex_);
  return queue_.size();
}

void WorkerPool::run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      // Stopping still drains: a queued task may be a response someone is waiting for.
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      task();
    } catch (const std::exception& e) {
      log_.error("worker task threw", {{"error", e.what()}});
    } catch (...) {
      log_.error("worker task threw", {{"error", "unknown exception"}});
    }
  }
}

}  // namespace ot::controld
