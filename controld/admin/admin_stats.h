// The admin stats (POST /api/admin/stats, docs/api.md "Admin"): what an operator asks a machine
// about the whole service and about itself. The counts of records come from the database (every
// machine sees the same), the bridges, the process figures and its relayd's figures (open
// connections, forwarding counters) are the answering machine's, and the cluster view is the
// answering machine's view of the mesh (null on a single machine).
//
// Pure: the caller gathers the inputs (AdminStatsSource) and this turns them into the response
// body, so the JSON is tested without a server and the gRPC Admin service can share it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "controld/mesh/cluster_view.h"
#include "controld/relays/bridge_registry.h"
#include "controld/relays/relay_figures.h"
#include "controld/store/store.h"

namespace ot::controld {

struct AdminStatsInputs {
  RecordCounts records;
  BridgeTotals bridges;  // this machine's, as its relayd reported them
  std::string machineId;
  std::string region;
  std::optional<double> openFds;  // this process's
  double threads = 0;
  double uptimeSeconds = 0;
  std::optional<mesh::ClusterView> cluster;  // INTERNAL_LISTEN set and the mesh loop running
  // This machine's relayd figures (summed over its live sessions); nullopt when no session has
  // reported any (none connected, or an older relayd).
  std::optional<RelayFigures> relayd;
};

[[nodiscard]] nlohmann::ordered_json adminStatsJson(const AdminStatsInputs& inputs);

}  // namespace ot::controld
