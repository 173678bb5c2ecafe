#include "controld/admin/backup_commands.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "controld/admin/backup.h"
#include "controld/store/store.h"

namespace ot::controld {
namespace {

struct OpenedBackup {
  std::unique_ptr<Store> store;
  std::unique_ptr<Backup> backup;
};

// Opens and migrates the store at the configured URL: 2 when that fails.
std::optional<int> openBackup(const ControldConfig& config, OpenedBackup& out) {
  StoreOptions options;
  options.url = config.databaseUrl;
  options.sqlitePath = config.sqlitePath;
  options.poolSize = 2;
  options.poolMinIdle = 1;
  auto store = openStore(options);
  if (!store) {
    std::fprintf(stderr, "controld: cannot open the database: %s\n", store.error().message.c_str());
    return 2;
  }
  out.store = std::move(store).value();
  if (Status migrated = out.store->migrate(); !migrated) {
    std::fprintf(stderr, "controld: database: %s\n", migrated.error().message.c_str());
    return 2;
  }
  BackupStore* backupStore = out.store->backupStore();
  if (backupStore == nullptr) {
    std::fprintf(stderr, "controld: this database has no export/import\n");
    return 2;
  }
  out.backup = makeBackup(*backupStore, config.domain);
  return std::nullopt;
}

bool writeAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int runExportCommand(const ControldConfig& config, const std::string& file) {
  OpenedBackup opened;
  if (auto code = openBackup(config, opened)) return *code;
  const bool toStdout = file == "-";
  // The file holds token hashes: readable by its owner only.
  const int fd = toStdout ? STDOUT_FILENO
                          : ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::fprintf(stderr, "controld: cannot write %s: %s\n", file.c_str(), std::strerror(errno));
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  uint64_t records = 0;
  uint64_t bytes = 0;
  bool writeFailed = false;
  const Status exported = opened.backup->exportTo({}, [&](std::string_view chunk, uint32_t count) {
    if (!writeAll(fd, chunk)) {
      writeFailed = true;
      return false;
    }
    records += count;
    bytes += chunk.size();
    return true;
  });
  const bool closed = toStdout || ::close(fd) == 0;
  if (!exported || !closed) {
    std::fprintf(stderr, "controld: export failed after %llu records: %s\n",
                 static_cast<unsigned long long>(records),
                 writeFailed || !closed ? std::strerror(errno) : exported.error().message.c_str());
    return 1;
  }
  std::fprintf(stderr, "controld: exported %llu records (%llu bytes) in %.2f s\n",
               static_cast<unsigned long long>(records), static_cast<unsigned long long>(bytes),
               secondsSince(start));
  return 0;
}

int runImportCommand(const ControldConfig& config, const std::string& file, bool dryRun) {
  OpenedBackup opened;
  if (auto code = openBackup(config, opened)) return *code;
  const bool fromStdin = file == "-";
  const int fd = fromStdin ? STDIN_FILENO : ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::fprintf(stderr, "controld: cannot read %s: %s\n", file.c_str(), std::strerror(errno));
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  auto session = opened.backup->beginImport({.dryRun = dryRun});
  std::vector<char> buffer(64 * 1024);
  Status fed = Ok{};
  for (;;) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      fed = Error{ErrorKind::kUnavailable, std::string("read: ") + std::strerror(errno)};
      break;
    }
    if (n == 0) break;
    fed = session->feed({buffer.data(), static_cast<size_t>(n)});
    if (!fed) break;
  }
  if (!fromStdin) ::close(fd);
  if (!fed) {
    std::fprintf(stderr, "controld: import failed after %llu records: %s\n",
                 static_cast<unsigned long long>(session->recordsSeen()),
                 fed.error().message.c_str());
    return 1;
  }
  auto report = session->finish();
  if (!report) {
    std::fprintf(stderr, "controld: import failed after %llu records: %s\n",
                 static_cast<unsigned long long>(session->recordsSeen()),
                 report.error().message.c_str());
    return 1;
  }
  std::printf("%s\n", importReportJson(*report).c_str());
  std::fprintf(stderr, "controld: imported %llu records in %.2f s%s\n",
               static_cast<unsigned long long>(session->recordsSeen()), secondsSince(start),
               dryRun ? " (dry run: nothing written)" : "");
  const bool refused = !report->rejected.empty() || report->rejectedUnlisted > 0;
  return refused ? 3 : 0;
}

}  // namespace ot::controld
