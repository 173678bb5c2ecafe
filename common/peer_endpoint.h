// A peer as the socket (or a PROXY protocol header in front of relayd) names it: the address and
// the port kept apart. Per-source limits and controld's X-OpenTunnel-Client-Address take the
// address alone (an endpoint would make every source port a new source); the bridge `open` frame
// carries the endpoint (docs/protocol.md section 5).
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "common/proxy_protocol.h"

namespace ot {

struct PeerEndpoint {
  std::string address;  // "192.0.2.7", "2001:db8::1" (IPv4-mapped written as IPv4); "" if unknown
  uint16_t port = 0;

  // "192.0.2.7:443", "[2001:db8::1]:443"; "" when the address is unknown.
  [[nodiscard]] std::string toString() const;

  [[nodiscard]] static PeerEndpoint fromSocket(const sockaddr_storage& address);
  [[nodiscard]] static PeerEndpoint fromProxy(const ProxyAddress& address);
};

}  // namespace ot
