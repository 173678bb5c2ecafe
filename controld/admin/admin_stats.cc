#include "controld/admin/admin_stats.h"

#include <map>

namespace ot::controld {
namespace {

using Json = nlohmann::ordered_json;

// Bridges in total and per region over the machines of the view (this machine included).
Json clusterJson(const mesh::ClusterView& view) {
  Json out = mesh::clusterViewJson(view);
  size_t total = 0;
  std::map<std::string, size_t> byRegion;
  for (const mesh::ClusterMachine& machine : view.machines) {
    total += machine.summary.bridges;
    byRegion[machine.summary.life.region] += machine.summary.bridges;
  }
  Json regions = Json::object();
  for (const auto& [region, bridges] : byRegion) regions[region] = bridges;
  out["bridges"] = total;
  out["bridges_by_region"] = std::move(regions);
  return out;
}

// relayd's figures: what is open here now, and its counters since it started.
Json relaydJson(const RelayFigures& figures) {
  Json visitors = Json::object();
  for (const auto& [outcome, count] : figures.visitors) visitors[outcome] = count;
  Json failures = Json::object();
  for (const auto& [reason, count] : figures.forwardFailures) failures[reason] = count;
  return Json{
      {"visitor_connections_open", figures.visitorConnectionsOpen},
      {"bridges_attached", figures.bridgesAttached},
      {"visitor_connections", std::move(visitors)},
      {"forward_failures", std::move(failures)},
      {"mesh_lookups", {{"hit", figures.meshLookupsHit}, {"miss", figures.meshLookupsMiss}}},
      {"taken_at_ms", figures.takenAtMs}};
}

}  // namespace

Json adminStatsJson(const AdminStatsInputs& inputs) {
  const RecordCounts& records = inputs.records;
  Json out;
  out["tunnels"] = records.tunnels;
  out["deleted"] = records.deleted;
  out["issuing"] = records.issuing;
  out["alarms"] = records.alarms;
  out["jobs"] = Json{{"pending", records.jobsPending},
                     {"leased", records.jobsLeased},
                     {"done", records.jobsDone},
                     {"failed", records.jobsFailed},
                     {"abandoned", records.jobsAbandoned}};
  out["bridges"] = inputs.bridges.bridges;
  out["tunnels_online"] = inputs.bridges.tunnels;
  out["relays"] = inputs.bridges.relays;
  out["machine"] =
      Json{{"id", inputs.machineId},
           {"region", inputs.region},
           {"threads", static_cast<int64_t>(inputs.threads)},
           {"fds", inputs.openFds ? Json(static_cast<int64_t>(*inputs.openFds)) : Json(nullptr)},
           {"uptime_seconds", static_cast<int64_t>(inputs.uptimeSeconds)}};
  out["relayd"] = inputs.relayd ? relaydJson(*inputs.relayd) : Json(nullptr);
  out["cluster"] = inputs.cluster ? clusterJson(*inputs.cluster) : Json(nullptr);
  return out;
}

}  // namespace ot::controld
