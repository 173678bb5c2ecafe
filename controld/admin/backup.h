// Export and import of the tunnels table (the backup file; docs/operations.md "Backup and
// restore"): the one interface the HTTP admin routes, the Admin gRPC service and controld's offline
// `export` / `import` commands share, so all three write and read the same file by the same code.
//
// Both directions block on storage: call them from a worker thread, never from an I/O loop.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace ot::controld {

struct ExportOptions {
  // Leave deleted tunnels out; by default the file holds every record so that it is a whole backup.
  bool excludeDeleted = false;
};

// Takes the file's next bytes, as soon as they exist, and how many records end in them (for
// progress). Returns false when whoever reads has gone: the export stops and fails.
using ExportSink = std::function<bool(std::string_view bytes, uint32_t records)>;

struct ImportOptions {
  // Check every record and count what would happen, but write nothing.
  bool dryRun = false;
};

struct RejectedImport {
  std::string tunnelId;  // as the file gave it ("" when it had none)
  std::string reason;    // e.g. "hostname is not <id>.<domain>"
};

struct ImportReport {
  uint64_t inserted = 0;   // tunnels storage did not have
  uint64_t refreshed = 0;  // replaced a row still exactly as an earlier import left it
  uint64_t unchanged = 0;  // equal to what storage holds
  uint64_t skipped = 0;    // the server changed that tunnel since it was imported: left alone
  std::vector<RejectedImport> rejected;  // not what the server itself could have written
};

// One import in progress, fed the file in pieces of any size as they arrive; complete records are
// checked and written as they are seen, so memory stays bounded whatever the file's size.
class ImportSession {
 public:
  virtual ~ImportSession() = default;
  // The next bytes of the file. An error (malformed file, storage down after retries) ends the
  // import; records written before it stay written.
  virtual Status feed(std::string_view bytes) = 0;
  // The whole file was fed: checks that it ended where a file ends, and reports.
  virtual Result<ImportReport> finish() = 0;
  // Records read so far (for progress).
  [[nodiscard]] virtual uint64_t recordsSeen() const = 0;
};

class Backup {
 public:
  virtual ~Backup() = default;
  // Writes the whole file to `sink`, page by page as storage answers (keyset pages of 500).
  virtual Status exportTo(const ExportOptions& options, const ExportSink& sink) = 0;
  virtual std::unique_ptr<ImportSession> beginImport(const ImportOptions& options) = 0;
};

}  // namespace ot::controld
