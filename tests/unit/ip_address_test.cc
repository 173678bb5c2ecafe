// The per-source key (common/ip_address.h): addresses count as themselves, IPv6 as its /64, and
// an endpoint with a port is not an address.
#include "common/ip_address.h"

#include <doctest/doctest.h>

namespace ot {

TEST_CASE("ip_address: sourceKey keys IPv4 by address and IPv6 by its /64") {
  CHECK(sourceKey("192.0.2.7") == "192.0.2.7");
  CHECK(sourceKey("::ffff:192.0.2.7") == "192.0.2.7");
  CHECK(sourceKey("2001:db8:1:2:aaaa::1") == "2001:db8:1:2::/64");
  CHECK(sourceKey("[2001:db8:1:2:bbbb::9]") == "2001:db8:1:2::/64");
  CHECK(sourceKey("2001:db8:1:3::1") == "2001:db8:1:3::/64");
}

TEST_CASE("ip_address: sourceKey refuses endpoints and junk") {
  CHECK_FALSE(sourceKey("192.0.2.7:51234").has_value());
  CHECK_FALSE(sourceKey("[2001:db8::1]:443").has_value());
  CHECK_FALSE(sourceKey("").has_value());
  CHECK_FALSE(sourceKey("example.com").has_value());
}

}  // namespace ot
