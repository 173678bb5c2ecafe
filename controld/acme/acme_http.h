// One blocking HTTP exchange with the ACME server (common/curl_http underneath). Any thread may
// call it at once. Never logs (request bodies hold signed JWS).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "controld/acme/acme_errors.h"

namespace ot::controld {

struct AcmeHttpOptions {
  std::string caBundle;  // extra roots (PEM file) on top of the system's; "" for none
  int64_t connectTimeoutMs = 10'000;
  int64_t totalTimeoutMs = 30'000;
};

struct AcmeHttpResponse {
  int status = 0;
  std::string body;
  std::string contentType;
  std::string location;
  std::string replayNonce;
  std::optional<int64_t> retryAfterMs;  // delta-seconds or an HTTP date, as milliseconds
};

// method: GET, HEAD or POST (with `body` as application/jose+json). `accept` is sent when not
// empty. Transport failures: kTimeout for timeouts, kNetwork otherwise (a cancel too: the caller
// checks its flag). Every HTTP status is a response.
[[nodiscard]] AcmeResult<AcmeHttpResponse> acmeHttp(const AcmeHttpOptions& options,
                                                    std::string_view method, const std::string& url,
                                                    const std::string& body,
                                                    const std::string& accept,
                                                    const std::atomic<bool>& cancel);

}  // namespace ot::controld
