// GET /api/tunnel/{id}/status (docs/api.md "Status", docs/pools-status.md): a tunnel's live
// health per origin and profile, with the tunnel's token. Authentication and its answers (401,
// 404) are the tunnel routes' own: TunnelService::getTunnel checks the token before anything
// else. The figures come from StatusApi::gather (tunnel_status_source.h), which asks this
// machine's relayd and the mesh table; it runs on the API worker, never on the I/O loop.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "controld/api/api_router.h"
#include "controld/api/tunnel_service.h"

namespace ot::controld {

struct TunnelStatusProfile {
  std::string name;
  uint32_t index = 0;
  uint32_t links = 0;        // attached to this machine's relayd
  uint32_t openStreams = 0;  // on those links
  // From the origin's `status` report (0 / "" without one).
  uint32_t linksWanted = 0;
  uint32_t linksUp = 0;
  uint64_t nextTryMs = 0;
  std::string lastError;
};

struct TunnelStatusOrigin {
  std::string name;  // "" for bridges attached without an origin name
  bool reported = false;
  uint64_t reportAgeMs = 0;
  std::vector<TunnelStatusProfile> profiles;
  // Its links on other machines of the mesh (the mesh table carries each bridge's origin), and
  // those machines, sorted.
  uint32_t peerLinks = 0;
  std::vector<std::string> peerMachines;
};

struct TunnelStatusInputs {
  bool relayConnected = false;  // this controld has a live relayd session
  bool relayAnswered = false;   // and it answered in time (else: the registry's counts)
  std::vector<TunnelStatusOrigin> origins;
  uint32_t peerLinks = 0;  // the tunnel's bridges on other machines of the mesh
};

struct StatusApi {
  // Empty: every tunnel reads as "relay unreachable" (no relay is wired in).
  std::function<TunnelStatusInputs(const std::string& tunnelId)> gather;
};

// The response body (pure; for tests and otctl's admin call alike).
[[nodiscard]] nlohmann::ordered_json tunnelStatusJson(const std::string& tunnelId,
                                                      const TunnelStatusInputs& inputs);

// Adds the route and its schema; addApiSchemas must have run. `service` must outlive the router.
void addStatusRoutes(ApiRouter& router, TunnelService& service, const StatusApi& status);

}  // namespace ot::controld
