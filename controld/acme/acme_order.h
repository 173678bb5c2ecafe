// One ACME issuance attempt (RFC 8555 section 7.4): a new order for the names, DNS-01 for each
// pending authorization (one TXT name _acme-challenge.<host> shared by the host and its wildcard),
// the challenges answered once the records are visible, the authorizations polled, the order
// finalized with the CSR, the chain downloaded.
//
// What a stuck CA must not do to us:
//  - An order that arrives with a challenge already processing or a failed authorization (a reused
//    order) is abandoned for a new one, after its pending authorizations are deactivated.
//  - At the end, whatever happened, every authorization still pending is deactivated (section
//    7.5.2), so the next attempt does not inherit it.
//  - The TXT records are deleted at the end unless an answered authorization could not be
//    deactivated (the CA might still look at them).
// Cleanup runs even after a cancel (shutdown), with its own uncancelled requests.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "controld/acme/acme_client.h"
#include "controld/acme/acme_errors.h"
#include "controld/acme/dns_provider.h"
#include "controld/acme/dns_record_metrics.h"
#include "controld/issuance/issuer.h"

namespace ot::controld {

struct AcmeOrderConfig {
  int64_t pollIntervalMs = 2'000;         // ACME_POLL_INTERVAL_MS
  int pollAttempts = 60;                  // authorizations and the order, each
  int64_t propagationTimeoutMs = 10'000;  // ACME_DNS_PROPAGATION_TIMEOUT_MS; 0 skips the check
  int maxOrders = 3;                      // new orders after abandoned ones, in all
  // The TXT strings a resolver sees for a name (default: lookupTxt on dns_resolver).
  std::function<Result<std::vector<std::string>>(const std::string& name)> lookupTxt;
  std::string dnsResolver;  // ACME_DNS_RESOLVER, host:port; "" the system's
  // Counts the challenge records an attempt creates, deletes and fails to delete (nullptr: none).
  // Must outlive every attempt.
  DnsRecordMetrics* dnsMetrics = nullptr;
};

// One attempt for `names` (the first is the host; "*.host" may follow) with the CSR (PEM).
[[nodiscard]] AcmeResult<IssuedCertificate> runAcmeOrder(AcmeClient& client, DnsProvider& dns,
                                                         const AcmeOrderConfig& config,
                                                         const std::vector<std::string>& names,
                                                         const std::string& csrPem,
                                                         const std::atomic<bool>& cancel);

// The leaf's validity and a check that it certifies the CSR's key (pure; for tests too).
[[nodiscard]] AcmeResult<IssuedCertificate> parseIssuedChain(const std::string& chainPem,
                                                             const std::string& csrPem);

}  // namespace ot::controld
