// What the API tests share: the real router over the real TunnelService, a real BridgeRegistry
// and a real Store (SQLite or MariaDB, see test_database.h), with a manual clock and a publisher
// and notifier that record what they were told. Every call also checks that the answer's status
// is one the route documents, so the OpenAPI document cannot drift from the behaviour.
#pragma once

#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "controld/api/api_routes.h"
#include "controld/api/tunnel_service.h"
#include "controld/relays/bridge_registry.h"
#include "controld/relays/record_publisher.h"
#include "tests/controld/csr_builder.h"
#include "tests/controld/recording_publisher.h"
#include "tests/controld/test_database.h"

namespace ot::controld::testing {

inline constexpr const char* kTestDomain = "tunnel.test";
inline constexpr int64_t kStartMs = 1'700'000'000'000;  // 2023-11-14T22:13:20.000Z
inline constexpr const char* kClient = "203.0.113.7";

using test_support::RecordingPublisher;

class CountingNotifier final : public JobNotifier {
 public:
  void jobAdded() override { ++count_; }
  int count() const { return count_.load(); }

 private:
  std::atomic<int> count_{0};
};

inline TunnelServiceConfig testConfig() {
  TunnelServiceConfig config;
  config.domain = kTestDomain;
  return config;
}

inline nlohmann::ordered_json parseBody(const ApiResponse& response) {
  auto body = nlohmann::ordered_json::parse(response.body, nullptr, false);
  REQUIRE_MESSAGE(!body.is_discarded(), "not JSON: " << response.body);
  return body;
}

inline std::optional<std::string> headerOf(const ApiResponse& response, const std::string& name) {
  for (const auto& [key, value] : response.headers) {
    if (key == name) return value;
  }
  return std::nullopt;
}

// The error body must be exactly {"_tag": tag, "message": ...}.
inline void checkError(const ApiResponse& response, int status, const std::string& tag) {
  INFO("body: " << response.body);
  CHECK(response.status == status);
  const auto body = parseBody(response);
  REQUIRE(body.is_object());
  CHECK(body.size() == 2);
  CHECK(body.begin().key() == "_tag");
  CHECK(body.value("_tag", "") == tag);
  CHECK(body.contains("message"));
  CHECK(headerOf(response, "Content-Type") == "application/json");
}

struct Headers {
  std::vector<std::pair<std::string, std::string>> list;
};

inline Headers bearer(const std::string& token) {
  return {{{"Authorization", "Bearer " + token}}};
}
inline Headers jsonType(Headers headers = {}) {
  headers.list.emplace_back("Content-Type", "application/json");
  return headers;
}

struct CreatedForTest {
  std::string id;
  std::string token;
};

// One API over one store. The clock only moves when a test moves it.
class TestApi {
 public:
  // `inspect`: where stored() and pendingJobs() look, when that should not be the store the
  // service uses (a test double that counts or interferes with calls).
  explicit TestApi(Store& store, TunnelServiceConfig config = testConfig(),
                   Store* inspect = nullptr)
      : store_(inspect != nullptr ? *inspect : store),
        service_(std::make_unique<TunnelService>(std::move(config),
                                                 TunnelServiceStores{store, store, store, store},
                                                 registry, publisher, notifier, clock.clock())),
        router_(std::make_shared<ApiRouter>(
            buildApiRouter(*service_, {}, {}, UsageApi{&store, clock.clock()}))),
        handler_(makeApiHandler(router_)) {}

  ApiResponse call(const std::string& method, const std::string& path, const std::string& body = "",
                   const Headers& headers = {}, const std::string& client = kClient) const {
    ApiRequest request;
    request.method = method;
    request.path = path;
    request.headers = headers.list;
    request.body = body;
    request.clientAddress = client;
    ApiResponse response = handler_(request);
    checkDocumented(method, path, response.status);
    return response;
  }

  // POST /api/tunnel, which must succeed.
  CreatedForTest create(const std::string& wantedId = "",
                        const std::string& client = kClient) const {
    const std::string body = wantedId.empty() ? "" : nlohmann::json{{"id", wantedId}}.dump();
    const ApiResponse response =
        call("POST", "/api/tunnel", body, wantedId.empty() ? Headers{} : jsonType(), client);
    INFO("body: " << response.body);
    REQUIRE(response.status == 201);
    const auto json = parseBody(response);
    return {json.at("id").get<std::string>(), json.at("token").get<std::string>()};
  }

  ApiResponse bind(const CreatedForTest& tunnel, const std::string& csrPem) const {
    return call("PUT", "/api/tunnel/" + tunnel.id + "/certificate",
                nlohmann::json{{"csr", csrPem}}.dump(), jsonType(bearer(tunnel.token)));
  }

  StoredTunnel stored(const std::string& id) const {
    auto tunnel = store_.getTunnel(id);
    REQUIRE(tunnel.ok());
    REQUIRE(tunnel->has_value());
    return **tunnel;
  }

  // Ends the tunnel's issuance as the job runner would (a revisioned write of the record), so
  // that another CSR may be bound.
  void finishIssuance(const std::string& id,
                      CertificateState state = CertificateState::kFailed) const {
    StoredTunnel done = stored(id);
    done.record.certificate.state = state;
    if (state == CertificateState::kFailed) done.record.certificate.error = "ended by the test";
    REQUIRE(store_.updateTunnel(done.record, done.revision).ok());
  }

  int64_t pendingJobs() const {
    auto count = store_.countJobs(JobStatus::kPending, 0);
    REQUIRE(count.ok());
    return *count;
  }

  const ApiRouter& router() const { return *router_; }
  TunnelService& service() { return *service_; }

  ManualClock clock{kStartMs};
  BridgeRegistry registry;
  RecordingPublisher publisher;
  CountingNotifier notifier;

 private:
  void checkDocumented(const std::string& method, const std::string& path, int status) const {
    const auto match = router_->match(method, path);
    if (match.kind != ApiRouter::MatchKind::kMatched) return;
    bool documented = false;
    for (const ApiResponseDoc& doc : match.route->doc.responses) documented |= doc.status == status;
    INFO(method << " " << path << " answered " << status);
    CHECK_MESSAGE(documented, "the route does not document this status");
  }

  Store& store_;
  std::unique_ptr<TunnelService> service_;
  std::shared_ptr<const ApiRouter> router_;
  ApiHandler handler_;
};

// A CSR for a tunnel's hostname (and its wildcard), signed with a key of the given kind.
inline std::string tunnelCsr(const std::string& id, bool wildcard = false,
                             TestKey key = TestKey::kP256) {
  CsrSpec spec = hostCsr(id + "." + kTestDomain, wildcard);
  spec.key = key;
  return buildCsrPem(spec);
}

}  // namespace ot::controld::testing
