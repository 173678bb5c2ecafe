// otctl's command groups, one file each. Each adds its subcommands to the app; the one the command
// line names sets `action`, which main runs once connected.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "otctl/client.h"

namespace ot::otctl {

using Action = std::function<int(Client& client)>;

void addStatsCommands(CLI::App& app, Action& action);   // stats, mesh
void addTunnelCommands(CLI::App& app, Action& action);  // tunnels list|show|delete, certs
void addBridgeCommands(CLI::App& app, Action& action);  // bridges, reset, drain
void addJobCommands(CLI::App& app, Action& action);     // jobs list|retry
void addBackupCommands(CLI::App& app, Action& action);  // export, import
void addUsageCommands(CLI::App& app, Action& action);   // usage
void addStatusCommands(CLI::App& app, Action& action);  // status

}  // namespace ot::otctl
