#include "controld/mesh/route_feed_pump.h"

#include <algorithm>
#include <utility>

namespace ot::mesh {

RouteFeedPump::RouteFeedPump(BridgeTable& table) : table_(table) {
  table_.setObserver(this);
}

RouteFeedPump::~RouteFeedPump() {
  table_.setObserver(nullptr);
}

void RouteFeedPump::start(uv_loop_t* loop) {
  uv_timer_init(loop, &timer_);
  timer_.data = this;
  uv_async_init(loop, &wake_, [](uv_async_t* async) {
    static_cast<RouteFeedPump*>(async->data)->serveRequests();
  });
  wake_.data = this;
  running_ = true;
  const std::lock_guard lock(mutex_);
  open_ = true;
  if (!requests_.empty()) uv_async_send(&wake_);  // asked before the loop ran
}

void RouteFeedPump::close() {
  if (!running_) return;
  running_ = false;
  {
    const std::lock_guard lock(mutex_);
    open_ = false;
    requests_.clear();
  }
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&wake_), nullptr);
}

void RouteFeedPump::linked(const std::string& machineId, bool up) {
  feed_.setLinked(machineId, up);
  arm();
}

void RouteFeedPump::requestSnapshot(std::string relayKey) {
  const std::lock_guard lock(mutex_);
  requests_.push_back(std::move(relayKey));
  if (open_) uv_async_send(&wake_);
}

void RouteFeedPump::machineCleared(const MachineLife& life) {
  feed_.machineCleared(life);
  arm();
}

void RouteFeedPump::bridgeAdded(const std::string& machineId, const BridgeEntry& bridge,
                                int64_t attachedAtMs) {
  feed_.bridgeAdded(machineId, bridge, attachedAtMs);
  arm();
}

void RouteFeedPump::bridgeRemoved(const std::string& machineId, std::string_view bridgeId) {
  feed_.bridgeRemoved(machineId, bridgeId);
  arm();
}

void RouteFeedPump::machineDraining(const std::string& machineId, bool draining) {
  feed_.machineDraining(machineId, draining);
  arm();
}

void RouteFeedPump::machineDropped(const std::string& machineId) {
  feed_.machineDropped(machineId);
  arm();
}

// The first change of a batch starts the timer; the ones within kBatchMs ride along.
void RouteFeedPump::arm() {
  if (!running_ || armed_) return;
  armed_ = true;
  uv_timer_start(
      &timer_, [](uv_timer_t* timer) { static_cast<RouteFeedPump*>(timer->data)->flush(); },
      kBatchMs, 0);
}

void RouteFeedPump::flush() {
  armed_ = false;
  if (auto delta = feed_.takeDelta(); delta && sink_.delta) sink_.delta(*delta);
}

void RouteFeedPump::holdSnapshots(bool held) {
  if (held_ == held) return;
  held_ = held;
  if (!held_) serveRequests();
}

void RouteFeedPump::serveRequests() {
  if (held_) return;
  std::vector<std::string> requests;
  {
    const std::lock_guard lock(mutex_);
    requests.swap(requests_);
  }
  if (requests.empty() || !running_) return;
  std::sort(requests.begin(), requests.end());
  requests.erase(std::unique(requests.begin(), requests.end()), requests.end());
  // What is pending goes to the sessions that have a snapshot, so the one taken now is the
  // current state at the version every session has reached.
  if (armed_) uv_timer_stop(&timer_);
  flush();
  const FeedSnapshot snapshot = feed_.snapshot();
  for (const std::string& key : requests) {
    if (sink_.snapshot) sink_.snapshot(key, snapshot);
  }
}

}  // namespace ot::mesh
