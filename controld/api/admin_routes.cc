#include "controld/api/admin_routes.h"

#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "common/crypto.h"
#include "common/log.h"

namespace ot::controld {
namespace {

using Json = nlohmann::ordered_json;

ApiResponse unauthorized(std::string message) {
  ApiResponse response = ApiResponse::error(401, "UnauthorizedError", std::move(message));
  response.headers.emplace_back("WWW-Authenticate", "Bearer");
  return response;
}

// The token rule every admin route shares: nullopt when the request carries ADMIN_TOKEN.
std::optional<ApiResponse> refuseWithoutToken(const ApiRequest& request,
                                              const crypto::Sha256Digest& tokenHash) {
  const auto token = bearerToken(request);
  if (!token) return unauthorized("a bearer token is required");
  const crypto::Sha256Digest given = crypto::sha256(*token);
  if (!crypto::constantTimeEqual(given, tokenHash)) return unauthorized("not the admin token");
  return std::nullopt;
}

bool queryFlag(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) != name) continue;
    const std::string_view value = eq == std::string_view::npos ? "" : pair.substr(eq + 1);
    return value.empty() || value == "1" || value == "true";
  }
  return false;
}

void streamExport(Backup& backup, StreamExchange& exchange) {
  // The head goes out before the first page is read: the client sees an answer at once.
  exchange.beginResponse(200, {{"Content-Type", "application/json"},
                               {"Cache-Control", "no-store"},
                               {"Content-Disposition", "attachment; filename=\"export.json\""}});
  const Status exported =
      backup.exportTo({}, [&](std::string_view bytes, uint32_t) { return exchange.write(bytes); });
  if (exported.ok()) {
    exchange.endResponse();
    return;
  }
  log::Logger("controld.admin")
      .warn("export failed: response cut short", {{"error", exported.error().message}});
  exchange.abortResponse();
}

void streamImport(Backup& backup, const ApiRequest& head, StreamExchange& exchange) {
  const bool dryRun = queryFlag(head.query, "dry_run");
  auto session = backup.beginImport({.dryRun = dryRun});
  std::string piece;
  const auto failed = [&](const Error& error) {
    if (error.kind == ErrorKind::kInvalid) {
      exchange.respond(ApiResponse::error(400, "BadRequestError", error.message));
    } else {
      exchange.respond(ApiResponse::error(503, "ServiceUnavailableError", error.message));
    }
  };
  for (;;) {
    const StreamExchange::Read read = exchange.readBody(piece);
    if (read == StreamExchange::Read::kGone) return;  // nobody left to answer
    if (read == StreamExchange::Read::kEnd) break;
    if (Status fed = session->feed(piece); !fed) return failed(fed.error());
  }
  auto report = session->finish();
  if (!report) return failed(report.error());
  exchange.respond(ApiResponse::json(200, importReportJson(*report)));
}

RouteDoc exportDoc() {
  RouteDoc doc;
  doc.operationId = "adminExport";
  doc.summary = "Export every tunnel record (a backup)";
  doc.description =
      "The backup file of docs/backup.md: {\"records\":[...]} with one record per line, each "
      "the stored record with its ID and revision. Streamed with chunked transfer encoding as "
      "the table is read 500 tunnels at a time, so it starts at once; pages are not one "
      "snapshot. A storage failure midway cuts the response short (no final chunk): a client "
      "sees a transfer error, never a complete but partial file. The file holds token hashes: "
      "keep it private. Needs Authorization: Bearer <ADMIN_TOKEN>.";
  doc.tag = "admin";
  doc.bearerAuth = true;
  doc.responses = {{200, "The backup file (application/json), streamed.", "", {}},
                   {401, "No bearer token, or not ADMIN_TOKEN.", "Error", {"WWW-Authenticate"}},
                   {503, "Export is unavailable here, or the server is busy.", "Error", {}}};
  return doc;
}

