// Gathers the admin stats' inputs (admin_stats.h) from the running controld: the record counts
// from the store (one grouped read), this machine's bridges from the registry, its relayd's figures
// from the relay hub, the process's descriptors and threads, and the mesh node's cluster view.
// Called on an API worker thread; the store read may block it (bounded by the store's statement
// timeout), the mesh view waits for the mesh loop.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "common/result.h"
#include "controld/admin/admin_stats.h"
#include "controld/mesh/mesh_node.h"
#include "controld/relays/relay_hub.h"

namespace ot::controld {

class AdminStatsSource {
 public:
  // `mesh`: the node when the mesh runs, else nullptr; asked at each call, since the node starts
  // after the API's routes are built.
  // `hub`: the relay sessions, whose latest figures (RelayInfo::figures) are relayd's part.
  AdminStatsSource(StatsStore& store, const BridgeRegistry& registry, const RelayHub& hub,
                   std::string machineId, std::string region,
                   std::chrono::steady_clock::time_point startedAt,
                   std::function<mesh::MeshNode*()> mesh);

  // The store's error when the counts cannot be read.
  [[nodiscard]] Result<AdminStatsInputs> gather() const;

 private:
  StatsStore& store_;
  const BridgeRegistry& registry_;
  const RelayHub& hub_;
  std::string machineId_;
  std::string region_;
  std::chrono::steady_clock::time_point startedAt_;
  std::function<mesh::MeshNode*()> mesh_;
};

}  // namespace ot::controld
