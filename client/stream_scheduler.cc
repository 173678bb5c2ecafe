#include "client/stream_scheduler.h"

#include <algorithm>
#include <utility>

namespace ot::client {

void StreamScheduler::markReady(uint32_t connId) {
  if (members_.insert(connId).second) ring_.push_back(connId);
}

void StreamScheduler::remove(uint32_t connId) {
  if (latest_.set && latest_.connId == connId) latest_ = std::exchange(latestOther_, Activity{});
  if (latestOther_.set && latestOther_.connId == connId) latestOther_ = Activity{};
  if (members_.erase(connId) == 0) return;
  ring_.erase(std::find(ring_.begin(), ring_.end(), connId));
}

void StreamScheduler::noteActive(uint32_t connId, uint64_t nowMs) {
  if (latest_.set && latest_.connId != connId) latestOther_ = latest_;
  latest_ = Activity{connId, nowMs, true};
}

bool StreamScheduler::othersActive(uint32_t connId, uint64_t nowMs) const {
  if (ring_.size() > members_.count(connId)) return true;
  const Activity& other = latest_.set && latest_.connId != connId ? latest_ : latestOther_;
  return other.set && nowMs < other.atMs + kActiveForMs;
}

uint64_t StreamScheduler::othersActiveUntil(uint32_t connId, uint64_t nowMs) const {
  const Activity& other = latest_.set && latest_.connId != connId ? latest_ : latestOther_;
  uint64_t until = other.set ? other.atMs + kActiveForMs : 0;
  if (ring_.size() > members_.count(connId)) until = std::max(until, nowMs + kActiveForMs);
  return until;
}

size_t StreamScheduler::sendAllowance(uint32_t connId, size_t window, uint64_t nowMs,
                                      uint64_t rttUs) const {
  if (!othersActive(connId, nowMs)) return window;
  return std::min<uint64_t>(window, window / 4 + kFairInFlight + rttUs * kBytesPerRttUs);
}

size_t StreamScheduler::receiveAllowance(uint32_t connId, size_t window, uint64_t nowMs,
                                         uint64_t rttUs) const {
  if (!othersActive(connId, nowMs)) return window;
  return std::min<uint64_t>(window, kFairInFlight + rttUs * kBytesPerRttUs);
}

std::optional<uint32_t> StreamScheduler::next(size_t queuedBytes) {
  if (ring_.empty() || queuedBytes >= lowMark_) return std::nullopt;
  const uint32_t connId = ring_.front();
  ring_.pop_front();
  members_.erase(connId);
  return connId;
}

}  // namespace ot::client
