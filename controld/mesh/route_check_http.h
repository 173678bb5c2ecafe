// The route check's HTTP exchange on the internal port (docs/mesh.md "Route checks"): one
// request, one response, then the connection closes.
//
//   GET /internal/tunnel/<id>/routes HTTP/1.1
//   Host: <receiver's internal address>
//   x-opentunnel-auth: OPENTUNNEL-AUTH/2 <sender> <receiver> <time> <nonce> <proof>
//
//   HTTP/1.1 200 OK            {"tunnel":"<id>","routes":["", "api"],"bridges":2}
//
// The routes are those the receiver's own live bridges of the tunnel claim now ("" is the bare
// hostname). Errors answer 400 (a request that is not a route check), 401 (a missing or refused
// signature: the body names the proof error), 404 (another path), each as {"error": "..."}.
//
// Pure: parsing what arrived so far and formatting both sides; the sockets are
// internal_exchange.*'s.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ot::mesh {

// Bounds: a request or a response larger than this is refused (a tunnel claims at most 256
// routes of at most 63 bytes: ~17 KiB of JSON at worst).
inline constexpr size_t kMaxRouteCheckRequestBytes = 8 * 1024;
inline constexpr size_t kMaxRouteCheckResponseBytes = 64 * 1024;

enum class HttpParse { kNeedMore, kComplete, kInvalid };

struct RouteCheckRequest {
  std::string method;
  std::string target;               // the request target exactly as sent (signed)
  std::string tunnelId;             // from the target, when it is a route check's
  std::optional<std::string> auth;  // the x-opentunnel-auth value
};

// The request line and the headers up to the blank line (a body is not read: a GET has none).
[[nodiscard]] HttpParse parseRouteCheckRequest(std::string_view bytes, RouteCheckRequest& out);

[[nodiscard]] std::string routeCheckTarget(std::string_view tunnelId);
[[nodiscard]] std::string formatRouteCheckRequest(std::string_view host, std::string_view target,
                                                  std::string_view auth);

// {"tunnel":...,"routes":[...],"bridges":n} with 200.
[[nodiscard]] std::string formatRouteCheckAnswer(std::string_view tunnelId,
                                                 const std::vector<std::string>& routes,
                                                 size_t bridges);
// {"error": message} with `status` (400, 401, 404).
[[nodiscard]] std::string formatRouteCheckError(int status, std::string_view message);

struct RouteCheckAnswer {
  int status = 0;
  std::vector<std::string> routes;  // 200 only
  size_t bridges = 0;
};

// A whole response needs its Content-Length's bytes; an answer that is not HTTP/1.1 with a
// length, or a 200 whose body is not the answer's JSON, is invalid.
[[nodiscard]] HttpParse parseRouteCheckAnswer(std::string_view bytes, RouteCheckAnswer& out);

}  // namespace ot::mesh
