#include "relayd/direct_targets.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <charconv>
#include <cstring>

namespace ot::relayd {

namespace {

bool validHostName(std::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  return std::all_of(host.begin(), host.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_';
  });
}

std::optional<std::string_view> refusedV4(uint32_t a) {  // host order
  const uint32_t first = a >> 24;
  if (a == 0) return "unspecified";
  if (first == 0) return "unspecified";  // 0.0.0.0/8: "this network"
  if (first == 127) return "loopback";
  if (first == 10 || (a & 0xFFF00000u) == 0xAC100000u || (a & 0xFFFF0000u) == 0xC0A80000u)
    return "private";
  if ((a & 0xFFC00000u) == 0x64400000u) return "private";  // 100.64.0.0/10, carrier-grade NAT
  if ((a & 0xFFFF0000u) == 0xA9FE0000u) return "link_local";
  if (first >= 224 && first <= 239) return "multicast";
  if (a == 0xFFFFFFFFu) return "multicast";  // limited broadcast
  return std::nullopt;
}

}  // namespace

std::optional<DirectAddress> parseDirectAddress(std::string_view text) {
  if (text.empty() || text.size() > 255) return std::nullopt;
  std::string_view host;
  std::string_view port;
  if (text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return std::nullopt;
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
    in6_addr v6{};
    if (inet_pton(AF_INET6, std::string(host).c_str(), &v6) != 1) return std::nullopt;
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (!validHostName(host)) return std::nullopt;
  }
  if (port.empty() || port.size() > 5) return std::nullopt;
  unsigned value = 0;
  const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (error != std::errc{} || end != port.data() + port.size() || value == 0 || value > 65535)
    return std::nullopt;
  return DirectAddress{std::string(host), static_cast<uint16_t>(value)};
}

std::optional<std::string_view> refusedAddressReason(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    return refusedV4(ntohl(v4.sin_addr.s_addr));
  }
  if (address.ss_family != AF_INET6) return "unspecified";
  const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
  const uint8_t* b = v6.sin6_addr.s6_addr;
  if (IN6_IS_ADDR_V4MAPPED(&v6.sin6_addr)) {
    uint32_t a = 0;
    std::memcpy(&a, b + 12, 4);
    return refusedV4(ntohl(a));
  }
  if (IN6_IS_ADDR_UNSPECIFIED(&v6.sin6_addr)) return "unspecified";
  if (IN6_IS_ADDR_LOOPBACK(&v6.sin6_addr)) return "loopback";
  if ((b[0] & 0xFE) == 0xFC) return "private";                     // fc00::/7
  if (b[0] == 0xFE && (b[1] & 0xC0) == 0x80) return "link_local";  // fe80::/10
  if (b[0] == 0xFF) return "multicast";
  return std::nullopt;
}

std::vector<DirectTarget> directTargetsOf(const v1::TunnelRecord& record) {
  std::vector<DirectTarget> targets;
  if (record.deleted()) return targets;
  for (const auto& origin : record.origins()) {
    if (origin.direct_address().empty() || !parseDirectAddress(origin.direct_address())) continue;
    DirectTarget target;
    target.tunnelId = record.tunnel_id();
    target.origin = origin.name();
    target.address = origin.direct_address();
    target.links = origin.direct_links() == 0 ? kDefaultDirectLinks
                                              : std::min(origin.direct_links(), kMaxDirectLinks);
    target.credentialSha256 = origin.credential_sha256();
    target.credentialGeneration = record.credential_generation();
    targets.push_back(std::move(target));
  }
  return targets;
}

uint32_t DirectSchedule::dialsDue(uint64_t nowMs) const {
  if (nowMs < nextDialAtMs_) return 0;
  const uint32_t busy = up_ + inFlight_;
  if (busy >= links_) return 0;
  // While failing, one probe at a time: a dead address costs one connect per wait, not `links`.
  if (failures_ > 0) return inFlight_ == 0 ? 1 : 0;
  return links_ - busy;
}

uint64_t DirectSchedule::dialFailed(uint64_t nowMs) {
  if (inFlight_ > 0) --inFlight_;
  if (failures_ < 64) ++failures_;
  uint64_t base = kFirstFailureMs;
  for (uint32_t i = 1; i < failures_ && base < kCapMs; ++i) base *= 2;
  base = std::min(base, kCapMs);
  const uint64_t wait = base / 2 + random_(base / 2);
  nextDialAtMs_ = std::max(nextDialAtMs_, nowMs + wait);
  return wait;
}

void DirectSchedule::dialAttached() {
  if (inFlight_ > 0) --inFlight_;
  ++up_;
  failures_ = 0;
}

void DirectSchedule::bridgeEnded(uint64_t nowMs) {
  if (up_ > 0) --up_;
  nextDialAtMs_ = std::max(nextDialAtMs_, nowMs + kAfterEndedMs + random_(kAfterEndedMs));
}

}  // namespace ot::relayd
