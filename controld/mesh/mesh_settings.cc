#include "controld/mesh/mesh_settings.h"

#include <charconv>

#include "common/fd_handoff.h"
#include "common/internal_settings.h"
#include "common/ip_address.h"
#include "common/machine_identity.h"

namespace ot::mesh {
namespace {

Error invalid(std::string message) {
  return Error{ErrorKind::kInvalid, std::move(message)};
}

bool unspecified(const IpAddress& ip) {
  for (size_t i = 0; i < (ip.v6 ? 16U : 4U); ++i) {
    if (ip.bytes[i] != 0) return false;
  }
  return true;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

std::vector<std::string_view> splitCommas(std::string_view text) {
  std::vector<std::string_view> items;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const size_t end = comma == std::string_view::npos ? text.size() : comma;
    items.push_back(text.substr(start, end - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return items;
}

}  // namespace

std::string HostPort::toString() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::optional<HostPort> parseHostPort(std::string_view text) {
  HostPort result;
  std::string_view portText;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return std::nullopt;
    }
    result.host = std::string(text.substr(1, close - 1));
    if (!parseIpAddress(result.host) || result.host.find(':') == std::string::npos) {
      return std::nullopt;
    }
    portText = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos || colon == 0) return std::nullopt;
    result.host = std::string(text.substr(0, colon));
    if (result.host.find(':') != std::string::npos) return std::nullopt;  // v6 needs brackets
    for (const char c : result.host) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '-' || c == '_';
      if (!ok) return std::nullopt;
    }
    portText = text.substr(colon + 1);
  }
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(portText.data(), portText.data() + portText.size(), port);
  if (ec != std::errc() || end != portText.data() + portText.size() || portText.empty() ||
      port == 0 || port > 65535 || portText.front() == '0') {
    return std::nullopt;
  }
  result.port = static_cast<uint16_t>(port);
  return result;
}

std::optional<std::string> canonicalAddress(std::string_view text) {
  auto parsed = parseHostPort(text);
  if (!parsed) return std::nullopt;
  if (auto ip = parseIpAddress(parsed->host)) parsed->host = ip->toString();
  return parsed->toString();
}

bool addressLess(std::string_view a, std::string_view b) {
  const auto pa = parseHostPort(a);
  const auto pb = parseHostPort(b);
  const auto ia = pa ? parseIpAddress(pa->host) : std::nullopt;
  const auto ib = pb ? parseIpAddress(pb->host) : std::nullopt;
  if (ia && ib) {
    if (ia->v6 != ib->v6) return !ia->v6;
    if (ia->bytes != ib->bytes) return ia->bytes < ib->bytes;
    return pa->port < pb->port;
  }
  if (ia.has_value() != ib.has_value()) return ia.has_value();
  return a < b;
}

Result<std::optional<MeshSettings>> checkMeshFlags(const MeshFlags& flags,
                                                   std::string_view machineId,
                                                   std::string_view region,
                                                   std::string_view controlSocket) {
  if (!flags.internalListen.enabled()) return std::optional<MeshSettings>{};
  if (std::string error = checkInternalListen(flags.internalListen, flags.internalToken);
      !error.empty()) {
    return invalid(std::move(error));
  }
  MeshSettings settings;
  settings.machineId = std::string(machineId);
  settings.region = std::string(region);
  settings.token = flags.internalToken;

  const std::string addressText =
      flags.internalAddress.empty()
          ? HostPort{flags.internalListen.host, flags.internalListen.port}.toString()
          : flags.internalAddress;
  const auto address = parseHostPort(addressText);
  const auto ip = address ? parseIpAddress(address->host) : std::nullopt;
  if (!address || !ip) {
    return invalid(
        "INTERNAL_ADDRESS must be an IP address and port (ip:port or [ipv6]:port), not '" +
        addressText + "'");
  }
  if (unspecified(*ip)) {
    return invalid("INTERNAL_ADDRESS is required when INTERNAL_LISTEN binds every address (" +
                   addressText + "): the address other machines reach this one at");
  }
  settings.internalAddress = HostPort{ip->toString(), address->port};

  for (const auto& item : splitCommas(flags.peers)) {
    const std::string_view peer = trim(item);
    if (peer.empty()) continue;
    auto parsed = parseHostPort(peer);
    if (!parsed) {
      return invalid("MESH_PEERS: '" + std::string(peer) + "' is not host:port");
    }
    if (auto peerIp = parseIpAddress(parsed->host)) parsed->host = peerIp->toString();
    if (*parsed == settings.internalAddress) continue;  // this machine itself
    settings.peers.push_back(std::move(*parsed));
  }
  if (flags.dns != "off") settings.dnsName = std::string(trim(flags.dns));
  settings.dnsPort = settings.internalAddress.port;
  if (flags.discoveryMs < 100 || flags.discoveryMs > 3'600'000) {
    return invalid("MESH_DISCOVERY_MS must be between 100 and 3600000");
  }
  if (flags.pingMs < 10 || flags.pingMs > 600'000) {
    return invalid("MESH_PING_MS must be between 10 and 600000");
  }
  if (flags.deadMs <= flags.pingMs) {
    return invalid("MESH_DEAD_MS (" + std::to_string(flags.deadMs) +
                   ") must be longer than MESH_PING_MS (" + std::to_string(flags.pingMs) + ")");
  }
  if (flags.holdMs <= flags.deadMs || flags.holdMs > 86'400'000) {
    return invalid("MESH_HOLD_MS (" + std::to_string(flags.holdMs) +
                   ") must be longer than MESH_DEAD_MS (" + std::to_string(flags.deadMs) +
                   ") and at most 86400000");
  }
  settings.discoveryMs = flags.discoveryMs;
  settings.holdMs = flags.holdMs;
  settings.pingMs = flags.pingMs;
  settings.deadMs = flags.deadMs;
  settings.verifyAddress = flags.verifyAddress;
  settings.handoffSocket =
      flags.handoffSocket.empty() ? defaultHandoffSocketPath(controlSocket) : flags.handoffSocket;
  return std::optional<MeshSettings>(std::move(settings));
}

}  // namespace ot::mesh
