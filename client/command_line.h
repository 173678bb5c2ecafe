// otunnel's command line: flags, the `http` / `tls` subcommands and the checks CLI11 cannot do
// itself (route syntax, DNS labels, the server URL). Runs once at startup on the main thread.
//
//   otunnel [--server URL] [--ca-file F] [--links N] [--state-dir D] [--id ID]
//           [--origin NAME] [--credential CRED] [--profile NAME=HOST:PORT[,sni=S][,links=N] ...]
//           [--issue-timeout S] [--log-level L] http|tls <port> [--route name=port ...]
//   otunnel [--state-dir D] status [--json]
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "client/origin_profile.h"
#include "client/server_url.h"
#include "common/log_format.h"
#include "common/result.h"

namespace ot::client {

// The relay takes at most 128 routes per attach; the bare hostname is one of them.
inline constexpr size_t kMaxNamedRoutes = 127;

struct CommandLine {
  ServerUrl server;
  std::string caFile;                   // "" -> the system roots
  int links = kDefaultLinksPerProfile;  // per profile, unless the profile says links=N
  std::string origin;                   // the origin name every bridge attaches under
  std::string credential;               // "" -> the tunnel token from the state file
  std::vector<ProfileSpec> profiles;    // never empty after parsing; order = profile_index
  std::string stateDir;                 // "" -> defaultStateDir()
  std::optional<std::string> wantedId;
  std::chrono::seconds issueTimeout{120};
  bool terminateTls = true;                // `http`; false for `tls` (passthrough)
  bool http2 = false;                      // `http --http2`: the local service speaks h2c
  uint16_t port = 0;                       // the bare hostname's local port
  std::map<std::string, uint16_t> routes;  // named routes: label -> local port
  bool provisionOnly = false;              // hidden: provision, print the URL, exit
  // The bridges' own log lines (stderr); the status lines people need are printed regardless.
  log::Level logLevel = log::Level::kWarn;
  bool statusCommand = false;  // `otunnel status`: print the running otunnel's status file
  bool statusJson = false;     // `otunnel status --json`
};

// "name=port" entries -> label -> port; kInvalid with a one-line message on the first problem
// (syntax, label, port 1-65535, a name given twice, more than kMaxNamedRoutes).
[[nodiscard]] Result<std::map<std::string, uint16_t>> parseRoutes(
    const std::vector<std::string>& specs);

// Parses argv. Returns the command line, or the exit code when otunnel should stop: 0 after
// --help, 2 on bad input (the reason is already printed on stderr, one line).
[[nodiscard]] std::variant<CommandLine, int> parseCommandLine(int argc, char** argv);

}  // namespace ot::client
