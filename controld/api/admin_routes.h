// The operator's routes of the HTTP API (docs/api.md "Admin"): POST /api/admin/stats, /export and
// /import, with Authorization: Bearer <ADMIN_TOKEN>. Export and import stream (their bodies are
// any size): the HTTP server runs them through adminStreamRoutes (http/stream_exchange.h); the
// router holds their documentation. Without ADMIN_TOKEN they are not added at all (404, as any
// unknown path). A missing or wrong token answers 401 UnauthorizedError; the token is compared by
// its SHA-256, in constant time, so neither its content nor its length leaks through timing.
#pragma once

#include <functional>
#include <string>

#include "common/result.h"
#include "controld/admin/admin_stats.h"
#include "controld/admin/backup.h"
#include "controld/api/api_router.h"
#include "controld/http/stream_exchange.h"

namespace ot::controld {

struct AdminApi {
  std::string token;  // ADMIN_TOKEN; empty: no admin routes
  // Gathers the stats (AdminStatsSource::gather); an error answers 503.
  std::function<Result<AdminStatsInputs>()> gatherStats;
  // Export and import (null: those routes answer 503). Must outlive the HTTP server.
  Backup* backup = nullptr;
};

// Adds the admin routes and their schema to `router` when `admin.token` is set; the API's own
// schemas (addApiSchemas: Error) must be there first.
void addAdminRoutes(ApiRouter& router, const AdminApi& admin);

// The streamed admin routes for HttpServerOptions::streamRoutes: POST /api/admin/export (the
// backup file, chunked, written as pages are read; cut short, never ended cleanly, when storage
// fails midway) and POST /api/admin/import[?dry_run=1] (the file as the body, read in pieces
// into an ImportSession; the ImportReport as JSON). Nothing without admin.token.
//
// `guard` wraps the routes' token check in the API's own guards (withTrustedProxies and the
// failed-authentication guard with the state the API's routes use): a wrong token on these routes
// counts against its source like any 401, and a refused source gets 429 here too, right token or
// not. These routes are chosen by the request head before the API's handler chain, so without it
// they would escape those guards. Empty: the token check alone (tests).
[[nodiscard]] StreamRoutes adminStreamRoutes(
    const AdminApi& admin, const std::function<ApiHandler(ApiHandler)>& guard = {});

}  // namespace ot::controld
