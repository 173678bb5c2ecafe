#include "controld/api/origin_routes.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <variant>

#include "common/log.h"
#include "controld/api/api_routes.h"
#include "controld/api/origin_api_parts.h"
#include "controld/api/origin_direct_routes.h"

namespace ot::controld {
namespace {

using Json = origin_api::Json;

const log::Logger kOriginRoutesLog("controld.api");

using origin_api::badRequest;
using origin_api::noSecret;
using origin_api::originJson;
using origin_api::reply;
using origin_api::routeDoc;
using origin_api::withCommonResponses;

std::optional<OriginSecret> secretOf(const OriginApi& api) {
  return origin_api::secretOr(api.secret);
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
  auto write = origin_api::readPoolWrite(request);
  if (auto* refused = std::get_if<ApiResponse>(&write)) return std::move(*refused);
  const std::optional<std::string>& token = std::get<origin_api::PoolWrite>(write).token;
  const Json& object = std::get<origin_api::PoolWrite>(write).body;
  const auto nameIt = object.find("name");
  if (nameIt == object.end() || !nameIt->is_string() ||
      !isValidOriginName(nameIt->get_ref<const std::string&>())) {
    return badRequest("name must be 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-'");
  }
  const std::string name = nameIt->get<std::string>();
  if (name == kReservedOriginName) {
    return badRequest("the origin name \"rotate\" is reserved (it names the rotation route)");
  }
  std::optional<DirectTarget> direct;
  if (const auto it = object.find("direct"); it != object.end() && !it->is_null()) {
    auto parsed = directTargetFromJson(*it);
    if (!parsed) return badRequest(parsed.error().message);
    direct = std::move(parsed).value();
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
        record.origins.push_back(OriginEntry{name, addedAt, direct});
        return std::nullopt;
      });
  if (!changed) return serviceErrorResponse(changed.error());
  const TunnelRecord& record = changed->record;
  kOriginRoutesLog.info("origin added", {{"tunnel", record.id},
                                         {"origin", name},
                                         {"direct", direct ? direct->address : std::string("-")}});
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
        if (std::erase_if(record.origins,
                          [&](const OriginEntry& origin) { return origin.name == name; }) == 0) {
          return ServiceError{ServiceErrorKind::kNotFound, "the tunnel has no such origin", 0};
        }
        return std::nullopt;
      });
  if (!changed) return serviceErrorResponse(changed.error());
  kOriginRoutesLog.info("origin removed", {{"tunnel", changed->record.id}, {"origin", name}});
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
  kOriginRoutesLog.info(
      "origin credentials rotated",
      {{"tunnel", changed->record.id}, {"generation", changed->record.credentialGeneration}});
  return reply(200, poolJson(*secret, changed->record));
}

ApiResponse setBalancing(TunnelService& service, const OriginApi& api, const ApiRequest& request,
                         const PathParams& params) {
  auto write = origin_api::readPoolWrite(request);
  if (auto* refused = std::get_if<ApiResponse>(&write)) return std::move(*refused);
  const std::optional<std::string>& token = std::get<origin_api::PoolWrite>(write).token;
  const Json& object = std::get<origin_api::PoolWrite>(write).body;
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
  kOriginRoutesLog.info("balancing set", {{"tunnel", changed->record.id},
                                          {"mode", balancingName(changed->record.balancing)},
                                          {"sticky_hold_ms", changed->record.stickyHoldMs}});
  return reply(200, poolJson(*secret, changed->record));
}

// ---- Documentation ----

Json poolSchema() {
  const Json origin = {{"$ref", "#/components/schemas/Origin"}};
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
  Json out = origin_api::originSchema();
  out["required"].push_back("generation");
  out["properties"]["generation"] = {{"type", "integer"}, {"format", "int64"}};
  return out;
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
                   "\"rotate\"."}}},
                {"direct",
                 {{"allOf", Json::array({{{"$ref", "#/components/schemas/DirectTarget"}}})},
                  {"nullable", true},
                  {"description",
                   "Optional: the relays dial the origin there (direct mode); absent or null: "
                   "the origin dials the relays."}}}}}};
}

