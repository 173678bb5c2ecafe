// Configuration helpers shared by every binary: flags that fall back to environment variables
// (CLI11), and pure parsers for the value types our settings use (listen addresses, booleans,
// byte sizes). Parsers return std::nullopt on bad input; CLI11 turns that into a clear error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/cli_fwd.h"

namespace ot::config {

// Where a listener binds: "off", "host:port" / "[v6]:port", or "unix:/path/to/socket".
struct ListenAddress {
  enum class Kind { kOff, kTcp, kUnix };
  Kind kind = Kind::kOff;
  std::string host;  // kTcp: an IP literal or a name, without brackets
  uint16_t port = 0;
  std::string path;  // kUnix

  [[nodiscard]] bool enabled() const { return kind != Kind::kOff; }
  [[nodiscard]] std::string toString() const;
};

[[nodiscard]] std::optional<ListenAddress> parseListenAddress(std::string_view text);
// true/false, 1/0, yes/no, on/off (any case).
[[nodiscard]] std::optional<bool> parseBool(std::string_view text);
// A plain non-negative decimal integer that fits in 64 bits, no sign, no suffix.
[[nodiscard]] std::optional<uint64_t> parseUnsigned(std::string_view text);

// CLI11 glue: a flag `--name` that reads `ENV_NAME` when absent, validated by the parsers above.
CLI::Option* addListenOption(CLI::App& app, const std::string& flag, const std::string& env,
                             ListenAddress& target, const std::string& help);
CLI::Option* addBoolOption(CLI::App& app, const std::string& flag, const std::string& env,
                           bool& target, const std::string& help);

// AUTH_FAILURE_LIMIT and AUTH_FAILURE_WINDOW_MS, which relayd (failed attaches) and controld
// (failed API credentials) read alike; `refused` says what a source past the limit gets.
void addAuthFailureOptions(CLI::App& app, uint32_t& limit, uint64_t& windowMs,
                           const std::string& failures, const std::string& refused);

// Parses argv; prints help or the error and returns an exit code when the program should stop
// (0 after --help, 2 on a bad flag or environment value), std::nullopt when it should go on.
[[nodiscard]] std::optional<int> parseCommandLine(CLI::App& app, int argc, char** argv);

}  // namespace ot::config
