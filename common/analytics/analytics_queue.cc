#include "common/analytics/analytics_queue.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace ot::analytics {

EventQueue::EventQueue(size_t capacity, size_t wakeAt)
    : slots_(std::max<size_t>(capacity, 1)), wakeAt_(std::max<size_t>(wakeAt, 1)) {}

bool EventQueue::push(Event event) {
  bool wakeNow = false;
  {
    const std::lock_guard lock(mutex_);
    if (closed_ || count_ == slots_.size()) {
      ++refused_;
      return false;
    }
    slots_[(head_ + count_) % slots_.size()] = std::move(event);
    ++count_;
    wakeNow = count_ == wakeAt_;
  }
  // Only the push that completes a batch wakes the sender: the others cost no system call.
  if (wakeNow) wake_.notify_one();
  return true;
}

size_t EventQueue::take(size_t max, std::vector<Event>& out) {
  const std::lock_guard lock(mutex_);
  const size_t n = std::min(max, count_);
  for (size_t i = 0; i < n; ++i) {
    Event& slot = slots_[head_];
    out.push_back(std::move(slot));
    slot = Event{};  // releases what the moved-from strings and vector may still hold
    head_ = (head_ + 1) % slots_.size();
  }
  count_ -= n;
  return n;
}

size_t EventQueue::waitFor(size_t count, int64_t timeoutMs) {
  std::unique_lock lock(mutex_);
  wake_.wait_for(lock, std::chrono::milliseconds(std::max<int64_t>(timeoutMs, 0)),
                 [&] { return closed_ || woken_ || count_ >= count; });
  woken_ = false;
  return count_;
}

void EventQueue::close() {
  {
    const std::lock_guard lock(mutex_);
    closed_ = true;
  }
  wake_.notify_all();
}

void EventQueue::wake() {
  {
    const std::lock_guard lock(mutex_);
    woken_ = true;
  }
  wake_.notify_all();
}

size_t EventQueue::size() const {
  const std::lock_guard lock(mutex_);
  return count_;
}

uint64_t EventQueue::refused() const {
  const std::lock_guard lock(mutex_);
  return refused_;
}

}  // namespace ot::analytics
