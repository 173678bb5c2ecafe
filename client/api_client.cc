#include "client/api_client.h"

#include <curl/curl.h>

#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/config.h"

namespace ot::client {
namespace {

using Json = nlohmann::json;

// The API's answers are small JSON documents; a larger body is not one of them.
constexpr size_t kMaxBodySize = 1024 * 1024;
constexpr std::chrono::milliseconds kDefaultRetryWait{1000};

struct CurlFree {
  void operator()(CURL* curl) const { curl_easy_cleanup(curl); }
};
struct SlistFree {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};

void initCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Exchange {
  std::string body;
  std::optional<int64_t> retryAfterS;
  bool tooLarge = false;
  const std::atomic<bool>* cancel = nullptr;
};

size_t onBody(char* data, size_t size, size_t count, void* user) {
  auto* exchange = static_cast<Exchange*>(user);
  const size_t bytes = size * count;
  if (exchange->body.size() + bytes > kMaxBodySize) {
    exchange->tooLarge = true;
    return 0;  // curl fails the transfer with CURLE_WRITE_ERROR
  }
  exchange->body.append(data, bytes);
  return bytes;
}

size_t onHeader(char* data, size_t size, size_t count, void* user) {
  auto* exchange = static_cast<Exchange*>(user);
  const size_t bytes = size * count;
  std::string_view line(data, bytes);
  // A new response (after a 100 Continue) starts with its status line.
  if (line.starts_with("HTTP/")) exchange->retryAfterS.reset();
  constexpr std::string_view kName = "retry-after:";
  if (line.size() > kName.size()) {
    std::string lower(line.substr(0, kName.size()));
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == kName) {
      std::string_view value = line.substr(kName.size());
      while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
        value.remove_prefix(1);
      }
      while (!value.empty() && (value.back() == '\r' || value.back() == '\n' ||
                                value.back() == ' ' || value.back() == '\t')) {
        value.remove_suffix(1);
      }
      // Only the delay-seconds form; an HTTP-date falls back to the default wait.
      if (auto seconds = config::parseUnsigned(value); seconds && *seconds < 86400) {
        exchange->retryAfterS = static_cast<int64_t>(*seconds);
      }
    }
  }
  return bytes;
}

int onProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* exchange = static_cast<const Exchange*>(user);
  return exchange->cancel != nullptr && exchange->cancel->load() ? 1 : 0;
}

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
  initCurlOnce();
  if (!options_.sleep) {
    const std::atomic<bool>* cancel = options_.cancel;
    options_.sleep = [cancel](std::chrono::milliseconds wait) {
      return defaultSleep(wait, cancel);
    };
  }
}

std::string ApiClient::tunnelPath(std::string_view id) const {
  std::string path = "/api/tunnel/";
  // IDs are DNS labels, but a hand-edited state file must not be able to change the path.
  for (char c : id) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '-' || c == '_' || c == '.';
    if (plain) {
      path += c;
    } else {
      constexpr char kHex[] = "0123456789ABCDEF";
      const auto byte = static_cast<unsigned char>(c);
      path += '%';
      path += kHex[byte >> 4];
      path += kHex[byte & 0x0f];
    }
  }
  return path;
}

ApiResult<ApiClient::Response> ApiClient::sendOnce(const char* method, const std::string& path,
                                                   const std::string& body,
                                                   std::string_view token) const {
  std::unique_ptr<CURL, CurlFree> curl(curl_easy_init());
  if (curl == nullptr) return ApiError{0, "", "cannot start an HTTP request (curl_easy_init)"};
  CURL* handle = curl.get();
  const std::string url = options_.server.base() + path;
  Exchange exchange;
  exchange.cancel = options_.cancel;
  char error_buffer[CURL_ERROR_SIZE] = {};

  std::unique_ptr<curl_slist, SlistFree> headers;
  const auto addHeader = [&headers](const std::string& line) {
    headers.reset(curl_slist_append(headers.release(), line.c_str()));
  };
  addHeader("Accept: application/json");
  addHeader("Expect:");  // no 100-continue round trip for our small bodies
  if (!body.empty()) addHeader("Content-Type: application/json");
  if (!token.empty()) addHeader("Authorization: Bearer " + std::string(token));

  // Names under .localhost are loopback (RFC 6761) even where the resolver does not know it.
  std::unique_ptr<curl_slist, SlistFree> resolve;
  if (options_.server.isLoopbackName()) {
    resolve.reset(curl_slist_append(nullptr, (options_.server.hostPort() + ":127.0.0.1").c_str()));
    curl_easy_setopt(handle, CURLOPT_RESOLVE, resolve.get());
  }

  curl_easy_setopt(handle, CURLOPT_URL, url.c_str());
  curl_easy_setopt(handle, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(handle, CURLOPT_NOSIGNAL, 1L);  // worker threads: no SIGALRM for timeouts
  curl_easy_setopt(handle, CURLOPT_USERAGENT, kUserAgent);
  curl_easy_setopt(handle, CURLOPT_HTTPHEADER, headers.get());
  // curl's varargs read a long.
  const long connect_ms = options_.connectTimeout.count();
  const long total_ms = options_.totalTimeout.count();
  curl_easy_setopt(handle, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
  curl_easy_setopt(handle, CURLOPT_TIMEOUT_MS, total_ms);
  curl_easy_setopt(handle, CURLOPT_ERRORBUFFER, error_buffer);
  curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, onBody);
  curl_easy_setopt(handle, CURLOPT_WRITEDATA, &exchange);
  curl_easy_setopt(handle, CURLOPT_HEADERFUNCTION, onHeader);
  curl_easy_setopt(handle, CURLOPT_HEADERDATA, &exchange);
  curl_easy_setopt(handle, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, onProgress);
  curl_easy_setopt(handle, CURLOPT_XFERINFODATA, &exchange);
  if (!options_.caFile.empty()) curl_easy_setopt(handle, CURLOPT_CAINFO, options_.caFile.c_str());
  if (std::string_view(method) == "POST") {
    curl_easy_setopt(handle, CURLOPT_POST, 1L);
  } else if (std::string_view(method) != "GET") {
    curl_easy_setopt(handle, CURLOPT_CUSTOMREQUEST, method);
  }
  if (!body.empty() || std::string_view(method) == "POST") {
    curl_easy_setopt(handle, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(handle, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  }

  const CURLcode code = curl_easy_perform(handle);
  if (code != CURLE_OK) {
    std::string why = error_buffer[0] != '\0' ? error_buffer : curl_easy_strerror(code);
    if (code == CURLE_ABORTED_BY_CALLBACK) why = "cancelled";
    if (exchange.tooLarge) why = "the answer is larger than 1 MiB";
    return ApiError{0, "", "cannot reach " + options_.server.base() + ": " + why};
  }
  long status = 0;
  curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &status);
  return Response{static_cast<int>(status), std::move(exchange.body), exchange.retryAfterS};
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
        response->retryAfterS ? std::min(std::chrono::milliseconds(*response->retryAfterS * 1000),
                                         options_.maxRetryWait)
                              : std::min(kDefaultRetryWait, options_.maxRetryWait);
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
