// The Store over SOCI, for MySQL/MariaDB and SQLite alike: one class, dialect differences kept
// to a few statements. Owns a pool of sessions (session_pool.h; StoreOptions::poolSize at most):
// a session is opened on first use or by the upkeep, closed when its connection breaks (the next
// use or the upkeep reopens it), and kept, topped up and recycled by the upkeep (maintainPool,
// run every poolUpkeepIntervalMs once startPoolUpkeep() is called). No statement spans more than
// one session and none needs a transaction: every write is a single conditional statement, which
// is what makes several controlds on one database safe. The one exception is an import's batch
// (sql_store_backup.cc), one transaction that locks each row it compares.
//
// SQLite keeps at most kSqlitePoolLimit sessions, kSqliteMinIdle of them while idle: it lets one
// writer in at a time however many sessions wait, and each session holds its own page cache and
// descriptors, so MySQL's 50 would cost memory and buy nothing.
//
// Thread-safe: each call leases a session for its duration. Calls block (database I/O): worker
// threads only. Given a Metrics, every call is timed and its failures counted (store_metrics.h).
#pragma once

#include <soci/session.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "common/periodic_task.h"
#include "controld/store/admin_store.h"
#include "controld/store/database_url.h"
#include "controld/store/session_pool.h"
#include "controld/store/sql_errors.h"
#include "controld/store/sql_schema.h"
#include "controld/store/sql_session_liveness.h"
#include "controld/store/store.h"
#include "controld/store/store_metrics.h"
#include "controld/store/usage_origin_store.h"

