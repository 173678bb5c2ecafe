// ISSUER=acme from controld's configuration: the DNS provider (dns_factory.h) and the ACME
// account and order settings, checked at start-up before the database is touched, so a bad
// configuration fails at once.
#pragma once

#include <memory>

#include "controld/acme/acme_issuer.h"
#include "controld/acme/dns_record_metrics.h"
#include "controld/controld_config.h"

namespace ot::controld {

// The issuer, or nullptr after logging what is missing or wrong (controld then exits 2).
// dnsMetrics may be null; it must outlive the issuer.
[[nodiscard]] std::unique_ptr<AcmeIssuer> makeAcmeIssuer(const ControldConfig& config,
                                                         DnsRecordMetrics* dnsMetrics);

}  // namespace ot::controld
