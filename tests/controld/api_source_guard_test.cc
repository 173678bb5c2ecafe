// withSourceGuard (controld/api/api_source_guard.h): 401s count per source, a source past the limit
// gets 429 + Retry-After for requests with credentials until its window ends, and a client
// address that is not an address is never used as one. The inner handler answers 401 unless the
// token is "right"; the clock is the test's.
#include "controld/api/api_source_guard.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "common/metrics.h"

namespace ot::controld {
namespace {

struct Guarded {
  metrics::Metrics metrics;
  uint64_t now = 1'000'000;
  std::string seenAddress;
  ApiHandler handler;

  explicit Guarded(uint32_t limit) {
    SourceFailureLimits limits;
    limits.maxFailures = limit;
    limits.windowMs = 60'000;
    handler = withSourceGuard(
        [this](const ApiRequest& request) {
          seenAddress = request.clientAddress;
          const auto auth = request.header("Authorization");
          if (auth && *auth == "Bearer right") return ApiResponse::json(200, "{}");
          return ApiResponse::error(401, "UnauthorizedError", "no");
        },
        limits, metrics, [this] { return now; });
  }

  ApiResponse call(const std::string& address, const char* token) {
    ApiRequest request;
    request.method = "GET";
    request.path = "/api/tunnel/abc";
    request.clientAddress = address;
    if (token != nullptr)
      request.headers.emplace_back("Authorization", std::string("Bearer ") + token);
    return handler(request);
  }

  static std::string header(const ApiResponse& response, const std::string& name) {
    for (const auto& [key, value] : response.headers) {
      if (key == name) return value;
    }
    return "";
  }
};

}  // namespace

TEST_CASE("api source guard: a source past its failures gets 429 until its window ends") {
  Guarded api(3);
  for (int i = 0; i < 3; ++i) CHECK(api.call("203.0.113.7", "wrong").status == 401);
  api.now += 1'000;
  const ApiResponse refused = api.call("203.0.113.7", "wrong");
  CHECK(refused.status == 429);
  CHECK(refused.body.find("RateLimitedError") != std::string::npos);
  CHECK(Guarded::header(refused, "Retry-After") == "59");
  // The right token from that source waits too; another source is not affected.
  CHECK(api.call("203.0.113.7", "right").status == 429);
  CHECK(api.call("203.0.113.8", "right").status == 200);
  CHECK(api.call("203.0.113.8", "wrong").status == 401);
  // Without credentials the guard does not refuse (the route answers as it would).
  CHECK(api.call("203.0.113.7", nullptr).status == 401);
  // The window passes.
  api.now += 59'000;
  CHECK(api.call("203.0.113.7", "right").status == 200);
}

TEST_CASE("api source guard: an IPv6 /64 is one source") {
  Guarded api(2);
  CHECK(api.call("2001:db8:1:2::1", "wrong").status == 401);
  CHECK(api.call("2001:db8:1:2::ffff", "wrong").status == 401);
  CHECK(api.call("2001:db8:1:2:aaaa::9", "right").status == 429);
  CHECK(api.call("2001:db8:1:3::1", "right").status == 200);
}

TEST_CASE("api source guard: a client address that is not an address is dropped, not used") {
  Guarded api(2);
  for (const char* endpoint :
       {"203.0.113.7:40001", "203.0.113.7:40002", "[2001:db8::1]:443", "junk"}) {
    CHECK(api.call(endpoint, "wrong").status == 401);
    CHECK(api.seenAddress.empty());
  }
  // Not counted under any source: a real address is unaffected.
  CHECK(api.call("203.0.113.7", "right").status == 200);
  CHECK(api.seenAddress == "203.0.113.7");
  CHECK(api.metrics.counter("opentunnel_api_client_address_invalid_total", "").Value() == 4);
  CHECK(api.metrics.counter("opentunnel_auth_failures_total", "", {{"kind", "api"}}).Value() == 4);
}

TEST_CASE("api source guard: limit 0 counts failures but never refuses") {
  Guarded api(0);
  for (int i = 0; i < 50; ++i) CHECK(api.call("203.0.113.7", "wrong").status == 401);
  CHECK(api.call("203.0.113.7", "right").status == 200);
}

}  // namespace ot::controld
