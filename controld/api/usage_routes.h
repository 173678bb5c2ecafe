// GET /api/tunnel/{id}/usage?period=24h|30d (docs/api.md "Usage"): a tunnel's recent traffic from
// the usage_hourly table, with the tunnel's token, for the status page's graph (docs/website.md).
// Authentication and its answers (401, 404) are the tunnel routes' own: the token is checked by
// TunnelService::getTunnel before anything else is read.
#pragma once

#include "common/clock.h"
#include "controld/api/api_router.h"
#include "controld/api/tunnel_service.h"
#include "controld/store/store.h"

namespace ot::controld {

struct UsageApi {
  UsageStore* store = nullptr;  // null: the route is not added
  Clock nowMs;                  // empty: the system clock
};

// Adds the route and its schema; the API's own schemas (addApiSchemas) must be there first.
// `service` and `usage.store` must outlive the router.
void addUsageRoutes(ApiRouter& router, TunnelService& service, const UsageApi& usage);

}  // namespace ot::controld
