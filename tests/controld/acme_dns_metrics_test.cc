// The ACME order counts its challenge records in opentunnel_acme_dns_records_total (created,
// deleted, delete_failed) through the DnsRecordMetrics given to AcmeIssuer::create, against the
// fake CA of acme_test_support.h.
#include <doctest/doctest.h>

#include <atomic>
#include <memory>

#include "common/metrics.h"
#include "controld/acme/acme_issuer.h"
#include "controld/acme/acme_jws.h"
#include "controld/acme/dns_record_metrics.h"
#include "tests/controld/acme_test_support.h"
#include "tests/controld/csr_builder.h"

namespace ot::controld {
namespace {

using acme_testing::FakeAcmeServer;
using acme_testing::FakeDns;

constexpr const char* kHost = "dnsmetrics.example.com";
const std::atomic<bool> kRunning{false};

// Passes every call to a FakeDns (which the fake CA checks the challenges against) and fails
// deletes on request.
class FlakyDeletes final : public DnsProvider {
 public:
  explicit FlakyDeletes(FakeDns& inner) : inner_(inner) {}
  Result<TxtRecord> createTxt(const std::string& name, const std::string& value) override {
    return inner_.createTxt(name, value);
  }
  Status deleteTxt(const TxtRecord& record) override {
    if (failDeletes) return Error{ErrorKind::kUnavailable, "Cloudflare answered 500"};
    return inner_.deleteTxt(record);
  }
  Result<std::vector<TxtRecord>> listChallengeRecords(const std::string& domain) override {
    return inner_.listChallengeRecords(domain);
  }
  [[nodiscard]] const char* name() const override { return "flaky"; }

  std::atomic<bool> failDeletes{false};

 private:
  FakeDns& inner_;
};

double records(metrics::Metrics& metrics, const char* event) {
  return metrics.counter("opentunnel_acme_dns_records_total", "", {{"event", event}}).Value();
}

TEST_CASE("acme order: challenge records created, deleted and failed deletes are counted") {
  FakeAcmeServer server;
  FakeDns fake;
  server.dns = &fake;
  metrics::Metrics metrics;
  DnsRecordMetrics dnsMetrics(metrics);
  auto provider = std::make_unique<FlakyDeletes>(fake);
  FlakyDeletes* flaky = provider.get();
  AcmeIssuerConfig config;
  config.client.directoryUrl = server.directoryUrl();
  config.client.accountKeyJwk = jws::generateAccountKeyJwk().value();
  config.order.pollIntervalMs = 5;
  config.order.pollAttempts = 5;
  config.order.propagationTimeoutMs = 0;
  auto created = AcmeIssuer::create(std::move(config), std::move(provider), &dnsMetrics);
  REQUIRE(created.ok());
  AcmeIssuer& issuer = **created;
  CHECK(&issuer.dns() == flaky);
  const IssueRequest request{testing::buildCsrPem(testing::hostCsr(kHost, true)),
                             {kHost, std::string("*.") + kHost}};

  FailureDetail detail;
  auto issued = issuer.issueDetailed(request, kRunning, detail);
  REQUIRE_MESSAGE(issued.ok(), issued.error().message);
  // The host and its wildcard: two values under one name, both removed at the end.
  CHECK(records(metrics, "created") == 2);
  CHECK(records(metrics, "deleted") == 2);
  CHECK(records(metrics, "delete_failed") == 0);
  CHECK(records(metrics, "swept") == 0);

  flaky->failDeletes = true;
  issued = issuer.issueDetailed(request, kRunning, detail);
  REQUIRE_MESSAGE(issued.ok(), issued.error().message);
  CHECK(records(metrics, "created") == 4);
  CHECK(records(metrics, "deleted") == 2);
  CHECK(records(metrics, "delete_failed") == 2);
  CHECK(fake.live() == 2);
}

}  // namespace
}  // namespace ot::controld
