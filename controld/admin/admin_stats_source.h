// Gathers the admin stats' inputs (admin_stats.h) from the running controld: the record counts
// from the store (one grouped read), this machine's bridges from the registry, the process's
// descriptors and threads, and the mesh node's cluster view. Called on an API worker thread; the
// store read may block it (bounded by the store's statement timeout), the mesh view waits for the
// mesh loop.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "common/result.h"
#include "controld/admin/admin_stats.h"
#include "controld/mesh/mesh_node.h"

namespace ot::controld {

class AdminStatsSource {
 public:
  // `mesh`: the node when the mesh runs, else nullptr; asked at each call, since the node starts
  // after the API's routes are built.
  AdminStatsSource(StatsStore& store, const BridgeRegistry& registry, std::string machineId,
                   std::string region, std::chrono::steady_clock::time_point startedAt,
                   std::function<mesh::MeshNode*()> mesh);

  // The store's error when the counts cannot be read.
  [[nodiscard]] Result<AdminStatsInputs> gather() const;

 private:
  StatsStore& store_;
  const BridgeRegistry& registry_;
  std::string machineId_;
  std::string region_;
  std::chrono::steady_clock::time_point startedAt_;
  std::function<mesh::MeshNode*()> mesh_;
};

}  // namespace ot::controld
