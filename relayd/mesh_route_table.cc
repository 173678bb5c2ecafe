#include "relayd/mesh_route_table.h"

#include <algorithm>
#include <utility>

namespace ot::relayd {
namespace {

std::string routeKey(std::string_view tunnelId, std::string_view route) {
  std::string key;
  key.reserve(tunnelId.size() + 1 + route.size());
  key.append(tunnelId);
  key.push_back('\0');
  key.append(route);
  return key;
}

}  // namespace

std::string_view hostOfAddress(std::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return {};
  std::string_view host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

void MeshRouteTable::replace(uint64_t version, std::vector<MeshPeer> peers,
                             const std::vector<MeshRouteHolder>& holders) {
  version_ = version;
  peers_ = std::move(peers);
  routes_.clear();
  for (const MeshRouteHolder& holder : holders) add(holder);
}

MeshRouteTable::Apply MeshRouteTable::apply(const MeshRouteDelta& delta) {
  if (delta.version <= version_) return Apply::kStale;
  if (delta.version != version_ + 1) return Apply::kGap;
  version_ = delta.version;
  for (const MeshRouteHolder& holder : delta.removed) remove(holder);
  for (const MeshRouteHolder& holder : delta.added) add(holder);
  if (delta.peers) peers_ = *delta.peers;
  return Apply::kApplied;
}

void MeshRouteTable::add(const MeshRouteHolder& holder) {
  std::vector<Holder>& holders = routes_[routeKey(holder.tunnelId, holder.route)];
  // One entry per machine, origin and route: a machine with several bridges of one origin on a
  // route is one holder, at its newest attach (controld sends that one).
  std::erase_if(holders, [&](const Holder& h) {
    return h.machineId == holder.machineId && h.origin == holder.origin;
  });
  const Holder entry{holder.machineId, holder.attachedAtMs, holder.origin};
  const auto before = [](const Holder& a, const Holder& b) {
    if (a.attachedAtMs != b.attachedAtMs) return a.attachedAtMs > b.attachedAtMs;
    if (a.machineId != b.machineId) return a.machineId < b.machineId;
    return a.origin < b.origin;
  };
  holders.insert(std::upper_bound(holders.begin(), holders.end(), entry, before), entry);
}

void MeshRouteTable::remove(const MeshRouteHolder& holder) {
  const auto it = routes_.find(routeKey(holder.tunnelId, holder.route));
  if (it == routes_.end()) return;
  std::erase_if(it->second, [&](const Holder& h) {
    return h.machineId == holder.machineId && h.origin == holder.origin;
  });
  if (it->second.empty()) routes_.erase(it);
}

const MeshPeer* MeshRouteTable::peer(std::string_view machineId) const {
  for (const MeshPeer& candidate : peers_) {
    if (candidate.machineId == machineId) return &candidate;
  }
  return nullptr;
}

const std::vector<MeshRouteTable::Holder>* MeshRouteTable::holdersOf(std::string_view tunnelId,
                                                                     std::string_view route) const {
  lookupKey_.assign(tunnelId);
  lookupKey_.push_back('\0');
  lookupKey_.append(route);
  const auto it = routes_.find(lookupKey_);
  return it == routes_.end() ? nullptr : &it->second;
}

std::optional<MeshForwardTarget> MeshRouteTable::pick(std::string_view tunnelId,
                                                      std::string_view route,
                                                      std::string_view skipMachine) const {
  const std::vector<Holder>* holders = holdersOf(tunnelId, route);
  if (holders == nullptr) return std::nullopt;
  for (const Holder& holder : *holders) {
    if (!skipMachine.empty() && holder.machineId == skipMachine) continue;
    // A holder controld no longer lists as a peer (it was dropped in the same delta that should
    // have removed its routes) is never a target.
    if (const MeshPeer* known = peer(holder.machineId)) {
      return MeshForwardTarget{known->machineId, known->internalAddress, holder.origin};
    }
  }
  return std::nullopt;
}

std::optional<MeshForwardTarget> MeshRouteTable::pickOrigin(std::string_view tunnelId,
                                                            std::string_view route,
                                                            std::string_view origin,
                                                            std::string_view skipMachine) const {
  const std::vector<Holder>* holders = holdersOf(tunnelId, route);
  if (holders == nullptr) return std::nullopt;
  for (const Holder& holder : *holders) {
    if (holder.origin != origin) continue;
    if (!skipMachine.empty() && holder.machineId == skipMachine) continue;
    if (const MeshPeer* known = peer(holder.machineId)) {
      return MeshForwardTarget{known->machineId, known->internalAddress, holder.origin};
    }
  }
  return std::nullopt;
}

void MeshRouteTable::originsOf(std::string_view tunnelId, std::string_view route,
                               std::vector<std::string_view>& out) const {
  const std::vector<Holder>* holders = holdersOf(tunnelId, route);
  if (holders == nullptr) return;
  for (const Holder& holder : *holders) {
    const std::string_view name = holder.origin;
    if (std::find(out.begin(), out.end(), name) != out.end()) continue;
    if (peer(holder.machineId) != nullptr) out.push_back(name);
  }
}

bool MeshRouteTable::linkedFrom(std::string_view machineId, std::string_view peerHost) const {
  const MeshPeer* known = peer(machineId);
  return known != nullptr && known->linked && !peerHost.empty() &&
         hostOfAddress(known->internalAddress) == peerHost;
}

}  // namespace ot::relayd
