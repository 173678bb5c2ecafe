#include "controld/api/origin_routes.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <variant>

#include "common/log.h"
#include "common/log_format.h"
#include "controld/api/api_routes.h"

namespace ot::controld {
namespace {

using Json = nlohmann::ordered_json;

const log::Logger kLog("controld.api");

std::string timeText(int64_t ms) {
  return log::formatTimestamp(std::chrono::system_clock::time_point(std::chrono::milliseconds(ms)));
}

ApiResponse badRequest(std::string_view message) {
  return ApiResponse::error(400, "BadRequestError", message);
}

ApiResponse noSecret() {
  // Only before controld has read its secret (or in a test without one); never expected live.
  return ApiResponse::error(503, "ServiceUnavailableError", "origin credentials are unavailable");
}

ApiResponse reply(int status, const Json& body) {
  return ApiResponse::json(status, body.dump(-1, ' ', false, Json::error_handler_t::replace));
}

std::optional<OriginSecret> secretOf(const OriginApi& api) {
  return api.secret ? api.secret : installedOriginSecret();
}

Json originJson(const OriginSecret& secret, const TunnelRecord& record, const OriginEntry& origin) {
  return Json{{"name", origin.name},
              {"addedAt", timeText(origin.addedAtMs)},
              {"credential", deriveOriginCredential(secret, record.id, origin.name,
                                                    record.credentialGeneration)}};
}

Json poolJson(const OriginSecret& secret, const TunnelRecord& record) {
  Json origins = Json::array();
  for (const OriginEntry& origin : record.origins) {
    origins.push_back(originJson(secret, record, origin));
  }
  return Json{{"id", record.id},
              {"generation", record.credentialGeneration},
              {"balancing", balancingName(record.balancing)},
              {"stickyHoldMs", record.stickyHoldMs},
              {"origins", std::move(origins)}};
}

ServiceError conflict(std::string message) {
  return ServiceError{ServiceErrorKind::kConflict, std::move(message), 0};
}

// ---- Handlers ----

ApiResponse getOrigins(TunnelService& service, const OriginApi& api, const ApiRequest& request,
                       const PathParams& params) {
  auto view = service.getTunnel(params.get("id"), bearerToken(request));
  if (!view) return serviceErrorResponse(view.error());
  const auto secret = secretOf(api);
  if (!secret) return noSecret();
  return reply(200, poolJson(*secret, view->record));
}

ApiResponse addOrigin(TunnelService& service, const OriginApi& api, const ApiRequest& request,
                      const PathParams& params) {
  const std::optional<std::string> token = bearerToken(request);
  // Without a token nothing else about the request matters.
  if (!token) {
    return serviceErrorResponse({ServiceErrorKind::kUnauthorized, "a bearer token is required"});
  }
  auto body = readJsonBody(request, /*required=*/true);
  if (auto* refused = std::get_if<ApiResponse>(&body)) return std::move(*refused);
  const Json& object = std::get<Json>(body);
  const auto nameIt = object.find("name");
  if (nameIt == object.end() || !nameIt->is_string() ||
      !isValidOriginName(nameIt->get_ref<const std::string&>())) {
    return badRequest("name must be 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-'");
  }
  const std::string name = nameIt->get<std::string>();
  if (name == kReservedOriginName) {
    return badRequest("the origin name \"rotate\" is reserved (it names the rotation route)");
  }
  const auto secret = secretOf(api);
  if (!secret) return noSecret();

  const int64_t addedAt = service.nowMs();
  auto changed = service.changeTunnel(
      params.get("id"), token, [&](TunnelRecord& record) -> std::optional<ServiceError> {
        const bool listed =
            std::any_of(record.origins.begin(), record.origins.end(),
                        [&](const OriginEntry& origin) { return origin.name == name; });
        if (listed) return conflict("the tunnel already has an origin named " + name);
        if (record.origins.size() >= kMaxOriginsPerTunnel) {
          return conflict("the tunnel already has " + std::to_string(kMaxOriginsPerTunnel) +
                          " origins, the most it may have; remove one first");
        }
        record.origins.push_back(OriginEntry{name, addedAt});
        return std::nullopt;
      });
  if (!changed) return serviceErrorResponse(changed.error());
  const TunnelRecord& record = changed->record;
  kLog.info("origin added", {{"tunnel", record.id}, {"origin", name}});
  Json out = originJson(*secret, record, record.origins.back());
  out["generation"] = record.credentialGeneration;
  return reply(201, out);
}

ApiResponse removeOrigin(TunnelService& service, const ApiRequest& request,
                         const PathParams& params) {
  const std::string name(params.get("name"));
  auto changed = service.changeTunnel(
      params.get("id"), bearerToken(request),
      [&](TunnelRecord& record) -> std::optional<ServiceError> {
        const auto listed =
            std::find_if(record.origins.begin(), record.origins.end(),
                         [&](const OriginEntry& origin) { return origin.name == name; });
        if (listed == record.origins.end()) {
          return ServiceError{ServiceErrorKind::kNotFound, "the tunnel has no such origin", 0};
        }
        record.origins.erase(listed);
        return std::nullopt;
      });
  if (!changed) return serviceErrorResponse(changed.error());
  kLog.info("origin removed", {{"tunnel", changed->record.id}, {"origin", name}});
  return ApiResponse{204, {}, ""};
}

ApiResponse rotate(TunnelService& service, const OriginApi& api, const ApiRequest& request,
                   const PathParams& params) {
  const auto secret = secretOf(api);
  if (!secret) {
    // The token is still checked first, so a caller without one learns nothing.
    auto view = service.getTunnel(params.get("id"), bearerToken(request));
    if (!view) return serviceErrorResponse(view.error());
    return noSecret();
  }
  auto changed = service.changeTunnel(params.get("id"), bearerToken(request),
                                      [](TunnelRecord& record) -> std::optional<ServiceError> {
                                        ++record.credentialGeneration;
                                        return std::nullopt;
                                      });
  if (!changed) return serviceErrorResponse(changed.error());
  kLog.info("origin credentials rotated",
            {{"tunnel", changed->record.id}, {"generation", changed->record.credentialGeneration}});
  return reply(200, poolJson(*secret, changed->record));
}

ApiResponse setBalancing(TunnelService& service, const OriginApi& api, const ApiRequest& request,
                         const PathParams& params) {
  const std::optional<std::string> token = bearerToken(request);
  if (!token) {
    return serviceErrorResponse({ServiceErrorKind::kUnauthorized, "a bearer token is required"});
  }
  auto body = readJsonBody(request, /*required=*/true);
  if (auto* refused = std::get_if<ApiResponse>(&body)) return std::move(*refused);
  const Json& object = std::get<Json>(body);
  std::optional<Balancing> mode;
  std::optional<int64_t> hold;
  if (const auto it = object.find("mode"); it != object.end()) {
    if (it->is_string()) mode = parseBalancing(it->get_ref<const std::string&>());
    if (!mode) return badRequest("mode must be \"spread\" or \"priority\"");
  }
  if (const auto it = object.find("stickyHoldMs"); it != object.end()) {
    if (it->is_number_integer()) hold = it->get<int64_t>();
    if (!hold || *hold < 0 || *hold > kMaxStickyHoldMs) {
      return badRequest("stickyHoldMs must be an integer from 0 to " +
                        std::to_string(kMaxStickyHoldMs));
    }
  }
  if (!mode && !hold) return badRequest("give mode, stickyHoldMs or both");
  const auto secret = secretOf(api);
  if (!secret) return noSecret();
  auto changed = service.changeTunnel(params.get("id"), token,
                                      [&](TunnelRecord& record) -> std::optional<ServiceError> {
                                        if (mode) record.balancing = *mode;
                                        if (hold) record.stickyHoldMs = *hold;
                                        return std::nullopt;
                                      });
  if (!changed) return serviceErrorResponse(changed.error());
  kLog.info("balancing set", {{"tunnel", changed->record.id},
                              {"mode", balancingName(changed->record.balancing)},
                              {"sticky_hold_ms", changed->record.stickyHoldMs}});
  return reply(200, poolJson(*secret, changed->record));
}

// ---- Documentation ----

Json poolSchema() {
  Json origin = {
      {"type", "object"},
      {"required", {"name", "addedAt", "credential"}},
      {"properties",
       {{"name", {{"type", "string"}, {"description", "The origin's name."}}},
        {"addedAt", {{"type", "string"}, {"format", "date-time"}}},
        {"credential",
         {{"type", "string"},
          {"description",
           "What the origin attaches with (under its own name only): derived from the "
           "server's secret, the tunnel, the name and the generation; never stored."}}}}}};
  return Json{
      {"type", "object"},
      {"required", {"id", "generation", "balancing", "stickyHoldMs", "origins"}},
      {"properties",
       {{"id", {{"type", "string"}, {"description", "The tunnel's ID."}}},
        {"generation",
         {{"type", "integer"},
          {"format", "int64"},
          {"description", "The credential generation; a rotation adds one."}}},
        {"balancing", {{"type", "string"}, {"enum", {"spread", "priority"}}}},
        {"stickyHoldMs",
         {{"type", "integer"},
          {"description", "How long an origin that comes back waits before taking visitors."}}},
        {"origins", {{"type", "array"}, {"description", "Oldest first."}, {"items", origin}}}}}};
}

Json addedSchema() {
  return Json{{"type", "object"},
              {"required", {"name", "addedAt", "credential", "generation"}},
              {"properties",
               {{"name", {{"type", "string"}}},
                {"addedAt", {{"type", "string"}, {"format", "date-time"}}},
                {"credential", {{"type", "string"}}},
                {"generation", {{"type", "integer"}, {"format", "int64"}}}}}};
}

Json addRequestSchema() {
  return Json{{"type", "object"},
              {"required", {"name"}},
              {"properties",
               {{"name",
                 {{"type", "string"},
                  {"pattern", "^[A-Za-z0-9._-]{1,64}$"},
                  {"description",
                   "The origin's name, as its client sends it in attach; not "
                   "\"rotate\"."}}}}}};
}

Json balancingRequestSchema() {
  return Json{{"type", "object"},
              {"description", "At least one member."},
              {"properties",
               {{"mode", {{"type", "string"}, {"enum", {"spread", "priority"}}}},
                {"stickyHoldMs", {{"type", "integer"}, {"minimum", 0}, {"maximum", 600000}}}}}};
}

RouteDoc doc(const char* operationId, const char* summary, const char* description) {
  RouteDoc out;
  out.operationId = operationId;
  out.summary = summary;
  out.description = description;
  out.tag = "tunnels";
  out.bearerAuth = true;
  out.parameters = {{"id", "The tunnel's ID: the first label of its hostname."}};
  return out;
}

std::vector<ApiResponseDoc> common(std::vector<ApiResponseDoc> specific, bool body = false) {
  specific.push_back({401,
                      "No bearer token, or not this tunnel's token (an origin's credential "
                      "is not accepted here).",
                      "Error",
                      {"WWW-Authenticate"}});
  specific.push_back({404, "No such tunnel (never created, or deleted).", "Error", {}});
  if (body) {
    specific.push_back({413, "The body is larger than the server accepts.", "Error", {}});
    specific.push_back({415, "A body whose Content-Type is not application/json.", "Error", {}});
    specific.push_back(
        {429, "Too many failed authentications from this address.", "Error", {"Retry-After"}});
  }
  specific.push_back({503, "Storage is unavailable, or the tunnel kept changing; retry.", "Error",
                      body ? std::vector<std::string>{"Retry-After"} : std::vector<std::string>{}});
  return specific;
}

}  // namespace

void addOriginRoutes(ApiRouter& router, TunnelService& service, const OriginApi& api) {
  router.addSchema("OriginPool", poolSchema());
  router.addSchema("AddedOrigin", addedSchema());
  router.addSchema("AddOriginRequest", addRequestSchema());
  router.addSchema("BalancingRequest", balancingRequestSchema());
  router.addSchema("RotateRequest", Json{{"type", "object"}, {"description", "No members."}});
  TunnelService* s = &service;

  RouteDoc list = doc("getOrigins", "Read the pool",
                      "The tunnel's origins with their credentials, its credential generation and "
                      "how visitors are balanced.");
  list.responses = common({{200, "The pool.", "OriginPool", {}}});
  router.add(
      {"GET", "/api/tunnel/{id}/origins", list,
       [s, api](const ApiRequest& r, const PathParams& p) { return getOrigins(*s, api, r, p); }});

  RouteDoc add = doc("addOrigin", "Add an origin",
                     "Adds a named origin and answers its credential. relays learn of it at once.");
  add.requestBody = ApiBodyDoc{"AddOriginRequest", true, ""};
  add.responses =
      common({{201, "Added.", "AddedOrigin", {}},
              {400, "The name is not valid, or is \"rotate\".", "Error", {}},
              {409, "The origin exists, or the tunnel has 32 origins already.", "Error", {}}},
             /*body=*/true);
  router.add(
      {"POST", "/api/tunnel/{id}/origins", add,
       [s, api](const ApiRequest& r, const PathParams& p) { return addOrigin(*s, api, r, p); }});

  RouteDoc remove = doc("removeOrigin", "Remove an origin",
                        "Removes the origin: its credential stops working and relays close the "
                        "bridges that attached with it.");
  remove.parameters.push_back({"name", "The origin's name."});
  remove.responses = common({{204, "Removed.", "", {}}});
  remove.responses[2].description += " Also: the tunnel has no origin of that name.";
  router.add({"DELETE", "/api/tunnel/{id}/origins/{name}", remove,
              [s](const ApiRequest& r, const PathParams& p) { return removeOrigin(*s, r, p); }});

  RouteDoc rotation = doc("rotateOriginCredentials", "Rotate the origins' credentials",
                          "Adds one to the credential generation: every origin gets a new "
                          "credential and the old ones stop working at once.");
  rotation.requestBody = ApiBodyDoc{"RotateRequest", false, "Nothing; may be left out."};
  rotation.responses =
      common({{200, "The pool with the new credentials.", "OriginPool", {}}}, /*body=*/true);
  router.add(
      {"POST", "/api/tunnel/{id}/origins/rotate", rotation,
       [s, api](const ApiRequest& r, const PathParams& p) { return rotate(*s, api, r, p); }});

  RouteDoc balancing = doc("setBalancing", "Set balancing and hold time",
                           "spread: every connected profile of the chosen origin takes new "
                           "visitors; priority: the first profile with links takes them all. "
                           "stickyHoldMs: how long an origin that comes back waits before taking "
                           "its visitors back.");
  balancing.requestBody = ApiBodyDoc{"BalancingRequest", true, ""};
  balancing.responses =
      common({{200, "The pool.", "OriginPool", {}},
              {400, "Neither member, an unknown mode, or a hold outside 0-600000.", "Error", {}}},
             /*body=*/true);
  router.add(
      {"PUT", "/api/tunnel/{id}/balancing", balancing,
       [s, api](const ApiRequest& r, const PathParams& p) { return setBalancing(*s, api, r, p); }});
}

}  // namespace ot::controld
