// Export and import of the tunnels table (the backup file; docs/operations.md "Backup and
// restore"): the one interface the HTTP admin routes, the Admin gRPC service and controld's offline
// `export` / `import` commands share, so all three write and read the same file by the same code.
//
// Both directions block on storage: call them from a worker thread, never from an I/O loop.
#pragma once

#include <cstddef>
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
  // Rejections beyond kMaxListedRejections are counted here instead of listed, so that a hostile
  // file of a million bad records cannot grow the report without bound.
  uint64_t rejectedUnlisted = 0;
  bool dryRun = false;  // nothing was written: the counts say what would have happened
};

inline constexpr size_t kMaxListedRejections = 10'000;

// The report as the API answers it (docs/api.md "Admin"): {"dry_run", "inserted", "refreshed",
// "unchanged", "skipped", "rejected": [{"id", "reason"}], "rejected_unlisted"}.
[[nodiscard]] std::string importReportJson(const ImportReport& report);

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

class BackupStore;

// Records are imported in transactions of this many (and exported in pages of as many).
inline constexpr int kBackupBatch = 500;

// The Backup over a store's export and import (BackupStore, sql_store_backup.cc), checking every
// imported record for `domain` (import_checks.h). The store must outlive it and its sessions.
[[nodiscard]] std::unique_ptr<Backup> makeBackup(BackupStore& store, std::string domain);

}  // namespace ot::controld
