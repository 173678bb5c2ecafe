#include "client/api_client.h"

#include <nlohmann/json.hpp>
#include <thread>

#include "common/clock.h"
#include "common/curl_http.h"

namespace ot::client {
namespace {

using Json = nlohmann::json;

// The API's answers are small JSON documents; a larger body is not one of them.
constexpr size_t kMaxBodySize = 1024 * 1024;
constexpr std::chrono::milliseconds kDefaultRetryWait{1000};

bool defaultSleep(std::chrono::milliseconds wait, const std::atomic<bool>* cancel) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cancel != nullptr && cancel->load()) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    std::this_thread::sleep_for(std::min(left, std::chrono::milliseconds(100)));
  }
  return cancel == nullptr || !cancel->load();
}

std::string stringMember(const Json& object, const char* name) {
  const auto found = object.find(name);
  return found != object.end() && found->is_string() ? found->get<std::string>() : std::string();
}

// An error answer's body -> ApiError; the message falls back to the status when the body is not
// the API's error shape (a proxy's HTML page, say).
ApiError errorFromAnswer(int status, const std::string& body) {
  ApiError error;
  error.status = status;
  const Json document = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (document.is_object()) {
    error.tag = stringMember(document, "_tag");
    error.message = stringMember(document, "message");
  }
  if (error.message.empty()) error.message = "the server answered HTTP " + std::to_string(status);
  return error;
}

ApiError badAnswer(int status, const std::string& what) {
  return ApiError{
      0, "", "unexpected answer from the server (HTTP " + std::to_string(status) + "): " + what};
}

ApiResult<Json> parseObject(int status, const std::string& body) {
  Json document = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!document.is_object()) return badAnswer(status, "not a JSON object");
  return document;
}

CertificateStatus certificateFrom(int status, const Json& document) {
  CertificateStatus certificate;
  certificate.httpStatus = status;
  certificate.state = stringMember(document, "state");
  certificate.chain = stringMember(document, "chain");
  certificate.notAfter = stringMember(document, "notAfter");
  certificate.error = stringMember(document, "error");
  return certificate;
}

ApiResult<CertificateStatus> certificateAnswer(int status, const std::string& body) {
  auto document = parseObject(status, body);
  if (!document) return document.error();
  CertificateStatus certificate = certificateFrom(status, *document);
  if (certificate.state.empty()) return badAnswer(status, "no certificate state");
  if (certificate.state == "ready" && certificate.chain.empty()) {
    return badAnswer(status, "a ready certificate without its chain");
  }
  return certificate;
}

}  // namespace

std::string ApiError::describe() const {
  if (status == 0) return message;
  std::string text = message + " (HTTP " + std::to_string(status);
  if (!tag.empty()) text += " " + tag;
  return text + ")";
}

ApiClient::ApiClient(ApiClientOptions options) : options_(std::move(options)) {
  if (!options_.sleep) {
    const std::atomic<bool>* cancel = options_.cancel;
    options_.sleep = [cancel](std::chrono::milliseconds wait) {
      return defaultSleep(wait, cancel);
    };
  }
}

std::string ApiClient::tunnelPath(std::string_view id) const {
  // IDs are DNS labels, but a hand-edited state file must not be able to change the path.
  return "/api/tunnel/" + http::percentEncode(id);
}

