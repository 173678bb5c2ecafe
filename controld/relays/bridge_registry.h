// controld's view of the live bridges, rebuilt from what each relayd reports over its control
// session (a snapshot on connect, then attached/detached deltas). Nothing here is stored: after a
// controld restart the view is empty until the relays reconnect and send their snapshots.
// Thread-safe: gRPC session threads write, API worker threads read.
#pragma once

#include <cstdint>
#include <map>
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
};

struct BridgeTotals {
  size_t relays = 0;
  size_t bridges = 0;
  size_t tunnels = 0;  // tunnels with at least one bridge
};

class BridgeRegistry {
 public:
  // relay_key names one life of one relayd (machine id + epoch).
  void replaceRelay(const std::string& relayKey, std::vector<BridgeEntry> bridges);
  void attached(const std::string& relayKey, BridgeEntry bridge);
  void detached(const std::string& relayKey, const std::string& bridgeId);
  // The relay's session ended: its bridges are no longer known to be live.
  void dropRelay(const std::string& relayKey);

  [[nodiscard]] size_t bridgeCount(const std::string& tunnelId) const;
  [[nodiscard]] std::vector<BridgeEntry> bridgesOf(const std::string& tunnelId) const;
  [[nodiscard]] BridgeTotals totals() const;

 private:
  void indexLocked(const BridgeEntry& bridge);
  void unindexLocked(const BridgeEntry& bridge);

  mutable std::mutex mutex_;
  // relay -> bridge id -> entry
  std::map<std::string, std::unordered_map<std::string, BridgeEntry>> relays_;
  // tunnel -> number of bridges over all relays
  std::unordered_map<std::string, size_t> perTunnel_;
};

}  // namespace ot::controld
