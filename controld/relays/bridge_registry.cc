#include "controld/relays/bridge_registry.h"

namespace ot::controld {

void BridgeRegistry::indexLocked(const BridgeEntry& bridge) {
  ++perTunnel_[bridge.tunnelId];
}

void BridgeRegistry::unindexLocked(const BridgeEntry& bridge) {
  auto it = perTunnel_.find(bridge.tunnelId);
  if (it == perTunnel_.end()) return;
  if (--it->second == 0) perTunnel_.erase(it);
}

void BridgeRegistry::replaceRelay(const std::string& relayKey, std::vector<BridgeEntry> bridges) {
  std::lock_guard lock(mutex_);
  auto& table = relays_[relayKey];
  for (const auto& [id, bridge] : table) unindexLocked(bridge);
  table.clear();
  for (auto& bridge : bridges) {
    indexLocked(bridge);
    auto id = bridge.bridgeId;
    table.insert_or_assign(std::move(id), std::move(bridge));
  }
}

void BridgeRegistry::attached(const std::string& relayKey, BridgeEntry bridge) {
  std::lock_guard lock(mutex_);
  auto& table = relays_[relayKey];
  auto existing = table.find(bridge.bridgeId);
  if (existing != table.end()) unindexLocked(existing->second);
  indexLocked(bridge);
  auto id = bridge.bridgeId;
  table.insert_or_assign(std::move(id), std::move(bridge));
}

void BridgeRegistry::detached(const std::string& relayKey, const std::string& bridgeId) {
  std::lock_guard lock(mutex_);
  auto relay = relays_.find(relayKey);
  if (relay == relays_.end()) return;
  auto it = relay->second.find(bridgeId);
  if (it == relay->second.end()) return;
  unindexLocked(it->second);
  relay->second.erase(it);
}

void BridgeRegistry::dropRelay(const std::string& relayKey) {
  std::lock_guard lock(mutex_);
  auto relay = relays_.find(relayKey);
  if (relay == relays_.end()) return;
  for (const auto& [id, bridge] : relay->second) unindexLocked(bridge);
  relays_.erase(relay);
}

size_t BridgeRegistry::bridgeCount(const std::string& tunnelId) const {
  std::lock_guard lock(mutex_);
  auto it = perTunnel_.find(tunnelId);
  return it == perTunnel_.end() ? 0 : it->second;
}

std::vector<BridgeEntry> BridgeRegistry::bridgesOf(const std::string& tunnelId) const {
  std::lock_guard lock(mutex_);
  std::vector<BridgeEntry> out;
  if (perTunnel_.find(tunnelId) == perTunnel_.end()) return out;
  for (const auto& [relay, table] : relays_) {
    for (const auto& [id, bridge] : table) {
      if (bridge.tunnelId == tunnelId) out.push_back(bridge);
    }
  }
  return out;
}

BridgeTotals BridgeRegistry::totals() const {
  std::lock_guard lock(mutex_);
  BridgeTotals totals;
  totals.relays = relays_.size();
  for (const auto& [relay, table] : relays_) totals.bridges += table.size();
  totals.tunnels = perTunnel_.size();
  return totals;
}

}  // namespace ot::controld
