#include "controld/api/api_types.h"

#include <strings.h>

#include <nlohmann/json.hpp>

#include "common/text.h"

namespace ot::controld {

std::optional<std::string_view> ApiRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key.size() == name.size() && strncasecmp(key.data(), name.data(), name.size()) == 0) {
      return std::string_view(value);
    }
  }
  return std::nullopt;
}

std::string effectiveClientAddress(const ApiRequest& request, const IpRanges& trustedProxies) {
  if (trustedProxies.empty() || !trustedProxies.contains(request.clientAddress)) {
    return request.clientAddress;
  }
  std::optional<std::string_view> forwarded;
  for (const auto& [key, value] : request.headers) {
    if (key.size() != kCfConnectingIpHeader.size() ||
        strncasecmp(key.data(), kCfConnectingIpHeader.data(), key.size()) != 0) {
      continue;
    }
    if (forwarded) return request.clientAddress;  // repeated: not Cloudflare's own
    forwarded = value;
  }
  if (!forwarded) return request.clientAddress;
  const auto address = parseIpAddress(*forwarded);
  if (!address) return request.clientAddress;
  return address->toString();
}

ApiHandler withTrustedProxies(ApiHandler inner, IpRanges trustedProxies) {
  if (trustedProxies.empty()) return inner;
  return
      [inner = std::move(inner), trusted = std::move(trustedProxies)](const ApiRequest& request) {
        if (!trusted.contains(request.clientAddress)) return inner(request);
        ApiRequest copy = request;
        copy.clientAddress = effectiveClientAddress(request, trusted);
        return inner(copy);
      };
}

ApiResponse ApiResponse::json(int status, std::string jsonBody) {
  ApiResponse response;
  response.status = status;
  response.headers.emplace_back("Content-Type", "application/json");
  response.body = std::move(jsonBody);
  return response;
}

ApiResponse ApiResponse::error(int status, std::string_view tag, std::string_view message) {
  nlohmann::ordered_json body = {{"_tag", tag}, {"message", message}};
  // replace: a message built from client input may hold invalid UTF-8.
  return json(status, body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

std::optional<std::string> bearerToken(const ApiRequest& request) {
  const auto header = request.header("Authorization");
  if (!header) return std::nullopt;
  const std::string_view value = trimOws(*header);
  constexpr std::string_view kScheme = "Bearer";
  if (value.size() <= kScheme.size() ||
      !equalsIgnoreCase(value.substr(0, kScheme.size()), kScheme) ||
      (value[kScheme.size()] != ' ' && value[kScheme.size()] != '\t')) {
    return std::nullopt;
  }
  const std::string_view token = trimOws(value.substr(kScheme.size()));
  if (token.empty()) return std::nullopt;
  return std::string(token);
}

}  // namespace ot::controld
