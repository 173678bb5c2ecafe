// An origin's identity and the ways it reaches the relay (issue 16, docs/pools-dialer.md), as
// pure logic: the origin name (--origin, default the host name made safe), and the profiles
// (--profile NAME=HOST:PORT[,sni=NAME][,links=N], at most 8, their order is profile_index).
// Without --profile there is one profile, "default", from --server's host and port. A profile
// written NAME=listen:HOST:PORT[,links=N] listens there instead of dialing: the relay dials
// the origin (direct mode, docs/pools-direct.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "client/server_url.h"
#include "common/result.h"

namespace ot::client {

inline constexpr int kDefaultLinksPerProfile = 4;
inline constexpr int kMaxLinksPerProfile = 16;

struct ProfileSpec {
  std::string name;
  std::string host;  // a name or an IP literal (IPv6 without brackets)
  uint16_t port = 0;
  std::string sni;      // "" -> the tunnel's API domain
  int links = 0;        // 0 -> --links (listening: the relay's default, 4)
  bool listen = false;  // direct mode: host:port is where otunnel listens for the relay

  bool operator==(const ProfileSpec&) const = default;
};

// 1-64 of A-Za-z0-9._- (the attach's origin and profile names).
[[nodiscard]] bool isOriginName(std::string_view name);

// The host name made into an origin name: characters outside A-Za-z0-9._- become '-', cut to
// 64; "origin" when nothing is left.
[[nodiscard]] std::string defaultOriginName(std::string_view hostName);

// This machine's host name (gethostname), made safe as above.
[[nodiscard]] std::string localOriginName();

// One --profile value; kInvalid with a one-line message naming the problem.
[[nodiscard]] Result<ProfileSpec> parseProfileSpec(std::string_view text);

// Every --profile value (at most bridge::kMaxProfiles, names unique) or, when there are none,
// the one "default" profile from the server's host and port.
[[nodiscard]] Result<std::vector<ProfileSpec>> parseProfiles(const std::vector<std::string>& specs,
                                                             const ServerUrl& server);

}  // namespace ot::client
