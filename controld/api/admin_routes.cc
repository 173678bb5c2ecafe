#include "controld/api/admin_routes.h"

#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "common/crypto.h"

namespace ot::controld {
namespace {

using Json = nlohmann::ordered_json;

ApiResponse unauthorized(std::string message) {
  ApiResponse response = ApiResponse::error(401, "UnauthorizedError", std::move(message));
  response.headers.emplace_back("WWW-Authenticate", "Bearer");
  return response;
}

RouteDoc statsDoc() {
  RouteDoc doc;
  doc.operationId = "adminStats";
  doc.summary = "Service statistics for operators";
  doc.description =
      "Counts of tunnels (live, deleted, issuing, with an alarm) and jobs by status, read from the "
      "database; the answering machine's bridges, descriptors and threads; its relayd's open "
      "connections and forwarding counters; and its view of the region mesh (null on a single "
      "machine). Needs Authorization: Bearer <ADMIN_TOKEN>; the "
      "route exists only when the server has an ADMIN_TOKEN.";
  doc.tag = "admin";
  doc.bearerAuth = true;
  doc.responses = {{200, "The statistics.", "AdminStats", {}},
                   {401, "No bearer token, or not ADMIN_TOKEN.", "Error", {"WWW-Authenticate"}},
                   {503, "Storage is unavailable.", "Error", {}}};
  return doc;
}

Json statsSchema() {
  auto integer = [](const char* description) {
    return Json{{"type", "integer"}, {"description", description}};
  };
  return Json{
      {"type", "object"},
      {"required",
       {"tunnels", "deleted", "issuing", "alarms", "jobs", "bridges", "tunnels_online", "relays",
        "machine", "relayd", "cluster"}},
      {"properties",
       {{"tunnels", integer("Tunnels not deleted (every machine answers the same).")},
        {"deleted", integer("Deleted tunnels, kept so their IDs stay taken.")},
        {"issuing", integer("Tunnels with a certificate being issued.")},
        {"alarms", integer("Tunnels with an alarm set (a renewal or retry due).")},
        {"jobs",
         {{"type", "object"},
          {"description", "Jobs by status; leased: pending and held by a machine now."}}},
        {"bridges", integer("Bridges attached to this machine.")},
        {"tunnels_online", integer("Tunnels with a bridge on this machine.")},
        {"relays", integer("relayd sessions connected to this controld.")},
        {"machine",
         {{"type", "object"},
          {"description", "This machine: id, region, threads, fds (this process), uptime."}}},
        {"relayd",
         {{"type", "object"},
          {"nullable", true},
          {"description",
           "This machine's relayd, as it last reported (about once a second when something "
           "changed): visitor_connections_open and bridges_attached now; since relayd started, "
           "visitor_connections by outcome (served_local, forwarded_out, forwarded_in, "
           "rejected_..., error), forward_failures by reason (refused, connect, timeout, io) and "
           "mesh_lookups (hit, miss); taken_at_ms. Null until a relayd reported them."}}},
        {"cluster",
         {{"type", "object"},
          {"nullable", true},
          {"description",
           "This machine's view of the mesh: machines (itself first) with their bridges, tunnels, "
           "routes, epoch, sequence and draining; peers by address and state; complete when "
           "every peer is linked; bridges in total and by region. Null without "
           "INTERNAL_LISTEN."}}}}}};
}

}  // namespace

void addAdminRoutes(ApiRouter& router, const AdminApi& admin) {
  if (admin.token.empty()) return;
  router.addSchema("AdminStats", statsSchema());
  auto tokenHash = std::make_shared<const crypto::Sha256Digest>(crypto::sha256(admin.token));
  router.add({"POST", "/api/admin/stats", statsDoc(),
              [tokenHash, gather = admin.gatherStats](const ApiRequest& request,
                                                      const PathParams&) -> ApiResponse {
                const auto token = bearerToken(request);
                if (!token) return unauthorized("a bearer token is required");
                const crypto::Sha256Digest given = crypto::sha256(*token);
                if (!crypto::constantTimeEqual(given, *tokenHash))
                  return unauthorized("not the admin token");
                auto inputs = gather();
                if (!inputs) {
                  return ApiResponse::error(503, "ServiceUnavailableError", "storage unavailable");
                }
                return ApiResponse::json(200, adminStatsJson(*inputs).dump(
                                                  -1, ' ', false, Json::error_handler_t::replace));
              }});
}

}  // namespace ot::controld
