// CIDR parsing and matching for TRUSTED_PROXY_RANGES (ip_ranges.h): IPv4, IPv6, the built-in
// Cloudflare list, malformed input refused, and the IPv6 /64 rate keys of the addresses it lets
// through.
#include "controld/api/ip_ranges.h"

#include <doctest/doctest.h>

#include <string>

#include "controld/api/tunnel_service.h"

namespace ot::controld {
namespace {

IpRange cidr(const char* text) {
  auto range = parseCidr(text);
  REQUIRE_MESSAGE(range.ok(), text << ": " << (range.ok() ? "" : range.error().message));
  return *range;
}

TEST_CASE("ip ranges: addresses parse in their usual spellings") {
  auto v4 = parseIpAddress("192.0.2.1");
  REQUIRE(v4.has_value());
  CHECK_FALSE(v4->v6);
  CHECK(v4->toString() == "192.0.2.1");
  auto v6 = parseIpAddress("2001:DB8::1");
  REQUIRE(v6.has_value());
  CHECK(v6->v6);
  CHECK(v6->toString() == "2001:db8::1");
  CHECK(parseIpAddress("[2001:db8::1]") == v6);
  CHECK(parseIpAddress("2001:db8::1%eth0") == v6);
  // IPv4-mapped IPv6 is the IPv4 address.
  CHECK(parseIpAddress("::ffff:192.0.2.1") == v4);
  for (const char* bad : {"", "192.0.2", "192.0.2.1:80", " 192.0.2.1", "192.0.2.256",
                          "2001:db8::1::2", "example.com", "192.0.2.1%eth0", "[192.0.2.1"}) {
    CAPTURE(bad);
    CHECK_FALSE(parseIpAddress(bad).has_value());
  }
}

TEST_CASE("ip ranges: IPv4 ranges match exactly their addresses") {
  const IpRange range = cidr("198.51.100.0/22");
  CHECK(range.toString() == "198.51.100.0/22");
  CHECK(range.contains(*parseIpAddress("198.51.100.0")));
  CHECK(range.contains(*parseIpAddress("198.51.103.255")));
  CHECK_FALSE(range.contains(*parseIpAddress("198.51.104.0")));
  CHECK_FALSE(range.contains(*parseIpAddress("198.51.99.255")));
  CHECK(range.contains(*parseIpAddress("::ffff:198.51.101.7")));
  CHECK_FALSE(range.contains(*parseIpAddress("2001:db8::1")));
  CHECK(cidr("0.0.0.0/0").contains(*parseIpAddress("203.0.113.9")));
  CHECK_FALSE(cidr("0.0.0.0/0").contains(*parseIpAddress("2001:db8::1")));
  const IpRange host = cidr("203.0.113.9");
  CHECK(host.prefix == 32);
  CHECK(host.contains(*parseIpAddress("203.0.113.9")));
  CHECK_FALSE(host.contains(*parseIpAddress("203.0.113.8")));
}

TEST_CASE("ip ranges: IPv6 ranges match on bit boundaries") {
  const IpRange range = cidr("2a06:98c0::/29");
  CHECK(range.contains(*parseIpAddress("2a06:98c0::1")));
  CHECK(range.contains(*parseIpAddress("2a06:98c7:ffff::1")));
  CHECK_FALSE(range.contains(*parseIpAddress("2a06:98c8::1")));
  CHECK_FALSE(range.contains(*parseIpAddress("192.0.2.1")));
  const IpRange net64 = cidr("2001:db8:1:2::/64");
  CHECK(net64.contains(*parseIpAddress("2001:db8:1:2:ffff:ffff:ffff:ffff")));
  CHECK_FALSE(net64.contains(*parseIpAddress("2001:db8:1:3::")));
  CHECK(cidr("::/0").contains(*parseIpAddress("2606:4700::1")));
  CHECK(cidr("2001:db8::1").prefix == 128);
}

TEST_CASE("ip ranges: malformed ranges are refused, saying why") {
  for (const char* bad :
       {"", "/24", "192.0.2.0/", "192.0.2.0/33", "192.0.2.0/-1", "192.0.2.0/+8", "192.0.2.0/2 4",
        "192.0.2.0/24/8", "2001:db8::/129", "192.0.2.1/24", "2001:db8::1/64", "[2001:db8::]/32",
        "::ffff:192.0.2.0/120", "cloudflare.com/24", "192.0.2.0/0x18"}) {
    CAPTURE(bad);
    auto range = parseCidr(bad);
    REQUIRE_FALSE(range.ok());
    CHECK(range.error().kind == ErrorKind::kInvalid);
    CHECK(range.error().message.find(bad) != std::string::npos);
  }
  CHECK(parseCidr("192.0.2.1/24").error().message.find("192.0.2.0/24") != std::string::npos);
}

TEST_CASE("ip ranges: TRUSTED_PROXY_RANGES lists, cloudflare and off") {
  auto off = parseTrustedProxyRanges("off");
  REQUIRE(off.ok());
  CHECK(off->empty());
  CHECK_FALSE(off->contains("173.245.48.1"));

  auto defaults = parseTrustedProxyRanges("cloudflare");
  REQUIRE(defaults.ok());
  CHECK(defaults->ranges().size() == kCloudflareRanges.size());
  CHECK(defaults->contains("173.245.48.1"));
  CHECK(defaults->contains("104.16.0.1"));
  CHECK(defaults->contains("2606:4700:10::6816:1"));
  CHECK(defaults->contains("2a06:98c1::1"));
  CHECK_FALSE(defaults->contains("203.0.113.7"));
  CHECK_FALSE(defaults->contains("2001:db8::1"));
  CHECK_FALSE(defaults->contains("not an address"));

  auto mixed = parseTrustedProxyRanges(" 10.0.0.0/8 , fd00::/8,cloudflare ");
  REQUIRE(mixed.ok());
  CHECK(mixed->ranges().size() == kCloudflareRanges.size() + 2);
  CHECK(mixed->contains("10.1.2.3"));
  CHECK(mixed->contains("fd12::1"));
  CHECK(mixed->contains("162.158.1.1"));
  CHECK_FALSE(mixed->contains("11.0.0.1"));

  for (const char* bad : {"", " ", "10.0.0.0/8,", ",10.0.0.0/8", "10.0.0.0/8,,fd00::/8",
                          "10.0.0.1/8", "off,10.0.0.0/8", "10.0.0.0/8 fd00::/8", "Cloudflare"}) {
    CAPTURE(bad);
    auto parsed = parseTrustedProxyRanges(bad);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.error().kind == ErrorKind::kInvalid);
  }
}

TEST_CASE("ip ranges: addresses from behind a proxy get IPv4 and IPv6 /64 rate keys") {
  // What effectiveClientAddress returns is an address's canonical text; the create limit then
  // keys it like any other client address.
  const std::string a = parseIpAddress("2001:DB8:1:2::1")->toString();
  const std::string b = parseIpAddress("2001:db8:1:2:ffff::9")->toString();
  const std::string c = parseIpAddress("2001:db8:1:3::1")->toString();
  CHECK(clientRateKey(a) == "2001:db8:1:2::/64");
  CHECK(clientRateKey(a) == clientRateKey(b));
  CHECK(clientRateKey(c) == "2001:db8:1:3::/64");
  CHECK(clientRateKey(parseIpAddress("::ffff:192.0.2.1")->toString()) == "192.0.2.1");
}

}  // namespace
}  // namespace ot::controld
