// controld: the control plane. Parses its flags (or runs the account-key subcommand), blocks the
// shutdown signals before any thread starts, sets up logging and runs ControldServer
// (controld_server.h), which builds, serves and stops every part (see docs/architecture.md).
#include <cstdio>
#include <string>
#include <utility>

#include "common/crypto.h"
#include "common/log.h"
#include "controld/acme/acme_jws.h"
#include "controld/controld_config.h"
#include "controld/controld_server.h"
#include "controld/shutdown_signals.h"

namespace {

std::string randomMachineId() {
  auto bytes = ot::crypto::randomBytes(6);
  return "controld-" + (bytes ? ot::crypto::toHex(*bytes) : std::string("unknown"));
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ot::controld;
  ControldConfig config;
  CLI::App app{"controld: OpenTunnel's control plane (HTTP API, storage, issuance, gRPC)"};
  addControldFlags(app, config);
  CLI::App* accountKey =
      app.add_subcommand("account-key", "print a new ACME account key (a P-256 private JWK)");
  app.require_subcommand(0, 1);
  if (auto code = ot::config::parseCommandLine(app, argc, argv)) return *code;
  if (accountKey->parsed()) {
    auto jwk = jws::generateAccountKeyJwk();
    if (!jwk) {
      std::fprintf(stderr, "cannot make a key: %s\n", jwk.error().message.c_str());
      return 1;
    }
    std::printf("%s\n", jwk->c_str());
    return 0;
  }

  const ShutdownSignals signals = ShutdownSignals::block();
  if (config.machineId.empty()) config.machineId = randomMachineId();
  ot::log::init({.format = *ot::log::parseFormat(config.logFormat),
                 .level = *ot::log::parseLevel(config.logLevel),
                 .target = "controld",
                 .trailingFields = {{"machine", config.machineId}}});
  ControldServer server(std::move(config), signals);
  return server.run();
}
