// What the pool's routes share (origin_routes.cc, origin_direct_routes.cc): an origin's JSON as
// the API shows it, its schema, and the parts of their documentation every route repeats. Pure.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "controld/api/api_router.h"
#include "controld/base/origin_credentials.h"
#include "controld/store/tunnel_record.h"

namespace ot::controld::origin_api {

using Json = nlohmann::ordered_json;

[[nodiscard]] ApiResponse badRequest(std::string_view message);
// Only before controld has read its secret (or in a test without one); never expected live.
[[nodiscard]] ApiResponse noSecret();
[[nodiscard]] ApiResponse reply(int status, const Json& body);

// The secret credentials are derived under: `given` (tests), else the one controld installed.
[[nodiscard]] std::optional<OriginSecret> secretOr(const std::optional<OriginSecret>& given);

// A pool write's tunnel token and JSON body, or the answer refusing it: 401 without a token (then
// the body is not read), else the body's own refusals (413, 415, 400).
struct PoolWrite {
  std::optional<std::string> token;
  Json body;
};
[[nodiscard]] std::variant<PoolWrite, ApiResponse> readPoolWrite(const ApiRequest& request);

// The record's origin of that name, or nullptr.
[[nodiscard]] OriginEntry* findOrigin(TunnelRecord& record, std::string_view name);

// {"address","links"}, or null when the origin has no direct target.
[[nodiscard]] Json directJson(const std::optional<DirectTarget>& direct);
// {"name","addedAt","credential","direct"}: one origin as GET lists it.
[[nodiscard]] Json originJson(const OriginSecret& secret, const TunnelRecord& record,
                              const OriginEntry& origin);

// The schemas "Origin" (originJson) and "DirectTarget" ({"address","links"}).
[[nodiscard]] Json originSchema();
[[nodiscard]] Json directTargetSchema();

// A route's documentation with the tunnel's bearer token and its {id} parameter.
[[nodiscard]] RouteDoc routeDoc(const char* operationId, const char* summary,
                                const char* description);
// `specific` followed by the answers every pool route may give (401, 404, 503; with a body also
// 413, 415, 429).
[[nodiscard]] std::vector<ApiResponseDoc> withCommonResponses(std::vector<ApiResponseDoc> specific,
                                                              bool body = false);

}  // namespace ot::controld::origin_api