namespace ot::controld {

inline constexpr int kSqlitePoolLimit = 16;
inline constexpr int kSqliteMinIdle = 2;

// What one upkeep round did.
struct PoolUpkeepReport {
  int lost = 0;        // idle sessions the server had ended (killed, timed out, restarted)
  int recycled = 0;    // closed at their maximum lifetime
  int idleClosed = 0;  // idle too long beyond the minimum
  int opened = 0;      // opened to reach the idle minimum
  std::string error;   // why opening stopped short, if it did
};

class SqlStore final : public Store,
                       public BackupStore,
                       public AdminStore,
                       public UsageOriginStore {
 public:
  // Validates the options and URL; connects to nothing yet. `metrics` (may be null: no metrics)
  // must outlive the store.
  [[nodiscard]] static Result<std::unique_ptr<SqlStore>> open(const StoreOptions& options,
                                                              metrics::Metrics* metrics = nullptr);

  SqlStore(const DatabaseUrl& url, const StoreOptions& options,
           metrics::Metrics* metrics = nullptr);
  ~SqlStore() override;
  SqlStore(const SqlStore&) = delete;
  SqlStore& operator=(const SqlStore&) = delete;

  [[nodiscard]] SqlDialect dialect() const { return dialect_; }
  [[nodiscard]] const std::string& redactedUrl() const { return redactedUrl_; }

  Status migrate() override;
  // migrate(), saying what it found and did.
  [[nodiscard]] Result<MigrationReport> migrateWithReport();
  [[nodiscard]] PoolStats poolStats() const override { return {open_.load(), inUse_.load()}; }
  void startPoolUpkeep() override;
  // One upkeep round now (the upkeep task runs it every poolUpkeepIntervalMs): closes the idle
  // sessions the server ended, those max_lifetime old and those idle past idle_timeout beyond
  // min_idle, then opens sessions until min_idle are open. Sessions lent to callers are left
  // alone. Blocks while it connects.
  PoolUpkeepReport maintainPool(PoolTime now);
  [[nodiscard]] const PoolLimits& poolLimits() const { return limits_; }
  Status ping() override;

  Result<int64_t> insertTunnel(const TunnelRecord& record) override;
  Result<std::optional<StoredTunnel>> getTunnel(const std::string& id) override;
  Result<int64_t> updateTunnel(const TunnelRecord& record, int64_t expectedRevision) override;
  Result<std::vector<StoredTunnel>> listTunnels(const std::string& afterId, int limit) override;
  Result<std::vector<StoredTunnel>> directTunnels(const std::string& afterId, int limit) override;
  Result<std::vector<StoredTunnel>> dueAlarms(int64_t nowMs, int limit) override;
  Result<bool> clearAlarm(const std::string& id, int64_t alarmAtMs) override;
  Result<std::vector<std::string>> deletedAmong(const std::vector<std::string>& ids) override;

  Result<bool> addJob(const Job& job) override;
  Result<std::optional<Job>> getJob(const std::string& id) override;
  Result<std::optional<Job>> claimJob(const std::string& owner, int64_t nowMs, int64_t leaseMs,
                                      bool includeIssue) override;
  Result<bool> extendLease(const std::string& jobId, const std::string& owner,
                           int64_t leaseUntilMs) override;
  Result<bool> finishJob(const Job& job, const std::string& owner) override;
  Status releaseLeases(const std::string& owner) override;
  Result<int64_t> countJobs(JobStatus status, int64_t sinceMs) override;
  Result<std::vector<Job>> leasedJobs(int64_t nowMs, int limit) override;
  Result<std::vector<Job>> failedJobs(JobKind kind, const std::string& errorPrefix,
                                      const std::string& afterId, int limit) override;
  Result<bool> requeueFailedJob(const std::string& id, const std::string& expectedLastError,
                                const std::string& lastError, int64_t nowMs) override;

  Result<std::optional<std::string>> getMeta(const std::string& key) override;
  Result<bool> insertMetaIfAbsent(const std::string& key, const std::string& value) override;
  Result<bool> compareAndSetMeta(const std::string& key, const std::string& expected,
                                 const std::string& value) override;

  Result<std::optional<ServerCertificate>> getServerCertificate(const std::string& domain) override;
  Status putServerCertificate(const ServerCertificate& certificate) override;

  Result<RateDecision> acquireRate(const std::string& key, int64_t nowMs, int64_t intervalMs,
                                   int64_t burst) override;
  Result<int64_t> pruneRates(int64_t nowMs, int limit) override;

  Status addUsage(const std::string& tunnelId, int64_t hourStartMs, int64_t bytesIn,
                  int64_t bytesOut, int64_t connections) override;
  Result<std::vector<UsageHour>> usageHours(const std::string& tunnelId, int64_t fromMs,
                                            int64_t toMs) override;  // sql_store_usage.cc
  // UsageOriginStore (sql_store_usage.cc)
  Status addOriginUsage(const std::string& tunnelId, int64_t hourStartMs, const std::string& origin,
                        int64_t bytesIn, int64_t bytesOut, int64_t connections) override;
  Result<std::vector<UsageOriginHour>> usageOriginHours(const std::string& tunnelId, int64_t fromMs,
                                                        int64_t toMs) override;

  Result<RecordCounts> recordCounts(int64_t nowMs) override;

  BackupStore* backupStore() override { return this; }
  Result<std::vector<RawTunnelRow>> exportTunnels(const std::string& afterId, int limit,
                                                  bool excludeDeleted) override;
  Result<std::vector<ImportOutcome>> importTunnels(const std::vector<ImportRow>& rows,
                                                   bool dryRun) override;
  Result<std::vector<StoredTunnel>> tunnelPage(const TunnelPageQuery& query) override;
  Result<std::vector<Job>> jobPage(const JobPageQuery& query) override;

 private:
  // The one path every Store method takes to the database: runs leased(operation, fn), timing
  // it and counting its failure under `operation` (the method's name) when metrics are on.
  template <typename T, typename Fn>
  Result<T> run(const char* operation, Fn&& fn);

  // Leases a session (bounded by acquire_timeout_ms), opens it if needed, runs fn(session) and
  // turns what it throws into an Error; a broken connection is closed for the next lease to
  // reopen. fn returns Result<T>.
  template <typename T, typename Fn>
  Result<T> leased(const char* operation, Fn&& fn);

  // Opens the session and applies per-connection settings (timeouts, TLS checks, WAL). Leaves
  // the session closed when anything fails (and throws what SOCI threw).
  Status connect(soci::session& sql);

  // Closes an open session of a lent slot and counts it gone.
  void closeSession(soci::session& sql);
  // One upkeep round on the clock, logged.
  std::chrono::milliseconds upkeepRound();

  DatabaseUrl url_;
  SqlDialect dialect_;
  std::string connectString_;  // holds the password
  std::string redactedUrl_;
  StoreOptions options_;
  PoolLimits limits_;
  SessionPool pool_;
  std::atomic<int64_t> open_{0};   // sessions connected (connect() succeeded, not yet closed)
  std::atomic<int64_t> inUse_{0};  // sessions leased to a call right now
  std::unique_ptr<StoreMetrics> metrics_;  // null: calls are not measured
  PeriodicTask upkeep_;                    // last: stopped before the pool goes
};

template <typename T, typename Fn>
Result<T> SqlStore::run(const char* operation, Fn&& fn) {
  if (metrics_ == nullptr) return leased<T>(operation, std::forward<Fn>(fn));
  const auto started = std::chrono::steady_clock::now();
  Result<T> result = leased<T>(operation, std::forward<Fn>(fn));
  metrics_->observe(operation, std::chrono::steady_clock::now() - started, !result.ok());
  return result;
}

template <typename T, typename Fn>
Result<T> SqlStore::leased(const char* operation, Fn&& fn) {
  const int64_t waitMs = std::clamp<int64_t>(options_.acquireTimeoutMs, 0, 3'600'000);
  const std::optional<std::size_t> slot = pool_.acquire(std::chrono::milliseconds(waitMs));
  if (!slot) return Error{ErrorKind::kUnavailable, "storage unavailable: no free connection"};
  ++inUse_;
  struct GiveBack {
    SessionPool& pool;
    std::size_t slot;
    std::atomic<int64_t>& inUse;
    ~GiveBack() {
      --inUse;
      pool.release(slot, std::chrono::steady_clock::now());
    }
  } giveBack{pool_, *slot, inUse_};
  soci::session& sql = pool_.session(*slot);
  // A session kept from before a server restart is dead. It is found out here, before anything
  // is sent (a look at the socket, no round trip), and replaced, so a recovered server costs
  // callers nothing. A statement that fails once sent is never tried again: "lost connection
  // during query" does not say whether the server ran it, and claimJob, finishJob or
  // compareAndSetMeta must not run twice. The caller gets the error and decides.
  try {
    if (sql.get_backend() != nullptr && serverEndedSession(sql)) closeSession(sql);
    if (sql.get_backend() == nullptr) {
      Status connected = connect(sql);
      if (!connected) {
        return Error{connected.error().kind,
                     std::string(operation) + ": " + connected.error().message};
      }
      ++open_;
      pool_.times(*slot).openedAt = std::chrono::steady_clock::now();
    }
    return fn(sql);
  } catch (const std::exception& error) {
    SqlFailure failure = classifySqlFailure(error);
    // connect() closes what it opened when it fails, so only a counted session is open here.
    if (failure.dropConnection && sql.get_backend() != nullptr) closeSession(sql);
    return Error{failure.kind, std::string(operation) + ": " + failure.message};
  }
}

}  // namespace ot::controld
