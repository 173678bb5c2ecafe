#include "controld/api/ip_ranges.h"

#include <algorithm>
#include <cstring>

namespace ot::controld {
namespace {

std::string_view trimmed(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// Whether the first `prefix` bits of a and b agree (same family assumed).
bool samePrefix(const std::array<uint8_t, 16>& a, const std::array<uint8_t, 16>& b, int prefix) {
  const auto whole = static_cast<size_t>(prefix / 8);
  if (std::memcmp(a.data(), b.data(), whole) != 0) return false;
  const int rest = prefix % 8;
  if (rest == 0) return true;
  const auto mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (a[whole] & mask) == (b[whole] & mask);
}

}  // namespace

bool IpRange::contains(const IpAddress& address) const {
  return address.v6 == base.v6 && samePrefix(address.bytes, base.bytes, prefix);
}

std::string IpRange::toString() const {
  return base.toString() + "/" + std::to_string(prefix);
}

Result<IpRange> parseCidr(std::string_view text) {
  const std::string shown(text);
  const size_t slash = text.find('/');
  // parseIpAddress would take "::ffff:1.2.3.4" as IPv4, which makes its /96 meaningless: a
  // range's base is taken literally.
  const std::string_view addressText = text.substr(0, slash);
  auto address = parseIpAddress(addressText);
  if (!address || addressText.front() == '[' || addressText.find('%') != std::string::npos ||
      (!address->v6 && addressText.find(':') != std::string::npos)) {
    return Error{ErrorKind::kInvalid, "not an IP address range: \"" + shown + "\""};
  }
  IpRange range;
  range.base = *address;
  range.prefix = address->bits();
  if (slash != std::string_view::npos) {
    const std::string_view digits = text.substr(slash + 1);
    if (digits.empty() || digits.size() > 3 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return Error{ErrorKind::kInvalid, "not a prefix length in \"" + shown + "\""};
    }
    int prefix = 0;
    for (const char c : digits) prefix = prefix * 10 + (c - '0');
    if (prefix > address->bits()) {
      return Error{ErrorKind::kInvalid, "prefix length out of range in \"" + shown + "\""};
    }
    range.prefix = prefix;
  }
  IpRange network = range;
  for (int bit = range.prefix; bit < address->bits(); ++bit) {
    network.base.bytes[static_cast<size_t>(bit / 8)] &= static_cast<uint8_t>(~(0x80 >> (bit % 8)));
  }
  if (network.base != range.base) {
    return Error{ErrorKind::kInvalid,
                 "host bits set in \"" + shown + "\" (the network is " + network.toString() + ")"};
  }
  return range;
}

bool IpRanges::contains(const IpAddress& address) const {
  return std::any_of(ranges_.begin(), ranges_.end(),
                     [&](const IpRange& range) { return range.contains(address); });
}

bool IpRanges::contains(std::string_view address) const {
  const auto parsed = parseIpAddress(address);
  return parsed && contains(*parsed);
}

Result<IpRanges> parseTrustedProxyRanges(std::string_view text) {
  const std::string_view whole = trimmed(text);
  if (whole == "off") return IpRanges{};
  if (whole.empty()) {
    return Error{ErrorKind::kInvalid, "TRUSTED_PROXY_RANGES is empty (use off to trust none)"};
  }
  std::vector<IpRange> ranges;
  size_t start = 0;
  while (start <= whole.size()) {
    size_t comma = whole.find(',', start);
    if (comma == std::string_view::npos) comma = whole.size();
    const std::string_view item = trimmed(whole.substr(start, comma - start));
    if (item.empty()) {
      return Error{ErrorKind::kInvalid, "TRUSTED_PROXY_RANGES has an empty item"};
    }
    if (item == "cloudflare") {
      for (const std::string_view cidr : kCloudflareRanges) {
        auto range = parseCidr(cidr);
        if (!range) return range.error();
        ranges.push_back(*range);
      }
    } else {
      auto range = parseCidr(item);
      if (!range) {
        return Error{ErrorKind::kInvalid, "TRUSTED_PROXY_RANGES: " + range.error().message};
      }
      ranges.push_back(*range);
    }
    start = comma + 1;
  }
  return IpRanges(std::move(ranges));
}

}  // namespace ot::controld
