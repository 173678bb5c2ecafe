// otunnel: the tunnel client (the origin half). This entry point only parses its command line
// until the client issue lands.
#include <cstdio>
#include <string>
#include <vector>

#include "common/config.h"

int main(int argc, char** argv) {
  std::string server = "https://opentunnel.localhost:8443";
  std::string ca_file;
  std::vector<std::string> routes;
  int links = 2;
  uint16_t port = 0;

  CLI::App app{"otunnel: expose a local port at https://<id>.<domain>"};
  app.add_option("--server", server, "the OpenTunnel service")
      ->envname("OTUNNEL_SERVER")
      ->capture_default_str();
  app.add_option("--ca-file", ca_file, "extra CA certificate to trust (a local development CA)")
      ->envname("OTUNNEL_CA_FILE");
  app.add_option("--links", links, "bridges to keep open")->check(CLI::Range(1, 16));
  app.require_subcommand(1);
  auto* http = app.add_subcommand("http", "terminate visitors' TLS here and forward plain HTTP");
  http->add_option("port", port, "local port")->required()->check(CLI::Range(1, 65535));
  http->add_option("--route", routes, "name=port: serve <name>.<id>.<domain> from another port");
  auto* tls = app.add_subcommand("tls", "pass visitors' TLS through to a local TLS server");
  tls->add_option("port", port, "local port")->required()->check(CLI::Range(1, 65535));
  if (auto code = ot::config::parseCommandLine(app, argc, argv)) return *code;

  std::fprintf(stderr, "otunnel: the client is not built yet\n");
  return 1;
}
