#include "controld/admin/backup.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "controld/admin/backup_file.h"
#include "controld/admin/import_checks.h"
#include "controld/store/store.h"

namespace ot::controld {
namespace {

using Json = nlohmann::ordered_json;

void shorten(std::string& text, size_t limit) {
  if (text.size() <= limit) return;
  text.resize(limit);
  text += "...";
}

class StoreImportSession final : public ImportSession {
 public:
  StoreImportSession(BackupStore& store, const std::string& domain, ImportOptions options)
      : store_(store), domain_(domain), options_(options) {
    report_.dryRun = options.dryRun;
    batch_.reserve(kBackupBatch);
  }

  Status feed(std::string_view bytes) override {
    if (!failure_.message.empty()) return failure_;
    texts_.clear();
    Status fed = reader_.feed(bytes, texts_);
    // Records complete before a malformed spot are still imported: the file's order is the
    // order of writing, and the error says where it stopped.
    for (const std::string& text : texts_) {
      if (Status added = add(text); !added) return fail(added.error());
    }
    if (!fed) return fail(fed.error());
    return Ok{};
  }

  Result<ImportReport> finish() override {
    if (!failure_.message.empty()) return failure_;
    if (Status ended = reader_.finish(); !ended) return fail(ended.error());
    if (Status flushed = flush(); !flushed) return fail(flushed.error());
    return report_;
  }

  [[nodiscard]] uint64_t recordsSeen() const override { return reader_.recordsSeen(); }

 private:
  Error fail(Error error) {
    failure_ = std::move(error);
    return failure_;
  }

  void reject(std::string id, std::string reason) {
    if (report_.rejected.size() >= kMaxListedRejections) {
      ++report_.rejectedUnlisted;
      return;
    }
    // Both may quote the file, whose records reach 256 KiB: the list stays small whatever it says.
    shorten(id, 100);
    shorten(reason, 300);
    report_.rejected.push_back({std::move(id), std::move(reason)});
  }

  Status add(const std::string& text) {
    ParsedBackupRecord parsed = parseBackupRecord(text);
    if (!parsed.error.empty()) {
      reject(std::move(parsed.row.id), std::move(parsed.error));
      return Ok{};
    }
    Result<TunnelRecord> record = checkImportedRecord(parsed.row, domain_);
    if (!record) {
      reject(std::move(parsed.row.id), record.error().message);
      return Ok{};
    }
    batch_.push_back({std::move(record).value(), parsed.row.revision});
    if (batch_.size() >= static_cast<size_t>(kBackupBatch)) return flush();
    return Ok{};
  }

  Status flush() {
    if (batch_.empty()) return Ok{};
    auto outcomes = store_.importTunnels(batch_, options_.dryRun);
    if (!outcomes) return outcomes.error();
    for (ImportOutcome outcome : *outcomes) {
      switch (outcome) {
        case ImportOutcome::kInserted:
          ++report_.inserted;
          break;
        case ImportOutcome::kRefreshed:
          ++report_.refreshed;
          break;
        case ImportOutcome::kUnchanged:
          ++report_.unchanged;
          break;
        case ImportOutcome::kSkipped:
          ++report_.skipped;
          break;
      }
    }
    batch_.clear();
    return Ok{};
  }

  BackupStore& store_;
  const std::string& domain_;
  const ImportOptions options_;
  BackupReader reader_;
  std::vector<std::string> texts_;
  std::vector<ImportRow> batch_;
  ImportReport report_;
  Error failure_;  // empty message: none yet
};

class StoreBackup final : public Backup {
 public:
  StoreBackup(BackupStore& store, std::string domain) : store_(store), domain_(std::move(domain)) {}

  Status exportTo(const ExportOptions& options, const ExportSink& sink) override {
    // The opening goes out before the first page is read, so a reader sees bytes at once.
    if (!sink(BackupWriter::begin(), 0)) return gone();
    BackupWriter writer;
    std::string after;
    std::string out;
    for (;;) {
      auto page = store_.exportTunnels(after, kBackupBatch, options.excludeDeleted);
      if (!page) return page.error();
      out.clear();
      for (const RawTunnelRow& row : *page)
        writer.record({row.id, row.recordJson, row.revision}, out);
      if (!page->empty() && !sink(out, static_cast<uint32_t>(page->size()))) return gone();
      if (page->size() < static_cast<size_t>(kBackupBatch)) break;
      after = page->back().id;
    }
    if (!sink(BackupWriter::end(), 0)) return gone();
    return Ok{};
  }

  std::unique_ptr<ImportSession> beginImport(const ImportOptions& options) override {
    return std::make_unique<StoreImportSession>(store_, domain_, options);
  }

 private:
  static Error gone() { return Error{ErrorKind::kUnavailable, "the export's reader went away"}; }

  BackupStore& store_;
  const std::string domain_;
};

}  // namespace

std::string importReportJson(const ImportReport& report) {
  Json rejected = Json::array();
  for (const RejectedImport& r : report.rejected) {
    rejected.push_back({{"id", r.tunnelId}, {"reason", r.reason}});
  }
  const Json json = {{"dry_run", report.dryRun},
                     {"inserted", report.inserted},
                     {"refreshed", report.refreshed},
                     {"unchanged", report.unchanged},
                     {"skipped", report.skipped},
                     {"rejected", std::move(rejected)},
                     {"rejected_unlisted", report.rejectedUnlisted}};
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::unique_ptr<Backup> makeBackup(BackupStore& store, std::string domain) {
  return std::make_unique<StoreBackup>(store, std::move(domain));
}

}  // namespace ot::controld
