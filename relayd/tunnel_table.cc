#include "relayd/tunnel_table.h"

#include <openssl/crypto.h>

#include <algorithm>

#include "common/crypto.h"

namespace ot::relayd {

namespace {

bool hashEquals(const Sha256& expected, std::string_view secret) {
  const auto digest = crypto::sha256(secret);
  return CRYPTO_memcmp(expected.data(), digest.data(), expected.size()) == 0;
}

}  // namespace

bool TunnelTable::upsertRecord(const std::string& tunnelId, CachedRecord record) {
  ++changes_;
  Tunnel& tunnel = tunnels_[tunnelId];
  missing_.erase(tunnelId);
  tunnel.used = true;
  if (tunnel.haveRecord && tunnel.record.deleted) return false;  // deletion is final
  if (tunnel.haveRecord && !record.deleted && record.revision < tunnel.record.revision)
    return false;
  tunnel.haveRecord = true;
  tunnel.record = std::move(record);
  tunnel.recordFresh = true;
  return true;
}

size_t TunnelTable::certificatesExpiringBy(int64_t deadlineUnixMs) const {
  size_t count = 0;
  for (const auto& [id, tunnel] : tunnels_) {
    const CachedRecord& record = tunnel.record;
    if (tunnel.bridges.empty() || !tunnel.haveRecord || record.deleted || !record.certReady) {
      continue;
    }
    if (record.certNotAfterMs > 0 && record.certNotAfterMs <= deadlineUnixMs) ++count;
  }
  return count;
}

void TunnelTable::markDeleted(const std::string& tunnelId) {
  ++changes_;
  Tunnel& tunnel = tunnels_[tunnelId];
  tunnel.used = true;
  tunnel.haveRecord = true;
  tunnel.record.deleted = true;
  tunnel.record.certReady = false;
}

void TunnelTable::dropRecord(const std::string& tunnelId) {
  ++changes_;
  auto it = tunnels_.find(tunnelId);
  if (it == tunnels_.end()) return;
  it->second.haveRecord = false;
  it->second.record = CachedRecord{};
  eraseIfEmpty(it);
}

const CachedRecord* TunnelTable::record(std::string_view tunnelId) const {
  auto it = tunnels_.find(std::string(tunnelId));
  if (it == tunnels_.end() || !it->second.haveRecord) return nullptr;
  it->second.used = true;
  return &it->second.record;
}

void TunnelTable::markMissing(const std::string& tunnelId, uint64_t nowMs, uint64_t ttlMs) {
  // Bounded: expired entries are dropped whenever the map grows large.
  if (missing_.size() > 100'000) {
    std::erase_if(missing_, [nowMs](const auto& entry) { return entry.second <= nowMs; });
    if (missing_.size() > 100'000) missing_.clear();
  }
  missing_[tunnelId] = nowMs + ttlMs;
}

bool TunnelTable::knownMissing(std::string_view tunnelId, uint64_t nowMs) const {
  auto it = missing_.find(std::string(tunnelId));
  return it != missing_.end() && it->second > nowMs;
}

std::vector<std::string> TunnelTable::recheckNegative() {
  missing_.clear();
  std::vector<std::string> reread;
  for (auto it = tunnels_.begin(); it != tunnels_.end();) {
    Tunnel& tunnel = it->second;
    if (!tunnel.haveRecord || tunnel.record.deleted || tunnel.record.certReady) {
      ++it;
      continue;
    }
    if (!tunnel.bridges.empty()) {
      reread.push_back(it->first);
      ++it;
      continue;
    }
    // No bridge here: nothing routes by it, and the next upgrade or attach reads it afresh.
    it = tunnels_.erase(it);
  }
  return reread;
}

TunnelTable::Sweep TunnelTable::sweep(uint64_t nowMs, bool dropIdle) {
  ++changes_;
  Sweep result;
  std::erase_if(missing_, [nowMs](const auto& entry) { return entry.second <= nowMs; });
  for (auto it = tunnels_.begin(); it != tunnels_.end();) {
    Tunnel& tunnel = it->second;
    if (tunnel.bridges.empty()) {
      if (tunnel.used) {
        tunnel.idleSinceMs = nowMs;
      } else if (dropIdle && nowMs - tunnel.idleSinceMs >= kIdleDropMs) {
        it = tunnels_.erase(it);
        ++result.dropped;
        continue;
      }
    }
    tunnel.used = false;
    if (tunnel.recordFresh) {
      tunnel.recordFresh = false;
      tunnel.recordAtMs = nowMs;
    } else if (tunnel.haveRecord && !tunnel.record.deleted && !tunnel.record.certReady &&
               !tunnel.bridges.empty() && nowMs - tunnel.recordAtMs >= kRereadNotReadyMs) {
      tunnel.recordAtMs = nowMs;  // asked once per TTL, whatever the answer
      result.reread.push_back(it->first);
    }
    tunnel.hold.sweep(nowMs, tunnel.record.stickyHoldMs);
    ++it;
  }
  return result;
}

bool TunnelTable::credentialMatches(const CachedRecord& record, std::string_view token,
                                    std::string_view origin) {
  if (hashEquals(record.tokenSha256, token)) return true;
  for (const auto& [name, hash] : record.origins) {
    if (name == origin) return hashEquals(hash, token);
  }
  return false;
}

bool TunnelTable::routesFit(std::string_view tunnelId,
                            const std::vector<std::string>& routes) const {
  auto it = tunnels_.find(std::string(tunnelId));
  uint32_t limit = limits_.maxRoutesPerTunnel;
  size_t distinct = 0;
  if (it != tunnels_.end()) {
    if (it->second.haveRecord && it->second.record.maxRoutes != 0) {
      limit = std::min(limit, it->second.record.maxRoutes);
    }
    distinct = it->second.routeClaims.size();
    for (const auto& route : routes) {
      if (!it->second.routeClaims.contains(route)) ++distinct;
    }
  } else {
    distinct = routes.size();
  }
  return distinct <= limit;
}

uint32_t TunnelTable::bridgeConnLimit(std::string_view tunnelId, uint32_t clientMaxConns) const {
  uint32_t limit = std::min(clientMaxConns, limits_.maxConnsPerBridge);
  if (const CachedRecord* cached = record(tunnelId);
      cached != nullptr && cached->maxConnsPerBridge != 0) {
    limit = std::min(limit, cached->maxConnsPerBridge);
  }
  return std::max<uint32_t>(limit, 1);
}

uint32_t TunnelTable::tunnelConnLimit(const Tunnel& tunnel) const {
  uint32_t limit = limits_.maxConnsPerTunnel;
  if (tunnel.haveRecord && tunnel.record.maxConnsPerTunnel != 0) {
    limit = std::min(limit, tunnel.record.maxConnsPerTunnel);
  }
  return limit;
}

BridgeOrigin TunnelTable::classifyAttach(const CachedRecord* record, std::string_view token,
                                         std::string origin, std::string profile,
                                         uint32_t profileIndex) {
  BridgeOrigin result;
  result.profileIndex = profileIndex;
  if (record != nullptr && !hashEquals(record->tokenSha256, token)) {
    for (const auto& [name, hash] : record->origins) {
      if (name != origin || !hashEquals(hash, token)) continue;
      result.derivedCredential = true;
      result.credentialSha256 = hash;
      break;
    }
  }
  result.origin = std::move(origin);
  result.profile = std::move(profile);
  return result;
}

void TunnelTable::addBridge(const std::string& tunnelId, uint64_t bridgeKey,
                            std::vector<std::string> routes, uint32_t maxConns, BridgeOrigin origin,
                            uint64_t nowMs) {
  ++changes_;
  Tunnel& tunnel = tunnels_[tunnelId];
  for (const auto& route : routes) ++tunnel.routeClaims[route];
  const bool firstOfOrigin =
      std::none_of(tunnel.bridges.begin(), tunnel.bridges.end(),
                   [&](const BridgeEntry& entry) { return entry.origin.origin == origin.origin; });
  if (firstOfOrigin) tunnel.hold.linksUp(origin.origin, nowMs, !tunnel.bridges.empty());
  tunnel.bridges.push_back(
      BridgeEntry{bridgeKey, std::move(routes), maxConns, 0, false, std::move(origin)});
  ++bridgeCount_;
}

std::vector<uint64_t> TunnelTable::revokedBridges(std::string_view tunnelId) const {
  std::vector<uint64_t> revoked;
  auto it = tunnels_.find(std::string(tunnelId));
  if (it == tunnels_.end() || !it->second.haveRecord) return revoked;
  const CachedRecord& record = it->second.record;
  for (const auto& bridge : it->second.bridges) {
    if (!bridge.origin.derivedCredential) continue;
    const bool listed =
        std::any_of(record.origins.begin(), record.origins.end(), [&](const auto& entry) {
          return entry.first == bridge.origin.origin &&
                 CRYPTO_memcmp(entry.second.data(), bridge.origin.credentialSha256.data(),
                               entry.second.size()) == 0;
        });
    if (!listed) revoked.push_back(bridge.key);
  }
  return revoked;
}

const BridgeOrigin* TunnelTable::bridgeOrigin(std::string_view tunnelId, uint64_t bridgeKey) const {
  auto it = tunnels_.find(std::string(tunnelId));
  if (it == tunnels_.end()) return nullptr;
  for (const auto& bridge : it->second.bridges) {
    if (bridge.key == bridgeKey) return &bridge.origin;
  }
  return nullptr;
}

void TunnelTable::removeBridge(const std::string& tunnelId, uint64_t bridgeKey, uint64_t nowMs) {
  ++changes_;
  auto it = tunnels_.find(tunnelId);
  if (it == tunnels_.end()) return;
  Tunnel& tunnel = it->second;
  auto bridge =
      std::find_if(tunnel.bridges.begin(), tunnel.bridges.end(),
                   [bridgeKey](const BridgeEntry& entry) { return entry.key == bridgeKey; });
  if (bridge == tunnel.bridges.end()) return;
  for (const auto& route : bridge->routes) {
    auto claim = tunnel.routeClaims.find(route);
    if (claim != tunnel.routeClaims.end() && --claim->second == 0) tunnel.routeClaims.erase(claim);
  }
  tunnel.open -= std::min(tunnel.open, bridge->open);
  const std::string origin = std::move(bridge->origin.origin);
  tunnel.bridges.erase(bridge);
  const bool lastOfOrigin =
      std::none_of(tunnel.bridges.begin(), tunnel.bridges.end(),
                   [&](const BridgeEntry& entry) { return entry.origin.origin == origin; });
  if (lastOfOrigin) tunnel.hold.linksLost(origin, nowMs);
  tunnel.used = true;  // its idle time starts with its last bridge gone
  --bridgeCount_;
  eraseIfEmpty(it);
}

void TunnelTable::setDraining(const std::string& tunnelId, uint64_t bridgeKey) {
  auto it = tunnels_.find(tunnelId);
  if (it == tunnels_.end()) return;
  for (auto& bridge : it->second.bridges) {
    if (bridge.key == bridgeKey) bridge.draining = true;
  }
}

std::vector<uint64_t> TunnelTable::bridgesOf(std::string_view tunnelId) const {
  std::vector<uint64_t> keys;
  auto it = tunnels_.find(std::string(tunnelId));
  if (it == tunnels_.end()) return keys;
  for (const auto& bridge : it->second.bridges) keys.push_back(bridge.key);
  return keys;
}

size_t TunnelTable::bridgeCountOf(std::string_view tunnelId) const {
  auto it = tunnels_.find(std::string(tunnelId));
  return it == tunnels_.end() ? 0 : it->second.bridges.size();
}

TunnelTable::Pick TunnelTable::pickBridge(std::string_view tunnelId, std::string_view route,
                                          std::string_view visitorKey, uint64_t nowMs,
                                          const PickOptions& options) {
  auto it = tunnels_.find(std::string(tunnelId));
  if (it != tunnels_.end()) it->second.used = true;
  if (it == tunnels_.end() || !it->second.haveRecord || it->second.record.deleted) {
    return {PickResult::kUnknownTunnel, 0, {}};
  }
  Tunnel& tunnel = it->second;
  if (!tunnel.record.certReady) return {PickResult::kCertNotReady, 0, {}};
  if (tunnel.bridges.empty()) return {PickResult::kNoBridge, 0, {}};
  if (!tunnel.routeClaims.contains(route)) return {PickResult::kUnknownRoute, 0, {}};
  if (tunnel.open >= tunnelConnLimit(tunnel)) return {PickResult::kTooManyConnections, 0, {}};
  const auto usable = [route](const BridgeEntry& bridge) {
    return !bridge.draining && bridge.open < bridge.maxConns &&
           std::find(bridge.routes.begin(), bridge.routes.end(), route) != bridge.routes.end();
  };
  // The origins with a usable bridge: a tunnel has a few (at most 32 named), so a linear scan.
  candidates_.clear();
  bool anyServing = false;
  for (const auto& bridge : tunnel.bridges) {
    if (bridge.draining) continue;
    if (std::find(bridge.routes.begin(), bridge.routes.end(), route) == bridge.routes.end())
      continue;
    anyServing = true;
    if (bridge.open >= bridge.maxConns) continue;
    const std::string_view name = bridge.origin.origin;
    if (std::none_of(candidates_.begin(), candidates_.end(),
                     [name](const OriginCandidate& known) { return known.name == name; })) {
      candidates_.push_back({name, 1.0, tunnel.hold.held(name, nowMs, tunnel.record.stickyHoldMs)});
    }
  }
  const size_t localCount = candidates_.size();
  size_t chosen = localCount;
  if (!options.origin.empty()) {
    // Forwarded with its origin chosen: honoured when that origin has a usable link here.
    for (size_t i = 0; i < localCount; ++i) {
      if (candidates_[i].name == options.origin) chosen = i;
    }
  }
  if (chosen == localCount) {
    // The mesh's origins join unheld (the hold is this machine's: docs/pools-mesh.md).
    for (const std::string_view name : options.remoteOrigins) {
      if (std::none_of(candidates_.begin(), candidates_.end(),
                       [name](const OriginCandidate& known) { return known.name == name; })) {
        candidates_.push_back({name, 1.0, false});
      }
    }
    chosen = chooseOrigin(visitorKey, candidates_);
  }
  if (chosen >= localCount && chosen < candidates_.size()) {
    return {PickResult::kRemote, 0, candidates_[chosen].name};
  }
  if (chosen == candidates_.size()) {
    return {anyServing ? PickResult::kTooManyConnections : PickResult::kNoBridge, 0, {}};
  }
  const std::string_view origin = candidates_[chosen].name;
  // priority: only the lowest profile_index with a usable link of this origin takes part.
  uint32_t profileIndex = 0;
  const bool priority = tunnel.record.balancing == Balancing::kPriority;
  if (priority) {
    profileIndex = UINT32_MAX;
    for (const auto& bridge : tunnel.bridges) {
      if (bridge.origin.origin == origin && usable(bridge))
        profileIndex = std::min(profileIndex, bridge.origin.profileIndex);
    }
  }
  BridgeEntry* best = nullptr;
  for (auto& bridge : tunnel.bridges) {
    if (bridge.origin.origin != origin || !usable(bridge)) continue;
    if (priority && bridge.origin.profileIndex != profileIndex) continue;
    if (best == nullptr || bridge.open <= best->open) best = &bridge;
  }
  ++best->open;
  ++tunnel.open;
  return {PickResult::kOk, best->key, {}};
}

void TunnelTable::connectionClosed(std::string_view tunnelId, uint64_t bridgeKey) {
  auto it = tunnels_.find(std::string(tunnelId));
  if (it == tunnels_.end()) return;
  for (auto& bridge : it->second.bridges) {
    if (bridge.key == bridgeKey && bridge.open > 0) {
      --bridge.open;
      if (it->second.open > 0) --it->second.open;
      return;
    }
  }
}

void TunnelTable::eraseIfEmpty(std::unordered_map<std::string, Tunnel>::iterator it) {
  if (!it->second.haveRecord && it->second.bridges.empty()) tunnels_.erase(it);
}

}  // namespace ot::relayd
