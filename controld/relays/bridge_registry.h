// controld's view of the live bridges, rebuilt from what each relayd reports
// over its control session (a snapshot on connect, then attached/detached
// deltas). Nothing here is stored: after a controld restart the view is empty
// until the relays reconnect and send their snapshots.
//
// Indexed by tunnel: each tunnel keeps its own bridges and a count of the
// claims on each of its routes, so what an attach asks (bridgeCount,
// routeCountWith, bridgesOf) costs the tunnel's own bridges and routes, flat in
// the number of live bridges overall. Each relay keeps only which tunnel each
// of its bridge IDs belongs to, for its deltas and for dropping it whole.
// Thread-safe: gRPC session threads write, API worker threads read.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace ot::controld {

struct BridgeEntry {
  std::string bridgeId;
  std::string tunnelId;
  std::vector<std::string> routes;
  std::string origin;
  std::string profile;
  uint32_t maxConns = 0;
  int64_t attachedAtMs = 0;
  std::string peerAddress;
  uint32_t profileIndex = 0;  // the profile's place in its origin's list (0 first)
};

struct BridgeTotals {
  size_t relays = 0;
  size_t bridges = 0;
  size_t tunnels = 0;  // tunnels with at least one bridge
};

// Told of every change the registry applies (the mesh node announces this machine's bridges from
// it, docs/mesh.md). Called with the registry's lock held, so changes arrive in the order they were
// applied: an observer only queues the change (no blocking, no call back into the registry).
class BridgeRegistryObserver {
 public:
  virtual ~BridgeRegistryObserver() = default;
  virtual void relayReplaced(const std::string& relayKey,
                             const std::vector<BridgeEntry>& bridges) = 0;
  virtual void bridgeAttached(const std::string& relayKey, const BridgeEntry& bridge) = 0;
  // relayd reported the bridge gone (also one it never reported attached: an authorized attach
  // that failed).
  virtual void bridgeDetached(const std::string& relayKey, const std::string& bridgeId) = 0;
  // Only for a relay the registry held.
  virtual void relayDropped(const std::string& relayKey) = 0;
  // controld allowed an attach on the relay's session, before relayd tells the client `attached`
  // (docs/mesh.md "Announcing this machine's bridges"). The registry itself does not change.
  virtual void bridgeAuthorized(const std::string& /*relayKey*/, const BridgeEntry& /*bridge*/) {}
};

class BridgeRegistry {
 public:
  // At most one observer; nullptr removes it. The observer must outlive its registration.
  void setObserver(BridgeRegistryObserver* observer);

  // relay_key names one life of one relayd (machine id + epoch).
  void replaceRelay(const std::string& relayKey, std::vector<BridgeEntry> bridges);
  // A bridge ID the relay already reported is replaced (even when it moved to
  // another tunnel).
  void attached(const std::string& relayKey, BridgeEntry bridge);
  void detached(const std::string& relayKey, const std::string& bridgeId);
  // controld allowed `bridge` on the relay's session: only the observer is told.
  void authorized(const std::string& relayKey, const BridgeEntry& bridge);
  // The relay's session ended: its bridges are no longer known to be live.
  void dropRelay(const std::string& relayKey);

  [[nodiscard]] size_t bridgeCount(const std::string& tunnelId) const;
  [[nodiscard]] std::vector<BridgeEntry> bridgesOf(const std::string& tunnelId) const;
  // How many distinct routes the tunnel would hold with `requested` added to
  // its live bridges'.
  [[nodiscard]] size_t routeCountWith(const std::string& tunnelId,
                                      const std::vector<std::string>& requested) const;
  [[nodiscard]] BridgeTotals totals() const;

 private:
  struct TunnelBridges {
    // relay key + '\0' + bridge ID -> entry
    std::unordered_map<std::string, BridgeEntry> bridges;
    // route -> how many of the bridges above claim it
    std::unordered_map<std::string, size_t> routeClaims;
  };
  // relay -> bridge ID -> its tunnel
  using RelayBridges = std::unordered_map<std::string, std::string>;

  void addLocked(const std::string& relayKey, RelayBridges& relay, BridgeEntry bridge);
  void removeLocked(const std::string& relayKey, const std::string& bridgeId,
                    const std::string& tunnelId);

  mutable std::mutex mutex_;
  BridgeRegistryObserver* observer_ = nullptr;
  std::unordered_map<std::string, RelayBridges> relays_;
  std::unordered_map<std::string, TunnelBridges> tunnels_;
  size_t bridgeTotal_ = 0;
};

}  // namespace ot::controld
