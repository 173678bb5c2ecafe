// relayd: the data plane. This entry point only wires configuration to the parts that exist.
#include <cstdio>

#include "relayd/relayd_config.h"

int main(int argc, char** argv) {
  ot::relayd::RelaydConfig config;
  CLI::App app{"relayd: OpenTunnel's data plane (SNI routing, bridges, visitor splicing)"};
  ot::relayd::addRelaydFlags(app, config);
  if (auto code = ot::config::parseCommandLine(app, argc, argv)) return *code;

  // The data plane is built under its own issue; refuse to pretend to serve until then.
  std::fprintf(stderr, "relayd: configuration is valid, but the data plane is not built yet\n");
  return 1;
}
