// One blocking HTTP exchange through libcurl, shared by the clients of outside HTTP APIs: the
// ACME CA (controld/acme_http), the DNS providers (controld/dns_cloudflare, dns_challtestsrv) and
// otunnel's calls to the API (client/api_client). Each call uses its own easy handle, so any thread
// may call it at once. It never logs: requests carry bearer tokens and signed JWS.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace ot::http {

struct CurlRequest {
  std::string method = "GET";  // HEAD is sent without a body; POST always sends `body`
  std::string url;
  std::string body;                  // sent for POST, and for any method when not empty
  std::vector<std::string> headers;  // "Name: value"; "Expect:" is always added
  std::string userAgent;
  // Extra roots (a PEM file). With keep_system_roots they are added to the system's; without,
  // they replace them (a private CA's clients trust only it).
  std::string caFile;
  bool keepSystemRoots = false;
  std::vector<std::string> resolve;  // CURLOPT_RESOLVE entries, "host:port:address"
  int64_t connectTimeoutMs = 10'000;
  int64_t totalTimeoutMs = 30'000;
  std::size_t maxBodyBytes = 1024 * 1024;     // a longer answer fails the exchange
  const std::atomic<bool>* cancel = nullptr;  // checked while the transfer runs
};

struct CurlReply {
  int status = 0;
  std::string body;
  // The final answer's headers (those of a 100 Continue or a redirect are dropped), names in
  // lower case, values trimmed, in the order received.
  std::vector<std::pair<std::string, std::string>> headers;

  // The first value of the header `lower_case_name`, "" when absent.
  [[nodiscard]] std::string header(std::string_view lowerCaseName) const;
};

// Transport failures are errors: kTimeout for curl's timeouts, kUnavailable for everything else
// (a cancel says "cancelled", an oversized answer says how large it may be). Every HTTP status,
// 4xx and 5xx included, is a reply for the caller to judge.
[[nodiscard]] Result<CurlReply> performCurl(const CurlRequest& request);

// Retry-After's value (RFC 9110 10.2.3): delta-seconds or an IMF-fixdate, as milliseconds from
// now_unix_ms (a date in the past is 0); nullopt when it is neither. Huge delays are clamped to
// 999,999,999 s rather than overflowing.
[[nodiscard]] std::optional<int64_t> parseRetryAfterMs(std::string_view value, int64_t nowUnixMs);

// Percent-encodes one URL component (a path segment or a query value): everything but RFC 3986's
// unreserved characters.
[[nodiscard]] std::string percentEncode(std::string_view text);

}  // namespace ot::http
