#include "controld/mesh/route_check_http.h"

#include <charconv>
#include <nlohmann/json.hpp>

#include "common/text.h"

namespace ot::mesh {
namespace {

constexpr std::string_view kPrefix = "/internal/tunnel/";
constexpr std::string_view kSuffix = "/routes";
constexpr std::string_view kEndOfHead = "\r\n\r\n";

// Splits "name: value" (value without surrounding whitespace); false without a colon.
bool splitHeader(std::string_view line, std::string_view& name, std::string_view& value) {
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  name = line.substr(0, colon);
  value = trimOws(line.substr(colon + 1));
  return true;
}

// The head's lines after the first, each without its CRLF.
template <typename Fn>
bool forEachHeader(std::string_view head, Fn&& fn) {
  size_t start = head.find("\r\n");
  while (start != std::string_view::npos) {
    start += 2;
    const size_t end = head.find("\r\n", start);
    const std::string_view line =
        head.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (line.empty()) break;
    std::string_view name;
    std::string_view value;
    if (!splitHeader(line, name, value)) return false;
    fn(name, value);
    start = end;
  }
  return true;
}

std::string response(int status, std::string_view reason, std::string_view body) {
  std::string out =
      "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\nConnection: close\r\n\r\n";
  out.append(body);
  return out;
}

}  // namespace

HttpParse parseRouteCheckRequest(std::string_view bytes, RouteCheckRequest& out) {
  const size_t end = bytes.find(kEndOfHead);
  if (end == std::string_view::npos) {
    return bytes.size() > kMaxRouteCheckRequestBytes ? HttpParse::kInvalid : HttpParse::kNeedMore;
  }
  if (end + kEndOfHead.size() > kMaxRouteCheckRequestBytes) return HttpParse::kInvalid;
  const std::string_view head = bytes.substr(0, end + 2);  // keeps the last header's CRLF
  const std::string_view line = head.substr(0, head.find("\r\n"));
  const size_t space = line.find(' ');
  const size_t lastSpace = line.rfind(' ');
  if (space == std::string_view::npos || lastSpace == space ||
      line.substr(lastSpace + 1) != "HTTP/1.1") {
    return HttpParse::kInvalid;
  }
  out.method = std::string(line.substr(0, space));
  out.target = std::string(line.substr(space + 1, lastSpace - space - 1));
  out.tunnelId.clear();
  const std::string_view target = out.target;
  if (target.size() > kPrefix.size() + kSuffix.size() && target.starts_with(kPrefix) &&
      target.ends_with(kSuffix)) {
    out.tunnelId =
        std::string(target.substr(kPrefix.size(), target.size() - kPrefix.size() - kSuffix.size()));
  }
  out.auth.reset();
  const bool wellFormed = forEachHeader(head, [&](std::string_view name, std::string_view value) {
    if (equalsIgnoreCase(name, "x-opentunnel-auth") && !out.auth) out.auth = std::string(value);
  });
  return wellFormed ? HttpParse::kComplete : HttpParse::kInvalid;
}

std::string routeCheckTarget(std::string_view tunnelId) {
  return std::string(kPrefix) + std::string(tunnelId) + std::string(kSuffix);
}

std::string formatRouteCheckRequest(std::string_view host, std::string_view target,
                                    std::string_view auth) {
  return "GET " + std::string(target) + " HTTP/1.1\r\nHost: " + std::string(host) +
         "\r\nx-opentunnel-auth: " + std::string(auth) + "\r\nConnection: close\r\n\r\n";
}

std::string formatRouteCheckAnswer(std::string_view tunnelId,
                                   const std::vector<std::string>& routes, size_t bridges) {
  const nlohmann::json body = {{"tunnel", tunnelId}, {"routes", routes}, {"bridges", bridges}};
  return response(200, "OK", body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

std::string formatRouteCheckError(int status, std::string_view message) {
  const char* reason = status == 401 ? "Unauthorized" : status == 404 ? "Not Found" : "Bad Request";
  const nlohmann::json body = {{"error", message}};
  return response(status, reason,
                  body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

HttpParse parseRouteCheckAnswer(std::string_view bytes, RouteCheckAnswer& out) {
  const size_t end = bytes.find(kEndOfHead);
  if (end == std::string_view::npos) {
    return bytes.size() > kMaxRouteCheckResponseBytes ? HttpParse::kInvalid : HttpParse::kNeedMore;
  }
  const std::string_view head = bytes.substr(0, end + 2);
  const std::string_view line = head.substr(0, head.find("\r\n"));
  if (!line.starts_with("HTTP/1.1 ") || line.size() < 12) return HttpParse::kInvalid;
  int status = 0;
  const auto code = line.substr(9, 3);
  if (std::from_chars(code.data(), code.data() + code.size(), status).ec != std::errc{}) {
    return HttpParse::kInvalid;
  }
  std::optional<size_t> length;
  bool valid = forEachHeader(head, [&](std::string_view name, std::string_view value) {
    if (!equalsIgnoreCase(name, "content-length")) return;
    size_t parsed = 0;
    const auto result = std::from_chars(value.data(), value.data() + value.size(), parsed);
    if (result.ec == std::errc{} && result.ptr == value.data() + value.size()) length = parsed;
  });
  if (!valid || !length || *length > kMaxRouteCheckResponseBytes) return HttpParse::kInvalid;
  const std::string_view body = bytes.substr(end + kEndOfHead.size());
  if (body.size() < *length) return HttpParse::kNeedMore;
  out.status = status;
  out.routes.clear();
  out.bridges = 0;
  if (status != 200) return HttpParse::kComplete;
  const auto json = nlohmann::json::parse(body.substr(0, *length), nullptr, false);
  if (json.is_discarded() || !json.is_object()) return HttpParse::kInvalid;
  const auto routes = json.find("routes");
  if (routes == json.end() || !routes->is_array()) return HttpParse::kInvalid;
  for (const auto& route : *routes) {
    if (!route.is_string()) return HttpParse::kInvalid;
    out.routes.push_back(route.get<std::string>());
  }
  const auto bridges = json.find("bridges");
  if (bridges != json.end() && bridges->is_number_unsigned()) out.bridges = bridges->get<size_t>();
  return HttpParse::kComplete;
}

}  // namespace ot::mesh
