#include "client/stream_scheduler.h"

#include <algorithm>

namespace ot::client {

void StreamScheduler::markReady(uint32_t connId) {
  if (members_.insert(connId).second) ring_.push_back(connId);
}

void StreamScheduler::remove(uint32_t connId) {
  if (members_.erase(connId) == 0) return;
  ring_.erase(std::find(ring_.begin(), ring_.end(), connId));
}

std::optional<uint32_t> StreamScheduler::next(size_t queuedBytes) {
  if (ring_.empty() || queuedBytes >= lowMark_) return std::nullopt;
  const uint32_t connId = ring_.front();
  ring_.pop_front();
  members_.erase(connId);
  return connId;
}

}  // namespace ot::client
