// IP addresses as peers present them, and the key under which per-source limits count a peer.
// Pure: no I/O, no shared state.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ot {

struct IpAddress {
  bool v6 = false;
  std::array<uint8_t, 16> bytes{};  // IPv4: the first 4 bytes

  [[nodiscard]] int bits() const { return v6 ? 128 : 32; }
  [[nodiscard]] std::string toString() const;
  // An IPv4-mapped IPv6 address (::ffff:192.0.2.1) as the IPv4 address it carries; any other
  // address as it is.
  [[nodiscard]] IpAddress unmapped() const;
  bool operator==(const IpAddress&) const = default;
};

// "192.0.2.1", "2001:db8::1", "[2001:db8::1]", "fe80::1%eth0" (the zone is dropped). An
// IPv4-mapped IPv6 address ("::ffff:192.0.2.1") is the IPv4 address. nullopt for anything else
// (ports and surrounding whitespace included).
[[nodiscard]] std::optional<IpAddress> parseIpAddress(std::string_view text);

// The key per-source limits and counters use for a peer: an IPv4 address as itself, an IPv6
// address as its /64 ("2001:db8:1:2::/64"), since one IPv6 host commonly holds a whole /64 and
// would otherwise get a fresh budget per address. nullopt for text that is not an address
// (an "ip:port" endpoint included: callers pass addresses, never endpoints).
[[nodiscard]] std::optional<std::string> sourceKey(std::string_view address);

}  // namespace ot
