#include "controld/mesh/outbound_queue.h"

#include <utility>

namespace ot::mesh {

bool OutboundQueue::push(std::string frame, int64_t nowMs) {
  if (overflowed_ || frames_.size() >= maxFrames_) {
    overflowed_ = true;
    return false;
  }
  bytes_ += frame.size();
  frames_.push_back(std::move(frame));
  lastPushAtMs_ = nowMs;
  return true;
}

void OutboundQueue::pop() {
  bytes_ -= frames_.front().size();
  frames_.pop_front();
}

}  // namespace ot::mesh
