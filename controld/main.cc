// controld: the control plane. This entry point only wires configuration to the parts that exist.
#include <cstdio>

#include "controld/controld_config.h"

int main(int argc, char** argv) {
  ot::controld::ControldConfig config;
  CLI::App app{"controld: OpenTunnel's control plane (HTTP API, storage, issuance, gRPC)"};
  ot::controld::addControldFlags(app, config);
  if (auto code = ot::config::parseCommandLine(app, argc, argv)) return *code;

  std::fprintf(stderr, "controld: configuration is valid, but the control plane is not built yet\n");
  return 1;
}
