// otctl: the admin tool. It speaks controld's Admin gRPC service (docs/admin.md) over the admin
// unix socket, or over TCP with TLS and the admin token.
#include <cstdio>
#include <string>

#include "common/config.h"
#include "otctl/client.h"
#include "otctl/commands.h"
#include "otctl/exit_codes.h"

int main(int argc, char** argv) {
  using namespace ot::otctl;
  ConnectOptions options;
  CLI::App app{
      "otctl: administer an OpenTunnel machine through controld's Admin service\n"
      "exit codes: 0 ok, 1 the operation failed, 2 usage, 3 not found, 4 controld cannot be "
      "reached or refused the credentials"};
  app.fallthrough();
  app.add_option("--socket", options.socket, "controld's admin unix socket")
      ->envname("ADMIN_SOCKET")
      ->capture_default_str();
  app.add_option("--address", options.address, "host:port of ADMIN_LISTEN (TLS) instead")
      ->envname("ADMIN_ADDRESS");
  app.add_option("--token", options.token, "the admin token, with --address")
      ->envname("ADMIN_TOKEN");
  app.add_option("--ca", options.caFile, "PEM file of the CA that signed controld's certificate");
  app.add_option("--tls-name", options.tlsName, "the name controld's certificate holds");
  int64_t timeoutSeconds = 30;
  app.add_option("--timeout", timeoutSeconds, "seconds per call (not export/import)")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  app.add_flag("--json", options.json, "JSON for scripts instead of tables");
  app.require_subcommand(1);

  Action action;
  addStatsCommands(app, action);
  addTunnelCommands(app, action);
  addBridgeCommands(app, action);
  addJobCommands(app, action);
  addBackupCommands(app, action);
  addUsageCommands(app, action);
  addStatusCommands(app, action);
  if (auto code = ot::config::parseCommandLine(app, argc, argv)) return *code;
  if (!action) {
    std::fprintf(stderr, "otctl: no command (otctl --help)\n");
    return kExitUsage;
  }
  if (!options.address.empty() && options.token.empty()) {
    std::fprintf(stderr, "otctl: --address needs --token (or ADMIN_TOKEN)\n");
    return kExitUsage;
  }
  options.timeout = std::chrono::seconds(timeoutSeconds);
  Client client(options);
  if (!client.connect()) return kExitUnreachable;
  return action(client);
}
