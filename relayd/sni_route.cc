#include "relayd/sni_route.h"

#include "common/bridge_frame.h"

namespace ot::relayd {

SniTarget classifySni(std::string_view serverName, std::string_view domain) {
  SniTarget target;
  if (domain.empty() || serverName.empty()) return target;
  if (serverName == domain) {
    target.kind = SniTarget::Kind::kApi;
    return target;
  }
  if (serverName.size() <= domain.size() + 1) return target;
  const size_t prefixLength = serverName.size() - domain.size() - 1;
  if (serverName.substr(prefixLength + 1) != domain || serverName[prefixLength] != '.')
    return target;
  const std::string_view prefix = serverName.substr(0, prefixLength);
  const size_t dot = prefix.find('.');
  std::string_view route;
  std::string_view id = prefix;
  if (dot != std::string_view::npos) {
    route = prefix.substr(0, dot);
    id = prefix.substr(dot + 1);
    if (id.find('.') != std::string_view::npos || !bridge::isDnsLabel(route))
      return target;  // deeper
  }
  if (!bridge::isDnsLabel(id)) return target;
  target.kind = SniTarget::Kind::kTunnel;
  target.tunnelId = std::string(id);
  target.route = std::string(route);
  return target;
}

BridgePath parseBridgePath(std::string_view target) {
  constexpr std::string_view kPrefix = "/api/tunnel/";
  constexpr std::string_view kSuffix = "/bridge";
  BridgePath path;
  if (!target.starts_with(kPrefix) || !target.ends_with(kSuffix)) return path;
  if (target.size() < kPrefix.size() + kSuffix.size()) return path;
  const std::string_view id =
      target.substr(kPrefix.size(), target.size() - kPrefix.size() - kSuffix.size());
  if (id.find('/') != std::string_view::npos || id.find('?') != std::string_view::npos) return path;
  path.matches = true;
  path.validId = bridge::isDnsLabel(id);
  if (path.validId) path.tunnelId = std::string(id);
  return path;
}

}  // namespace ot::relayd
