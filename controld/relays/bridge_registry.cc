#include "controld/relays/bridge_registry.h"

#include <unordered_set>
#include <utility>

namespace ot::controld {
namespace {

std::string bridgeKey(const std::string& relayKey, const std::string& bridgeId) {
  std::string key;
  key.reserve(relayKey.size() + 1 + bridgeId.size());
  key += relayKey;
  key += '\0';
  key += bridgeId;
  return key;
}

}  // namespace

void BridgeRegistry::addLocked(const std::string& relayKey, RelayBridges& relay,
                               BridgeEntry bridge) {
  auto [slot, inserted] = relay.try_emplace(bridge.bridgeId, bridge.tunnelId);
  if (!inserted) {
    removeLocked(relayKey, bridge.bridgeId, slot->second);
    slot->second = bridge.tunnelId;
  }
  TunnelBridges& tunnel = tunnels_[bridge.tunnelId];
  for (const auto& route : bridge.routes) ++tunnel.routeClaims[route];
  tunnel.bridges.insert_or_assign(bridgeKey(relayKey, bridge.bridgeId), std::move(bridge));
  ++bridgeTotal_;
}

// Takes the bridge out of its tunnel's index only; the caller updates the
// relay's table.
void BridgeRegistry::removeLocked(const std::string& relayKey, const std::string& bridgeId,
                                  const std::string& tunnelId) {
  auto tunnel = tunnels_.find(tunnelId);
  if (tunnel == tunnels_.end()) return;
  auto entry = tunnel->second.bridges.find(bridgeKey(relayKey, bridgeId));
  if (entry == tunnel->second.bridges.end()) return;
  auto& claims = tunnel->second.routeClaims;
  for (const auto& route : entry->second.routes) {
    auto claim = claims.find(route);
    if (claim != claims.end() && --claim->second == 0) claims.erase(claim);
  }
  tunnel->second.bridges.erase(entry);
  --bridgeTotal_;
  if (tunnel->second.bridges.empty()) tunnels_.erase(tunnel);
}

void BridgeRegistry::setObserver(BridgeRegistryObserver* observer) {
  std::lock_guard lock(mutex_);
  observer_ = observer;
}

void BridgeRegistry::replaceRelay(const std::string& relayKey, std::vector<BridgeEntry> bridges) {
  std::lock_guard lock(mutex_);
  if (observer_ != nullptr) observer_->relayReplaced(relayKey, bridges);
  RelayBridges& relay = relays_[relayKey];
  for (const auto& [bridgeId, tunnelId] : relay) removeLocked(relayKey, bridgeId, tunnelId);
  relay.clear();
  for (auto& bridge : bridges) addLocked(relayKey, relay, std::move(bridge));
}

void BridgeRegistry::attached(const std::string& relayKey, BridgeEntry bridge) {
  std::lock_guard lock(mutex_);
  if (observer_ != nullptr) observer_->bridgeAttached(relayKey, bridge);
  addLocked(relayKey, relays_[relayKey], std::move(bridge));
}

void BridgeRegistry::detached(const std::string& relayKey, const std::string& bridgeId) {
  std::lock_guard lock(mutex_);
  // Told even for a bridge not held here: an authorized attach that failed was announced.
  if (observer_ != nullptr) observer_->bridgeDetached(relayKey, bridgeId);
  auto relay = relays_.find(relayKey);
  if (relay == relays_.end()) return;
  auto it = relay->second.find(bridgeId);
  if (it == relay->second.end()) return;
  removeLocked(relayKey, bridgeId, it->second);
  relay->second.erase(it);
}

void BridgeRegistry::authorized(const std::string& relayKey, const BridgeEntry& bridge) {
  std::lock_guard lock(mutex_);
  if (observer_ != nullptr) observer_->bridgeAuthorized(relayKey, bridge);
}

void BridgeRegistry::dropRelay(const std::string& relayKey) {
  std::lock_guard lock(mutex_);
  auto relay = relays_.find(relayKey);
  if (relay == relays_.end()) return;
  for (const auto& [bridgeId, tunnelId] : relay->second) removeLocked(relayKey, bridgeId, tunnelId);
  relays_.erase(relay);
  if (observer_ != nullptr) observer_->relayDropped(relayKey);
}

size_t BridgeRegistry::bridgeCount(const std::string& tunnelId) const {
  std::lock_guard lock(mutex_);
  auto it = tunnels_.find(tunnelId);
  return it == tunnels_.end() ? 0 : it->second.bridges.size();
}

std::vector<BridgeEntry> BridgeRegistry::bridgesOf(const std::string& tunnelId) const {
  std::lock_guard lock(mutex_);
  std::vector<BridgeEntry> out;
  auto it = tunnels_.find(tunnelId);
  if (it == tunnels_.end()) return out;
  out.reserve(it->second.bridges.size());
  for (const auto& [key, bridge] : it->second.bridges) out.push_back(bridge);
  return out;
}

size_t BridgeRegistry::routeCountWith(const std::string& tunnelId,
                                      const std::vector<std::string>& requested) const {
  std::lock_guard lock(mutex_);
  auto it = tunnels_.find(tunnelId);
  const std::unordered_map<std::string, size_t>* claims =
      it == tunnels_.end() ? nullptr : &it->second.routeClaims;
  std::unordered_set<std::string_view> added;
  for (const auto& route : requested) {
    if (claims == nullptr || !claims->contains(route)) added.insert(route);
  }
  return (claims == nullptr ? 0 : claims->size()) + added.size();
}

BridgeTotals BridgeRegistry::totals() const {
  std::lock_guard lock(mutex_);
  BridgeTotals totals;
  totals.relays = relays_.size();
  totals.bridges = bridgeTotal_;
  totals.tunnels = tunnels_.size();
  return totals;
}

}  // namespace ot::controld
