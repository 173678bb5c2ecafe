// ISSUER=acme: certificates from an RFC 8555 CA (ZeroSSL in production, Pebble in tests) with
// DNS-01 through a DnsProvider. Owns the shared AcmeClient (account, nonces) and the provider;
// issue()/issueDetailed() run one order attempt each (acme_order.h) on the calling worker thread,
// several at once. Failures carry their classification (acme_errors.h) for the job runner.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "controld/acme/acme_client.h"
#include "controld/acme/acme_order.h"
#include "controld/acme/dns_provider.h"
#include "controld/issuance/issuer.h"

namespace ot::controld {

struct AcmeIssuerConfig {
  AcmeClientConfig client;
  AcmeOrderConfig order;
};

class AcmeIssuer final : public Issuer {
 public:
  // kInvalid (with the reason) for missing or unusable configuration; nothing is contacted yet.
  // dns_metrics (nullable, must outlive the issuer) counts the attempts' challenge records; it
  // replaces config.order.dns_metrics when given.
  static Result<std::unique_ptr<AcmeIssuer>> create(AcmeIssuerConfig config,
                                                    std::unique_ptr<DnsProvider> dns,
                                                    DnsRecordMetrics* dnsMetrics = nullptr);

  Result<IssuedCertificate> issue(const IssueRequest& request,
                                  const std::atomic<bool>& cancel) override;
  Result<IssuedCertificate> issueDetailed(const IssueRequest& request,
                                          const std::atomic<bool>& cancel,
                                          FailureDetail& detail) override;
  [[nodiscard]] const char* name() const override { return "acme"; }

  [[nodiscard]] AcmeClient& client() { return *client_; }
  // The provider the attempts use (also for the sweep of leftover records). Thread-safe.
  [[nodiscard]] DnsProvider& dns() { return *dns_; }

 private:
  AcmeIssuer(AcmeIssuerConfig config, std::unique_ptr<AcmeClient> client,
             std::unique_ptr<DnsProvider> dns)
      : config_(std::move(config)), client_(std::move(client)), dns_(std::move(dns)) {}

  AcmeIssuerConfig config_;
  std::unique_ptr<AcmeClient> client_;
  std::unique_ptr<DnsProvider> dns_;
};

}  // namespace ot::controld
