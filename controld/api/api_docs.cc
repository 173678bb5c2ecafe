#include "controld/api/api_docs.h"

#include <string>
#include <utility>
#include <vector>

namespace ot::controld {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kTunnelIdPattern = "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$";
constexpr const char* kTunnelTag = "tunnels";
constexpr const char* kServiceTag = "service";

Json str(const char* description) {
  return Json{{"type", "string"}, {"description", description}};
}

Json timeSchema(const char* description, bool nullable) {
  Json out = {{"type", "string"}, {"format", "date-time"}, {"description", description}};
  if (nullable) out["nullable"] = true;
  return out;
}

Json certificateState() {
  return Json{{"type", "string"},
              {"enum", {"none", "issuing", "ready", "failed"}},
              {"description",
               "none: no CSR bound yet; issuing: an issuance is queued or running (keep polling); "
               "ready: the chain is available; failed: see error, bind a new CSR to try again."}};
}

Json object(std::vector<std::string> required, Json properties) {
  return Json{
      {"type", "object"}, {"required", std::move(required)}, {"properties", std::move(properties)}};
}

ApiResponseDoc error(int status, std::string description, std::vector<std::string> headers = {}) {
  return ApiResponseDoc{status, std::move(description), "Error", std::move(headers)};
}

ApiResponseDoc unauthorized() {
  return error(401, "No bearer token, or not this tunnel's token.", {"WWW-Authenticate"});
}
ApiResponseDoc notFound() {
  return error(404, "No such tunnel (never created, or deleted).");
}
ApiResponseDoc unavailable(
    std::string description =
        "Storage is unavailable, or the tunnel changed while the request ran; retry.",
    std::vector<std::string> headers = {}) {
  return error(503, std::move(description), std::move(headers));
}
ApiResponseDoc tooLarge() {
  return error(413, "The body is larger than the server accepts (answered before any handler).");
}
ApiResponseDoc unsupportedMediaType() {
  return error(415, "A body whose Content-Type is not application/json.");
}
ApiParameterDoc idParameter() {
  return {"id", "The tunnel's ID: the first label of its hostname."};
}

}  // namespace

void addApiSchemas(ApiRouter& router) {
  router.addSchema(
      "Error",
      object({"_tag", "message"},
             {{"_tag",
               {{"type", "string"},
                {"enum",
                 {"BadRequestError", "UnauthorizedError", "NotFoundError", "MethodNotAllowedError",
                  "ConflictError", "PayloadTooLargeError", "UnsupportedMediaTypeError",
                  "RateLimitedError", "ServiceUnavailableError", "InternalServerError"}},
                {"description", "What kind of failure: branch on this, not on the message."}}},
              {"message", str("What went wrong, for people.")}}));
  router.addSchema(
      "CreateTunnelRequest",
      Json{{"type", "object"},
           {"properties",
            {{"id",
              {{"type", "string"},
               {"pattern", kTunnelIdPattern},
               {"maxLength", 63},
               {"description", "The wanted ID (one DNS label); omitted: a random one."}}}}}});
  router.addSchema(
      "CreatedTunnel",
      object({"id", "hostname", "token", "url"},
             {{"id", {{"type", "string"}, {"pattern", kTunnelIdPattern}}},
              {"hostname", str("<id>.<domain>")},
              {"token", str("The tunnel's bearer token. Returned only here, only once: the server "
                            "keeps its SHA-256 alone.")},
              {"url", str("https://<hostname>")}}));
  router.addSchema(
      "CertificateSummary",
      object({"state", "notAfter", "error"},
             {{"state", certificateState()},
              {"notAfter", timeSchema("When the certificate expires; null unless ready.", true)},
              {"error",
               {{"type", "string"},
                {"nullable", true},
                {"description", "The last issuance failure, if any."}}}}));
  router.addSchema(
      "Certificate",
      object({"state", "notAfter", "error"},
             {{"state", certificateState()},
              {"chain", str("PEM certificates, leaf first; present only when ready.")},
              {"notAfter", timeSchema("When the certificate expires; null unless ready.", true)},
              {"error",
               {{"type", "string"},
                {"nullable", true},
                {"description", "The last issuance failure, if any."}}}}));
  router.addSchema(
      "Tunnel",
      object({"id", "hostname", "state", "bridges", "createdAt", "lastConnectedAt", "certificate"},
             {{"id", {{"type", "string"}, {"pattern", kTunnelIdPattern}}},
              {"hostname", str("<id>.<domain>")},
              {"state",
               {{"type", "string"},
                {"enum", {"online", "offline"}},
                {"description", "online while at least one bridge is attached to a relay."}}},
              {"bridges", {{"type", "integer"}, {"minimum", 0}, {"description", "Live bridges."}}},
              {"createdAt", timeSchema("When the tunnel was created.", false)},
              {"lastConnectedAt", timeSchema("When a bridge last attached; null if never.", true)},
              {"certificate", {{"$ref", "#/components/schemas/CertificateSummary"}}}}));
  router.addSchema("BindCertificateRequest",
                   object({"csr"}, {{"csr", str("A PEM certificate signing request (CERTIFICATE "
                                                "REQUEST) for exactly <id>.<domain> and optionally "
                                                "*.<id>.<domain>, with CN=<id>.<domain>; ECDSA "
                                                "P-256/P-384 or RSA 2048-4096.")}}));
  router.addSchema("Deleted", object({"deleted"}, {{"deleted", {{"type", "boolean"}}}}));
  router.addSchema("Health",
                   object({"status"}, {{"status", {{"type", "string"}, {"enum", {"ok"}}}}}));
  router.addSchema("OpenApiDocument",
                   Json{{"type", "object"}, {"description", "This document (OpenAPI 3.0.3)."}});
}