ApiResult<ApiClient::Response> ApiClient::sendOnce(const char* method, const std::string& path,
                                                   const std::string& body,
                                                   std::string_view token) const {
  http::CurlRequest request;
  request.method = method;
  request.url = options_.server.base() + path;
  request.body = body;
  request.headers.emplace_back("Accept: application/json");
  if (!body.empty()) request.headers.emplace_back("Content-Type: application/json");
  if (!token.empty()) request.headers.push_back("Authorization: Bearer " + std::string(token));
  request.userAgent = kUserAgent;
  // Names under .localhost are loopback (RFC 6761) even where the resolver does not know it.
  if (options_.server.isLoopbackName()) {
    request.resolve.push_back(options_.server.hostPort() + ":127.0.0.1");
  }
  request.caFile = options_.caFile;
  request.connectTimeoutMs = options_.connectTimeout.count();
  request.totalTimeoutMs = options_.totalTimeout.count();
  request.maxBodyBytes = kMaxBodySize;
  request.cancel = options_.cancel;
  auto reply = http::performCurl(request);
  if (!reply)
    return ApiError{0, "", "cannot reach " + options_.server.base() + ": " + reply.error().message};
  return Response{reply->status, std::move(reply->body),
                  http::parseRetryAfterMs(reply->header("retry-after"), unixNowMs())};
}

ApiResult<ApiClient::Response> ApiClient::send(const char* method, const std::string& path,
                                               const std::string& body,
                                               std::string_view token) const {
  for (int attempt = 0;; ++attempt) {
    auto response = sendOnce(method, path, body, token);
    if (!response) return response.error();
    const int status = response->status;
    if (status >= 200 && status < 300) return response;
    const bool retryable = status == 429 || status == 503;
    if (!retryable || attempt >= options_.maxRetries) {
      return errorFromAnswer(status, response->body);
    }
    const std::chrono::milliseconds wait =
        std::min(response->retryAfterMs ? std::chrono::milliseconds(*response->retryAfterMs)
                                        : kDefaultRetryWait,
                 options_.maxRetryWait);
    if (!options_.sleep(wait)) return ApiError{0, "", "cancelled"};
  }
}

ApiResult<CreatedTunnel> ApiClient::createTunnel(const std::optional<std::string>& wantedId) const {
  const std::string body = wantedId ? Json{{"id", *wantedId}}.dump() : std::string("{}");
  auto response = send("POST", "/api/tunnel", body, "");
  if (!response) return response.error();
  auto document = parseObject(response->status, response->body);
  if (!document) return document.error();
  CreatedTunnel created{stringMember(*document, "id"), stringMember(*document, "hostname"),
                        stringMember(*document, "token"), stringMember(*document, "url")};
  if (created.id.empty() || created.hostname.empty() || created.token.empty()) {
    return badAnswer(response->status, "id, hostname or token missing");
  }
  return created;
}

ApiResult<TunnelInfo> ApiClient::getTunnel(std::string_view id, std::string_view token) const {
  auto response = send("GET", tunnelPath(id), "", token);
  if (!response) return response.error();
  auto document = parseObject(response->status, response->body);
  if (!document) return document.error();
  TunnelInfo info{stringMember(*document, "id"), stringMember(*document, "hostname"),
                  stringMember(*document, "state"), ""};
  const auto certificate = document->find("certificate");
  if (certificate != document->end() && certificate->is_object()) {
    info.certificateState = stringMember(*certificate, "state");
  }
  if (info.id.empty() || info.hostname.empty()) {
    return badAnswer(response->status, "id or hostname missing");
  }
  return info;
}

ApiResult<CertificateStatus> ApiClient::bindCertificate(std::string_view id, std::string_view token,
                                                        std::string_view csrPem) const {
  const std::string body = Json{{"csr", csrPem}}.dump();
  auto response = send("PUT", tunnelPath(id) + "/certificate", body, token);
  if (!response) return response.error();
  return certificateAnswer(response->status, response->body);
}

ApiResult<CertificateStatus> ApiClient::getCertificate(std::string_view id,
                                                       std::string_view token) const {
  auto response = send("GET", tunnelPath(id) + "/certificate", "", token);
  if (!response) return response.error();
  return certificateAnswer(response->status, response->body);
}

ApiResult<bool> ApiClient::deleteTunnel(std::string_view id, std::string_view token) const {
  auto response = send("DELETE", tunnelPath(id), "", token);
  if (!response) return response.error();
  return true;
}

}  // namespace ot::client
