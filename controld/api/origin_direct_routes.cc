#include "controld/api/origin_direct_routes.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "common/log.h"
#include "controld/api/api_routes.h"
#include "controld/api/origin_api_parts.h"
#include "controld/base/direct_target.h"

namespace ot::controld {
namespace {

using origin_api::badRequest;
using origin_api::findOrigin;
using origin_api::Json;
using origin_api::noSecret;
using origin_api::originJson;
using origin_api::reply;

const log::Logger kOriginDirectRoutesLog("controld.api");

ServiceError noSuchOrigin(const std::string& name) {
  return ServiceError{ServiceErrorKind::kNotFound, "the tunnel has no origin named " + name, 0};
}

ApiResponse setDirect(TunnelService& service, const OriginApi& api, const ApiRequest& request,
                      const PathParams& params) {
  auto write = origin_api::readPoolWrite(request);
  if (auto* refused = std::get_if<ApiResponse>(&write)) return std::move(*refused);
  const std::optional<std::string>& token = std::get<origin_api::PoolWrite>(write).token;
  auto target = directTargetFromJson(std::get<origin_api::PoolWrite>(write).body);
  if (!target) return badRequest(target.error().message);
  const auto secret = origin_api::secretOr(api.secret);
  if (!secret) return noSecret();

  const std::string name(params.get("name"));
  auto changed = service.changeTunnel(params.get("id"), token,
                                      [&](TunnelRecord& record) -> std::optional<ServiceError> {
                                        OriginEntry* origin = findOrigin(record, name);
                                        if (origin == nullptr) return noSuchOrigin(name);
                                        origin->direct = *target;
                                        return std::nullopt;
                                      });
  if (!changed) return serviceErrorResponse(changed.error());
  TunnelRecord& record = changed->record;
  kOriginDirectRoutesLog.info("origin direct target set", {{"tunnel", record.id},
                                                           {"origin", name},
                                                           {"address", target->address},
                                                           {"links", target->links}});
  return reply(200, originJson(*secret, record, *findOrigin(record, name)));
}

ApiResponse clearDirect(TunnelService& service, const ApiRequest& request,
                        const PathParams& params) {
  const std::string name(params.get("name"));
  // Turning off what is off answers 204 without writing: no new revision goes to the relays.
  bool alreadyOff = false;
  auto changed = service.changeTunnel(
      params.get("id"), bearerToken(request),
      [&](TunnelRecord& record) -> std::optional<ServiceError> {
        OriginEntry* origin = findOrigin(record, name);
        if (origin == nullptr) return noSuchOrigin(name);
        if (!origin->direct) {
          alreadyOff = true;
          return ServiceError{ServiceErrorKind::kConflict, "unchanged", 0};  // not answered
        }
        origin->direct.reset();
        return std::nullopt;
      });
  if (!changed && !alreadyOff) return serviceErrorResponse(changed.error());
  if (changed) {
    kOriginDirectRoutesLog.info("origin direct target removed",
                                {{"tunnel", changed->record.id}, {"origin", name}});
  }
  return ApiResponse{204, {}, ""};
}

}  // namespace

void addOriginDirectRoutes(ApiRouter& router, TunnelService& service, const OriginApi& api) {
  TunnelService* s = &service;

  RouteDoc set = origin_api::routeDoc(
      "setOriginDirect", "Set an origin's direct target",
      "Direct mode: every relay machine dials the origin at address and keeps links bridges to it "
      "(the origin's otunnel listens there). Replaces a target set before; the relays get the new "
      "record at once.");
  set.parameters.push_back({"name", "The origin's name."});
  set.requestBody = ApiBodyDoc{"DirectTarget", true, ""};
  set.responses = origin_api::withCommonResponses(
      {{200, "Set: the origin as GET .../origins lists it.", "Origin", {}},
       {400, "address is not host:port as described, or links is not 1-16.", "Error", {}}},
      /*body=*/true);
  set.responses[3].description += " Also: the tunnel has no origin of that name.";
  router.add(
      {"PUT", "/api/tunnel/{id}/origins/{name}/direct", set,
       [s, api](const ApiRequest& r, const PathParams& p) { return setDirect(*s, api, r, p); }});

  RouteDoc clear = origin_api::routeDoc(
      "clearOriginDirect", "Turn an origin's direct mode off",
      "The relays stop dialing the origin and close the bridges they dialed; the origin may dial "
      "in itself as before. Answers 204 when it was off already.");
  clear.parameters.push_back({"name", "The origin's name."});
  clear.responses = origin_api::withCommonResponses({{204, "Off.", "", {}}});
  clear.responses[2].description += " Also: the tunnel has no origin of that name.";
  router.add({"DELETE", "/api/tunnel/{id}/origins/{name}/direct", clear,
              [s](const ApiRequest& r, const PathParams& p) { return clearDirect(*s, r, p); }});
}

}  // namespace ot::controld
