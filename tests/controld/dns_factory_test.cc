// makeDnsProvider: which provider each DNS_PROVIDER gives, and the settings each one needs.
#include "controld/acme/dns_factory.h"

#include <doctest/doctest.h>

#include <string>

namespace ot::controld {
namespace {

TEST_CASE("dns factory: builds the named provider or says what is missing") {
  ControldConfig config;
  std::string error;

  config.dnsProvider = "challtestsrv";
  auto challtestsrv = makeDnsProvider(config, &error);
  REQUIRE(challtestsrv != nullptr);
  CHECK(std::string(challtestsrv->name()) == "challtestsrv");
  config.challtestsrvUrl.clear();
  CHECK(makeDnsProvider(config, &error) == nullptr);
  CHECK(error == "DNS_PROVIDER=challtestsrv needs CHALLTESTSRV_URL");

  config.dnsProvider = "cloudflare";
  error.clear();
  CHECK(makeDnsProvider(config, &error) == nullptr);
  CHECK(error == "DNS_PROVIDER=cloudflare needs CLOUDFLARE_ZONE_ID and CLOUDFLARE_API_TOKEN");
  config.cloudflareZoneId = "zone";
  CHECK(makeDnsProvider(config, &error) == nullptr);
  config.cloudflareApiToken = "secret-token";
  error.clear();
  auto cloudflare = makeDnsProvider(config, &error);
  REQUIRE(cloudflare != nullptr);
  CHECK(std::string(cloudflare->name()) == "cloudflare");
  CHECK(error.empty());

  config.dnsProvider = "route53";
  CHECK(makeDnsProvider(config, &error) == nullptr);
  CHECK(error == "unknown DNS_PROVIDER \"route53\" (cloudflare or challtestsrv)");
  config.dnsProvider = "";
  CHECK(makeDnsProvider(config, nullptr) == nullptr);
  CHECK(makeDnsProvider(config, &error) == nullptr);
  CHECK(error == "DNS_PROVIDER is not set");
}

}  // namespace
}  // namespace ot::controld
