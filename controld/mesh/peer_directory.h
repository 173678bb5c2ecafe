// The addresses this machine links to (docs/mesh.md "Membership"): MESH_PEERS, plus MESH_DNS's
// answers (an address gone from DNS is still dialed for 30 s), each with its state for
// opentunnel_mesh_peers and the cluster view (up, connecting, unreachable) and its dial schedule:
// at once, or 2 s late when this machine's address is the higher one (so the lower one's link is
// usually the only one), and after a failed dial a backoff from 200 ms doubling to 5 s, jittered.
// Pure: time is passed in, the random draw injected; the mesh node does the dialing.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "controld/mesh/cluster_view.h"
#include "controld/mesh/mesh_settings.h"

namespace ot::mesh {

// PeerState and peerStateName are the cluster view's (cluster_view.h).

struct PeerView {
  std::string address;  // canonical ip:port (or host:port of MESH_PEERS)
  PeerState state = PeerState::kConnecting;
  std::string machine;  // once a link at the address proved it
  bool held = false;    // its link ended; its entries are held while its relayd answers
};

class PeerDirectory {
 public:
  // `random`: a draw in [0, 1) for the jitter.
  PeerDirectory(std::string selfAddress, const MeshSettings& settings,
                std::function<double()> random);

  void addConfigured(const std::string& address, int64_t nowMs);
  // One DNS answer: each address is added or refreshed.
  void sawInDns(const std::vector<std::string>& addresses, int64_t nowMs);
  // Forgets DNS-only addresses not seen for the grace period, unless a link is up at one.
  void expire(int64_t nowMs);

  // The addresses to dial now (not up, no dial running, due); each is marked as dialing.
  [[nodiscard]] std::vector<std::string> dueDials(int64_t nowMs);
  // This machine's dial of `address` ended (its link closed); `cameUp`: it had linked.
  void dialEnded(const std::string& address, bool cameUp, int64_t nowMs);
  // A link (either direction) to the machine at `address` is up / has ended.
  void linkUp(const std::string& address, const std::string& machine);
  void linkDown(const std::string& address, int64_t nowMs);

  [[nodiscard]] std::vector<PeerView> view() const;
  [[nodiscard]] size_t count(PeerState state) const;
  [[nodiscard]] bool known(const std::string& address) const { return peers_.contains(address); }

 private:
  struct Peer {
    PeerState state = PeerState::kConnecting;
    std::string machine;
    bool configured = false;
    int64_t dnsSeenAtMs = 0;
    bool dialing = false;
    bool up = false;
    int64_t backoffMs = 0;
    int64_t nextDialAtMs = 0;
  };

  Peer& add(const std::string& address, int64_t nowMs);
  [[nodiscard]] int64_t firstDelay(const std::string& address) const;
  [[nodiscard]] int64_t jittered(int64_t ms) const;

  std::string selfAddress_;
  MeshSettings settings_;
  std::function<double()> random_;
  std::map<std::string, Peer> peers_;
};

}  // namespace ot::mesh
