#include "controld/api/status_routes.h"

#include <string>
#include <utility>

#include "controld/api/api_routes.h"

namespace ot::controld {
namespace {

using Json = nlohmann::ordered_json;

ApiResponse status(TunnelService& service, const StatusApi& api, const ApiRequest& request,
                   const PathParams& params) {
  auto view = service.getTunnel(params.get("id"), bearerToken(request));
  if (!view) return serviceErrorResponse(view.error());
  const TunnelStatusInputs inputs = api.gather ? api.gather(view->record.id) : TunnelStatusInputs{};
  const Json body = tunnelStatusJson(view->record.id, inputs);
  return ApiResponse::json(200, body.dump(-1, ' ', false, Json::error_handler_t::replace));
}

Json statusSchema() {
  auto integer = [](const char* description) {
    return Json{{"type", "integer"}, {"format", "int64"}, {"description", description}};
  };
  auto text = [](const char* description) {
    return Json{{"type", "string"}, {"description", description}};
  };
  Json profile = {
      {"type", "object"},
      {"required",
       {"name", "index", "links", "openStreams", "linksWanted", "linksUp", "nextTryMs",
        "lastError"}},
      {"properties",
       {{"name", text("The profile's name (\"\" when unnamed).")},
        {"index", integer("The profile's place in its origin's list, 0 first.")},
        {"links", integer("Links of the profile attached to this machine's relay.")},
        {"openStreams", integer("Visitor connections open on those links.")},
        {"linksWanted", integer("Links the origin's otunnel wants for the profile (report).")},
        {"linksUp", integer("Links the origin's otunnel has up for it, on any relay (report).")},
        {"nextTryMs", integer("Wait until the profile's next dial, 0 when none (report).")},
        {"lastError", text("The profile's last dial error, \"\" when none (report).")}}}};
  Json origin = {
      {"type", "object"},
      {"required",
       {"name", "links", "reported", "reportAgeMs", "profiles", "peerLinks", "peerMachines"}},
      {"properties",
       {{"name", text("The origin's name (\"\" for unnamed bridges).")},
        {"links", integer("Its links attached to this machine's relay.")},
        {"reported",
         {{"type", "boolean"}, {"description", "Whether its otunnel sent a status report."}}},
        {"reportAgeMs", integer("How old that report is.")},
        {"profiles", {{"type", "array"}, {"items", profile}}},
        {"peerLinks", integer("Its links attached to other machines of the mesh.")},
        {"peerMachines",
         {{"type", "array"},
          {"items", {{"type", "string"}}},
          {"description", "The machines holding those links, sorted."}}}}}};
  return Json{
      {"type", "object"},
      {"required", {"id", "health", "summary", "links", "peerLinks", "origins"}},
      {"properties",
       {{"id", text("The tunnel's ID.")},
        {"health", {{"type", "string"}, {"enum", {"healthy", "no_links", "relay_unreachable"}}}},
        {"summary", text("health for people: \"healthy (12 links up)\", \"no links attached\", "
                         "\"relay unreachable\".")},
        {"links", integer("Links attached: this machine's plus peerLinks.")},
        {"peerLinks", integer("Links attached to other machines of the mesh.")},
        {"origins", {{"type", "array"}, {"items", origin}}}}}};
}

RouteDoc statusDoc() {
  RouteDoc doc;
  doc.operationId = "getStatus";
  doc.summary = "Read live status";
  doc.description =
      "The tunnel's health now: its links attached per origin and profile, the visitor "
      "connections open on them, and what each origin's otunnel last reported about its "
      "profiles (links wanted and up, the wait until its next dial, its last error). "
      "relay_unreachable: this machine has no relay connected; no_links: no link attached "
      "anywhere in the mesh. Answers within about a second.";
  doc.tag = "tunnels";
  doc.bearerAuth = true;
  doc.parameters = {{"id", "The tunnel's ID: the first label of its hostname."}};
  doc.responses = {
      {200, "The status.", "TunnelStatus", {}},
      {401, "No bearer token, or not this tunnel's token.", "Error", {"WWW-Authenticate"}},
      {404, "No such tunnel (never created, or deleted).", "Error", {}},
      {503, "Storage is unavailable; retry.", "Error", {}}};
  return doc;
}

}  // namespace

Json tunnelStatusJson(const std::string& tunnelId, const TunnelStatusInputs& inputs) {
  uint64_t local = 0;
  Json origins = Json::array();
  for (const TunnelStatusOrigin& origin : inputs.origins) {
    uint64_t links = 0;
    Json profiles = Json::array();
    for (const TunnelStatusProfile& p : origin.profiles) {
      links += p.links;
      profiles.push_back(Json{{"name", p.name},
                              {"index", p.index},
                              {"links", p.links},
                              {"openStreams", p.openStreams},
                              {"linksWanted", p.linksWanted},
                              {"linksUp", p.linksUp},
                              {"nextTryMs", p.nextTryMs},
                              {"lastError", p.lastError}});
    }
    local += links;
    origins.push_back(Json{{"name", origin.name},
                           {"links", links},
                           {"reported", origin.reported},
                           {"reportAgeMs", origin.reportAgeMs},
                           {"profiles", std::move(profiles)},
                           {"peerLinks", origin.peerLinks},
                           {"peerMachines", origin.peerMachines}});
  }
  const uint64_t total = local + inputs.peerLinks;
  std::string health;
  std::string summary;
  if (!inputs.relayConnected && total == 0) {
    health = "relay_unreachable";
    summary = "relay unreachable";
  } else if (total == 0) {
    health = "no_links";
    summary = "no links attached";
  } else {
    health = "healthy";
    summary = "healthy (" + std::to_string(total) + (total == 1 ? " link up)" : " links up)");
  }
  return Json{{"id", tunnelId},
              {"health", health},
              {"summary", summary},
              {"links", total},
              {"peerLinks", inputs.peerLinks},
              {"origins", std::move(origins)}};
}

void addStatusRoutes(ApiRouter& router, TunnelService& service, const StatusApi& api) {
  router.addSchema("TunnelStatus", statusSchema());
  TunnelService* s = &service;
  router.add(
      {"GET", "/api/tunnel/{id}/status", statusDoc(),
       [s, api](const ApiRequest& r, const PathParams& p) { return status(*s, api, r, p); }});
}

}  // namespace ot::controld
