#include "controld/api/reset_routes.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "controld/api/api_routes.h"

namespace ot::controld {
namespace {

using Json = nlohmann::ordered_json;

// One reset per tunnel per interval. Entries older than the interval are forgotten once the map
// is large, so its size is bounded by the resets of the last interval.
class ResetGate {
 public:
  explicit ResetGate(int64_t intervalMs) : intervalMs_(intervalMs) {}

  // 0: allowed (and recorded); else the ms to wait.
  int64_t take(const std::string& tunnelId, int64_t nowMs) {
    std::lock_guard lock(mutex_);
    if (last_.size() >= kPruneAt) {
      std::erase_if(last_, [&](const auto& entry) { return nowMs - entry.second >= intervalMs_; });
    }
    auto [it, added] = last_.try_emplace(tunnelId, nowMs);
    if (added) return 0;
    const int64_t since = nowMs - it->second;
    if (since >= 0 && since < intervalMs_) return intervalMs_ - since;
    it->second = nowMs;
    return 0;
  }

 private:
  static constexpr size_t kPruneAt = 4096;
  int64_t intervalMs_;
  std::mutex mutex_;
  std::unordered_map<std::string, int64_t> last_;
};

Json outcomeJson(const TunnelResetOutcome& outcome) {
  Json machines = Json::array();
  for (const MachineResetOutcome& machine : outcome.machines) {
    machines.push_back({{"machine", machine.machine},
                        {"here", machine.here},
                        {"told", machine.told},
                        {"bridges", machine.bridges}});
  }
  return Json{{"id", outcome.tunnelId},
              {"bridgesClosedHere", outcome.bridgesHere},
              {"relaysHere", outcome.relays},
              {"peersTold", outcome.peersTold},
              {"machines", std::move(machines)}};
}

ApiResponse reset(TunnelService& service, const ResetApi& api, ResetGate& gate,
                  const ApiRequest& request, const PathParams& params) {
  // The token first: a caller without it learns nothing and spends no one's budget.
  auto view = service.getTunnel(params.get("id"), bearerToken(request));
  if (!view) return serviceErrorResponse(view.error());
  const int64_t now = api.nowMs ? api.nowMs() : unixNowMs();
  if (const int64_t waitMs = gate.take(view->record.id, now); waitMs > 0) {
    const int64_t seconds = std::max<int64_t>(1, (waitMs + 999) / 1000);
    ApiResponse refused =
        ApiResponse::error(429, "RateLimitedError",
                           "this tunnel was reset less than a second ago; try again in " +
                               std::to_string(seconds) + " s");
    refused.headers.emplace_back("Retry-After", std::to_string(seconds));
    return refused;
  }
  const TunnelResetOutcome outcome = api.reset(view->record.id);
  return ApiResponse::json(
      200, outcomeJson(outcome).dump(-1, ' ', false, Json::error_handler_t::replace));
}

Json resetSchema() {
  auto integer = [](const char* description) {
    return Json{{"type", "integer"}, {"description", description}};
  };
  auto boolean = [](const char* description) {
    return Json{{"type", "boolean"}, {"description", description}};
  };
  Json machine = {
      {"type", "object"},
      {"required", {"machine", "here", "told", "bridges"}},
      {"properties",
       {{"machine", {{"type", "string"}, {"description", "The machine's ID."}}},
        {"here", boolean("The machine that answered (its relayd was told directly).")},
        {"told",
         boolean("Here, or a linked peer the reset went to. A machine not told (no mesh link "
                 "now) keeps its bridges of the tunnel.")},
        {"bridges", integer("Here: the bridges closed. A peer: the tunnel's bridges there as this "
                            "machine's mesh view showed them.")}}}};
  return Json{
      {"type", "object"},
      {"required", {"id", "bridgesClosedHere", "relaysHere", "peersTold", "machines"}},
      {"properties",
       {{"id", {{"type", "string"}, {"description", "The tunnel's ID."}}},
        {"bridgesClosedHere", integer("Bridges this machine's relayd closed.")},
        {"relaysHere", integer("relayd processes of this machine told (0: none connected).")},
        {"peersTold", integer("Other machines told to reset the tunnel.")},
        {"machines",
         {{"type", "array"},
          {"description",
           "This machine first, then every linked peer and every machine the mesh view shows "
           "with bridges of the tunnel."},
          {"items", machine}}}}}};
}

RouteDoc resetDoc() {
  RouteDoc doc;
  doc.operationId = "resetTunnel";
  doc.summary = "Reset the tunnel on every machine";
  doc.description =
      "Closes every bridge of the tunnel on every machine of the mesh (WebSocket close 4000 "
      "\"reset\"); the clients reconnect at once, without their backoff. Visitor connections "
      "in flight on those bridges end; nothing else of the tunnel changes. A machine without a "
      "mesh link at that moment is not told (told: false). At most one reset per tunnel per "
      "second on a machine.";
  doc.tag = "tunnels";
  doc.bearerAuth = true;
  doc.parameters = {{"id", "The tunnel's ID: the first label of its hostname."}};
  doc.responses = {
      {200, "What was reset, per machine.", "ResetOutcome", {}},
      {401, "No bearer token, or not this tunnel's token.", "Error", {"WWW-Authenticate"}},
      {404, "No such tunnel (never created, or deleted).", "Error", {}},
      {429, "The tunnel was reset less than a second ago.", "Error", {"Retry-After"}},
      {503, "Storage is unavailable; retry.", "Error", {}}};
  return doc;
}

}  // namespace

void addResetRoutes(ApiRouter& router, TunnelService& service, const ResetApi& api) {
  if (!api.reset) return;
  router.addSchema("ResetOutcome", resetSchema());
  TunnelService* s = &service;
  auto gate = std::make_shared<ResetGate>(api.minIntervalMs);
  router.add({"POST", "/api/tunnel/{id}/reset", resetDoc(),
              [s, api, gate](const ApiRequest& r, const PathParams& p) {
                return reset(*s, api, *gate, r, p);
              }});
}

}  // namespace ot::controld
