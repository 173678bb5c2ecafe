#include "common/ip_address.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

namespace ot {

std::string IpAddress::toString() const {
  char out[INET6_ADDRSTRLEN] = {};
  if (inet_ntop(v6 ? AF_INET6 : AF_INET, bytes.data(), out, sizeof out) == nullptr) return {};
  return out;
}

std::optional<IpAddress> parseIpAddress(std::string_view text) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
    text = text.substr(1, text.size() - 2);
  }
  if (text.empty() || text.size() > INET6_ADDRSTRLEN + 16) return std::nullopt;
  std::string plain(text);
  if (const size_t zone = plain.find('%'); zone != std::string::npos) {
    if (plain.find(':') == std::string::npos) return std::nullopt;  // zones are IPv6 only
    plain.resize(zone);
  }
  IpAddress address;
  if (inet_pton(AF_INET, plain.c_str(), address.bytes.data()) == 1) return address;
  if (inet_pton(AF_INET6, plain.c_str(), address.bytes.data()) != 1) return std::nullopt;
  address.v6 = true;
  return address.unmapped();
}

IpAddress IpAddress::unmapped() const {
  static constexpr uint8_t kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (!v6 || std::memcmp(bytes.data(), kMappedPrefix, sizeof kMappedPrefix) != 0) return *this;
  IpAddress v4;
  std::memcpy(v4.bytes.data(), bytes.data() + 12, 4);
  return v4;
}

std::optional<std::string> sourceKey(std::string_view address) {
  std::optional<IpAddress> parsed = parseIpAddress(address);
  if (!parsed) return std::nullopt;
  if (!parsed->v6) return parsed->toString();
  std::fill(parsed->bytes.begin() + 8, parsed->bytes.end(), uint8_t{0});
  return parsed->toString() + "/64";
}

}  // namespace ot
