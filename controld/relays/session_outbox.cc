#include "controld/relays/session_outbox.h"

#include <utility>

namespace ot::controld {

bool SessionOutbox::push(opentunnel::control::v1::ControlMessage message) {
  bool queued = false;
  {
    const std::lock_guard lock(mutex_);
    if (closed_) return false;
    if (queue_.size() >= limit_) {
      closed_ = true;
      overflowed_ = true;
      queue_.clear();
    } else {
      queue_.push_back(std::move(message));
      queued = true;
    }
  }
  // An overflow wakes the writer too, so it ends the session at once.
  ready_.notify_one();
  return queued;
}

std::optional<opentunnel::control::v1::ControlMessage> SessionOutbox::pop() {
  std::unique_lock lock(mutex_);
  ready_.wait(lock, [&] { return closed_ || !queue_.empty(); });
  if (closed_) return std::nullopt;
  auto message = std::move(queue_.front());
  queue_.pop_front();
  return message;
}

std::deque<opentunnel::control::v1::ControlMessage> SessionOutbox::popAll() {
  std::unique_lock lock(mutex_);
  ready_.wait(lock, [&] { return closed_ || !queue_.empty(); });
  if (closed_) return {};
  return std::exchange(queue_, {});
}

void SessionOutbox::close() {
  {
    const std::lock_guard lock(mutex_);
    closed_ = true;
    queue_.clear();
  }
  ready_.notify_all();
}

bool SessionOutbox::overflowed() const {
  const std::lock_guard lock(mutex_);
  return overflowed_;
}

bool SessionOutbox::closed() const {
  const std::lock_guard lock(mutex_);
  return closed_;
}

size_t SessionOutbox::size() const {
  const std::lock_guard lock(mutex_);
  return queue_.size();
}

}  // namespace ot::controld
