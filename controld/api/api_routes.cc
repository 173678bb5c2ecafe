#include "controld/api/api_routes.h"

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "common/log_format.h"
#include "common/text.h"
#include "controld/api/api_docs.h"

namespace ot::controld {
namespace {

using Json = nlohmann::ordered_json;

// ---- Reading requests ----

bool isJsonMediaType(std::string_view contentType) {
  const size_t semicolon = contentType.find(';');
  return equalsIgnoreCase(trimOws(contentType.substr(0, semicolon)), "application/json");
}

// The body as a JSON object, null when absent and optional, or the response refusing it.
std::variant<Json, ApiResponse> readJsonObject(const ApiRequest& request, bool required) {
  const auto contentType = request.header("Content-Type");
  if (contentType && !isJsonMediaType(*contentType)) {
    return ApiResponse::error(415, "UnsupportedMediaTypeError",
                              "the request body must be application/json");
  }
  if (request.body.empty()) {
    if (required) return ApiResponse::error(400, "BadRequestError", "a JSON body is required");
    return Json(nullptr);
  }
  if (!contentType) {
    return ApiResponse::error(415, "UnsupportedMediaTypeError",
                              "the request body must be application/json");
  }
  Json body = Json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    return ApiResponse::error(400, "BadRequestError", "the request body is not valid JSON");
  }
  if (!body.is_object()) {
    return ApiResponse::error(400, "BadRequestError", "the request body must be a JSON object");
  }
  return body;
}

// ---- Writing responses ----

ApiResponse json(int status, const Json& body) {
  return ApiResponse::json(status, body.dump(-1, ' ', false, Json::error_handler_t::replace));
}

ApiResponse errorResponse(const ServiceError& error) {
  ApiResponse response;
  switch (error.kind) {
    case ServiceErrorKind::kBadRequest:
      return ApiResponse::error(400, "BadRequestError", error.message);
    case ServiceErrorKind::kUnauthorized:
      response = ApiResponse::error(401, "UnauthorizedError", error.message);
      response.headers.emplace_back("WWW-Authenticate", "Bearer");
      return response;
    case ServiceErrorKind::kNotFound:
      return ApiResponse::error(404, "NotFoundError", error.message);
    case ServiceErrorKind::kIdTaken:
    case ServiceErrorKind::kCertificateInProgress:
    case ServiceErrorKind::kConflict:
      return ApiResponse::error(409, "ConflictError", error.message);
    case ServiceErrorKind::kRateLimited:
      response = ApiResponse::error(429, "RateLimitedError", error.message);
      response.headers.emplace_back("Retry-After", std::to_string(error.retryAfterS));
      return response;
    case ServiceErrorKind::kBusy:
      response = ApiResponse::error(503, "ServiceUnavailableError", error.message);
      response.headers.emplace_back("Retry-After", std::to_string(error.retryAfterS));
      return response;
    case ServiceErrorKind::kStale:
    case ServiceErrorKind::kStorage:
      return ApiResponse::error(503, "ServiceUnavailableError", error.message);
    case ServiceErrorKind::kInternal:
      break;
  }
  return ApiResponse::error(500, "InternalServerError", error.message);
}

Json timeJson(int64_t ms) {
  return log::formatTimestamp(std::chrono::system_clock::time_point(std::chrono::milliseconds(ms)));
}

Json optionalTimeJson(std::optional<int64_t> ms) {
  return ms ? timeJson(*ms) : Json(nullptr);
}

Json certificateJson(const CertificateInfo& certificate, bool withChain) {
  const bool ready = certificate.state == CertificateState::kReady;
  Json out = {{"state", certificateStateName(certificate.state)}};
  if (withChain && ready) out["chain"] = certificate.chainPem;
  out["notAfter"] =
      ready && certificate.notAfterMs > 0 ? timeJson(certificate.notAfterMs) : Json(nullptr);
  out["error"] = certificate.error.empty() ? Json(nullptr) : Json(certificate.error);
  return out;
}

Json tunnelJson(const TunnelView& view) {
  const TunnelRecord& record = view.record;
  return Json{{"id", record.id},
              {"hostname", record.hostname},
              {"state", view.online() ? "online" : "offline"},
              {"bridges", view.bridges},
              {"createdAt", timeJson(record.createdAtMs)},
              {"lastConnectedAt", optionalTimeJson(record.lastConnectedAtMs)},
              {"certificate", certificateJson(record.certificate, false)}};
}

// ---- Handlers ----

ApiResponse createTunnel(TunnelService& service, const ApiRequest& request) {
  auto body = readJsonObject(request, /*required=*/false);
  if (auto* refused = std::get_if<ApiResponse>(&body)) return std::move(*refused);
  const Json& object = std::get<Json>(body);
  std::optional<std::string> wantedId;
  if (object.is_object()) {
    const auto id = object.find("id");
    if (id != object.end() && !id->is_null()) {
      if (!id->is_string())
        return ApiResponse::error(400, "BadRequestError", "id must be a string");
      wantedId = id->get<std::string>();
    }
  }
  auto created = service.createTunnel(wantedId, request.clientAddress);
  if (!created) return errorResponse(created.error());
  return json(201, Json{{"id", created->id},
                        {"hostname", created->hostname},
                        {"token", created->token},
                        {"url", created->url}});
}

ApiResponse getTunnel(TunnelService& service, const ApiRequest& request, const PathParams& params) {
  auto view = service.getTunnel(params.get("id"), bearerToken(request));
  if (!view) return errorResponse(view.error());
  return json(200, tunnelJson(*view));
}

ApiResponse deleteTunnel(TunnelService& service, const ApiRequest& request,
                         const PathParams& params) {
  auto deleted = service.deleteTunnel(params.get("id"), bearerToken(request));
  if (!deleted) return errorResponse(deleted.error());
  return json(200, Json{{"deleted", true}});
}

ApiResponse bindCertificate(TunnelService& service, const ApiRequest& request,
                            const PathParams& params) {
  const std::optional<std::string> token = bearerToken(request);
  // Without a token nothing else about the request matters.
  if (!token) return errorResponse({ServiceErrorKind::kUnauthorized, "a bearer token is required"});
  auto body = readJsonObject(request, /*required=*/true);
  if (auto* refused = std::get_if<ApiResponse>(&body)) return std::move(*refused);
  const Json& object = std::get<Json>(body);
  const auto csr = object.find("csr");
  if (csr == object.end() || !csr->is_string()) {
    return ApiResponse::error(400, "BadRequestError",
                              "csr must be a PEM certificate signing request");
  }
  auto bound = service.bindCertificate(params.get("id"), token, csr->get_ref<const std::string&>());
  if (!bound) return errorResponse(bound.error());
  const bool issuing = bound->certificate.state == CertificateState::kIssuing;
  return json(issuing ? 202 : 200, certificateJson(bound->certificate, true));
}

ApiResponse getCertificate(TunnelService& service, const ApiRequest& request,
                           const PathParams& params) {
  auto certificate = service.getCertificate(params.get("id"), bearerToken(request));
  if (!certificate) return errorResponse(certificate.error());
  return json(200, certificateJson(*certificate, true));
}

ApiResponse health(TunnelService& service) {
  auto healthy = service.health();
  if (!healthy) return errorResponse(healthy.error());
  return json(200, Json{{"status", "ok"}});
}

}  // namespace

