#include "controld/relays/bridge_registry.h"

namespace ot::controld {

void BridgeRegistry::indexLocked(const BridgeEntry& bridge) {
  ++per_tunnel_[bridge.tunnel_id];
}

void BridgeRegistry::unindexLocked(const BridgeEntry& bridge) {
  auto it = per_tunnel_.find(bridge.tunnel_id);
  if (it == per_tunnel_.end()) return;
  if (--it->second == 0) per_tunnel_.erase(it);
}

void BridgeRegistry::replaceRelay(const std::string& relay_key, std::vector<BridgeEntry> bridges) {
  std::lock_guard lock(mutex_);
  auto& table = relays_[relay_key];
  for (const auto& [id, bridge] : table) unindexLocked(bridge);
  table.clear();
  for (auto& bridge : bridges) {
    indexLocked(bridge);
    auto id = bridge.bridge_id;
    table.insert_or_assign(std::move(id), std::move(bridge));
  }
}

void BridgeRegistry::attached(const std::string& relay_key, BridgeEntry bridge) {
  std::lock_guard lock(mutex_);
  auto& table = relays_[relay_key];
  auto existing = table.find(bridge.bridge_id);
  if (existing != table.end()) unindexLocked(existing->second);
  indexLocked(bridge);
  auto id = bridge.bridge_id;
  table.insert_or_assign(std::move(id), std::move(bridge));
}

void BridgeRegistry::detached(const std::string& relay_key, const std::string& bridge_id) {
  std::lock_guard lock(mutex_);
  auto relay = relays_.find(relay_key);
  if (relay == relays_.end()) return;
  auto it = relay->second.find(bridge_id);
  if (it == relay->second.end()) return;
  unindexLocked(it->second);
  relay->second.erase(it);
}

void BridgeRegistry::dropRelay(const std::string& relay_key) {
  std::lock_guard lock(mutex_);
  auto relay = relays_.find(relay_key);
  if (relay == relays_.end()) return;
  for (const auto& [id, bridge] : relay->second) unindexLocked(bridge);
  relays_.erase(relay);
}

size_t BridgeRegistry::bridgeCount(const std::string& tunnel_id) const {
  std::lock_guard lock(mutex_);
  auto it = per_tunnel_.find(tunnel_id);
  return it == per_tunnel_.end() ? 0 : it->second;
}

std::vector<BridgeEntry> BridgeRegistry::bridgesOf(const std::string& tunnel_id) const {
  std::lock_guard lock(mutex_);
  std::vector<BridgeEntry> out;
  if (per_tunnel_.find(tunnel_id) == per_tunnel_.end()) return out;
  for (const auto& [relay, table] : relays_) {
    for (const auto& [id, bridge] : table) {
      if (bridge.tunnel_id == tunnel_id) out.push_back(bridge);
    }
  }
  return out;
}

BridgeTotals BridgeRegistry::totals() const {
  std::lock_guard lock(mutex_);
  BridgeTotals totals;
  totals.relays = relays_.size();
  for (const auto& [relay, table] : relays_) totals.bridges += table.size();
  totals.tunnels = per_tunnel_.size();
  return totals;
}

}  // namespace ot::controld
