// otunnel's side of the HTTP API (docs/api.md) over libcurl: create a tunnel, read it, bind a CSR,
// read the certificate, delete. Calls block (up to 30 s each, plus Retry-After waits): use them at
// startup or from the renewal thread, never on the event loop. Every call uses its own curl handle,
// so one ApiClient may be used from several threads at once; curl_global_init must have run (the
// constructor does it once per process).
//
// 429 and 503 answers are retried up to 3 times, each after min(Retry-After, 8 s) (1 s without
// the header); then the server's message is returned.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "client/server_url.h"
#include "common/result.h"

namespace ot::client {

inline constexpr const char* kUserAgent = "otunnel/0.1.0";

// Why a call failed: an HTTP error answer, or no usable answer at all (status 0).
struct ApiError {
  int status = 0;       // 0: could not connect, TLS failed, timed out, cancelled, bad answer
  std::string tag;      // the body's "_tag" ("NotFoundError"), "" when there was none
  std::string message;  // the body's "message", or what went wrong
  // One line for people: the message, with the status and tag when there was an answer.
  [[nodiscard]] std::string describe() const;
};

template <typename T>
using ApiResult = Result<T, ApiError>;

struct CreatedTunnel {
  std::string id;
  std::string hostname;
  std::string token;  // shown once: save it before anything else
  std::string url;
};

struct TunnelInfo {
  std::string id;
  std::string hostname;
  std::string state;             // "online" / "offline"
  std::string certificateState;  // "none", "issuing", "ready", "failed"
};

struct CertificateStatus {
  int httpStatus = 0;    // bindCertificate: 202 while issuing, 200 otherwise
  std::string state;     // "none", "issuing", "ready", "failed"
  std::string chain;     // PEM, when ready
  std::string notAfter;  // RFC 3339, when ready
  std::string error;     // why issuance failed, when failed
};

struct ApiClientOptions {
  ServerUrl server;
  std::string caFile;  // "" -> the system roots
  std::chrono::milliseconds connectTimeout{10'000};
  std::chrono::milliseconds totalTimeout{30'000};
  int maxRetries = 3;
  std::chrono::milliseconds maxRetryWait{8'000};
  // Waits before a retry; returns false to give up (cancelled). Default: sleeps, watching
  // `cancel`. Tests inject one that records the waits.
  std::function<bool(std::chrono::milliseconds)> sleep;
  // When set and true, calls in flight stop soon and return status 0 "cancelled".
  const std::atomic<bool>* cancel = nullptr;
};

class ApiClient {
 public:
  explicit ApiClient(ApiClientOptions options);

  // wantedId: std::nullopt for a random ID.
  [[nodiscard]] ApiResult<CreatedTunnel> createTunnel(
      const std::optional<std::string>& wantedId) const;
  [[nodiscard]] ApiResult<TunnelInfo> getTunnel(std::string_view id, std::string_view token) const;
  [[nodiscard]] ApiResult<CertificateStatus> bindCertificate(std::string_view id,
                                                             std::string_view token,
                                                             std::string_view csrPem) const;
  [[nodiscard]] ApiResult<CertificateStatus> getCertificate(std::string_view id,
                                                            std::string_view token) const;
  [[nodiscard]] ApiResult<bool> deleteTunnel(std::string_view id, std::string_view token) const;

  [[nodiscard]] const ApiClientOptions& options() const { return options_; }

 private:
  struct Response {
    int status = 0;
    std::string body;
    std::optional<int64_t> retryAfterMs;  // Retry-After, delta-seconds or a date
  };
  // One request with the retry policy; a non-2xx answer becomes an ApiError.
  [[nodiscard]] ApiResult<Response> send(const char* method, const std::string& path,
                                         const std::string& body, std::string_view token) const;
  [[nodiscard]] ApiResult<Response> sendOnce(const char* method, const std::string& path,
                                             const std::string& body, std::string_view token) const;
  [[nodiscard]] std::string tunnelPath(std::string_view id) const;

  ApiClientOptions options_;
};

}  // namespace ot::client
