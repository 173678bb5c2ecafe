#include "controld/mesh/local_bridges.h"

#include <algorithm>
#include <unordered_set>

namespace ot::mesh {

BridgeEntry LocalBridges::convert(const controld::BridgeEntry& bridge) const {
  BridgeEntry entry;
  entry.machine = machineId_;
  entry.tunnelId = bridge.tunnelId;
  entry.bridgeId = bridge.bridgeId;
  entry.routes = bridge.routes;
  if (entry.routes.empty()) entry.routes.emplace_back();  // the bare hostname
  entry.attachedAtMs = bridge.attachedAtMs;
  entry.origin = bridge.origin;
  entry.profileIndex = bridge.profileIndex;
  return entry;
}

void LocalBridges::attach(const std::string& relayKey, BridgeEntry entry,
                          std::vector<FrameBody>& out, bool pending, int64_t nowMs) {
  auto found = bridges_.find(entry.bridgeId);
  if (found != bridges_.end()) {
    Held& held = found->second;
    // Unchanged, or relayd confirming what was announced at authorization (its attach time is
    // relayd's, a little later): nothing to announce.
    const bool confirms = held.pending && held.entry.tunnelId == entry.tunnelId &&
                          held.entry.routes == entry.routes && held.entry.origin == entry.origin &&
                          held.entry.profileIndex == entry.profileIndex;
    if (held.entry == entry || confirms) {
      held.relayKey = relayKey;
      if (!pending && held.pending) {
        held.pending = false;
        --pendingCount_;
      }
      return;
    }
    if (held.pending) --pendingCount_;
  }
  out.emplace_back(Attached{++sequence_, entry});
  std::get<Attached>(out.back()).bridge.machine.clear();  // implied by the link on the wire
  if (pending) {
    ++pendingCount_;
    pendingOrder_.emplace_back(nowMs, entry.bridgeId);
  }
  std::string bridgeId = entry.bridgeId;
  bridges_.insert_or_assign(std::move(bridgeId), Held{relayKey, std::move(entry), pending, nowMs});
}

void LocalBridges::detach(const std::string& bridgeId, std::vector<FrameBody>& out) {
  auto found = bridges_.find(bridgeId);
  if (found == bridges_.end()) return;
  out.emplace_back(Detached{++sequence_, found->second.entry.tunnelId, bridgeId});
  if (found->second.pending) --pendingCount_;
  bridges_.erase(found);
}

std::vector<FrameBody> LocalBridges::apply(const LocalChange& change, int64_t nowMs) {
  std::vector<FrameBody> out;
  switch (change.kind) {
    case LocalChange::Kind::kReplaced: {
      std::unordered_set<std::string> kept;
      for (const auto& bridge : change.bridges) kept.insert(bridge.bridgeId);
      std::vector<std::string> gone;
      for (const auto& [bridgeId, held] : bridges_) {
        if (held.relayKey == change.relayKey && !kept.contains(bridgeId)) gone.push_back(bridgeId);
      }
      std::sort(gone.begin(), gone.end());
      for (const auto& bridgeId : gone) detach(bridgeId, out);
      for (const auto& bridge : change.bridges) attach(change.relayKey, convert(bridge), out);
      break;
    }
    case LocalChange::Kind::kAttached:
      for (const auto& bridge : change.bridges) attach(change.relayKey, convert(bridge), out);
      break;
    case LocalChange::Kind::kAuthorized:
      for (const auto& bridge : change.bridges) {
        attach(change.relayKey, convert(bridge), out, true, nowMs);
      }
      break;
    case LocalChange::Kind::kDetached: {
      auto found = bridges_.find(change.bridgeId);
      if (found != bridges_.end() && found->second.relayKey == change.relayKey) {
        detach(change.bridgeId, out);
      }
      break;
    }
    case LocalChange::Kind::kDropped: {
      std::vector<std::string> gone;
      for (const auto& [bridgeId, held] : bridges_) {
        if (held.relayKey == change.relayKey) gone.push_back(bridgeId);
      }
      std::sort(gone.begin(), gone.end());
      for (const auto& bridgeId : gone) detach(bridgeId, out);
      break;
    }
  }
  return out;
}

std::vector<FrameBody> LocalBridges::expirePending(int64_t nowMs, int64_t boundMs) {
  std::vector<std::string> gone;
  while (!pendingOrder_.empty() && nowMs - pendingOrder_.front().first >= boundMs) {
    auto [authorizedAtMs, bridgeId] = std::move(pendingOrder_.front());
    pendingOrder_.pop_front();
    auto found = bridges_.find(bridgeId);
    // Still the same authorization, never confirmed (a later one has its own item).
    if (found != bridges_.end() && found->second.pending &&
        found->second.authorizedAtMs == authorizedAtMs) {
      gone.push_back(std::move(bridgeId));
    }
  }
  std::sort(gone.begin(), gone.end());
  gone.erase(std::unique(gone.begin(), gone.end()), gone.end());
  std::vector<FrameBody> out;
  for (const auto& bridgeId : gone) detach(bridgeId, out);
  return out;
}

std::vector<std::string> LocalBridges::tunnelIds() const {
  std::vector<std::string> tunnels;
  tunnels.reserve(bridges_.size());
  for (const auto& [bridgeId, held] : bridges_) tunnels.push_back(held.entry.tunnelId);
  std::sort(tunnels.begin(), tunnels.end());
  tunnels.erase(std::unique(tunnels.begin(), tunnels.end()), tunnels.end());
  return tunnels;
}

std::vector<BridgeEntry> LocalBridges::snapshot() const {
  std::vector<BridgeEntry> entries;
  entries.reserve(bridges_.size());
  for (const auto& [bridgeId, held] : bridges_) entries.push_back(held.entry);
  std::sort(entries.begin(), entries.end(),
            [](const BridgeEntry& a, const BridgeEntry& b) { return a.bridgeId < b.bridgeId; });
  return entries;
}

std::vector<BridgeEntry> LocalBridges::bridgesOf(std::string_view tunnelId) const {
  std::vector<BridgeEntry> out;
  for (const auto& [id, held] : bridges_) {
    if (held.entry.tunnelId == tunnelId) out.push_back(held.entry);
  }
  return out;
}

}  // namespace ot::mesh
