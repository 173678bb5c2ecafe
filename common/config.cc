#include "common/config.h"

#include <arpa/inet.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <charconv>

#include "common/text.h"

namespace ot::config {
namespace {

bool isIpv6Literal(const std::string& host) {
  in6_addr addr{};
  return inet_pton(AF_INET6, host.c_str(), &addr) == 1;
}

// A host name or IPv4 literal: letters, digits, '-', '.', nothing else (no spaces or slashes).
bool isPlainHost(std::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  return std::all_of(host.begin(), host.end(), [](unsigned char c) {
    return std::isalnum(c) != 0 || c == '-' || c == '.' || c == '_';
  });
}

std::optional<uint16_t> parsePort(std::string_view text) {
  auto value = parseUnsigned(text);
  if (!value || *value > 65535) return std::nullopt;
  return static_cast<uint16_t>(*value);
}

}  // namespace

std::string ListenAddress::toString() const {
  switch (kind) {
    case Kind::kOff:
      return "off";
    case Kind::kUnix:
      return "unix:" + path;
    case Kind::kTcp:
      break;
  }
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::optional<ListenAddress> parseListenAddress(std::string_view text) {
  ListenAddress out;
  if (toLower(text) == "off") return out;
  if (text.starts_with("unix:")) {
    out.kind = ListenAddress::Kind::kUnix;
    out.path = std::string(text.substr(5));
    // sun_path holds 108 bytes including the terminator.
    if (out.path.empty() || out.path.size() > 107) return std::nullopt;
    return out;
  }
  out.kind = ListenAddress::Kind::kTcp;
  std::string_view portText;
  if (text.starts_with("[")) {
    const auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return std::nullopt;
    }
    out.host = std::string(text.substr(1, close - 1));
    if (!isIpv6Literal(out.host)) return std::nullopt;
    portText = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    out.host = std::string(text.substr(0, colon));
    if (!isPlainHost(out.host)) return std::nullopt;
    portText = text.substr(colon + 1);
  }
  const auto port = parsePort(portText);
  if (!port) return std::nullopt;
  out.port = *port;
  return out;
}

std::optional<bool> parseBool(std::string_view text) {
  const auto lower = toLower(text);
  if (lower == "true" || lower == "1" || lower == "yes" || lower == "on") return true;
  if (lower == "false" || lower == "0" || lower == "no" || lower == "off") return false;
  return std::nullopt;
}

std::optional<uint64_t> parseUnsigned(std::string_view text) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  uint64_t value = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

CLI::Option* addListenOption(CLI::App& app, const std::string& flag, const std::string& env,
                             ListenAddress& target, const std::string& help) {
  auto* option = app.add_option_function<std::string>(
      flag,
      [&target, flag](const std::string& value) {
        auto parsed = parseListenAddress(value);
        if (!parsed) {
          throw CLI::ValidationError(
              flag, "expected off, host:port, [v6]:port or unix:/path, got '" + value + "'");
        }
        target = *parsed;
      },
      help);
  option->envname(env)->default_str(target.toString());
  return option;
}

void addAuthFailureOptions(CLI::App& app, uint32_t& limit, uint64_t& windowMs,
                           const std::string& failures, const std::string& refused) {
  app.add_option("--auth-failure-limit", limit,
                 failures + " one address (IPv6: /64) may have per window before " + refused +
                     " for the rest of it; 0 disables")
      ->envname("AUTH_FAILURE_LIMIT")
      ->check(CLI::Range(uint32_t{0}, uint32_t{1'000'000}))
      ->capture_default_str();
  app.add_option("--auth-failure-window-ms", windowMs,
                 "the window of --auth-failure-limit, from a source's first failure")
      ->envname("AUTH_FAILURE_WINDOW_MS")
      ->check(CLI::Range(uint64_t{1'000}, uint64_t{86'400'000}))
      ->capture_default_str();
}

CLI::Option* addBoolOption(CLI::App& app, const std::string& flag, const std::string& env,
                           bool& target, const std::string& help) {
  auto* option = app.add_option_function<std::string>(
      flag,
      [&target, flag](const std::string& value) {
        auto parsed = parseBool(value);
        if (!parsed)
          throw CLI::ValidationError(flag, "expected true or false, got '" + value + "'");
        target = *parsed;
      },
      help);
  option->envname(env)->default_str(target ? "true" : "false");
  return option;
}

std::optional<int> parseCommandLine(CLI::App& app, int argc, char** argv) {
  // CLI11 reports problems by exception; this is start-up code, never the data path.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error);  // prints the help or the error
    return code == 0 ? 0 : 2;
  }
  return std::nullopt;
}

}  // namespace ot::config
