// Direct mode's pure part (docs/pools-direct.md "The relay's dialer"): which origins this relay
// dials, read from the tunnel records controld pushed (OriginCredential.direct_address and
// direct_links); which resolved addresses it refuses to dial; and each target's dial schedule
// (links wanted, up, in flight, the backoff after failed dials). No I/O: DirectDialer
// (direct_dialer.h) runs it on the loop.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "opentunnel/control/v1/control.pb.h"

namespace ot::relayd {

namespace v1 = ::opentunnel::control::v1;

inline constexpr uint32_t kDefaultDirectLinks = 4;
inline constexpr uint32_t kMaxDirectLinks = 16;

// "host:port": an IPv4 literal, an [IPv6] literal in brackets, or a DNS name; port 1-65535.
struct DirectAddress {
  std::string host;  // without brackets
  uint16_t port = 0;
};
[[nodiscard]] std::optional<DirectAddress> parseDirectAddress(std::string_view text);

// Why a resolved address is not dialed without DIRECT_ALLOW_PRIVATE ("loopback", "private",
// "link_local", "multicast", "unspecified"); nullopt: a public address. IPv4-mapped IPv6 is
// judged as the IPv4 address it carries.
[[nodiscard]] std::optional<std::string_view> refusedAddressReason(const sockaddr_storage& address);

// One origin this relay keeps links to. The credential's hash is part of it, so a rotated
// credential is a changed target (its old links are closed, new ones dialed).
struct DirectTarget {
  std::string tunnelId;
  std::string origin;
  std::string address;  // as the record has it
  uint32_t links = kDefaultDirectLinks;
  std::string credentialSha256;
  uint64_t credentialGeneration = 0;
  bool operator==(const DirectTarget&) const = default;
};

// The record's origins with a direct address that parses (links clamped to 1-16, 0 meaning the
// default). A deleted record has none.
[[nodiscard]] std::vector<DirectTarget> directTargetsOf(const v1::TunnelRecord& record);

// One target's dial schedule. A dial that fails waits: the first wait about 0.5 s, doubling up to
// 60 s, with equal jitter (b/2 + random(0, b/2)), the shape of otunnel's link backoff. While
// failing, one dial probes at a time; once one attaches the counts reset and the rest are dialed.
// A bridge that attached and ended is redialed after a short wait (250-500 ms).
class DirectSchedule {
 public:
  static constexpr uint64_t kFirstFailureMs = 500;
  static constexpr uint64_t kCapMs = 60'000;
  static constexpr uint64_t kAfterEndedMs = 250;

  // `random(n)`: a uniform value in [0, n]; injected so tests control it.
  DirectSchedule(uint32_t links, std::function<uint64_t(uint64_t)> random)
      : links_(links), random_(std::move(random)) {}

  // Dials to start now.
  [[nodiscard]] uint32_t dialsDue(uint64_t nowMs) const;
  void dialStarted() { ++inFlight_; }
  // A dial failed (name lookup, connect, refused address, no attach by the deadline); returns the
  // wait before the next one.
  uint64_t dialFailed(uint64_t nowMs);
  void dialAttached();
  // An attached bridge of this target ended.
  void bridgeEnded(uint64_t nowMs);

  [[nodiscard]] uint32_t links() const { return links_; }
  [[nodiscard]] uint32_t up() const { return up_; }
  [[nodiscard]] uint32_t inFlight() const { return inFlight_; }
  [[nodiscard]] uint32_t failuresInARow() const { return failures_; }
  [[nodiscard]] uint64_t nextDialAtMs() const { return nextDialAtMs_; }

 private:
  uint32_t links_;
  std::function<uint64_t(uint64_t)> random_;
  uint32_t up_ = 0;
  uint32_t inFlight_ = 0;
  uint32_t failures_ = 0;
  uint64_t nextDialAtMs_ = 0;
};

}  // namespace ot::relayd
