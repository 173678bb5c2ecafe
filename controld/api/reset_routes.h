// POST /api/tunnel/{id}/reset (docs/api.md, docs/pools-reset.md): the owner resets a tunnel on
// every machine of the mesh. This machine's relayd closes the tunnel's bridges with 4000 "reset"
// (the clients redial at once) and every linked peer is told to do the same; the answer says
// what was done per machine. With the tunnel's token, as the other tunnel routes (401, 404 first);
// at most one reset per tunnel per `minIntervalMs` on this machine (429 with Retry-After), so the
// route cannot be used to keep a mesh's relays busy.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/clock.h"
#include "controld/admin/tunnel_reset.h"
#include "controld/api/api_router.h"
#include "controld/api/tunnel_service.h"

namespace ot::controld {

struct ResetApi {
  // Does the reset (TunnelResetter::reset); empty: the route is not added.
  std::function<TunnelResetOutcome(const std::string& tunnelId)> reset;
  Clock nowMs;                   // empty: the system clock
  int64_t minIntervalMs = 1000;  // per tunnel, on this machine
};

// Adds the route and its schema; the API's own schemas (addApiSchemas) must be there first.
// `service` must outlive the router.
void addResetRoutes(ApiRouter& router, TunnelService& service, const ResetApi& api);

}  // namespace ot::controld
