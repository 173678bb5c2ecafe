// One blocking HTTP request through libcurl for the DNS providers (dns_cloudflare.h,
// dns_challtestsrv.h). Each call uses its own easy handle, so any thread may call it at once. It
// never logs, so headers holding a bearer token stay out of the logs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace ot::controld {

struct DnsHttpRequest {
  std::string method = "GET";  // GET, POST, DELETE
  std::string url;
  std::string body;                  // sent when not empty (and always for POST)
  std::vector<std::string> headers;  // "Name: value"
  int64_t connect_timeout_ms = 10'000;
  int64_t total_timeout_ms = 30'000;
};

struct DnsHttpReply {
  long status = 0;
  std::string body;
  std::string retry_after;  // the Retry-After header's value, "" when absent
};

// Transport failures come back as errors (kTimeout for curl's timeout, kUnavailable otherwise);
// every HTTP status, 4xx and 5xx included, is a reply for the caller to judge.
[[nodiscard]] Result<DnsHttpReply> performDnsHttp(const DnsHttpRequest& request);

// Percent-encodes one URL component (query value or path segment).
[[nodiscard]] std::string urlEncode(const std::string& text);

}  // namespace ot::controld