Json balancingRequestSchema() {
  return Json{{"type", "object"},
              {"description", "At least one member."},
              {"properties",
               {{"mode", {{"type", "string"}, {"enum", {"spread", "priority"}}}},
                {"stickyHoldMs", {{"type", "integer"}, {"minimum", 0}, {"maximum", 600000}}}}}};
}

}  // namespace

void addOriginRoutes(ApiRouter& router, TunnelService& service, const OriginApi& api) {
  router.addSchema("DirectTarget", origin_api::directTargetSchema());
  router.addSchema("Origin", origin_api::originSchema());
  router.addSchema("OriginPool", poolSchema());
  router.addSchema("AddedOrigin", addedSchema());
  router.addSchema("AddOriginRequest", addRequestSchema());
  router.addSchema("BalancingRequest", balancingRequestSchema());
  router.addSchema("RotateRequest", Json{{"type", "object"}, {"description", "No members."}});
  TunnelService* s = &service;

  RouteDoc list =
      routeDoc("getOrigins", "Read the pool",
               "The tunnel's origins with their credentials, its credential generation and "
               "how visitors are balanced.");
  list.responses = withCommonResponses({{200, "The pool.", "OriginPool", {}}});
  router.add(
      {"GET", "/api/tunnel/{id}/origins", list,
       [s, api](const ApiRequest& r, const PathParams& p) { return getOrigins(*s, api, r, p); }});

  RouteDoc add =
      routeDoc("addOrigin", "Add an origin",
               "Adds a named origin and answers its credential. relays learn of it at once.");
  add.requestBody = ApiBodyDoc{"AddOriginRequest", true, ""};
  add.responses = withCommonResponses(
      {{201, "Added.", "AddedOrigin", {}},
       {400, "The name is not valid, or is \"rotate\"; or direct is not valid.", "Error", {}},
       {409, "The origin exists, or the tunnel has 32 origins already.", "Error", {}}},
      /*body=*/true);
  router.add(
      {"POST", "/api/tunnel/{id}/origins", add,
       [s, api](const ApiRequest& r, const PathParams& p) { return addOrigin(*s, api, r, p); }});

  RouteDoc remove =
      routeDoc("removeOrigin", "Remove an origin",
               "Removes the origin: its credential stops working and relays close the "
               "bridges that attached with it.");
  remove.parameters.push_back({"name", "The origin's name."});
  remove.responses = withCommonResponses({{204, "Removed.", "", {}}});
  remove.responses[2].description += " Also: the tunnel has no origin of that name.";
  router.add({"DELETE", "/api/tunnel/{id}/origins/{name}", remove,
              [s](const ApiRequest& r, const PathParams& p) { return removeOrigin(*s, r, p); }});

  RouteDoc rotation = routeDoc("rotateOriginCredentials", "Rotate the origins' credentials",
                               "Adds one to the credential generation: every origin gets a new "
                               "credential and the old ones stop working at once.");
  rotation.requestBody = ApiBodyDoc{"RotateRequest", false, "Nothing; may be left out."};
  rotation.responses = withCommonResponses(
      {{200, "The pool with the new credentials.", "OriginPool", {}}}, /*body=*/true);
  router.add(
      {"POST", "/api/tunnel/{id}/origins/rotate", rotation,
       [s, api](const ApiRequest& r, const PathParams& p) { return rotate(*s, api, r, p); }});

  RouteDoc balancing =
      routeDoc("setBalancing", "Set balancing and hold time",
               "spread: every connected profile of the chosen origin takes new "
               "visitors; priority: the first profile with links takes them all. "
               "stickyHoldMs: how long an origin that comes back waits before taking "
               "its visitors back.");
  balancing.requestBody = ApiBodyDoc{"BalancingRequest", true, ""};
  balancing.responses = withCommonResponses(
      {{200, "The pool.", "OriginPool", {}},
       {400, "Neither member, an unknown mode, or a hold outside 0-600000.", "Error", {}}},
      /*body=*/true);
  router.add(
      {"PUT", "/api/tunnel/{id}/balancing", balancing,
       [s, api](const ApiRequest& r, const PathParams& p) { return setBalancing(*s, api, r, p); }});

  addOriginDirectRoutes(router, service, api);
}

}  // namespace ot::controld
