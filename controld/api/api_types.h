// The HTTP API's request and response as handlers see them, independent of the transport.
// The HTTP server (http_server.h) parses requests on its I/O loop and runs the handler on a
// worker thread (handlers may block on storage); the response goes back to the loop to be sent.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "controld/api/ip_ranges.h"

namespace ot::controld {

struct ApiRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // without the query, percent-encoding untouched
  std::string query;   // after '?', may be empty
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // The client's address ("ip" without port). On the unix socket it comes from relayd's
  // X-OpenTunnel-Client-Address header (relayd removes any such header a visitor sent); on the
  // development TCP listener it is the socket's peer; never taken from anyone else.
  std::string clientAddress;

  // Case-insensitive lookup of the first header with this name.
  [[nodiscard]] std::optional<std::string_view> header(std::string_view name) const;
};

// The token of "Authorization: Bearer <token>"; std::nullopt when there is none (or another
// scheme). Shared by the tunnel routes and the admin routes.
[[nodiscard]] std::optional<std::string> bearerToken(const ApiRequest& request);

struct ApiResponse {
  int status = 200;
  std::vector<std::pair<std::string, std::string>>
      headers;  // Content-Length is added by the server
  std::string body;

  // A JSON body (Content-Type: application/json).
  static ApiResponse json(int status, std::string jsonBody);
  // The API's error shape: {"_tag": tag, "message": message}.
  static ApiResponse error(int status, std::string_view tag, std::string_view message);
};

// The header relayd sets on every request it proxies; trusted only on the unix socket.
inline constexpr std::string_view kClientAddressHeader = "X-OpenTunnel-Client-Address";

// Runs on a worker thread; may block. Must not throw (the server answers 500 if it does).
using ApiHandler = std::function<ApiResponse(const ApiRequest&)>;

// The header Cloudflare sets to the visitor's address. Believed only from a trusted proxy.
inline constexpr std::string_view kCfConnectingIpHeader = "CF-Connecting-IP";

// The address a request is counted under (the create rate limit): its CF-Connecting-IP when the
// connection's address (client_address as the server filled it) is in `trusted_proxies` and the
// header is one valid IP address, otherwise client_address itself. A header from anyone else, a
// repeated one or one that is not an address is ignored, so nobody outside the trusted ranges
// can choose the budget they are counted against.
[[nodiscard]] std::string effectiveClientAddress(const ApiRequest& request,
                                                 const IpRanges& trustedProxies);

// `inner` with client_address replaced by effectiveClientAddress. With no trusted ranges it is
// `inner` unchanged. The ranges are copied; the result may run on any number of threads.
[[nodiscard]] ApiHandler withTrustedProxies(ApiHandler inner, IpRanges trustedProxies);

}  // namespace ot::controld
