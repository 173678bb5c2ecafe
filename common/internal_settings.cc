#include "common/internal_settings.h"

#include <CLI/CLI.hpp>

namespace ot::mesh {

void addInternalOptions(CLI::App& app, config::ListenAddress& listen, std::string& token,
                        std::string& address) {
  config::addListenOption(app, "--internal-listen", "INTERNAL_LISTEN", listen,
                          "the internal address other machines reach (relayd listens on it and "
                          "hands mesh links to controld); off runs one machine without the mesh");
  app.add_option("--internal-token", token,
                 "secret shared by every machine, at least 32 bytes; required with "
                 "INTERNAL_LISTEN; only proven on the wire, never sent")
      ->envname("INTERNAL_TOKEN");
  app.add_option("--internal-address", address,
                 "ip:port where other machines reach this one (default: INTERNAL_LISTEN's); "
                 "mesh links and forwarded visitors leave from its IP")
      ->envname("INTERNAL_ADDRESS");
}

std::string checkInternalListen(const config::ListenAddress& listen, std::string_view token) {
  if (!listen.enabled()) return {};
  if (listen.kind != config::ListenAddress::Kind::kTcp) {
    return "INTERNAL_LISTEN must be a TCP address (host:port), not a unix socket";
  }
  if (token.empty()) {
    return "INTERNAL_TOKEN is required with INTERNAL_LISTEN (the secret every machine shares; "
           "openssl rand -hex 32 makes one)";
  }
  if (token.size() < kMinInternalTokenBytes) {
    return "INTERNAL_TOKEN is too short: at least " + std::to_string(kMinInternalTokenBytes) +
           " bytes";
  }
  return {};
}

}  // namespace ot::mesh