RouteDoc importDoc() {
  RouteDoc doc;
  doc.operationId = "adminImport";
  doc.summary = "Import a backup file";
  doc.description =
      "The body is a file from POST /api/admin/export (any size: read in pieces, not limited to "
      "64 KiB). Each record is inserted when absent, left alone when equal or when this server "
      "changed it since it was imported, and refreshed (a new revision) when still exactly as "
      "an earlier import left it. A record the server could not have written itself (an ID "
      "that is not one DNS label, a hostname other than <id>.<domain>, a token hash that is not "
      "SHA-256, a CSR or identifiers for other names, an unknown state) is written nowhere and "
      "listed under rejected. ?dry_run=1 counts without writing. Records before a malformed "
      "spot or a storage failure stay written. Needs Authorization: Bearer <ADMIN_TOKEN>.";
  doc.tag = "admin";
  doc.bearerAuth = true;
  doc.responses = {{200, "What the import did.", "AdminImportReport", {}},
                   {400, "The body is not a backup file (cut short, malformed).", "Error", {}},
                   {401, "No bearer token, or not ADMIN_TOKEN.", "Error", {"WWW-Authenticate"}},
                   {503, "Storage is unavailable, or the server is busy.", "Error", {}}};
  return doc;
}

Json importReportSchema() {
  auto integer = [](const char* description) {
    return Json{{"type", "integer"}, {"description", description}};
  };
  return Json{
      {"type", "object"},
      {"required",
       {"dry_run", "inserted", "refreshed", "unchanged", "skipped", "rejected",
        "rejected_unlisted"}},
      {"properties",
       {{"dry_run", {{"type", "boolean"}, {"description", "Nothing was written."}}},
        {"inserted", integer("Records the database did not have.")},
        {"refreshed", integer("Rows still as an earlier import left them, replaced.")},
        {"unchanged", integer("Records equal to the stored row.")},
        {"skipped", integer("Rows this server changed since they were imported: left alone.")},
        {"rejected",
         {{"type", "array"},
          {"description", "Records refused, with the reason (the first 10,000)."},
          {"items",
           {{"type", "object"},
            {"properties", {{"id", {{"type", "string"}}}, {"reason", {{"type", "string"}}}}}}}}},
        {"rejected_unlisted", integer("Refused records beyond the listed 10,000.")}}}};
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
                if (auto refused = refuseWithoutToken(request, *tokenHash)) return *refused;
                auto inputs = gather();
                if (!inputs) {
                  return ApiResponse::error(503, "ServiceUnavailableError", "storage unavailable");
                }
                return ApiResponse::json(200, adminStatsJson(*inputs).dump(
                                                  -1, ' ', false, Json::error_handler_t::replace));
              }});
  // Export and import are served by adminStreamRoutes; these entries document them and answer
  // only where the server streams nothing (the token checked first, as everywhere).
  router.addSchema("AdminImportReport", importReportSchema());
  for (auto [path, doc] :
       {std::pair{"/api/admin/export", exportDoc()}, std::pair{"/api/admin/import", importDoc()}}) {
    router.add({"POST", path, std::move(doc),
                [tokenHash](const ApiRequest& request, const PathParams&) -> ApiResponse {
                  if (auto refused = refuseWithoutToken(request, *tokenHash)) return *refused;
                  return ApiResponse::error(503, "ServiceUnavailableError",
                                            "export and import are not served here");
                }});
  }
}

StreamRoutes adminStreamRoutes(const AdminApi& admin,
                               const std::function<ApiHandler(ApiHandler)>& guard) {
  if (admin.token.empty()) return {};
  auto tokenHash = std::make_shared<const crypto::Sha256Digest>(crypto::sha256(admin.token));
  // 200 when the request carries ADMIN_TOKEN, else the 401 every admin route answers.
  ApiHandler tokenCheck = [tokenHash](const ApiRequest& request) -> ApiResponse {
    if (auto refused = refuseWithoutToken(request, *tokenHash)) return *refused;
    return ApiResponse::json(200, "{}");
  };
  auto admit = std::make_shared<const ApiHandler>(guard ? guard(std::move(tokenCheck))
                                                        : std::move(tokenCheck));
  Backup* backup = admin.backup;
  return [admit, backup](const ApiRequest& head) -> StreamHandler {
    if (head.method != "POST") return {};
    const bool isExport = head.path == "/api/admin/export";
    if (!isExport && head.path != "/api/admin/import") return {};
    return [admit, backup, isExport](const ApiRequest& request, StreamExchange& exchange) {
      ApiResponse admitted = (*admit)(request);
      if (admitted.status != 200) {
        exchange.respond(std::move(admitted));
        return;
      }
      if (backup == nullptr) {
        exchange.respond(ApiResponse::error(503, "ServiceUnavailableError",
                                            "export and import are not available"));
        return;
      }
      if (isExport) {
        streamExport(*backup, exchange);
      } else {
        streamImport(*backup, request, exchange);
      }
    };
  };
}

}  // namespace ot::controld
