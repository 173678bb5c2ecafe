#include "controld/server_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>

#include <algorithm>
#include <cstdint>

namespace ot::controld {

ApiHandler metricsHandler(metrics::Metrics& metrics, const Store& store) {
  constexpr const char* kPoolName = "opentunnel_db_pool_connections";
  constexpr const char* kPoolHelp = "Database connections held, by state (idle, in_use).";
  auto& idle = metrics.gauge(kPoolName, kPoolHelp, {{"state", "idle"}});
  auto& inUse = metrics.gauge(kPoolName, kPoolHelp, {{"state", "in_use"}});
  return [&metrics, &store, &idle, &inUse](const ApiRequest& request) {
    if (request.path != "/metrics") return ApiResponse::error(404, "NotFoundError", "not found");
    if (request.method != "GET") {
      return ApiResponse::error(405, "MethodNotAllowedError", "use GET");
    }
    const PoolStats pool = store.poolStats();
    inUse.Set(static_cast<double>(pool.inUse));
    idle.Set(static_cast<double>(std::max<int64_t>(pool.open - pool.inUse, 0)));
    ApiResponse response;
    response.headers.emplace_back("Content-Type", "text/plain; version=0.0.4");
    response.body = metrics.render();
    return response;
  };
}

std::function<void(std::string_view)> limitedCounter(metrics::Metrics& metrics) {
  constexpr const char* kName = "opentunnel_requests_limited_total";
  constexpr const char* kHelp = "API requests refused by a limit.";
  prometheus::Counter& createRate = metrics.counter(kName, kHelp, {{"limit", "create_rate"}});
  prometheus::Counter& issuanceRate = metrics.counter(kName, kHelp, {{"limit", "issuance_rate"}});
  prometheus::Counter& backlog = metrics.counter(kName, kHelp, {{"limit", "issuance_backlog"}});
  return [&createRate, &issuanceRate, &backlog](std::string_view limit) {
    if (limit == "create_rate") {
      createRate.Increment();
    } else if (limit == "issuance_rate") {
      issuanceRate.Increment();
    } else if (limit == "issuance_backlog") {
      backlog.Increment();
    }
  };
}

}  // namespace ot::controld