RouteDoc createTunnelDoc() {
  RouteDoc doc;
  doc.operationId = "createTunnel";
  doc.summary = "Create a tunnel";
  doc.description =
      "Creates a tunnel with a random ID, or the one asked for. The answer holds the tunnel's "
      "token, which is never shown again. Limited per client address (IPv4 address, IPv6 /64).";
  doc.tag = kTunnelTag;
  doc.requestBody = ApiBodyDoc{"CreateTunnelRequest", false, "Optional; may be empty."};
  doc.responses = {
      {201, "Created.", "CreatedTunnel", {}},
      error(400, "Not JSON, not an object, or an id that is not one DNS label."),
      error(409, "The wanted id is taken (IDs of deleted tunnels stay taken)."),
      tooLarge(),
      unsupportedMediaType(),
      error(429, "Too many tunnels created from this address.", {"Retry-After"}),
      unavailable("Storage is unavailable, or certificate issuance is backed up (with "
                  "Retry-After: 30).",
                  {"Retry-After"}),
  };
  return doc;
}

RouteDoc getTunnelDoc() {
  RouteDoc doc;
  doc.operationId = "getTunnel";
  doc.summary = "Read a tunnel";
  doc.description =
      "The tunnel, whether it is online (from the live bridges) and its "
      "certificate's state.";
  doc.tag = kTunnelTag;
  doc.bearerAuth = true;
  doc.parameters = {idParameter()};
  doc.responses = {{200, "The tunnel.", "Tunnel", {}}, unauthorized(), notFound(), unavailable()};
  return doc;
}

RouteDoc deleteTunnelDoc() {
  RouteDoc doc;
  doc.operationId = "deleteTunnel";
  doc.summary = "Delete a tunnel";
  doc.description = "Deletes the tunnel; relays drop its bridges. Its ID is not reused.";
  doc.tag = kTunnelTag;
  doc.bearerAuth = true;
  doc.parameters = {idParameter()};
  doc.responses = {{200, "Deleted.", "Deleted", {}}, unauthorized(), notFound(), unavailable()};
  return doc;
}

RouteDoc bindCertificateDoc() {
  RouteDoc doc;
  doc.operationId = "bindCertificate";
  doc.summary = "Request a certificate for a CSR";
  doc.description =
      "Binds a CSR to the tunnel and queues its issuance (the private key never leaves the "
      "client). Binding the CSR that is already bound changes nothing and answers its current "
      "state, so a client may repeat the call. New CSRs are limited per tunnel; while one is "
      "being issued, another is refused (409) without being charged.";
  doc.tag = kTunnelTag;
  doc.bearerAuth = true;
  doc.parameters = {idParameter()};
  doc.requestBody = ApiBodyDoc{"BindCertificateRequest", true, ""};
  doc.responses = {
      {200, "The CSR was already bound and its certificate is ready or failed.", "Certificate", {}},
      {202, "Issuance is queued or running; poll GET .../certificate.", "Certificate", {}},
      error(400, "No or bad JSON, or a CSR the server refuses (the message says why)."),
      unauthorized(),
      notFound(),
      error(409, "Another CSR's certificate is being issued for this tunnel; nothing was charged."),
      tooLarge(),
      unsupportedMediaType(),
      error(429, "Too many new certificates for this tunnel.", {"Retry-After"}),
      unavailable("Storage is unavailable, the tunnel changed meanwhile, or certificate issuance "
                  "is backed up (with Retry-After: 30).",
                  {"Retry-After"}),
  };
  return doc;
}

RouteDoc getCertificateDoc() {
  RouteDoc doc;
  doc.operationId = "getCertificate";
  doc.summary = "Read the certificate";
  doc.description = "The certificate's state, and its chain once ready.";
  doc.tag = kTunnelTag;
  doc.bearerAuth = true;
  doc.parameters = {idParameter()};
  doc.responses = {
      {200, "The certificate.", "Certificate", {}}, unauthorized(), notFound(), unavailable()};
  return doc;
}

RouteDoc healthDoc() {
  RouteDoc doc;
  doc.operationId = "health";
  doc.summary = "Health check";
  doc.description = "ok while the database answers.";
  doc.tag = kServiceTag;
  doc.responses = {{200, "Healthy.", "Health", {}}, unavailable("Storage is unavailable.")};
  return doc;
}

RouteDoc openApiDoc() {
  RouteDoc doc;
  doc.operationId = "openApi";
  doc.summary = "This API description";
  doc.tag = kServiceTag;
  doc.responses = {{200, "The OpenAPI 3.0.3 document.", "OpenApiDocument", {}}};
  return doc;
}

}  // namespace ot::controld
