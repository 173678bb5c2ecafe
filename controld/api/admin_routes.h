// The operator's routes of the HTTP API (docs/api.md "Admin"): POST /api/admin/stats, with
// Authorization: Bearer <ADMIN_TOKEN>. Without ADMIN_TOKEN they are not added at all (404, as any
// unknown path). A missing or wrong token answers 401 UnauthorizedError; the token is compared by
// its SHA-256, in constant time, so neither its content nor its length leaks through timing.
#pragma once

#include <functional>
#include <string>

#include "common/result.h"
#include "controld/admin/admin_stats.h"
#include "controld/api/api_router.h"

namespace ot::controld {

struct AdminApi {
  std::string token;  // ADMIN_TOKEN; empty: no admin routes
  // Gathers the stats (AdminStatsSource::gather); an error answers 503.
  std::function<Result<AdminStatsInputs>()> gatherStats;
};

// Adds the admin routes and their schema to `router` when `admin.token` is set; the API's own
// schemas (addApiSchemas: Error) must be there first.
void addAdminRoutes(ApiRouter& router, const AdminApi& admin);

}  // namespace ot::controld
