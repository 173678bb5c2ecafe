// Builds the DNS-01 provider named by DNS_PROVIDER from controld's settings. Called once at
// startup (main thread); the provider it returns is thread-safe.
#pragma once

#include <memory>
#include <string>

#include "controld/acme/dns_provider.h"
#include "controld/controld_config.h"

namespace ot::controld {

// challtestsrv needs CHALLTESTSRV_URL; cloudflare needs CLOUDFLARE_ZONE_ID and
// CLOUDFLARE_API_TOKEN (CLOUDFLARE_API_URL defaults to Cloudflare's). nullptr and *error (which
// never contains the token) when DNS_PROVIDER is empty or unknown or a setting is missing.
[[nodiscard]] std::unique_ptr<DnsProvider> makeDnsProvider(const ControldConfig& config,
                                                           std::string* error);

}  // namespace ot::controld
