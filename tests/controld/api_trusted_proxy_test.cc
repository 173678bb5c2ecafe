// The client address behind trusted proxies (TRUSTED_PROXY_RANGES): the API handler as
// ControldServer builds it (withTrustedProxies over the router) counts creates per
// CF-Connecting-IP only when the connection comes from a trusted range; from anywhere else the
// header is ignored.
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "controld/api/api_routes.h"
#include "controld/api/api_types.h"
#include "controld/api/ip_ranges.h"
#include "tests/controld/api_test_support.h"

namespace ot::controld {
namespace {

using testing::CountingNotifier;
using testing::RecordingPublisher;
using testing::testDatabases;

constexpr const char* kProxy = "198.51.100.10";  // inside the trusted range below
constexpr const char* kDirect = "203.0.113.7";   // a client connecting straight to us

// The real router and service behind withTrustedProxies, with a create burst of 2.
class ProxiedApi {
 public:
  ProxiedApi(Store& store, const std::string& trusted)
      : service_(makeConfig(), {store, store, store, store}, registry_, publisher_, notifier_,
                 [] { return testing::kStartMs; }),
        router_(std::make_shared<ApiRouter>(buildApiRouter(service_))) {
    auto ranges = parseTrustedProxyRanges(trusted);
    REQUIRE(ranges.ok());
    handler_ = withTrustedProxies(makeApiHandler(router_), *ranges);
  }

  // POST /api/tunnel over a connection from `connection` carrying these CF-Connecting-IP values.
  int create(const std::string& connection, std::vector<std::string> forwarded = {}) const {
    ApiRequest request;
    request.method = "POST";
    request.path = "/api/tunnel";
    request.clientAddress = connection;
    for (auto& value : forwarded) request.headers.emplace_back("CF-Connecting-IP", value);
    return handler_(request).status;
  }

 private:
  static TunnelServiceConfig makeConfig() {
    TunnelServiceConfig config = testing::testConfig();
    config.createRatePerHour = 30;
    config.createRateBurst = 2;
    return config;
  }

  BridgeRegistry registry_;
  RecordingPublisher publisher_;
  CountingNotifier notifier_;
  TunnelService service_;
  std::shared_ptr<const ApiRouter> router_;
  ApiHandler handler_;
};

TEST_CASE("api: effectiveClientAddress believes CF-Connecting-IP only from trusted proxies") {
  const IpRanges trusted = *parseTrustedProxyRanges("198.51.100.0/24,2001:db8:cf::/48");
  ApiRequest request;
  request.clientAddress = kDirect;
  request.headers = {{"cf-connecting-ip", "192.0.2.1"}};
  CHECK(effectiveClientAddress(request, trusted) == kDirect);
  request.clientAddress = kProxy;
  CHECK(effectiveClientAddress(request, trusted) == "192.0.2.1");
  request.clientAddress = "2001:db8:cf::5";
  request.headers = {{"CF-Connecting-IP", "2001:DB8:1:2::1"}};
  CHECK(effectiveClientAddress(request, trusted) == "2001:db8:1:2::1");
  request.clientAddress = kProxy;
  // Not an address, repeated, or absent: the connection's own address.
  request.headers = {{"CF-Connecting-IP", "192.0.2.1, 192.0.2.2"}};
  CHECK(effectiveClientAddress(request, trusted) == kProxy);
  request.headers = {{"CF-Connecting-IP", "192.0.2.1"}, {"CF-Connecting-IP", "192.0.2.2"}};
  CHECK(effectiveClientAddress(request, trusted) == kProxy);
  request.headers = {};
  CHECK(effectiveClientAddress(request, trusted) == kProxy);
  // off trusts nobody.
  request.headers = {{"CF-Connecting-IP", "192.0.2.1"}};
  CHECK(effectiveClientAddress(request, *parseTrustedProxyRanges("off")) == kProxy);
}

TEST_CASE("api: a spoofed CF-Connecting-IP from an untrusted address is ignored") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    const ProxiedApi api(*store, "198.51.100.0/24");
    // Each request claims another client; all are counted against the connection's address.
    CHECK(api.create(kDirect, {"192.0.2.1"}) == 201);
    CHECK(api.create(kDirect, {"192.0.2.2"}) == 201);
    CHECK(api.create(kDirect, {"192.0.2.3"}) == 429);
    CHECK(api.create(kDirect) == 429);
    // Another direct client still has its own budget.
    CHECK(api.create("203.0.113.8", {"192.0.2.3"}) == 201);
  }
}

TEST_CASE("api: CF-Connecting-IP from a trusted proxy names the client: separate budgets") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    const ProxiedApi api(*store, "198.51.100.0/24");
    CHECK(api.create(kProxy, {"192.0.2.1"}) == 201);
    CHECK(api.create(kProxy, {"192.0.2.1"}) == 201);
    CHECK(api.create(kProxy, {"192.0.2.1"}) == 429);
    // Another client behind the same edge has a budget of its own.
    CHECK(api.create("198.51.100.11", {"192.0.2.2"}) == 201);
    CHECK(api.create(kProxy, {"192.0.2.2"}) == 201);
    CHECK(api.create(kProxy, {"192.0.2.2"}) == 429);
    // IPv6 clients are counted per /64.
    CHECK(api.create(kProxy, {"2001:db8:1:2::1"}) == 201);
    CHECK(api.create(kProxy, {"2001:db8:1:2::99"}) == 201);
    CHECK(api.create(kProxy, {"2001:db8:1:2:ffff::1"}) == 429);
    CHECK(api.create(kProxy, {"2001:db8:1:3::1"}) == 201);
    // A proxy request without the header is counted as the proxy itself.
    CHECK(api.create(kProxy) == 201);
  }
}

}  // namespace
}  // namespace ot::controld
