// otctl: the admin tool. It speaks controld's admin gRPC service over the control socket.
#include <cstdio>
#include <string>

#include "common/config.h"

int main(int argc, char** argv) {
  std::string controlSocket = "/run/opentunnel/control.sock";
  CLI::App app{"otctl: administer an OpenTunnel machine through controld"};
  app.add_option("--control-socket", controlSocket, "controld's gRPC unix socket")
      ->envname("CONTROL_SOCKET")
      ->capture_default_str();
  app.require_subcommand(1);
  app.add_subcommand("stats", "tunnel, job and bridge counts");
  app.add_subcommand("tunnels", "list tunnels");
  std::string tunnel;
  app.add_subcommand("reset", "rebuild a tunnel's bridges")
      ->add_option("tunnel", tunnel)
      ->required();
  if (auto code = ot::config::parseCommandLine(app, argc, argv)) return *code;

  std::fprintf(stderr, "otctl: controld's admin service is not built yet\n");
  return 1;
}
