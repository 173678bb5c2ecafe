// controld: the control plane. Parses its flags (or runs the account-key, export or import
// subcommand), blocks the shutdown signals before any thread starts, sets up logging and runs
// ControldServer (controld_server.h), which builds, serves and stops every part (see
// docs/architecture.md).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <utility>

#include "common/log.h"
#include "common/machine_identity.h"
#include "controld/acme/acme_jws.h"
#include "controld/admin/backup_commands.h"
#include "controld/controld_config.h"
#include "controld/controld_server.h"
#include "controld/shutdown_signals.h"

int main(int argc, char** argv) {
  using namespace ot::controld;
  ControldConfig config;
  CLI::App app{"controld: OpenTunnel's control plane (HTTP API, storage, issuance, gRPC)"};
  addControldFlags(app, config);
  CLI::App* accountKey =
      app.add_subcommand("account-key", "print a new ACME account key (a P-256 private JWK)");
  std::string backupFile;
  bool dryRun = false;
  CLI::App* exportCommand = app.add_subcommand(
      "export", "write every tunnel record to FILE (docs/backup.md) and exit; - is stdout");
  exportCommand->add_option("file", backupFile, "the backup file to write")->required();
  CLI::App* importCommand = app.add_subcommand(
      "import", "write the records of FILE (an export) into the database and exit; - is stdin");
  importCommand->add_option("file", backupFile, "the backup file to read")->required();
  importCommand->add_flag("--dry-run", dryRun, "check and count every record, write nothing");
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
  // Offline: no server, no signals; plain stderr lines.
  if (exportCommand->parsed()) return runExportCommand(config, backupFile);
  if (importCommand->parsed()) return runImportCommand(config, backupFile, dryRun);

  const ShutdownSignals signals = ShutdownSignals::block();
  // Machine and region go on every line from here on (the fields are added once, here).
  auto machineId = ot::resolveMachineId(config.identity);
  if (!machineId.ok()) {
    std::fprintf(stderr, "controld: %s\n", machineId.error().message.c_str());
    return 2;
  }
  config.identity.machineId = std::move(machineId).value();
  ot::log::init({.format = *ot::log::parseFormat(config.logFormat),
                 .level = *ot::log::parseLevel(config.logLevel),
                 .target = "controld",
                 .trailingFields = {{"machine", config.identity.machineId},
                                    {"region", config.identity.region}}});
  ControldServer server(std::move(config), signals);
  return server.run();
}
