#include "controld/admin/admin_stats_source.h"

#include <utility>

#include "common/clock.h"
#include "common/descriptor_watch.h"
#include "common/metrics.h"

namespace ot::controld {

AdminStatsSource::AdminStatsSource(StatsStore& store, const BridgeRegistry& registry,
                                   const RelayHub& hub, std::string machineId, std::string region,
                                   std::chrono::steady_clock::time_point startedAt,
                                   std::function<mesh::MeshNode*()> mesh)
    : store_(store),
      registry_(registry),
      hub_(hub),
      machineId_(std::move(machineId)),
      region_(std::move(region)),
      startedAt_(startedAt),
      mesh_(std::move(mesh)) {}

Result<AdminStatsInputs> AdminStatsSource::gather() const {
  auto records = store_.recordCounts(unixNowMs());
  if (!records) return records.error();
  AdminStatsInputs inputs;
  inputs.records = *records;
  inputs.bridges = registry_.totals();
  for (const RelayInfo& relay : hub_.relays()) {
    if (!relay.figures) continue;
    if (!inputs.relayd) inputs.relayd.emplace();
    addRelayFigures(*inputs.relayd, *relay.figures);
  }
  inputs.machineId = machineId_;
  inputs.region = region_;
  const metrics::ProcessStats process = metrics::readProcessStats(startedAt_);
  inputs.openFds = process.openFds;
  inputs.uptimeSeconds = process.uptimeSeconds;
  inputs.threads = metrics::threadCount();
  if (mesh::MeshNode* node = mesh_ ? mesh_() : nullptr) inputs.cluster = node->clusterView();
  return inputs;
}

}  // namespace ot::controld
