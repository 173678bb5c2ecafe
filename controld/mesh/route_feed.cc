#include "controld/mesh/route_feed.h"

#include <algorithm>
#include <utility>

namespace ot::mesh {
namespace {

// One holder: a machine's bridges of one origin on one (tunnel, route). The origin is part of the
// key so every machine sees which origins a peer holds (docs/pools-mesh.md).
std::string holderKey(std::string_view tunnelId, std::string_view route, std::string_view machineId,
                      std::string_view origin) {
  std::string key;
  key.reserve(tunnelId.size() + route.size() + machineId.size() + origin.size() + 3);
  key.append(tunnelId);
  key.push_back('\0');
  key.append(route);
  key.push_back('\0');
  key.append(machineId);
  key.push_back('\0');
  key.append(origin);
  return key;
}

// Tunnel IDs, routes (DNS labels), machine IDs and origin names never hold a NUL.
FeedHolder splitKey(const std::string& key, int64_t attachedAtMs) {
  const size_t first = key.find('\0');
  const size_t second = key.find('\0', first + 1);
  const size_t third = key.find('\0', second + 1);
  return FeedHolder{key.substr(0, first), key.substr(first + 1, second - first - 1),
                    key.substr(second + 1, third - second - 1), attachedAtMs,
                    key.substr(third + 1)};
}

std::string_view machineOfKey(const std::string& key) {
  const size_t second = key.find('\0', key.find('\0') + 1);
  const size_t third = key.find('\0', second + 1);
  return std::string_view(key).substr(second + 1, third - second - 1);
}

}  // namespace

void RouteFeed::machineCleared(const MachineLife& life) {
  auto [position, inserted] = machines_.try_emplace(life.machineId);
  Machine& machine = position->second;
  for (const auto& [id, bridge] : machine.bridges) removeTimes(life.machineId, bridge);
  machine.bridges.clear();
  machine.draining = life.draining;
  machine.internalAddress = life.internalAddress;
  peersDirty_ = true;  // new, or perhaps a new address: takeDelta compares
}

void RouteFeed::bridgeAdded(const std::string& machineId, const BridgeEntry& entry,
                            int64_t attachedAtMs) {
  Machine& machine = machines_[machineId];
  Bridge bridge{entry.tunnelId, {}, attachedAtMs, entry.origin};
  bridge.routes.reserve(entry.routes.size());
  for (const std::string& route : entry.routes) {
    if (std::find(bridge.routes.begin(), bridge.routes.end(), route) == bridge.routes.end()) {
      bridge.routes.push_back(route);
    }
  }
  auto [position, inserted] = machine.bridges.try_emplace(entry.bridgeId);
  if (!inserted) removeTimes(machineId, position->second);  // announced again: replaces
  addTimes(machineId, bridge);
  position->second = std::move(bridge);
}

void RouteFeed::bridgeRemoved(const std::string& machineId, std::string_view bridgeId) {
  auto machine = machines_.find(machineId);
  if (machine == machines_.end()) return;
  auto bridge = machine->second.bridges.find(std::string(bridgeId));
  if (bridge == machine->second.bridges.end()) return;
  removeTimes(machineId, bridge->second);
  machine->second.bridges.erase(bridge);
}

void RouteFeed::machineDraining(const std::string& machineId, bool draining) {
  auto machine = machines_.find(machineId);
  if (machine == machines_.end() || machine->second.draining == draining) return;
  machine->second.draining = draining;
  markMachineDirty(machineId, machine->second);
}

void RouteFeed::machineDropped(const std::string& machineId) {
  auto machine = machines_.find(machineId);
  if (machine == machines_.end()) return;
  for (const auto& [id, bridge] : machine->second.bridges) removeTimes(machineId, bridge);
  machines_.erase(machine);
  peersDirty_ = true;
}

void RouteFeed::setLinked(const std::string& machineId, bool linked) {
  if (linked) {
    linked_.insert(machineId);
  } else {
    linked_.erase(machineId);
  }
  peersDirty_ = true;
}

void RouteFeed::addTimes(const std::string& machineId, const Bridge& bridge) {
  for (const std::string& route : bridge.routes) {
    std::string key = holderKey(bridge.tunnelId, route, machineId, bridge.origin);
    times_[key].push_back(bridge.attachedAtMs);
    dirty_.insert(std::move(key));
  }
}

void RouteFeed::removeTimes(const std::string& machineId, const Bridge& bridge) {
  for (const std::string& route : bridge.routes) {
    std::string key = holderKey(bridge.tunnelId, route, machineId, bridge.origin);
    auto times = times_.find(key);
    if (times == times_.end()) continue;
    auto& list = times->second;
    if (auto one = std::find(list.begin(), list.end(), bridge.attachedAtMs); one != list.end()) {
      *one = list.back();
      list.pop_back();
    }
    if (list.empty()) times_.erase(times);
    dirty_.insert(std::move(key));
  }
}

void RouteFeed::markMachineDirty(const std::string& machineId, const Machine& machine) {
  for (const auto& [id, bridge] : machine.bridges) {
    for (const std::string& route : bridge.routes) {
      dirty_.insert(holderKey(bridge.tunnelId, route, machineId, bridge.origin));
    }
  }
}

std::vector<FeedPeer> RouteFeed::currentPeers() const {
  std::vector<FeedPeer> peers;
  peers.reserve(machines_.size());
  for (const auto& [id, machine] : machines_) {
    peers.push_back(FeedPeer{id, machine.internalAddress, linked_.contains(id)});
  }
  std::sort(peers.begin(), peers.end(),
            [](const FeedPeer& a, const FeedPeer& b) { return a.machineId < b.machineId; });
  return peers;
}

std::optional<FeedDelta> RouteFeed::takeDelta() {
  FeedDelta delta;
  for (const std::string& key : dirty_) {
    std::optional<int64_t> newest;
    if (auto times = times_.find(key); times != times_.end()) {
      auto machine = machines_.find(std::string(machineOfKey(key)));
      if (machine != machines_.end() && !machine->second.draining) {
        newest = *std::max_element(times->second.begin(), times->second.end());
      }
    }
    auto published = published_.find(key);
    if (newest) {
      if (published != published_.end() && published->second == *newest) continue;
      published_[key] = *newest;
      delta.added.push_back(splitKey(key, *newest));
    } else if (published != published_.end()) {
      published_.erase(published);
      delta.removed.push_back(splitKey(key, 0));
    }
  }
  dirty_.clear();
  if (peersDirty_) {
    peersDirty_ = false;
    auto peers = currentPeers();
    if (peers != publishedPeers_) {
      publishedPeers_ = peers;
      delta.peers = std::move(peers);
    }
  }
  if (delta.added.empty() && delta.removed.empty() && !delta.peers) return std::nullopt;
  delta.version = ++version_;
  return delta;
}

FeedSnapshot RouteFeed::snapshot() const {
  FeedSnapshot snapshot{version_, publishedPeers_, {}};
  snapshot.holders.reserve(published_.size());
  for (const auto& [key, attachedAtMs] : published_) {
    snapshot.holders.push_back(splitKey(key, attachedAtMs));
  }
  return snapshot;
}

}  // namespace ot::mesh
