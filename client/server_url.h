// The OpenTunnel service's address as the user gives it (--server): "https://host[:port]" or,
// for development against a plain-TCP controld, "http://host[:port]". Pure: any thread may call.
//
// The same URL names both halves of the service: the HTTP API (the base URL) and the relay the
// bridges connect to (host and port; protocol.md section 1). The public URL of a tunnel shows the
// port only when visitors cannot use the default 443.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ot::client {

struct ServerUrl {
  std::string scheme;  // "https" or "http", lowercase
  std::string host;    // lowercase; an IPv6 literal without brackets
  uint16_t port = 0;   // explicit, or the scheme's default (443 / 80)

  // "scheme://host:port" with brackets around an IPv6 literal; no trailing slash.
  [[nodiscard]] std::string base() const;
  // "host:port" as curl's CURLOPT_RESOLVE and people write it.
  [[nodiscard]] std::string hostPort() const;
  // isLocalhostName(host) (common/address_resolver.h).
  [[nodiscard]] bool isLoopbackName() const;
};

// std::nullopt with `error` set when the text is not such a URL (no path other than "/", no
// query, no user info).
[[nodiscard]] std::optional<ServerUrl> parseServerUrl(std::string_view text, std::string* error);

// What visitors open: https://<hostname>, with ":<port>" when the server's port is not 443.
[[nodiscard]] std::string publicUrl(std::string_view hostname, const ServerUrl& server);

}  // namespace ot::client
