// relayd's view of the tunnels it serves (pure logic, loop thread only): the cached part of each
// tunnel record controld pushed (token hash, certificate readiness, limits, deletion), the bridges
// attached here with the routes they claimed, and the visitor connections each carries. Visitors
// are routed from here alone, so relayd keeps working while controld is away.
//
// Bridges are named by an opaque key chosen by the caller (the BridgeSession's number).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "relayd/origin_choice.h"

namespace ot::relayd {

using Sha256 = std::array<uint8_t, 32>;

// How visitors are spread over the chosen origin's links (TunnelRecord.balancing).
enum class Balancing : uint8_t {
  kSpread,    // every usable link of the origin; the one with the fewest open streams
  kPriority,  // the lowest profile_index with a usable link, then its fewest-open link
};

inline constexpr uint32_t kDefaultStickyHoldMs = 10'000;

struct CachedRecord {
  uint64_t revision = 0;
  Sha256 tokenSha256{};
  bool certReady = false;
  int64_t certNotAfterMs = 0;  // the certificate leaf's notAfter (Unix ms) when certReady, else 0
  bool deleted = false;
  uint32_t maxConnsPerBridge = 0;  // 0: the machine's limit
  uint32_t maxConnsPerTunnel = 0;
  uint32_t maxRoutes = 0;
  std::vector<std::pair<std::string, Sha256>> origins;  // name -> credential hash
  Balancing balancing = Balancing::kSpread;
  uint32_t stickyHoldMs = kDefaultStickyHoldMs;
  uint64_t credentialGeneration = 0;
};

// What a bridge attached as: its origin ("" unnamed), profile, and which credential it used.
struct BridgeOrigin {
  std::string origin;
  std::string profile;
  uint32_t profileIndex = 0;
  // Attached with its origin's derived credential (not the tunnel token): closed when a newer
  // record no longer lists that credential's hash under the origin.
  bool derivedCredential = false;
  Sha256 credentialSha256{};
};

struct MachineLimits {
  uint32_t maxConnsPerBridge = 256;
  uint32_t maxConnsPerTunnel = 1024;
  uint32_t maxRoutesPerTunnel = 256;
};

enum class PickResult : uint8_t {
  kOk,
  kUnknownTunnel,  // no record, or deleted
  kCertNotReady,
  kNoBridge,      // the tunnel has no bridge here
  kUnknownRoute,  // it has bridges, none claims the route
  kTooManyConnections,
  kRemote,  // the chosen origin's links are on another machine (Pick::remoteOrigin)
};

// What the mesh adds to a pick (docs/pools-mesh.md). Empty: a local-only pick, as before.
struct PickOptions {
  // Origins other machines hold the visitor's route with (the mesh table): chosen over together
  // with the local ones, so every machine gives a visitor the same origin.
  std::span<const std::string_view> remoteOrigins;
  // A forwarded visitor's origin, chosen by the machine it landed on: taken when it has a usable
  // link here; otherwise this machine chooses among its own.
  std::string_view origin;
};

class TunnelTable {
 public:
  explicit TunnelTable(MachineLimits limits) : limits_(limits) {}

  // Applies a record unless the one held has a higher revision. A deleted record stays cached
  // (so upgrades answer 404 and visitors are refused) whatever its revision.
  bool upsertRecord(const std::string& tunnelId, CachedRecord record);
  void markDeleted(const std::string& tunnelId);
  // Forgets the record (a reset); bridges stay until the caller closes them.
  void dropRecord(const std::string& tunnelId);
  [[nodiscard]] const CachedRecord* record(std::string_view tunnelId) const;

