// A tunnel's reset (docs/pools-reset.md): this machine's relayd closes the tunnel's bridges (close
// 4000 "reset", so their clients redial at once) and drops its cached record; with the mesh, the
// event tunnel_reset goes to every linked peer, whose controld does the same with its own relayd
// (resetHere). Nothing else of the tunnel, or of any other tunnel, is touched.
//
// Used by the Admin service (otctl reset), the API (POST /api/tunnel/{id}/reset) and the peers'
// events. reset() may wait for the mesh loop (call it from a worker, never from an I/O loop);
// resetHere() never blocks. Thread-safe; everything it refers to must outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "controld/mesh/mesh_node.h"
#include "controld/relays/bridge_registry.h"
#include "controld/relays/relay_hub.h"

namespace ot::controld {

// One machine in a reset's outcome.
struct MachineResetOutcome {
  std::string machine;
  bool here = false;  // this machine (its relayd was told directly)
  bool told = false;  // here, or a linked peer the event went to
  // Here: the bridges this machine's relayd closes. A peer: its bridges of the tunnel as this
  // machine's mesh table showed them (its relayd closes what it has when the event lands).
  uint32_t bridges = 0;
};

struct TunnelResetOutcome {
  std::string tunnelId;
  uint32_t bridgesHere = 0;  // closed by this machine's relayd
  size_t relays = 0;         // relayd sessions the command went to (0: no relayd connected)
  uint32_t peersTold = 0;    // linked peers the event went to
  std::vector<MachineResetOutcome> machines;  // this machine first, then peers by ID
};

class TunnelResetter {
 public:
  // `mesh`: the node when the mesh runs, else nullptr, asked per call.
  TunnelResetter(BridgeRegistry& registry, RelayHub& hub, std::function<mesh::MeshNode*()> mesh,
                 std::string machineId);

  // Here, and (unless `hereOnly`) on every linked peer. The tunnel is not looked up: the caller
  // has checked that it exists.
  [[nodiscard]] TunnelResetOutcome reset(const std::string& tunnelId, bool hereOnly = false);
  // Here only (a peer's tunnel_reset): the bridges closed. Never blocks.
  size_t resetHere(const std::string& tunnelId);

 private:
  BridgeRegistry& registry_;
  RelayHub& hub_;
  std::function<mesh::MeshNode*()> mesh_;
  std::string machineId_;
};

}  // namespace ot::controld
