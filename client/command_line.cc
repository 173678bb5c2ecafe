#include "client/command_line.h"

#include <CLI/CLI.hpp>
#include <cstdio>

#include "common/bridge_control.h"
#include "common/bridge_frame.h"
#include "common/config.h"

namespace ot::client {
namespace {

Error invalid(std::string message) {
  return Error{ErrorKind::kInvalid, std::move(message)};
}

int refuse(const std::string& message) {
  std::fprintf(stderr, "otunnel: %s\n", message.c_str());
  return 2;
}

}  // namespace

Result<std::map<std::string, uint16_t>> parseRoutes(const std::vector<std::string>& specs) {
  if (specs.size() > kMaxNamedRoutes) {
    return invalid("at most " + std::to_string(kMaxNamedRoutes) + " --route entries; got " +
                   std::to_string(specs.size()));
  }
  std::map<std::string, uint16_t> routes;
  for (const std::string& spec : specs) {
    const size_t equals = spec.find('=');
    if (equals == std::string::npos) {
      return invalid("--route \"" + spec + "\" must be name=port");
    }
    const std::string name = spec.substr(0, equals);
    const std::string_view portText = std::string_view(spec).substr(equals + 1);
    if (!bridge::isDnsLabel(name)) {
      return invalid("--route name \"" + name +
                     "\" must be one lowercase DNS label: 1-63 of a-z 0-9 -, no hyphen first "
                     "or last");
    }
    const std::optional<uint64_t> port = config::parseUnsigned(portText);
    if (!port || *port < 1 || *port > 65535) {
      return invalid("--route " + name + ": port \"" + std::string(portText) +
                     "\" must be a number from 1 to 65535");
    }
    if (!routes.emplace(name, static_cast<uint16_t>(*port)).second) {
      return invalid("--route " + name + " is given more than once");
    }
  }
  return routes;
}

std::variant<CommandLine, int> parseCommandLine(int argc, char** argv) {
  CommandLine line;
  std::string server = "https://opentunnel.localhost:8443";
  std::string wantedId;
  std::vector<std::string> routeSpecs;
  int issueTimeoutS = 120;
  std::string logLevel = "warn";
  std::vector<std::string> profileSpecs;

  CLI::App app{"otunnel: expose a local port at https://<id>.<domain>"};
  app.fallthrough();  // global flags may also follow the subcommand
  app.add_option("--server", server, "the OpenTunnel service")
      ->envname("OTUNNEL_SERVER")
      ->capture_default_str();
  app.add_option("--ca-file", line.caFile, "extra CA certificate to trust (a local development CA)")
      ->envname("OTUNNEL_CA_FILE");
  app.add_option("--links", line.links, "bridges to keep open")
      ->check(CLI::Range(1, kMaxLinksPerProfile))
      ->capture_default_str();
  app.add_option("--origin", line.origin,
                 "this origin's name in the tunnel's pool (default: the host name)")
      ->envname("OTUNNEL_ORIGIN");
  app.add_option("--credential", line.credential,
                 "the origin's derived credential, attached instead of the tunnel token")
      ->envname("OTUNNEL_CREDENTIAL");
  app.add_option("--profile", profileSpecs,
                 "NAME=HOST:PORT[,sni=NAME][,links=N]: one way to reach the relay (at most 8; "
                 "default: --server's host and port); NAME=listen:HOST:PORT[,links=N]: the "
                 "relay connects here (direct mode)");
  app.add_option("--state-dir", line.stateDir,
                 "where the tunnel, its token and key are kept (default $OTUNNEL_STATE_DIR, "
                 "$XDG_CONFIG_HOME/otunnel or ~/.config/otunnel)");
  app.add_option("--id", wantedId, "ask for this tunnel ID (a DNS label) for a new tunnel");
  app.add_option("--issue-timeout", issueTimeoutS,
                 "seconds to wait for the certificate to be issued")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  app.add_option("--log-level", logLevel,
                 "detail logged about the bridges: trace, debug, info, warn, error")
      ->envname("OTUNNEL_LOG_LEVEL")
      ->capture_default_str();
  // For tests and scripts: provision, print the URL, exit without connecting.
  app.add_flag("--provision-only", line.provisionOnly)->group("");
  app.require_subcommand(1);
  auto* http = app.add_subcommand("http", "terminate visitors' TLS here and forward plain HTTP");
  http->add_option("port", line.port, "local port")->required()->check(CLI::Range(1, 65535));
  http->add_option("--route", routeSpecs,
                   "name=port: serve <name>.<id>.<domain> from another port");
  http->add_flag("--http2", line.http2,
                 "the local service speaks HTTP/2 without TLS (h2c): offer h2 to visitors too");
  auto* tls = app.add_subcommand("tls", "pass visitors' TLS through to a local TLS server");
  tls->add_option("port", line.port, "local port")->required()->check(CLI::Range(1, 65535));
  tls->add_option("--route", routeSpecs, "name=port: serve <name>.<id>.<domain> from another port");
  auto* status = app.add_subcommand("status", "print what the running otunnel reports");
  status->add_flag("--json", line.statusJson, "the status file as it is, JSON");
  if (auto code = config::parseCommandLine(app, argc, argv)) return *code;

  line.statusCommand = status->parsed();
  line.terminateTls = http->parsed();
  line.issueTimeout = std::chrono::seconds(issueTimeoutS);
  std::string error;
  const std::optional<ServerUrl> url = parseServerUrl(server, &error);
  if (!url) return refuse(error);
  line.server = *url;
  if (!wantedId.empty()) {
    if (!bridge::isDnsLabel(wantedId)) {
      return refuse("--id \"" + wantedId +
                    "\" must be one lowercase DNS label: 1-63 of a-z 0-9 -, no hyphen first or "
                    "last");
    }
    line.wantedId = wantedId;
  }
  const std::optional<log::Level> level = log::parseLevel(logLevel);
  if (!level) return refuse("--log-level \"" + logLevel + "\" is not a log level");
  line.logLevel = *level;
  auto routes = parseRoutes(routeSpecs);
  if (!routes) return refuse(routes.error().message);
  line.routes = std::move(routes).value();
  if (line.origin.empty()) {
    line.origin = localOriginName();
  } else if (!isOriginName(line.origin)) {
    return refuse("--origin \"" + line.origin + "\" must be 1-64 of A-Za-z0-9._-");
  }
  if (line.credential.size() > bridge::kMaxTokenLength) {
    return refuse("--credential is longer than " + std::to_string(bridge::kMaxTokenLength) +
                  " characters");
  }
  auto profiles = parseProfiles(profileSpecs, line.server);
  if (!profiles) return refuse(profiles.error().message);
  line.profiles = std::move(profiles).value();
  return line;
}

}  // namespace ot::client