  // A recent FetchTunnel said "no such tunnel": remembered for `ttlMs` so scanners probing
  // random IDs cost controld one lookup per ID per ttl.
  void markMissing(const std::string& tunnelId, uint64_t nowMs, uint64_t ttlMs = 5'000);
  [[nodiscard]] bool knownMissing(std::string_view tunnelId, uint64_t nowMs) const;

  // The cached-record rules (docs/mesh.md "Cached records"). A mesh link came up, so an event may
  // have been lost: every "no such tunnel" answer is forgotten, and so is every record whose
  // certificate is not ready, except those of tunnels with a bridge here, which are returned to
  // be read again (visitors need a record to reach them). Deleted records stay.
  [[nodiscard]] std::vector<std::string> recheckNegative();
  // Run every few seconds. Drops tunnels with no bridge here whose record nobody used (pushed,
  // read for an upgrade, an attach or a visitor) for kIdleDropMs, and expired "missing" answers;
  // returns the not-ready records of tunnels with a bridge here last read kRereadNotReadyMs ago
  // (the safety TTL: read again however quiet the mesh was). `dropIdle` false (controld away:
  // nothing could be read again) keeps every record.
  static constexpr uint64_t kIdleDropMs = 30'000;
  static constexpr uint64_t kRereadNotReadyMs = 10 * 60'000;
  struct Sweep {
    size_t dropped = 0;
    std::vector<std::string> reread;
  };
  [[nodiscard]] Sweep sweep(uint64_t nowMs, bool dropIdle = true);

  // The credential check done from the cache when controld cannot be asked: the tunnel token, or
  // the named origin's derived credential. Constant time in the hashes.
  [[nodiscard]] static bool credentialMatches(const CachedRecord& record, std::string_view token,
                                              std::string_view origin);

  // Distinct routes the tunnel would hold here after adding `routes`; compared with its limit.
  [[nodiscard]] bool routesFit(std::string_view tunnelId,
                               const std::vector<std::string>& routes) const;
  // The cap on a new bridge's connections: min(client's max_conns, record, machine).
  [[nodiscard]] uint32_t bridgeConnLimit(std::string_view tunnelId, uint32_t clientMaxConns) const;

  // Which credential an attach used, from the record cached when it attached: derived only when
  // the token is not the tunnel token and matches the hash listed for its origin (anything else
  // is never revoked by revokedBridges).
  [[nodiscard]] static BridgeOrigin classifyAttach(const CachedRecord* record,
                                                   std::string_view token, std::string origin,
                                                   std::string profile, uint32_t profileIndex);

  // `nowMs` feeds the hold (an origin gaining its first link, or losing its last).
  void addBridge(const std::string& tunnelId, uint64_t bridgeKey, std::vector<std::string> routes,
                 uint32_t maxConns, BridgeOrigin origin = {}, uint64_t nowMs = 0);
  void removeBridge(const std::string& tunnelId, uint64_t bridgeKey, uint64_t nowMs = 0);
  // The bridges whose derived credential the cached record no longer lists under their origin
  // (the origin was removed or the generation rotated): to be closed with "credential revoked".
  [[nodiscard]] std::vector<uint64_t> revokedBridges(std::string_view tunnelId) const;
  // A draining bridge gets no new visitors.
  void setDraining(const std::string& tunnelId, uint64_t bridgeKey);
  [[nodiscard]] std::vector<uint64_t> bridgesOf(std::string_view tunnelId) const;
  [[nodiscard]] size_t bridgeCountOf(std::string_view tunnelId) const;
  [[nodiscard]] size_t bridgeCount() const { return bridgeCount_; }
  [[nodiscard]] size_t recordCount() const { return tunnels_.size(); }
  // Tunnels with a bridge here whose certificate (ready when its record came) expires at or
  // before `deadlineUnixMs`: opentunnel_certificates_expiring. O(tunnels), at scrape time.
  [[nodiscard]] size_t certificatesExpiringBy(int64_t deadlineUnixMs) const;
  // Bumped by every change to records and bridges (what the count above reads), so a count can
  // be reused while nothing changed.
  [[nodiscard]] uint64_t changes() const { return changes_; }

  // Chooses the bridge for a visitor of <route>.<id> (docs/pools-choice.md). Usable bridges:
  // not draining, claiming the route, with room. First the origin, by rendezvous hashing of
  // `visitorKey` (peerSourceKey: an IPv4 address, an IPv6 /64) over the origins with a usable
  // bridge, leaving out origins in their hold; then the origin's link by the record's balancing
  // (the fewest open streams, the newest on a tie). Counts the connection when it returns kOk.
  struct Pick {
    PickResult result = PickResult::kUnknownTunnel;
    uint64_t bridgeKey = 0;
    std::string_view remoteOrigin;  // kRemote: one of PickOptions::remoteOrigins
  };
  [[nodiscard]] Pick pickBridge(std::string_view tunnelId, std::string_view route,
                                std::string_view visitorKey = {}, uint64_t nowMs = 0,
                                const PickOptions& options = {});
  // The origin a bridge attached as (nullptr: unknown bridge). For tests and status.
  [[nodiscard]] const BridgeOrigin* bridgeOrigin(std::string_view tunnelId,
                                                 uint64_t bridgeKey) const;
  void connectionClosed(std::string_view tunnelId, uint64_t bridgeKey);

 private:
  struct BridgeEntry {
    uint64_t key = 0;
    std::vector<std::string> routes;
    uint32_t maxConns = 0;
    uint32_t open = 0;
    bool draining = false;
    BridgeOrigin origin;
  };
  struct Tunnel {
    bool haveRecord = false;
    CachedRecord record;
    std::vector<BridgeEntry> bridges;                          // in attach order
    std::map<std::string, uint32_t, std::less<>> routeClaims;  // route -> bridges claiming it
    uint32_t open = 0;
    OriginHold hold;
    // The cached-record rules, kept by sweep()'s clock: used since the previous sweep (a const
    // read counts too), when the sweeps found it unused, when its record was last stored.
    mutable bool used = true;
    uint64_t idleSinceMs = 0;
    bool recordFresh = true;  // stored since the previous sweep
    uint64_t recordAtMs = 0;
  };
  [[nodiscard]] uint32_t tunnelConnLimit(const Tunnel& tunnel) const;
  void eraseIfEmpty(std::unordered_map<std::string, Tunnel>::iterator it);

  MachineLimits limits_;
  std::unordered_map<std::string, Tunnel> tunnels_;
  uint64_t changes_ = 0;
  std::unordered_map<std::string, uint64_t> missing_;  // id -> expiry (ms)
  size_t bridgeCount_ = 0;
  std::vector<OriginCandidate> candidates_;  // pickBridge's scratch: no allocation per pick
};

}  // namespace ot::relayd
