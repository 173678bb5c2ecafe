// Gathers GET /api/tunnel/{id}/status's inputs (status_routes.h): asks this machine's relayd
// with a Command (TunnelStatusQuery) and waits for its TunnelStatusReply on the calling API
// worker, up to a deadline (never on the I/O loop); counts the tunnel's bridges on other machines
// from the mesh table, which knows their number but not their origins or reports. A relayd that
// does not answer in time (busy, or one older than the query, which only acks it as unknown)
// leaves the registry's per-origin counts of this machine's bridges instead.
// Thread-safe: many workers ask at once; replies arrive on the relay sessions' threads.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "controld/api/status_routes.h"
#include "controld/mesh/mesh_node.h"
#include "controld/relays/bridge_registry.h"
#include "controld/relays/relay_hub.h"

namespace ot::controld {

inline constexpr std::chrono::milliseconds kStatusQueryDeadline{1000};

// The inputs from relayd's replies (merged per origin and profile when several relays answered).
[[nodiscard]] TunnelStatusInputs statusFromReplies(
    const std::vector<cv1::TunnelStatusReply>& replies);
// The fallback from the registry: links per origin and profile, nothing reported.
// Adds the tunnel's bridges on other machines (the mesh table's entries for it) to the tunnel's
// and each origin's peer counts; an origin known only there gets an entry without profiles.
void addPeerBridges(TunnelStatusInputs& inputs, const std::vector<mesh::BridgeEntry>& peers);
[[nodiscard]] std::vector<TunnelStatusOrigin> statusFromRegistry(
    const std::vector<BridgeEntry>& bridges);

class TunnelStatusSource {
 public:
  // Sets the hub's TunnelStatusHandler; the source must outlive the hub's sessions (or unset it).
  TunnelStatusSource(RelayHub& hub, const BridgeRegistry& registry,
                     std::function<mesh::MeshNode*()> mesh,
                     std::chrono::milliseconds deadline = kStatusQueryDeadline);
  ~TunnelStatusSource();
  TunnelStatusSource(const TunnelStatusSource&) = delete;
  TunnelStatusSource& operator=(const TunnelStatusSource&) = delete;

  [[nodiscard]] TunnelStatusInputs gather(const std::string& tunnelId);
  void onReply(const cv1::TunnelStatusReply& reply);

 private:
  struct Pending {
    size_t expected = 0;
    std::vector<cv1::TunnelStatusReply> replies;
  };

  RelayHub& hub_;
  const BridgeRegistry& registry_;
  std::function<mesh::MeshNode*()> mesh_;
  std::chrono::milliseconds deadline_;
  std::mutex mutex_;
  std::condition_variable answered_;
  std::map<uint64_t, Pending> pending_;  // by Command.id
};

}  // namespace ot::controld
