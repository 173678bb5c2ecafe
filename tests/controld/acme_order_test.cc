// The ACME issuer against a fake CA in a thread (acme_test_support.h): the whole order flow, and
// how each kind of CA trouble is retried inside an attempt or classified for the job runner.
#include <doctest/doctest.h>

#include <chrono>

#include "controld/acme/acme_issuer.h"
#include "controld/acme/acme_jws.h"
#include "tests/controld/acme_test_support.h"
#include "tests/controld/csr_builder.h"

namespace ot::controld {
namespace {

using acme_testing::FakeAcmeServer;
using acme_testing::FakeDns;

constexpr const char* kOrderHost = "abc123.example.com";
constexpr const char* kWildcard = "*.abc123.example.com";
const std::atomic<bool> kOrderNotCancelled{false};

struct Harness {
  FakeAcmeServer server;
  FakeDns* dns = nullptr;
  std::unique_ptr<AcmeIssuer> issuer;
  std::string csrPem = testing::buildCsrPem(testing::hostCsr(kOrderHost, true));

  explicit Harness(const std::function<void(AcmeIssuerConfig&)>& tweak = {}) {
    AcmeIssuerConfig config;
    config.client.directoryUrl = server.directoryUrl();
    config.client.accountKeyJwk = jws::generateAccountKeyJwk().value();
    config.client.email = "acme@example.com";
    config.order.pollIntervalMs = 5;
    config.order.pollAttempts = 5;
    config.order.propagationTimeoutMs = 0;
    if (tweak) tweak(config);
    auto provider = std::make_unique<FakeDns>();
    dns = provider.get();
    server.dns = dns;
    auto created = AcmeIssuer::create(std::move(config), std::move(provider));
    REQUIRE(created.ok());
    issuer = std::move(created).value();
  }

