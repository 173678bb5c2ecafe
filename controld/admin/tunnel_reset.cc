#include "controld/admin/tunnel_reset.h"

#include <utility>

#include "common/log.h"

namespace ot::controld {
namespace {

log::Logger& tunnelResetLogger() {
  static log::Logger instance("controld.reset");
  return instance;
}

}  // namespace

TunnelResetter::TunnelResetter(BridgeRegistry& registry, RelayHub& hub,
                               std::function<mesh::MeshNode*()> mesh, std::string machineId)
    : registry_(registry), hub_(hub), mesh_(std::move(mesh)), machineId_(std::move(machineId)) {}

size_t TunnelResetter::resetHere(const std::string& tunnelId) {
  // The registry's count as relayd last reported it; relayd closes what it holds when the
  // command lands (an attach in between is closed too: the record is dropped and read again).
  const size_t bridges = registry_.bridgeCount(tunnelId);
  opentunnel::control::v1::Command command;
  command.mutable_reset_tunnel()->set_tunnel_id(tunnelId);
  hub_.sendCommand("", std::move(command));
  return bridges;
}

TunnelResetOutcome TunnelResetter::reset(const std::string& tunnelId, bool hereOnly) {
  TunnelResetOutcome outcome;
  outcome.tunnelId = tunnelId;
  const size_t bridges = registry_.bridgeCount(tunnelId);
  opentunnel::control::v1::Command command;
  command.mutable_reset_tunnel()->set_tunnel_id(tunnelId);
  outcome.relays = hub_.sendCommand("", std::move(command)).relays;
  outcome.bridgesHere = static_cast<uint32_t>(bridges);
  outcome.machines.push_back({machineId_, true, true, outcome.bridgesHere});
  mesh::MeshNode* node = hereOnly || !mesh_ ? nullptr : mesh_();
  if (node != nullptr) {
    for (const mesh::PeerReset& peer : node->announceReset(tunnelId)) {
      outcome.machines.push_back(
          {peer.machine, false, peer.told, static_cast<uint32_t>(peer.bridges)});
      if (peer.told) ++outcome.peersTold;
    }
  }
  size_t untold = 0;
  for (const auto& machine : outcome.machines) untold += machine.told ? 0 : 1;
  // Machines with bridges of the tunnel but no link miss the event: their bridges keep going.
  tunnelResetLogger().info("tunnel reset", {{"tunnel", tunnelId},
                                            {"bridges_here", bridges},
                                            {"peers_told", outcome.peersTold},
                                            {"machines_untold", untold},
                                            {"here_only", hereOnly}});
  return outcome;
}

}  // namespace ot::controld
