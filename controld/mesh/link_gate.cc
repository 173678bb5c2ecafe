#include "controld/mesh/link_gate.h"

#include <utility>

#include "common/mesh_proof.h"

namespace ot::mesh {

std::optional<std::string_view> LinkGate::update(int64_t nowMs, bool relaySnapshot) {
  if (open_) return std::nullopt;
  if (relaySnapshot) {
    open_ = true;
    return "relay_snapshot";
  }
  if (nowMs >= opensAtLatestMs_) {
    open_ = true;
    return "no_relay_session";
  }
  return std::nullopt;
}

bool LinkGate::defer(ReceivedHandoff& received) {
  if (open_ || deferred_.size() >= kMaxPreAuthConnections) return false;
  deferred_.push_back(std::move(received));
  return true;
}

std::vector<ReceivedHandoff> LinkGate::takeDeferred() {
  std::vector<ReceivedHandoff> taken;
  taken.swap(deferred_);
  return taken;
}

}  // namespace ot::mesh