  Result<IssuedCertificate> issue(FailureDetail& detail) {
    return issuer->issueDetailed(IssueRequest{csrPem, {kOrderHost, kWildcard}}, kOrderNotCancelled,
                                 detail);
  }
};

TEST_CASE("acme order: issues for a host and its wildcard through DNS-01 with EAB") {
  Harness harness([](AcmeIssuerConfig& config) {
    config.client.eabKid = "kid-1";
    config.client.eabHmacKey = "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W";
  });
  harness.server.requireEabKid = "kid-1";
  FailureDetail detail;
  auto issued = harness.issue(detail);
  REQUIRE_MESSAGE(issued.ok(), issued.error().message);
  CHECK(issued->notBeforeMs == 1893456000LL * 1000);
  CHECK(issued->notAfterMs == (1893456000LL + 90 * 86400) * 1000);
  CHECK(issued->chainPem.rfind("-----BEGIN CERTIFICATE-----", 0) == 0);
  CHECK(harness.server.eabSeen == 1);
  CHECK(harness.server.orders == 1);
  CHECK(harness.server.answered.size() == 2);
  CHECK(harness.server.deactivated.empty());
  // Both values went under the one shared name, and both were deleted at the end.
  CHECK(harness.dns->created() == 2);
  CHECK(harness.dns->deleted() == 2);
  CHECK(harness.dns->live() == 0);

  // A second attempt reuses the account: no second newAccount.
  const int before = harness.server.signedRequests;
  auto again = harness.issue(detail);
  REQUIRE(again.ok());
  CHECK(harness.server.eabSeen == 1);
  // newOrder, 2 authorizations, 2 answers, 2 polls, the order, finalize, the certificate.
  CHECK(harness.server.signedRequests - before == 10);
}

TEST_CASE("acme order: badNonce answers are retried with fresh nonces") {
  Harness harness;
  harness.server.badNonces = 3;
  FailureDetail detail;
  auto issued = harness.issue(detail);
  REQUIRE_MESSAGE(issued.ok(), issued.error().message);
  CHECK(harness.server.badNonceSent == 3);
}

TEST_CASE("acme order: badNonce beyond the retries is transient nonce trouble") {
  Harness harness;
  harness.server.badNonces = 100;
  FailureDetail detail;
  auto issued = harness.issue(detail);
  REQUIRE_FALSE(issued.ok());
  CHECK(harness.server.badNonceSent == 9);  // the first try and eight retries
  CHECK(detail.failure == FailureClass::kTransient);
  CHECK(std::string(detail.reason) == "bad_nonce");
  CHECK(detail.pointsAtCa);
  CHECK(issued.error().kind == ErrorKind::kUnavailable);
}

TEST_CASE("acme order: a short Retry-After is waited out and the request repeated") {
  Harness harness;
  harness.server.newOrder503RetryAfter = 1;
  FailureDetail detail;
  const auto started = std::chrono::steady_clock::now();
  auto issued = harness.issue(detail);
  const auto waited = std::chrono::steady_clock::now() - started;
  REQUIRE_MESSAGE(issued.ok(), issued.error().message);
  CHECK(waited >= std::chrono::milliseconds(1000));
  CHECK(harness.server.orders == 1);
}

TEST_CASE("acme order: a long Retry-After fails the attempt and is passed to the runner") {
  Harness harness([](AcmeIssuerConfig& config) { config.client.maxInlineRetryAfterMs = 500; });
  harness.server.newOrder503RetryAfter = 120;
  FailureDetail detail;
  auto issued = harness.issue(detail);
  REQUIRE_FALSE(issued.ok());
  CHECK(detail.retryAfterMs == 120'000);
  CHECK(detail.httpStatus == 503);
  CHECK(std::string(detail.reason) == "http_5xx");
  CHECK(detail.failure == FailureClass::kTransient);
}

TEST_CASE("acme order: a 5xx from the CA is transient and points at the CA") {
  Harness harness;
  harness.server.newOrder500 = true;
  FailureDetail detail;
  auto issued = harness.issue(detail);
  REQUIRE_FALSE(issued.ok());
  CHECK(detail.failure == FailureClass::kTransient);
  CHECK(std::string(detail.reason) == "http_5xx");
  CHECK(detail.httpStatus == 500);
  CHECK(detail.pointsAtCa);
  CHECK(issued.error().kind == ErrorKind::kUnavailable);
  CHECK(issued.error().message.find("serverInternal") != std::string::npos);
}

TEST_CASE("acme order: rejectedIdentifier is permanent") {
  Harness harness;
  harness.server.rejectIdentifier = true;
  FailureDetail detail;
  auto issued = harness.issue(detail);
  REQUIRE_FALSE(issued.ok());
  CHECK(detail.failure == FailureClass::kPermanent);
  CHECK(std::string(detail.reason) == "rejected");
  CHECK_FALSE(detail.pointsAtCa);
  CHECK(issued.error().kind == ErrorKind::kInvalid);
}

TEST_CASE(
    "acme order: an authorization still pending at the end is deactivated, records kept "
    "only if that fails") {
  Harness harness;
  harness.server.validationHangs = true;
  FailureDetail detail;
  auto issued = harness.issue(detail);
  REQUIRE_FALSE(issued.ok());
  CHECK(detail.failure == FailureClass::kTransient);
  CHECK(std::string(detail.reason) == "authz_pending");
  CHECK(harness.server.deactivated.size() == 2);
  // Deactivated, so nothing can look at the records any more: they are gone.
  CHECK(harness.dns->deleted() == 2);
  CHECK(harness.dns->live() == 0);
}

TEST_CASE("acme order: a reused order with a failed authorization is abandoned for a new one") {
  Harness harness;
  harness.server.failedOrders = 1;
  FailureDetail detail;
  auto issued = harness.issue(detail);
  REQUIRE_MESSAGE(issued.ok(), issued.error().message);
  CHECK(harness.server.orders == 2);
  CHECK(harness.server.answered.size() == 2);  // only the fresh order's challenges
}

TEST_CASE("acme order: orders that keep arriving failed give up after max_orders") {
  Harness harness;
  harness.server.failedOrders = 100;
  FailureDetail detail;
  auto issued = harness.issue(detail);
  REQUIRE_FALSE(issued.ok());
  CHECK(harness.server.orders == 3);
  CHECK(harness.server.answered.empty());
  CHECK(harness.dns->created() == 0);
}

TEST_CASE("acme order: challenges wait for the TXT records to be visible") {
  std::vector<std::string> lookedUp;
  FakeDns* dns_view = nullptr;
  Harness harness([&](AcmeIssuerConfig& config) {
    config.order.propagationTimeoutMs = 2'000;
    config.order.lookupTxt = [&](const std::string& name) -> Result<std::vector<std::string>> {
      lookedUp.push_back(name);
      // Invisible at the first look, then what the provider holds.
      if (lookedUp.size() == 1) return std::vector<std::string>{};
      return dns_view->valuesOf(name);
    };
  });
  dns_view = harness.dns;
  FailureDetail detail;
  auto issued = harness.issue(detail);
  REQUIRE_MESSAGE(issued.ok(), issued.error().message);
  REQUIRE(lookedUp.size() == 2);
  CHECK(lookedUp[0] == "_acme-challenge.abc123.example.com");
}

TEST_CASE("acme order: records that never propagate fail as dns trouble, transient") {
  Harness harness([](AcmeIssuerConfig& config) {
    config.order.propagationTimeoutMs = 50;
    config.order.lookupTxt = [](const std::string&) -> Result<std::vector<std::string>> {
      return std::vector<std::string>{};
    };
  });
  FailureDetail detail;
  auto issued = harness.issue(detail);
  REQUIRE_FALSE(issued.ok());
  CHECK(std::string(detail.reason) == "dns");
  CHECK(detail.failure == FailureClass::kTransient);
  CHECK(harness.server.answered.empty());
  // Never answered, but pending: deactivated, and the records deleted.
  CHECK(harness.server.deactivated.size() == 2);
  CHECK(harness.dns->live() == 0);
}

TEST_CASE("acme order: missing configuration is refused before anything is contacted") {
  AcmeIssuerConfig config;
  config.client.directoryUrl = "http://127.0.0.1:1/dir";
  auto noKey = AcmeIssuer::create(config, std::make_unique<FakeDns>());
  REQUIRE_FALSE(noKey.ok());
  CHECK(noKey.error().kind == ErrorKind::kInvalid);
  config.client.accountKeyJwk = jws::generateAccountKeyJwk().value();
  config.client.eabKid = "kid-only";
  auto halfEab = AcmeIssuer::create(config, std::make_unique<FakeDns>());
  REQUIRE_FALSE(halfEab.ok());
  CHECK(halfEab.error().message.find("ACME_EAB_HMAC_KEY") != std::string::npos);
  config.client.eabKid.clear();
  auto noDns = AcmeIssuer::create(config, nullptr);
  CHECK_FALSE(noDns.ok());
}

TEST_CASE("acme order: an unreachable CA is a transient network failure") {
  AcmeIssuerConfig config;
  {
    FakeAcmeServer closed;  // its port is free again once it is gone
    config.client.directoryUrl = closed.directoryUrl();
  }
  config.client.accountKeyJwk = jws::generateAccountKeyJwk().value();
  auto issuer = AcmeIssuer::create(config, std::make_unique<FakeDns>());
  REQUIRE(issuer.ok());
  FailureDetail detail;
  auto issued = (*issuer)->issueDetailed(
      IssueRequest{testing::buildCsrPem(testing::hostCsr(kOrderHost)), {kOrderHost}},
      kOrderNotCancelled, detail);
  REQUIRE_FALSE(issued.ok());
  CHECK(std::string(detail.reason) == "network");
  CHECK(detail.failure == FailureClass::kTransient);
}

}  // namespace
}  // namespace ot::controld
