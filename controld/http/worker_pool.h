// A fixed set of threads running blocking tasks (API handlers, SQL, ACME) off the I/O loops, fed
// from a bounded queue: when the queue is full, submit() refuses at once so the caller can answer
// "busy" instead of letting work pile up without bound. The pool owns its threads and the queued
// tasks; a task owns whatever it captured.
//
// Threads: submit() may be called from any thread (the HTTP loop calls it). The constructor,
// stop() and the destructor belong to the owner thread, never to a task.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "common/log.h"

namespace ot::controld {

inline constexpr size_t kDefaultWorkerThreads = 8;
inline constexpr size_t kDefaultWorkerQueue = 1024;

class WorkerPool {
 public:
  // `threads` is raised to 1 if 0. `maxQueued` bounds the tasks waiting for a thread (those
  // running do not count), so at most threads + maxQueued tasks are accepted at any time.
  explicit WorkerPool(size_t threads = kDefaultWorkerThreads,
                      size_t maxQueued = kDefaultWorkerQueue);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `task`; false when the queue is full or the pool is stopping (the task is dropped).
  // A task that throws is logged and forgotten; the thread goes on.
  [[nodiscard]] bool submit(std::function<void()> task);

  // Refuses new tasks, runs every task already queued, joins the threads. Idempotent.
  void stop();

  [[nodiscard]] size_t threadCount() const { return threadCount_; }
  // Tasks waiting for a thread now (a snapshot).
  [[nodiscard]] size_t queued() const;

 private:
  void run();

  const log::Logger log_{"controld.worker"};
  const size_t threadCount_;
  const size_t maxQueued_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;  // guarded by mutex_
  bool stopping_ = false;                    // guarded by mutex_
  std::vector<std::thread> threads_;         // owner thread only
};

}  // namespace ot::controld
