#include "controld/website/site_http.h"

#include <strings.h>

#include <utility>

namespace ot::controld {
namespace {

bool isOws(char c) {
  return c == ' ' || c == '\t';
}

// Headers every answer of the site carries, whatever its status.
void addCommonHeaders(ApiResponse& response) {
  response.headers.emplace_back("Cache-Control", std::string(kSiteCacheControl));
  response.headers.emplace_back("Content-Security-Policy", std::string(kSiteContentSecurityPolicy));
  response.headers.emplace_back("X-Content-Type-Options", "nosniff");
  // The status page keeps a token in the browser: no URL of ours goes anywhere else.
  response.headers.emplace_back("Referrer-Policy", "no-referrer");
}

bool requestMatches(const ApiRequest& request, std::string_view etag) {
  for (const auto& [name, value] : request.headers) {
    if (name.size() == 13 && strncasecmp(name.data(), "If-None-Match", 13) == 0 &&
        ifNoneMatchMatches(value, etag)) {
      return true;
    }
  }
  return false;
}

}  // namespace

bool ifNoneMatchMatches(std::string_view field, std::string_view etag) {
  size_t i = 0;
  while (i < field.size()) {
    if (isOws(field[i]) || field[i] == ',') {
      ++i;
      continue;
    }
    if (field[i] == '*') return true;
    if (field.substr(i, 2) == "W/") i += 2;
    if (i >= field.size() || field[i] != '"') return false;
    const size_t close = field.find('"', i + 1);
    if (close == std::string_view::npos) return false;
    if (field.substr(i, close + 1 - i) == etag) return true;
    i = close + 1;
  }
  return false;
}

std::optional<ApiResponse> siteResponse(const SiteTable& site, const ApiRequest& request) {
  const SiteTable::Lookup found = site.find(request.path);
  if (found.file == nullptr && found.redirect.empty()) return std::nullopt;

  if (request.method != "GET" && request.method != "HEAD") {
    ApiResponse response = ApiResponse::error(405, "MethodNotAllowedError",
                                              "method not allowed; this page answers GET, HEAD");
    response.headers.emplace_back("Allow", "GET, HEAD");
    return response;
  }
  ApiResponse response;
  if (!found.redirect.empty()) {
    response.status = 307;
    response.headers.emplace_back(
        "Location", request.query.empty() ? found.redirect : found.redirect + "?" + request.query);
    addCommonHeaders(response);
    return response;
  }
  const SiteFile& file = *found.file;
  response.headers.emplace_back("ETag", file.etag);
  addCommonHeaders(response);
  if (requestMatches(request, file.etag)) {
    response.status = 304;
    return response;
  }
  response.status = 200;
  response.headers.emplace_back("Content-Type", file.contentType);
  // A copy per request: the server owns the body it sends. Files are small (site_loader.h caps
  // them), and the worker thread pays, not the I/O loop.
  response.body = file.body;
  return response;
}

}  // namespace ot::controld
