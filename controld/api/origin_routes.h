// The pool's routes (docs/pools-origins.md, docs/api.md "Origins"), with the tunnel's token as
// bearer (an origin's credential is never accepted here):
//   GET    /api/tunnel/{id}/origins          the pool, with each origin's credential
//   POST   /api/tunnel/{id}/origins          add an origin {"name"[,"direct"]}; 201 with its
//   credential DELETE /api/tunnel/{id}/origins/{name}   remove one; its credential stops at once
//   POST   /api/tunnel/{id}/origins/rotate   bump the generation: every credential changes
//   PUT    /api/tunnel/{id}/balancing        {"mode","stickyHoldMs"}
// and direct mode's PUT/DELETE /api/tunnel/{id}/origins/{name}/direct (origin_direct_routes.h);
// an origin added with {"name","direct"} is dialed by the relays from the start.
// Every write goes through TunnelService::changeTunnel: a new revision, pushed to the relays.
#pragma once

#include <optional>

#include "controld/api/api_router.h"
#include "controld/api/tunnel_service.h"
#include "controld/base/origin_credentials.h"

namespace ot::controld {

struct OriginApi {
  // The secret credentials are derived with; nullopt: the process's (installedOriginSecret), read
  // per request. Without either, reads and writes answer 503.
  std::optional<OriginSecret> secret;
};

// "rotate" is the one valid origin name the API refuses: its DELETE path would be the rotation's.
inline constexpr const char* kReservedOriginName = "rotate";

// Adds the routes and their schemas; the API's own schemas (addApiSchemas) must be there first.
// `service` must outlive the router.
void addOriginRoutes(ApiRouter& router, TunnelService& service, const OriginApi& api);

}  // namespace ot::controld
