// Where a TLS connection goes, decided from its SNI alone (pure): the API domain itself, a
// tunnel's hostname <id>.<domain>, a named route <route>.<id>.<domain>, or nowhere (other domains,
// deeper names, names that are not DNS labels).
#pragma once

#include <string>
#include <string_view>

namespace ot::relayd {

struct SniTarget {
  enum class Kind : uint8_t { kApi, kTunnel, kOther };
  Kind kind = Kind::kOther;
  std::string tunnelId;  // kTunnel
  std::string route;     // kTunnel: "" for <id>.<domain>
};

// `serverName` is already lowercased (ClientHelloReader does it); `domain` is lowercase.
[[nodiscard]] SniTarget classifySni(std::string_view serverName, std::string_view domain);

// The tunnel ID in "/api/tunnel/<id>/bridge" (no query allowed), or "" when the target is not
// that path. `validId` is false when the path matches but the ID is not a DNS label.
struct BridgePath {
  bool matches = false;
  bool validId = false;
  std::string tunnelId;
};
[[nodiscard]] BridgePath parseBridgePath(std::string_view target);

}  // namespace ot::relayd
