// controld's offline `export FILE` and `import FILE [--dry-run]` (docs/backup.md): the same
// Backup as POST /api/admin/{export,import}, run against DATABASE_URL (or --sqlite-path) without
// starting the server. Both migrate the schema first, so a restore can go into an empty database.
// Blocking, for main() only.
//
// Exit codes: 0 done; 1 the export or import failed (storage, a malformed file, I/O); 2 the
// database URL or file cannot be used; 3 the import finished but refused some records (listed
// under "rejected" in the report printed on stdout).
#pragma once

#include <string>

#include "controld/controld_config.h"

namespace ot::controld {

// FILE "-" is stdout. A failure midway leaves the file without its end, never a valid file.
[[nodiscard]] int runExportCommand(const ControldConfig& config, const std::string& file);
// FILE "-" is stdin. Prints the import report (JSON) on stdout.
[[nodiscard]] int runImportCommand(const ControldConfig& config, const std::string& file,
                                   bool dryRun);

}  // namespace ot::controld
