#include "controld/store/session_pool.h"

#include <soci/session.h>

namespace ot::controld {

SessionPool::SessionPool(std::size_t size) : slots_(size) {
  for (Slot& slot : slots_) slot.session = std::make_unique<soci::session>();
}

SessionPool::~SessionPool() = default;

std::optional<std::size_t> SessionPool::acquire(std::chrono::milliseconds wait) {
  std::unique_lock lock(mutex_);
  std::optional<std::size_t> found;
  const auto pick = [&] {
    found.reset();
    std::optional<std::size_t> closed;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const Slot& slot = slots_[i];
      if (slot.lent) continue;
      if (!slot.open) {
        if (!closed) closed = i;
        continue;
      }
      if (!found || slot.times.idleSince > slots_[*found].times.idleSince) found = i;
    }
    if (!found) found = closed;
    return found.has_value();
  };
  if (!freed_.wait_for(lock, wait, pick)) return std::nullopt;
  slots_[*found].lent = true;
  return found;
}

bool SessionPool::tryAcquire(std::size_t index) {
  const std::lock_guard lock(mutex_);
  if (index >= slots_.size() || slots_[index].lent) return false;
  slots_[index].lent = true;
  return true;
}

void SessionPool::release(std::size_t index, PoolTime now) {
  {
    const std::lock_guard lock(mutex_);
    slots_[index].times.idleSince = now;
  }
  releaseUntouched(index);
}

void SessionPool::releaseUntouched(std::size_t index) {
  {
    const std::lock_guard lock(mutex_);
    Slot& slot = slots_[index];
    slot.open = slot.session->get_backend() != nullptr;
    slot.lent = false;
  }
  freed_.notify_one();
}

soci::session& SessionPool::session(std::size_t index) {
  return *slots_[index].session;
}

PoolSlotTimes& SessionPool::times(std::size_t index) {
  return slots_[index].times;
}

IdleVerdict idleVerdict(const PoolSlotTimes& times, PoolTime now, std::size_t openSessions,
                        const PoolLimits& limits) {
  if (now - times.openedAt >= limits.maxLifetime) return IdleVerdict::kRecycle;
  if (openSessions > limits.minIdle && now - times.idleSince >= limits.idleTimeout) {
    return IdleVerdict::kCloseIdle;
  }
  return IdleVerdict::kKeep;
}

}  // namespace ot::controld
