#include "controld/base/direct_target.h"

#include <arpa/inet.h>

#include <nlohmann/json.hpp>

namespace ot::controld {
namespace {

constexpr size_t kMaxDnsNameLength = 253;
constexpr size_t kMaxLabelLength = 63;

Error invalid(std::string message) {
  return Error{ErrorKind::kInvalid, std::move(message)};
}

bool isDigit(char c) {
  return c >= '0' && c <= '9';
}

bool isLabelChar(char c) {
  return isDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-';
}

// 1-65535, decimal, no sign and no leading zero (one spelling per port, so two addresses that
// differ are different targets).
std::optional<uint16_t> parsePort(std::string_view text) {
  if (text.empty() || text.size() > 5 || text.front() == '0') return std::nullopt;
  uint32_t value = 0;
  for (char c : text) {
    if (!isDigit(c)) return std::nullopt;
    value = value * 10 + static_cast<uint32_t>(c - '0');
  }
  if (value < 1 || value > 65535) return std::nullopt;
  return static_cast<uint16_t>(value);
}

bool isDnsName(std::string_view name) {
  if (name.empty() || name.size() > kMaxDnsNameLength) return false;
  bool lastAllDigits = false;
  size_t start = 0;
  while (true) {
    const size_t dot = name.find('.', start);
    const std::string_view label =
        name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (label.empty() || label.size() > kMaxLabelLength) return false;
    if (label.front() == '-' || label.back() == '-') return false;
    lastAllDigits = true;
    for (char c : label) {
      if (!isLabelChar(c)) return false;
      if (!isDigit(c)) lastAllDigits = false;
    }
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  // A top-level label is never all digits (RFC 3696 2): such a "name" is a mistyped IPv4 address.
  return !lastAllDigits;
}

bool onlyDigitsAndDots(std::string_view text) {
  for (char c : text) {
    if (!isDigit(c) && c != '.') return false;
  }
  return true;
}

}  // namespace

Result<DirectAddress> parseDirectAddress(std::string_view text) {
  if (text.empty()) return invalid("direct.address is empty: give host:port");
  if (text.size() > kMaxDirectAddressLength) {
    return invalid("direct.address is longer than " + std::to_string(kMaxDirectAddressLength) +
                   " characters");
  }
  DirectAddress out;
  std::string_view host;
  std::string_view port;
  if (text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return invalid("direct.address: an IPv6 address is written [address]:port");
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
    in6_addr v6{};
    if (inet_pton(AF_INET6, std::string(host).c_str(), &v6) != 1) {
      return invalid("direct.address: \"" + std::string(host) + "\" is not an IPv6 address");
    }
    out.kind = DirectHostKind::kIpv6;
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      return invalid("direct.address has no port: give host:port");
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return invalid("direct.address: an IPv6 address goes in brackets, as [address]:port");
    }
    if (host.empty()) return invalid("direct.address has no host: give host:port");
    if (onlyDigitsAndDots(host)) {
      in_addr v4{};
      if (inet_pton(AF_INET, std::string(host).c_str(), &v4) != 1) {
        return invalid("direct.address: \"" + std::string(host) + "\" is not an IPv4 address");
      }
      out.kind = DirectHostKind::kIpv4;
    } else {
      if (!isDnsName(host)) {
        return invalid("direct.address: \"" + std::string(host) +
                       "\" is neither an IP address nor a DNS name");
      }
      out.kind = DirectHostKind::kDnsName;
    }
  }
  const auto number = parsePort(port);
  if (!number) return invalid("direct.address: the port must be a number from 1 to 65535");
  out.host = std::string(host);
  out.port = *number;
  return out;
}

std::optional<std::string> checkDirectTarget(const DirectTarget& target) {
  if (auto parsed = parseDirectAddress(target.address); !parsed) return parsed.error().message;
  if (target.links < 1 || target.links > kMaxDirectLinks) {
    return "direct.links must be an integer from 1 to " + std::to_string(kMaxDirectLinks);
  }
  return std::nullopt;
}

Result<DirectTarget> directTargetFromJson(const nlohmann::ordered_json& json) {
  if (!json.is_object()) return invalid("direct must be an object {\"address\", \"links\"}");
  for (const auto& member : json.items()) {
    if (member.key() != "address" && member.key() != "links") {
      // Refused rather than ignored: a misspelt "link" would otherwise leave the default quietly.
      return invalid("direct has an unknown member \"" + member.key() +
                     "\"; it takes address and links");
    }
  }
  DirectTarget target;
  const auto address = json.find("address");
  if (address == json.end() || !address->is_string()) {
    return invalid("direct.address must be a string, host:port");
  }
  target.address = address->get<std::string>();
  if (const auto links = json.find("links"); links != json.end()) {
    if (!links->is_number_integer() || links->get<int64_t>() < 1 ||
        links->get<int64_t>() > static_cast<int64_t>(kMaxDirectLinks)) {
      return invalid("direct.links must be an integer from 1 to " +
                     std::to_string(kMaxDirectLinks));
    }
    target.links = static_cast<uint32_t>(links->get<int64_t>());
  }
  if (auto broken = checkDirectTarget(target)) return invalid(std::move(*broken));
  return target;
}

}  // namespace ot::controld
