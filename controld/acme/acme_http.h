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
  std::string ca_bundle;  // extra roots (PEM file) on top of the system's; "" for none
  int64_t connect_timeout_ms = 10'000;
  int64_t total_timeout_ms = 30'000;
};

struct AcmeHttpResponse {
  int status = 0;
  std::string body;
  std::string content_type;
  std::string location;
  std::string replay_nonce;
  std::optional<int64_t> retry_after_ms;  // delta-seconds or an HTTP date, as milliseconds
};

// method: GET, HEAD or POST (with `body` as application/jose+json). `accept` is sent when not
// empty. Transport failures: kTimeout for timeouts, kNetwork otherwise (a cancel too: the caller
// checks its flag). Every HTTP status is a response.
[[nodiscard]] AcmeResult<AcmeHttpResponse> acmeHttp(const AcmeHttpOptions& options,
                                                    std::string_view method,
                                                    const std::string& url,
                                                    const std::string& body,
                                                    const std::string& accept,
                                                    const std::atomic<bool>& cancel);

}  // namespace ot::controld
