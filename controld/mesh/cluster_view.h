// The cluster view of the admin stats and the numbers of the opentunnel_mesh_* gauges, built from
// the bridge table, this machine's own summary and the link loop's peer states. Pure: the caller
// (the admin stats handler, the metrics scrape) gathers the three on the link loop's thread and
// calls these; nothing here keeps state or carries a per-tunnel label.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "controld/mesh/bridge_table.h"

namespace ot::mesh {

// A peer as the link loop knows it: by address first (DNS, MESH_PEERS), by machine ID once its
// hello arrived. Unreachable includes an address that answers without the mesh.
enum class PeerState { kUp, kConnecting, kUnreachable };

[[nodiscard]] const char* peerStateName(PeerState state);

struct PeerLink {
  std::string address;
  std::string machineId;  // empty until a hello proved who is there
  PeerState state = PeerState::kConnecting;
};

// This machine's own row: its bridges come from relayd (controld's BridgeRegistry), not the table.
struct SelfSummary {
  MachineLife life;
  uint64_t sequence = 0;  // the last delta number this machine announced
  size_t bridges = 0;
  size_t tunnels = 0;
  size_t routes = 0;
};

struct ClusterMachine {
  MachineSummary summary;
  bool self = false;
};

struct ClusterView {
  std::vector<ClusterMachine> machines;  // this machine first, then peers by machine ID
  std::vector<PeerLink> peers;           // sorted by address
  size_t peersUp = 0;
  size_t peersConnecting = 0;
  size_t peersUnreachable = 0;
  bool complete = true;  // every known peer is linked (true with no peers: one machine)
};

// opentunnel_mesh_peers{state} and opentunnel_mesh_table_bridges{machine}.
struct MeshGauges {
  size_t peersUp = 0;
  size_t peersConnecting = 0;
  size_t peersUnreachable = 0;
  std::vector<std::pair<std::string, size_t>> bridgesByMachine;  // self first, then by ID
};

[[nodiscard]] ClusterView buildClusterView(const BridgeTable& table, const SelfSummary& self,
                                           std::vector<PeerLink> peers);
[[nodiscard]] MeshGauges meshGauges(const BridgeTable& table, const SelfSummary& self,
                                    const std::vector<PeerLink>& peers);
// The view as the admin stats' "cluster" object.
[[nodiscard]] nlohmann::ordered_json clusterViewJson(const ClusterView& view);

}  // namespace ot::mesh
