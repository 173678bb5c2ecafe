#include "controld/acme/acme_setup.h"

#include <string>
#include <utility>

#include "common/log.h"
#include "controld/acme/dns_factory.h"

namespace ot::controld {

std::unique_ptr<AcmeIssuer> makeAcmeIssuer(const ControldConfig& config,
                                           DnsRecordMetrics* dnsMetrics) {
  std::string problem;
  if (config.acmeAccountKeyJwk.empty()) {
    problem = "ACME_ACCOUNT_KEY_JWK is not set (controld account-key makes one)";
  } else if (config.dnsProvider.empty()) {
    problem = "DNS_PROVIDER is not set (cloudflare or challtestsrv)";
  }
  std::unique_ptr<DnsProvider> dns;
  if (problem.empty()) {
    dns = makeDnsProvider(config, &problem);
    if (!dns && problem.empty()) problem = "cannot set up DNS_PROVIDER " + config.dnsProvider;
  }
  if (problem.empty()) {
    AcmeIssuerConfig acme;
    acme.client.directoryUrl = config.acmeUrl;
    acme.client.email = config.acmeEmail;
    acme.client.eabKid = config.acmeEabKid;
    acme.client.eabHmacKey = config.acmeEabHmacKey;
    acme.client.accountKeyJwk = config.acmeAccountKeyJwk;
    acme.client.http.caBundle = config.acmeCaBundle;
    acme.order.pollIntervalMs = config.acmePollIntervalMs;
    acme.order.propagationTimeoutMs = config.acmeDnsPropagationTimeoutMs;
    acme.order.dnsResolver = config.acmeDnsResolver;
    auto created = AcmeIssuer::create(std::move(acme), std::move(dns), dnsMetrics);
    if (created) {
      log::info("issuing certificates through ACME", {{"directory", config.acmeUrl},
                                                      {"dns_provider", config.dnsProvider},
                                                      {"eab", !config.acmeEabKid.empty()}});
      return std::move(created).value();
    }
    problem = created.error().message;
  }
  log::error("ISSUER=acme is not configured", {{"error", problem}});
  return nullptr;
}

}  // namespace ot::controld
