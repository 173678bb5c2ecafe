// The metrics ControldServer wires itself (each room registers its own, e.g. acme_metrics.h,
// job_gauges.h): the /metrics endpoint and the API's limit counter. Built once at start-up on the
// daemon's Metrics, which must outlive what these return.
#pragma once

#include <functional>
#include <string_view>

#include "common/metrics.h"
#include "controld/api/api_types.h"
#include "controld/store/store.h"

namespace ot::controld {

// Serves GET /metrics (404 for any other path). The database pool gauge
// (opentunnel_db_pool_connections{state}) is read at scrape time: it changes with every request.
[[nodiscard]] ApiHandler metricsHandler(metrics::Metrics& metrics, const Store& store);

// opentunnel_requests_limited_total{limit}, every label registered up front so each is scraped
// (as 0) before the first refusal. Fits TunnelServiceConfig::on_limited.
[[nodiscard]] std::function<void(std::string_view)> limitedCounter(metrics::Metrics& metrics);

}  // namespace ot::controld
