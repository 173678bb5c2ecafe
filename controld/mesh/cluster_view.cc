#include "controld/mesh/cluster_view.h"

#include <algorithm>

namespace ot::mesh {
namespace {

struct PeerCounts {
  size_t up = 0;
  size_t connecting = 0;
  size_t unreachable = 0;
};

PeerCounts countPeers(const std::vector<PeerLink>& peers) {
  PeerCounts counts;
  for (const PeerLink& peer : peers) {
    switch (peer.state) {
      case PeerState::kUp:
        ++counts.up;
        break;
      case PeerState::kConnecting:
        ++counts.connecting;
        break;
      case PeerState::kUnreachable:
        ++counts.unreachable;
        break;
    }
  }
  return counts;
}

MachineSummary selfRow(const SelfSummary& self) {
  return MachineSummary{self.life, self.sequence, self.bridges, self.tunnels, self.routes};
}

}  // namespace

const char* peerStateName(PeerState state) {
  switch (state) {
    case PeerState::kUp:
      return "up";
    case PeerState::kConnecting:
      return "connecting";
    case PeerState::kUnreachable:
      return "unreachable";
  }
  return "unknown";
}

ClusterView buildClusterView(const BridgeTable& table, const SelfSummary& self,
                             std::vector<PeerLink> peers) {
  ClusterView view;
  view.machines.push_back({selfRow(self), true});
  for (MachineSummary& summary : table.machines()) {
    view.machines.push_back({std::move(summary), false});
  }
  std::sort(peers.begin(), peers.end(),
            [](const PeerLink& a, const PeerLink& b) { return a.address < b.address; });
  const PeerCounts counts = countPeers(peers);
  view.peersUp = counts.up;
  view.peersConnecting = counts.connecting;
  view.peersUnreachable = counts.unreachable;
  view.complete = counts.up == peers.size();
  view.peers = std::move(peers);
  return view;
}

MeshGauges meshGauges(const BridgeTable& table, const SelfSummary& self,
                      const std::vector<PeerLink>& peers) {
  MeshGauges gauges;
  const PeerCounts counts = countPeers(peers);
  gauges.peersUp = counts.up;
  gauges.peersConnecting = counts.connecting;
  gauges.peersUnreachable = counts.unreachable;
  gauges.bridgesByMachine.emplace_back(self.life.machineId, self.bridges);
  // Counts only: machines() would also count each machine's distinct tunnels and routes, which a
  // scrape every few seconds does not need.
  for (auto& row : table.bridgesByMachine()) gauges.bridgesByMachine.push_back(std::move(row));
  return gauges;
}

nlohmann::ordered_json clusterViewJson(const ClusterView& view) {
  nlohmann::ordered_json machines = nlohmann::ordered_json::array();
  for (const ClusterMachine& machine : view.machines) {
    const MachineSummary& summary = machine.summary;
    machines.push_back({{"machine", summary.life.machineId},
                        {"region", summary.life.region},
                        {"address", summary.life.internalAddress},
                        {"self", machine.self},
                        {"epoch", summary.life.epoch},
                        {"started_at_ms", summary.life.startedAtMs},
                        {"sequence", summary.sequence},
                        {"draining", summary.life.draining},
                        {"bridges", summary.bridges},
                        {"tunnels", summary.tunnels},
                        {"routes", summary.routes}});
  }
  nlohmann::ordered_json peers = nlohmann::ordered_json::array();
  for (const PeerLink& peer : view.peers) {
    peers.push_back({{"address", peer.address},
                     {"machine", peer.machineId.empty() ? nlohmann::ordered_json(nullptr)
                                                        : nlohmann::ordered_json(peer.machineId)},
                     {"state", peerStateName(peer.state)}});
  }
  return {{"complete", view.complete},
          {"peers_up", view.peersUp},
          {"peers_connecting", view.peersConnecting},
          {"peers_unreachable", view.peersUnreachable},
          {"machines", std::move(machines)},
          {"peers", std::move(peers)}};
}

}  // namespace ot::mesh