std::variant<Json, ApiResponse> readJsonBody(const ApiRequest& request, bool required) {
  return readJsonObject(request, required);
}

ApiResponse serviceErrorResponse(const ServiceError& error) {
  return errorResponse(error);
}

ApiRouter buildApiRouter(TunnelService& service, OpenApiInfo info, const AdminApi& admin,
                         const UsageApi& usage, const ResetApi& reset, const StatusApi& status) {
  ApiRouter router;
  addApiSchemas(router);
  TunnelService* s = &service;
  router.add({"POST", "/api/tunnel", createTunnelDoc(),
              [s](const ApiRequest& r, const PathParams&) { return createTunnel(*s, r); }});
  router.add({"GET", "/api/tunnel/{id}", getTunnelDoc(),
              [s](const ApiRequest& r, const PathParams& p) { return getTunnel(*s, r, p); }});
  router.add({"DELETE", "/api/tunnel/{id}", deleteTunnelDoc(),
              [s](const ApiRequest& r, const PathParams& p) { return deleteTunnel(*s, r, p); }});
  router.add({"PUT", "/api/tunnel/{id}/certificate", bindCertificateDoc(),
              [s](const ApiRequest& r, const PathParams& p) { return bindCertificate(*s, r, p); }});
  router.add({"GET", "/api/tunnel/{id}/certificate", getCertificateDoc(),
              [s](const ApiRequest& r, const PathParams& p) { return getCertificate(*s, r, p); }});
  addUsageRoutes(router, service, usage);
  addOriginRoutes(router, service, OriginApi{});
  addResetRoutes(router, service, reset);
  addStatusRoutes(router, service, status);
  router.add({"GET", "/health", healthDoc(),
              [s](const ApiRequest&, const PathParams&) { return health(*s); }});
  addAdminRoutes(router, admin);

  // The document describes the finished table, this route included; it is rendered once.
  auto document = std::make_shared<std::string>();
  router.add(
      {"GET", "/openapi.json", openApiDoc(), [document](const ApiRequest&, const PathParams&) {
         return ApiResponse::json(200, *document);
       }});
  if (info.servers.empty()) info.servers.push_back("https://" + service.config().domain);
  if (info.description.empty()) {
    info.description =
        "Create tunnels, bind certificate signing requests to them and follow their state. "
        "Every error is a JSON object {\"_tag\": <kind>, \"message\": <text>}; clients branch "
        "on _tag. 429 and some 503 answers carry Retry-After (seconds).";
  }
  *document = buildOpenApi(router, info).dump();
  return router;
}

ApiHandler makeApiHandler(std::shared_ptr<const ApiRouter> router) {
  return
      [router = std::move(router)](const ApiRequest& request) { return router->handle(request); };
}

}  // namespace ot::controld
