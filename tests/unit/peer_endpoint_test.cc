// PeerEndpoint (common/peer_endpoint.h): the address and the port kept apart, so per-source limits
// and controld get an address while the bridge `open` frame keeps the endpoint.
#include "common/peer_endpoint.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>

#include "common/ip_address.h"

namespace ot {
namespace {

sockaddr_storage v4(const char* text, uint16_t port) {
  sockaddr_storage storage{};
  auto* address = reinterpret_cast<sockaddr_in*>(&storage);
  address->sin_family = AF_INET;
  address->sin_port = htons(port);
  REQUIRE(::inet_pton(AF_INET, text, &address->sin_addr) == 1);
  return storage;
}

sockaddr_storage v6(const char* text, uint16_t port) {
  sockaddr_storage storage{};
  auto* address = reinterpret_cast<sockaddr_in6*>(&storage);
  address->sin6_family = AF_INET6;
  address->sin6_port = htons(port);
  REQUIRE(::inet_pton(AF_INET6, text, &address->sin6_addr) == 1);
  return storage;
}

}  // namespace

TEST_CASE(
    "peer endpoint: from a socket, the address alone is an address; the endpoint has the port") {
  const PeerEndpoint a = PeerEndpoint::fromSocket(v4("192.0.2.7", 51234));
  CHECK(a.address == "192.0.2.7");
  CHECK(a.port == 51234);
  CHECK(a.toString() == "192.0.2.7:51234");
  CHECK(sourceKey(a.address) == "192.0.2.7");

  const PeerEndpoint b = PeerEndpoint::fromSocket(v6("2001:db8:1:2::9", 443));
  CHECK(b.address == "2001:db8:1:2::9");
  CHECK(b.toString() == "[2001:db8:1:2::9]:443");
  CHECK(sourceKey(b.address) == "2001:db8:1:2::/64");

  const PeerEndpoint mapped = PeerEndpoint::fromSocket(v6("::ffff:203.0.113.9", 5));
  CHECK(mapped.address == "203.0.113.9");
  CHECK(mapped.toString() == "203.0.113.9:5");

  sockaddr_storage unknown{};
  unknown.ss_family = AF_UNIX;
  CHECK(PeerEndpoint::fromSocket(unknown).address.empty());
  CHECK(PeerEndpoint::fromSocket(unknown).toString().empty());
}

TEST_CASE("peer endpoint: from a PROXY header, the same split; IPv4-mapped written as IPv4") {
  const PeerEndpoint a = PeerEndpoint::fromProxy(ProxyAddress::ipv4({198, 51, 100, 20}, 40000));
  CHECK(a.address == "198.51.100.20");
  CHECK(a.toString() == "198.51.100.20:40000");
  std::array<uint8_t, 16> mapped{};
  mapped[10] = 0xff;
  mapped[11] = 0xff;
  mapped[12] = 198;
  mapped[13] = 51;
  mapped[14] = 100;
  mapped[15] = 21;
  const PeerEndpoint b = PeerEndpoint::fromProxy(ProxyAddress::ipv6(mapped, 7));
  CHECK(b.address == "198.51.100.21");
  CHECK(b.toString() == "198.51.100.21:7");
}

}  // namespace ot
