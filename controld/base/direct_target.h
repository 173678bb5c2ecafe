// An origin's direct target (docs/pools-direct.md "API and storage"): the "host:port" a relay
// dials to reach the origin, and how many bridges each relay machine keeps to it. The rules live
// here, apart from the API and the record, because three places check them: the API's request
// body, the stored record's pool (checkPool) and an imported backup.
// Pure: no I/O, no name resolution (the relay resolves and refuses private addresses itself).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace ot::controld {

inline constexpr uint32_t kDefaultDirectLinks = 4;
inline constexpr uint32_t kMaxDirectLinks = 16;
inline constexpr size_t kMaxDirectAddressLength = 255;

struct DirectTarget {
  std::string address;  // as the owner gave it: "host:port", "[v6]:port" or "a.b.c.d:port"
  uint32_t links = kDefaultDirectLinks;
  bool operator==(const DirectTarget&) const = default;
};

// What an address is made of, once it passed the rules.
enum class DirectHostKind { kIpv4, kIpv6, kDnsName };
struct DirectAddress {
  std::string host;  // without the brackets of an IPv6 literal
  uint16_t port = 0;
  DirectHostKind kind = DirectHostKind::kDnsName;
  bool operator==(const DirectAddress&) const = default;
};

// Checks "host:port": host an IPv4 dotted quad, an IPv6 literal in brackets (no zone), or a DNS
// name (labels of 1-63 of A-Za-z0-9 and '-', not starting or ending with '-', at most 253
// characters, last label not all digits so 1.2.3.999 is not taken for a name); port 1-65535 in
// decimal without leading zeros; at most kMaxDirectAddressLength characters in all. The error
// (kInvalid) is a sentence the API answers with 400.
[[nodiscard]] Result<DirectAddress> parseDirectAddress(std::string_view text);

// Why the target breaks the rules (its address, or links outside 1..kMaxDirectLinks); nullopt when
// it keeps them.
[[nodiscard]] std::optional<std::string> checkDirectTarget(const DirectTarget& target);

// The API's {"address": "...", "links": N} (links optional, default kDefaultDirectLinks; no other
// members). kInvalid with the 400's message when it is not that.
[[nodiscard]] Result<DirectTarget> directTargetFromJson(const nlohmann::ordered_json& json);

}  // namespace ot::controld
