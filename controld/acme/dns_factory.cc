#include "controld/acme/dns_factory.h"

#include <utility>

#include "controld/acme/dns_challtestsrv.h"
#include "controld/acme/dns_cloudflare.h"

namespace ot::controld {
namespace {

std::unique_ptr<DnsProvider> fail(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
  return nullptr;
}

}  // namespace

std::unique_ptr<DnsProvider> makeDnsProvider(const ControldConfig& config, std::string* error) {
  if (config.dnsProvider == "challtestsrv") {
    if (config.challtestsrvUrl.empty()) {
      return fail(error, "DNS_PROVIDER=challtestsrv needs CHALLTESTSRV_URL");
    }
    return std::make_unique<ChalltestsrvDns>(config.challtestsrvUrl);
  }
  if (config.dnsProvider == "cloudflare") {
    if (config.cloudflareZoneId.empty() || config.cloudflareApiToken.empty()) {
      return fail(error,
                  "DNS_PROVIDER=cloudflare needs CLOUDFLARE_ZONE_ID and CLOUDFLARE_API_TOKEN");
    }
    CloudflareOptions options;
    options.zoneId = config.cloudflareZoneId;
    options.apiToken = config.cloudflareApiToken;
    if (!config.cloudflareApiUrl.empty()) options.apiUrl = config.cloudflareApiUrl;
    return std::make_unique<CloudflareDns>(std::move(options));
  }
  if (config.dnsProvider.empty()) return fail(error, "DNS_PROVIDER is not set");
  return fail(error,
              "unknown DNS_PROVIDER \"" + config.dnsProvider + "\" (cloudflare or challtestsrv)");
}

}  // namespace ot::controld
