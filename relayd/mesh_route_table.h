// relayd's copy of where the region mesh's routes are held (docs/mesh.md "The control-session
// feed"): which peer machines hold a bridge for each (tunnel, route), and the peers themselves, as
// controld last told it over the control session. relayd forwards a visitor that has no local
// bridge by this copy, and keeps using it while controld is away.
//
// controld sends a snapshot when the session starts, then deltas, each numbered one above the
// last; a delta that does not follow on is a gap, and relayd asks for a new snapshot (until then
// it keeps forwarding by what it has). Within a route the newest attach is tried first (ties: the
// lower machine ID, as controld's own table decides), and a sender told `0` tries the next holder.
// A holder is one machine's bridges of one origin: a visitor's origin is chosen over the origins
// of every machine (docs/pools-mesh.md), then a holder of that origin is picked.
//
// Pure; loop thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ot::relayd {

struct MeshPeer {
  std::string machineId;
  std::string internalAddress;  // "host:port": where its relayd's internal listener is
  // Linked to controld now, or held by it after its link ended while its relayd answers the
  // signed liveness question: a forward from it is believed only when set.
  bool linked = true;
  bool operator==(const MeshPeer&) const = default;
};

struct MeshRouteHolder {
  std::string tunnelId;
  std::string route;  // "" for the tunnel's own hostname
  std::string machineId;
  int64_t attachedAtMs = 0;
  std::string origin;  // the holder's bridges' origin ("" unnamed, or from an older controld)
  bool operator==(const MeshRouteHolder&) const = default;
};

struct MeshRouteDelta {
  uint64_t version = 0;  // the table's version after this delta: exactly one above the last
  std::vector<MeshRouteHolder> added;    // holders added, or their attach time changed
  std::vector<MeshRouteHolder> removed;  // only tunnelId, route, machineId and origin are read
  // When set, the whole list of peers from now on (peers are few; changes are rare).
  std::optional<std::vector<MeshPeer>> peers;
};

// Where to send a visitor: the holder's machine and its internal address.
struct MeshForwardTarget {
  std::string machineId;
  std::string internalAddress;
  std::string origin;  // the origin of the holder's bridges (the forward header names it)
};

class MeshRouteTable {
 public:
  enum class Apply : uint8_t {
    kApplied,
    kStale,  // not newer than what the table holds: ignored
    kGap,    // skips a version: ignored; ask controld for a snapshot
  };

  void replace(uint64_t version, std::vector<MeshPeer> peers,
               const std::vector<MeshRouteHolder>& holders);
  [[nodiscard]] Apply apply(const MeshRouteDelta& delta);

  // The newest holder of (tunnel, route) that is a known peer, other than `skipMachine` (the one
  // that already answered 0), or nullopt when no other peer holds it.
  [[nodiscard]] std::optional<MeshForwardTarget> pick(std::string_view tunnelId,
                                                      std::string_view route,
                                                      std::string_view skipMachine = {}) const;

  // The newest holder of (tunnel, route) with bridges of `origin` that is a known peer, other
  // than `skipMachine`.
  [[nodiscard]] std::optional<MeshForwardTarget> pickOrigin(
      std::string_view tunnelId, std::string_view route, std::string_view origin,
      std::string_view skipMachine = {}) const;

  // Appends to `out` each origin (once) that a known peer holds (tunnel, route) with. The views
  // point into the table: valid until it next changes. No allocation once `out` has room (the
  // visitor's path: docs/pools-mesh.md).
  void originsOf(std::string_view tunnelId, std::string_view route,
                 std::vector<std::string_view>& out) const;

  // A forward from `machineId` counts only when that machine is linked now and the connection
  // comes from the host of its internal address (`peerHost`: the connection's source IP).
  [[nodiscard]] bool linkedFrom(std::string_view machineId, std::string_view peerHost) const;

  [[nodiscard]] uint64_t version() const { return version_; }
  [[nodiscard]] bool empty() const { return routes_.empty(); }
  [[nodiscard]] size_t routeCount() const { return routes_.size(); }
  [[nodiscard]] const std::vector<MeshPeer>& peers() const { return peers_; }

 private:
  void add(const MeshRouteHolder& holder);
  void remove(const MeshRouteHolder& holder);
  [[nodiscard]] const MeshPeer* peer(std::string_view machineId) const;

  struct Holder {
    std::string machineId;
    int64_t attachedAtMs = 0;
    std::string origin;
  };
  [[nodiscard]] const std::vector<Holder>* holdersOf(std::string_view tunnelId,
                                                     std::string_view route) const;
  uint64_t version_ = 0;
  std::vector<MeshPeer> peers_;
  // tunnel ID + '\0' + route -> its holders (one per machine and origin), newest attach first
  // (ties: lower machine ID, then origin)
  std::unordered_map<std::string, std::vector<Holder>> routes_;
  mutable std::string lookupKey_;  // reused by lookups, so a visitor's lookup allocates nothing
};

// "host" of "host:port" or "[v6]:port" ("" when it has no port).
[[nodiscard]] std::string_view hostOfAddress(std::string_view address);

}  // namespace ot::relayd
