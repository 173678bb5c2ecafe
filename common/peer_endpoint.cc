#include "common/peer_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "common/ip_address.h"

namespace ot {

std::string PeerEndpoint::toString() const {
  if (address.empty()) return "";
  const std::string portText = std::to_string(port);
  if (address.find(':') != std::string::npos) return "[" + address + "]:" + portText;
  return address + ":" + portText;
}

PeerEndpoint PeerEndpoint::fromSocket(const sockaddr_storage& address) {
  IpAddress ip;
  uint16_t port = 0;
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    std::memcpy(ip.bytes.data(), &v4.sin_addr, 4);
    port = ntohs(v4.sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    ip.v6 = true;
    std::memcpy(ip.bytes.data(), &v6.sin6_addr, 16);
    port = ntohs(v6.sin6_port);
  } else {
    return {};
  }
  // An IPv4-mapped IPv6 address comes out as IPv4, as the parser makes it (written once: this
  // runs for every accepted connection, shed ones included).
  std::string text = ip.unmapped().toString();
  if (text.empty()) return {};
  return PeerEndpoint{std::move(text), port};
}

PeerEndpoint PeerEndpoint::fromProxy(const ProxyAddress& address) {
  IpAddress ip;
  ip.v6 = address.family == ProxyAddress::Family::kInet6;
  ip.bytes = address.bytes;
  if (!ip.v6) std::fill(ip.bytes.begin() + 4, ip.bytes.end(), uint8_t{0});
  std::string text = ip.unmapped().toString();
  if (text.empty()) return {};
  return PeerEndpoint{std::move(text), address.port};
}

}  // namespace ot
