// Who this process is in the logs, the job leases and the control session: the machine ID and
// region both daemons take from MACHINE_ID / REGION (flags --machine-id / --region) and STATE_DIR.
//
// Without MACHINE_ID the ID is the one kept in <STATE_DIR>/machine-id: made on the first start (a
// random "m-" + 12 hex digits, written to a private temporary file and linked into place, so two
// daemons starting at once in one state directory end up with the same ID) and read back on every
// start after. controld and relayd given the same STATE_DIR therefore share one ID, and a
// restarted controld keeps its ID, so it takes its own job leases back at once.
#pragma once

#include <string>
#include <string_view>

#include "common/cli_fwd.h"
#include "common/result.h"

namespace ot {

inline constexpr std::string_view kMachineIdFile = "machine-id";

struct MachineIdentitySettings {
  std::string machineId;  // MACHINE_ID; empty: kept in <stateDir>/machine-id
  std::string region = "local";
  std::string stateDir = ".";
};

// --machine-id / MACHINE_ID, --region / REGION and --state-dir / STATE_DIR, with their checks.
// `stateDirHelp` says what else the daemon keeps there.
void addMachineIdentityOptions(CLI::App& app, MachineIdentitySettings& settings,
                               const std::string& stateDirHelp);

// An ID or region we accept: 1 to 64 of [A-Za-z0-9._-] (it goes into logs, leases and labels).
[[nodiscard]] bool validMachineName(std::string_view name);

// The configured ID when set; otherwise the one kept in <stateDir>/machine-id, made (with the
// directory, 0700 when missing) on the first start. kInvalid when the file holds something that is
// not an ID; kUnavailable when it cannot be read or made (the message names the path and says
// MACHINE_ID avoids the file).
[[nodiscard]] Result<std::string> resolveMachineId(const MachineIdentitySettings& settings);

}  // namespace ot
