#include "client/origin_profile.h"

#include <unistd.h>

#include <array>
#include <optional>
#include <set>

#include "common/bridge_control.h"
#include "common/config.h"

namespace ot::client {
namespace {

Error invalidProfile(std::string message) {
  return Error{ErrorKind::kInvalid, std::move(message)};
}

bool isNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// A host as a profile may name it: an IPv6 literal (brackets already removed) or a DNS name /
// IPv4 literal of letters, digits, '.', '-' and '_'.
bool isHostText(std::string_view host, bool bracketed) {
  if (host.empty() || host.size() > 253) return false;
  for (const char c : host) {
    const bool ok = bracketed ? (c == ':' || c == '.' || (c >= '0' && c <= '9') ||
                                 (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))
                              : isNameChar(c);
    if (!ok) return false;
  }
  return !bracketed || host.find(':') != std::string_view::npos;
}

}  // namespace

bool isOriginName(std::string_view name) {
  if (name.empty() || name.size() > bridge::kMaxNameLength) return false;
  for (const char c : name) {
    if (!isNameChar(c)) return false;
  }
  return true;
}

std::string defaultOriginName(std::string_view hostName) {
  std::string name;
  for (const char c : hostName.substr(0, bridge::kMaxNameLength)) name += isNameChar(c) ? c : '-';
  return name.empty() ? "origin" : name;
}

std::string localOriginName() {
  std::array<char, 256> buffer{};
  if (gethostname(buffer.data(), buffer.size() - 1) != 0) return defaultOriginName("");
  return defaultOriginName(buffer.data());
}

Result<ProfileSpec> parseProfileSpec(std::string_view text) {
  const std::string quoted = "--profile \"" + std::string(text) + "\"";
  const size_t equals = text.find('=');
  if (equals == std::string_view::npos) {
    return invalidProfile(
        quoted + " must be NAME=HOST:PORT[,sni=NAME][,links=N] or NAME=listen:HOST:PORT[,links=N]");
  }
  ProfileSpec spec;
  spec.name = std::string(text.substr(0, equals));
  if (!isOriginName(spec.name)) {
    return invalidProfile(quoted + ": the name must be 1-64 of A-Za-z0-9._-");
  }
  std::string_view rest = text.substr(equals + 1);
  constexpr std::string_view kListen = "listen:";
  if (rest.starts_with(kListen)) {
    spec.listen = true;
    rest.remove_prefix(kListen.size());
  }
  const std::string hostWord = spec.listen ? "listen:HOST:PORT" : "HOST:PORT";
  const size_t comma = rest.find(',');
  std::string_view address = rest.substr(0, comma);
  std::string_view options = comma == std::string_view::npos ? "" : rest.substr(comma + 1);
  std::string_view portText;
  bool bracketed = false;
  if (address.starts_with("[")) {
    const size_t close = address.find(']');
    if (close == std::string_view::npos || close + 1 >= address.size() ||
        address[close + 1] != ':') {
      return invalidProfile(quoted + ": an IPv6 address must be written " +
                            (spec.listen ? "listen:[ADDRESS]:PORT" : "[ADDRESS]:PORT"));
    }
    spec.host = std::string(address.substr(1, close - 1));
    portText = address.substr(close + 2);
    bracketed = true;
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string_view::npos)
      return invalidProfile(quoted + ": " + hostWord + " is missing the port");
    spec.host = std::string(address.substr(0, colon));
    portText = address.substr(colon + 1);
  }
  if (!isHostText(spec.host, bracketed)) {
    return invalidProfile(quoted + ": \"" + spec.host + "\" is not a host name or address" +
                          (spec.listen ? " to listen on" : ""));
  }
  const std::optional<uint64_t> port = config::parseUnsigned(portText);
  if (!port || *port < 1 || *port > 65535) {
    return invalidProfile(quoted + ": port \"" + std::string(portText) +
                          "\" must be a number from 1 to 65535");
  }
  spec.port = static_cast<uint16_t>(*port);
  while (!options.empty()) {
    const size_t next = options.find(',');
    const std::string_view option = options.substr(0, next);
    options = next == std::string_view::npos ? "" : options.substr(next + 1);
    if (option.starts_with("sni=")) {
      spec.sni = std::string(option.substr(4));
      if (!isHostText(spec.sni, false)) {
        return invalidProfile(quoted + ": sni \"" + spec.sni + "\" is not a host name");
      }
    } else if (option.starts_with("links=")) {
      const std::optional<uint64_t> links = config::parseUnsigned(option.substr(6));
      if (!links || *links < 1 || *links > static_cast<uint64_t>(kMaxLinksPerProfile)) {
        return invalidProfile(quoted + ": links must be a number from 1 to " +
                              std::to_string(kMaxLinksPerProfile));
      }
      spec.links = static_cast<int>(*links);
    } else if (spec.listen) {
      return invalidProfile(quoted + ": unknown option \"" + std::string(option) +
                            "\" (a listening profile takes links=N, sni=NAME)");
    } else {
      return invalidProfile(quoted + ": unknown option \"" + std::string(option) +
                            "\" (sni=NAME or links=N)");
    }
  }
  return spec;
}

Result<std::vector<ProfileSpec>> parseProfiles(const std::vector<std::string>& specs,
                                               const ServerUrl& server) {
  if (specs.empty()) {
    ProfileSpec spec;
    spec.name = "default";
    spec.host = server.host;
    spec.port = server.port;
    return std::vector<ProfileSpec>{spec};
  }
  if (specs.size() > bridge::kMaxProfiles) {
    return invalidProfile("at most " + std::to_string(bridge::kMaxProfiles) +
                          " --profile entries; got " + std::to_string(specs.size()));
  }
  std::vector<ProfileSpec> profiles;
  std::set<std::string> names;
  for (const std::string& text : specs) {
    auto spec = parseProfileSpec(text);
    if (!spec.ok()) return spec.error();
    if (!names.insert(spec.value().name).second) {
      return invalidProfile("--profile " + spec.value().name + " is given more than once");
    }
    profiles.push_back(std::move(spec).value());
  }
  return profiles;
}

}  // namespace ot::client
