// Direct mode's routes (docs/pools-direct.md "API and storage"), with the tunnel's token:
//   PUT    /api/tunnel/{id}/origins/{name}/direct   {"address","links"}: set or replace the
//                                                  origin's direct target; 200, the origin
//   DELETE /api/tunnel/{id}/origins/{name}/direct   the relays stop dialing it; 204
// Each is a revisioned record write through TunnelService::changeTunnel, pushed to the relays, as
// adding an origin is. addOriginRoutes adds them.
#pragma once

#include "controld/api/api_router.h"
#include "controld/api/origin_routes.h"
#include "controld/api/tunnel_service.h"

namespace ot::controld {

// Needs the schemas addOriginRoutes adds ("DirectTarget", "Origin"). `service` must outlive the
// router.
void addOriginDirectRoutes(ApiRouter& router, TunnelService& service, const OriginApi& api);

}  // namespace ot::controld
