// The HTTP API's routes: each handler reads its request (bearer token, JSON body), calls the
// TunnelService and turns the outcome into a response, mapping ServiceErrors to statuses:
//   400 BadRequestError            bad JSON, bad fields, a refused CSR, an invalid wanted id
//   401 UnauthorizedError          no bearer token, or not the tunnel's (WWW-Authenticate: Bearer)
//   404 NotFoundError              no such tunnel (or deleted), no such endpoint
//   405 MethodNotAllowedError      a known path with another method (Allow)
//   409 ConflictError              the wanted id is taken (deleted tunnels keep their id)
//   415 UnsupportedMediaTypeError  a body that is not declared application/json
//   429 RateLimitedError           over a rate (Retry-After)
//   503 ServiceUnavailableError    storage down, the tunnel changed meanwhile, issuance backlog
//                                  (the backlog with Retry-After: 30)
//   500 InternalServerError        a bug
// 413 for an oversized body comes from the HTTP server, before any handler; it is documented here.
// Times in responses are RFC 3339 strings in UTC with milliseconds, or null.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <variant>

#include "controld/api/admin_routes.h"
#include "controld/api/api_router.h"
#include "controld/api/api_types.h"
#include "controld/api/openapi.h"
#include "controld/api/origin_routes.h"
#include "controld/api/reset_routes.h"
#include "controld/api/status_routes.h"
#include "controld/api/tunnel_service.h"
#include "controld/api/usage_routes.h"

namespace ot::controld {

// Every route of the API over `service` (which must outlive the router), /health and
// /openapi.json included; the document is generated from the finished table, once.
// info.servers defaults to https://<the service's domain>. The admin routes (admin_routes.h) are
// added when `admin.token` is set.
// GET /api/tunnel/{id}/usage is added when `usage.store` is set (usage_routes.h); the pool's routes
// (origin_routes.h) and GET /api/tunnel/{id}/status (status_routes.h) always; POST
// /api/tunnel/{id}/reset when `reset.reset` is set (reset_routes.h).
[[nodiscard]] ApiRouter buildApiRouter(TunnelService& service, OpenApiInfo info = {},
                                       const AdminApi& admin = {}, const UsageApi& usage = {},
                                       const ResetApi& reset = {}, const StatusApi& status = {});

// The status and JSON error a ServiceError answers (the table above); for routes kept in files of
// their own (usage_routes.h).
[[nodiscard]] ApiResponse serviceErrorResponse(const ServiceError& error);

// The request's JSON object body, or the response refusing it (415 when not application/json,
// 400 when not a JSON object; an absent body is 400 when `required`, else JSON null).
[[nodiscard]] std::variant<nlohmann::ordered_json, ApiResponse> readJsonBody(
    const ApiRequest& request, bool required);

// The router as the HTTP server's handler (shared: the server may outlive the caller's copy).
[[nodiscard]] ApiHandler makeApiHandler(std::shared_ptr<const ApiRouter> router);

}  // namespace ot::controld
