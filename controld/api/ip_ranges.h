// IP addresses and CIDR ranges, for TRUSTED_PROXY_RANGES: the proxies (Cloudflare's edges by
// default) whose CF-Connecting-IP header the API believes. Pure: no I/O, no shared state; any
// thread may call, and an IpRanges may be read by many threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/ip_address.h"
#include "common/result.h"

namespace ot::controld {

using ot::IpAddress;
using ot::parseIpAddress;

struct IpRange {
  IpAddress base;  // host bits zero
  int prefix = 0;  // 0..32 for IPv4, 0..128 for IPv6

  [[nodiscard]] bool contains(const IpAddress& address) const;
  [[nodiscard]] std::string toString() const;  // "192.0.2.0/24"
};

// "192.0.2.0/24", "2001:db8::/32", or a bare address (/32, /128). Refused (kInvalid, saying
// why): a bad address, a prefix out of range or not a plain decimal, host bits set
// ("192.0.2.1/24" is probably a typo for something else).
[[nodiscard]] Result<IpRange> parseCidr(std::string_view text);

class IpRanges {
 public:
  IpRanges() = default;
  explicit IpRanges(std::vector<IpRange> ranges) : ranges_(std::move(ranges)) {}

  [[nodiscard]] bool contains(const IpAddress& address) const;
  // False for text that is not an address.
  [[nodiscard]] bool contains(std::string_view address) const;
  [[nodiscard]] bool empty() const { return ranges_.empty(); }
  [[nodiscard]] const std::vector<IpRange>& ranges() const { return ranges_; }

 private:
  std::vector<IpRange> ranges_;
};

// Cloudflare's published edge ranges (cloudflare.com/ips-v4 and /ips-v6, unchanged since 2021
// and current in 2026). Update them when Cloudflare publishes new ones: an edge outside the list
// would make all the clients behind it share one create budget.
inline constexpr std::array<std::string_view, 22> kCloudflareRanges = {
    "173.245.48.0/20",  "103.21.244.0/22", "103.22.200.0/22", "103.31.4.0/22",    "141.101.64.0/18",
    "108.162.192.0/18", "190.93.240.0/20", "188.114.96.0/20", "197.234.240.0/22", "198.41.128.0/17",
    "162.158.0.0/15",   "104.16.0.0/13",   "104.24.0.0/14",   "172.64.0.0/13",    "131.0.72.0/22",
    "2400:cb00::/32",   "2606:4700::/32",  "2803:f800::/32",  "2405:b500::/32",   "2405:8100::/32",
    "2a06:98c0::/29",   "2c0f:f248::/32"};

// TRUSTED_PROXY_RANGES: comma-separated CIDRs (spaces around them allowed); the word
// "cloudflare" among them stands for kCloudflareRanges; "off" alone trusts nobody (an empty
// set). Empty text, an empty item or a malformed CIDR is kInvalid naming the item.
[[nodiscard]] Result<IpRanges> parseTrustedProxyRanges(std::string_view text);

}  // namespace ot::controld
