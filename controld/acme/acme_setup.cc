#include "controld/acme/acme_setup.h"

#include <string>
#include <utility>

#include "common/log.h"
#include "controld/acme/dns_factory.h"

namespace ot::controld {

std::unique_ptr<AcmeIssuer> makeAcmeIssuer(const ControldConfig& config,
                                           DnsRecordMetrics* dnsMetrics) {
  std::string problem;
  if (config.acme_account_key_jwk.empty()) {
    problem = "ACME_ACCOUNT_KEY_JWK is not set (controld account-key makes one)";
  } else if (config.dns_provider.empty()) {
    problem = "DNS_PROVIDER is not set (cloudflare or challtestsrv)";
  }
  std::unique_ptr<DnsProvider> dns;
  if (problem.empty()) {
    dns = makeDnsProvider(config, &problem);
    if (!dns && problem.empty()) problem = "cannot set up DNS_PROVIDER " + config.dns_provider;
  }
  if (problem.empty()) {
    AcmeIssuerConfig acme;
    acme.client.directory_url = config.acme_url;
    acme.client.email = config.acme_email;
    acme.client.eab_kid = config.acme_eab_kid;
    acme.client.eab_hmac_key = config.acme_eab_hmac_key;
    acme.client.account_key_jwk = config.acme_account_key_jwk;
    acme.client.http.ca_bundle = config.acme_ca_bundle;
    acme.order.poll_interval_ms = config.acme_poll_interval_ms;
    acme.order.propagation_timeout_ms = config.acme_dns_propagation_timeout_ms;
    acme.order.dns_resolver = config.acme_dns_resolver;
    auto created = AcmeIssuer::create(std::move(acme), std::move(dns), dnsMetrics);
    if (created) {
      log::info("issuing certificates through ACME", {{"directory", config.acme_url},
                                                      {"dns_provider", config.dns_provider},
                                                      {"eab", !config.acme_eab_kid.empty()}});
      return std::move(created).value();
    }
    problem = created.error().message;
  }
  log::error("ISSUER=acme is not configured", {{"error", problem}});
  return nullptr;
}

}  // namespace ot::controld
