#include "common/periodic_task.h"

#include <algorithm>
#include <utility>

namespace ot {

PeriodicTask::PeriodicTask(Round round, PeriodicTaskOptions options)
    : round_(std::move(round)), options_(std::move(options)) {}

PeriodicTask::~PeriodicTask() {
  stop();
}

void PeriodicTask::start() {
  const std::lock_guard lock(mutex_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] { run(); });
}

void PeriodicTask::stop() {
  std::thread thread;
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
    if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) {
      thread = std::move(thread_);
    }
  }
  wake_.notify_all();
  if (thread.joinable()) thread.join();
}

void PeriodicTask::wake() {
  {
    const std::lock_guard lock(mutex_);
    wakeRequested_ = true;
  }
  wake_.notify_all();
}

bool PeriodicTask::stopping() const {
  const std::lock_guard lock(mutex_);
  return stopping_;
}

bool PeriodicTask::waitStopping(std::chrono::milliseconds wait) {
  std::unique_lock lock(mutex_);
  return wake_.wait_for(lock, std::max(wait, std::chrono::milliseconds(0)),
                        [this] { return stopping_; });
}

bool PeriodicTask::waitForNextRound(std::chrono::milliseconds wait) {
  if (options_.beforeWait) options_.beforeWait(wait);
  std::unique_lock lock(mutex_);
  wake_.wait_for(lock, std::max(wait, std::chrono::milliseconds(0)),
                 [this] { return stopping_ || wakeRequested_; });
  wakeRequested_ = false;
  return stopping_;
}

void PeriodicTask::run() {
  std::chrono::milliseconds wait = options_.initialDelay;
  bool stopped = wait.count() > 0 ? waitForNextRound(wait) : stopping();
  while (!stopped) {
    wait = round_();
    stopped = waitForNextRound(wait);
  }
  if (options_.finalRoundOnStop) (void)round_();
}

}  // namespace ot
