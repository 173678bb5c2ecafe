#include "controld/api/origin_api_parts.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "common/log_format.h"
#include "controld/api/api_routes.h"

namespace ot::controld::origin_api {
namespace {

std::string timeText(int64_t ms) {
  return log::formatTimestamp(std::chrono::system_clock::time_point(std::chrono::milliseconds(ms)));
}

}  // namespace

ApiResponse badRequest(std::string_view message) {
  return ApiResponse::error(400, "BadRequestError", message);
}

ApiResponse noSecret() {
  return ApiResponse::error(503, "ServiceUnavailableError", "origin credentials are unavailable");
}

ApiResponse reply(int status, const Json& body) {
  return ApiResponse::json(status, body.dump(-1, ' ', false, Json::error_handler_t::replace));
}

std::optional<OriginSecret> secretOr(const std::optional<OriginSecret>& given) {
  return given ? given : installedOriginSecret();
}

std::variant<PoolWrite, ApiResponse> readPoolWrite(const ApiRequest& request) {
  std::optional<std::string> token = bearerToken(request);
  // Without a token nothing else about the request matters.
  if (!token) {
    return serviceErrorResponse({ServiceErrorKind::kUnauthorized, "a bearer token is required"});
  }
  auto body = readJsonBody(request, /*required=*/true);
  if (auto* refused = std::get_if<ApiResponse>(&body)) return std::move(*refused);
  return PoolWrite{std::move(token), std::move(std::get<Json>(body))};
}

OriginEntry* findOrigin(TunnelRecord& record, std::string_view name) {
  const auto it = std::find_if(record.origins.begin(), record.origins.end(),
                               [&](const OriginEntry& origin) { return origin.name == name; });
  return it == record.origins.end() ? nullptr : &*it;
}

Json directJson(const std::optional<DirectTarget>& direct) {
  if (!direct) return Json(nullptr);
  return Json{{"address", direct->address}, {"links", direct->links}};
}

Json originJson(const OriginSecret& secret, const TunnelRecord& record, const OriginEntry& origin) {
  return Json{{"name", origin.name},
              {"addedAt", timeText(origin.addedAtMs)},
              {"credential",
               deriveOriginCredential(secret, record.id, origin.name, record.credentialGeneration)},
              {"direct", directJson(origin.direct)}};
}

Json directTargetSchema() {
  return Json{
      {"type", "object"},
      {"description",
       "Direct mode (docs/pools-direct.md): every relay machine keeps `links` bridges to the "
       "origin by dialing `address`; the origin's otunnel listens there and speaks first."},
      {"required", {"address"}},
      {"additionalProperties", false},
      {"properties",
       {{"address",
         {{"type", "string"},
          {"maxLength", kMaxDirectAddressLength},
          {"example", "origin.example.com:8443"},
          {"description",
           "host:port: an IPv4 address, an IPv6 address in brackets ([2001:db8::1]:8443) or a "
           "DNS name; port 1-65535."}}},
        {"links",
         {{"type", "integer"},
          {"minimum", 1},
          {"maximum", kMaxDirectLinks},
          {"default", kDefaultDirectLinks},
          {"description", "Bridges each relay machine keeps to the origin."}}}}}};
}

Json originSchema() {
  return Json{
      {"type", "object"},
      {"required", {"name", "addedAt", "credential", "direct"}},
      {"properties",
       {{"name", {{"type", "string"}, {"description", "The origin's name."}}},
        {"addedAt", {{"type", "string"}, {"format", "date-time"}}},
        {"credential",
         {{"type", "string"},
          {"description",
           "What the origin attaches with (under its own name only): derived from the "
           "server's secret, the tunnel, the name and the generation; never stored."}}},
        {"direct",
         {{"allOf", Json::array({{{"$ref", "#/components/schemas/DirectTarget"}}})},
          {"nullable", true},
          {"description",
           "Where the relays dial the origin; null when the origin dials the relays itself."}}}}}};
}

RouteDoc routeDoc(const char* operationId, const char* summary, const char* description) {
  RouteDoc out;
  out.operationId = operationId;
  out.summary = summary;
  out.description = description;
  out.tag = "tunnels";
  out.bearerAuth = true;
  out.parameters = {{"id", "The tunnel's ID: the first label of its hostname."}};
  return out;
}

std::vector<ApiResponseDoc> withCommonResponses(std::vector<ApiResponseDoc> specific, bool body) {
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

}  // namespace ot::controld::origin_api
