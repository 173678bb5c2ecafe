#include "client/server_url.h"

#include <cctype>

#include "common/address_resolver.h"
#include "common/config.h"
#include "common/text.h"

namespace ot::client {
namespace {

bool isHostChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '.' || c == '_';
}

std::optional<ServerUrl> fail(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
  return std::nullopt;
}

}  // namespace

std::string ServerUrl::base() const {
  return scheme + "://" + hostPort();
}

std::string ServerUrl::hostPort() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

bool ServerUrl::isLoopbackName() const {
  return isLocalhostName(host);
}

std::optional<ServerUrl> parseServerUrl(std::string_view text, std::string* error) {
  const std::string quoted = "server URL \"" + std::string(text) + "\"";
  const size_t separator = text.find("://");
  if (separator == std::string_view::npos) {
    return fail(error, quoted + " must start with https:// (or http:// for development)");
  }
  ServerUrl url;
  url.scheme = toLower(text.substr(0, separator));
  if (url.scheme != "https" && url.scheme != "http") {
    return fail(error, quoted + " must start with https:// (or http:// for development)");
  }
  std::string_view rest = text.substr(separator + 3);
  if (rest.ends_with("/")) rest.remove_suffix(1);
  if (rest.find_first_of("/?#@") != std::string_view::npos) {
    return fail(error, quoted + " must be scheme://host[:port] without a path, query or user");
  }
  std::string_view host = rest;
  std::string_view port;
  if (rest.starts_with("[")) {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return fail(error, quoted + " has an unclosed [");
    host = rest.substr(1, close - 1);
    const std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (!after.starts_with(":")) return fail(error, quoted + " has text after ]");
      port = after.substr(1);
      if (port.empty()) return fail(error, quoted + " has an empty port");
    }
    for (char c : host) {
      if (std::isxdigit(static_cast<unsigned char>(c)) == 0 && c != ':' && c != '.') {
        return fail(error, quoted + " has an invalid IPv6 address");
      }
    }
  } else if (const size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
    if (port.empty()) return fail(error, quoted + " has an empty port");
  }
  if (host.empty()) return fail(error, quoted + " has no host");
  if (!rest.starts_with("[")) {
    for (char c : host) {
      if (!isHostChar(c)) return fail(error, quoted + " has an invalid host name");
    }
  }
  url.host = toLower(host);
  if (port.empty()) {
    url.port = url.scheme == "https" ? 443 : 80;
  } else {
    const std::optional<uint64_t> number = config::parseUnsigned(port);
    if (!number || *number < 1 || *number > 65535) {
      return fail(error, quoted + " has an invalid port (1-65535)");
    }
    url.port = static_cast<uint16_t>(*number);
  }
  return url;
}

std::string publicUrl(std::string_view hostname, const ServerUrl& server) {
  std::string url = "https://" + std::string(hostname);
  if (server.port != 443) url += ":" + std::to_string(server.port);
  return url;
}

}  // namespace ot::client
