// Challenge records in a Cloudflare zone through its v4 API (Bearer token with DNS edit on the
// zone). Blocking; any thread may call it, each request on its own curl handle. The token is sent
// only in the Authorization header and never logged or put in an error message.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "controld/acme/dns_provider.h"

namespace ot::controld {

struct CloudflareOptions {
  std::string zoneId;
  std::string apiToken;
  std::string apiUrl = "https://api.cloudflare.com/client/v4";  // tests point it at a fake
  int pageSize = 100;  // records per list page (Cloudflare allows up to 5,000)
  int64_t connectTimeoutMs = 10'000;
  int64_t totalTimeoutMs = 30'000;
  // Requests answered 429 or 5xx are tried this many times in all, waiting Retry-After (capped)
  // or backoff_base_ms doubled per retry in between.
  int maxAttempts = 3;
  int64_t backoffBaseMs = 500;
  int64_t retryAfterCapMs = 5'000;
  // How waits between attempts happen; tests replace it to record them instead of sleeping.
  std::function<void(int64_t ms)> sleepMs;
};

// How long to wait before retry number `retry` (1 for the first): the Retry-After delay when
// the answer gave one (http::parseRetryAfterMs), else base * 2^(retry-1); both capped. Pure.
[[nodiscard]] int64_t cloudflareRetryDelayMs(int retry, std::optional<int64_t> retryAfterMs,
                                             int64_t baseMs, int64_t capMs);

// "2024-01-02T03:04:05.678Z" (RFC 3339, any offset) to Unix milliseconds; 0 when it does not
// parse. Pure.
[[nodiscard]] int64_t parseRfc3339Ms(const std::string& text);

class CloudflareDns final : public DnsProvider {
 public:
  explicit CloudflareDns(CloudflareOptions options);

  // TTL 60. A record with the same name and value that already exists (a retried attempt) is
  // returned as if created, so it is deleted like one.
  Result<TxtRecord> createTxt(const std::string& name, const std::string& value) override;
  // 404 and Cloudflare's 81044 (record does not exist) count as deleted.
  Status deleteTxt(const TxtRecord& record) override;
  // Pages through the zone's TXT records named _acme-challenge.*, keeping those under `domain`.
  Result<std::vector<TxtRecord>> listChallengeRecords(const std::string& domain) override;
  [[nodiscard]] const char* name() const override { return "cloudflare"; }

 private:
  struct Reply;
  // One request with the retries above; the reply of the last attempt.
  Result<Reply> call(const std::string& method, const std::string& pathAndQuery,
                     const std::string& body);
  Result<std::vector<TxtRecord>> findExact(const std::string& name, const std::string& value);

  CloudflareOptions options_;
};

}  // namespace ot::controld
