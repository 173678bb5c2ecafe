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
  if (config.dns_provider == "challtestsrv") {
    if (config.challtestsrv_url.empty()) {
      return fail(error, "DNS_PROVIDER=challtestsrv needs CHALLTESTSRV_URL");
    }
    return std::make_unique<ChalltestsrvDns>(config.challtestsrv_url);
  }
  if (config.dns_provider == "cloudflare") {
    if (config.cloudflare_zone_id.empty() || config.cloudflare_api_token.empty()) {
      return fail(error,
                  "DNS_PROVIDER=cloudflare needs CLOUDFLARE_ZONE_ID and CLOUDFLARE_API_TOKEN");
    }
    CloudflareOptions options;
    options.zone_id = config.cloudflare_zone_id;
    options.api_token = config.cloudflare_api_token;
    if (!config.cloudflare_api_url.empty()) options.api_url = config.cloudflare_api_url;
    return std::make_unique<CloudflareDns>(std::move(options));
  }
  if (config.dns_provider.empty()) return fail(error, "DNS_PROVIDER is not set");
  return fail(error,
              "unknown DNS_PROVIDER \"" + config.dns_provider + "\" (cloudflare or challtestsrv)");
}

}  // namespace ot::controld
