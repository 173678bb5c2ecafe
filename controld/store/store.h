// The storage interface of controld. Two implementations share it through SOCI: MySQL (MariaDB
// in tests) and embedded SQLite. Every method blocks on the database, so it is called from worker
// threads only, never from an I/O loop; each is safe to call from several threads at once.
// Failures come back as values: kUnavailable/kTimeout when the database cannot answer (the API
// maps them to 503), kConflict when a revision changed underneath (reload, answer 503).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "controld/store/tunnel_record.h"

namespace ot::metrics {
class Metrics;
}

namespace ot::controld {

struct StoredTunnel {
  TunnelRecord record;
  int64_t revision = 0;  // bumped by every write; writes name the revision they read
};

enum class JobKind { kIssue, kRenew, kServer };
enum class JobStatus { kPending, kDone, kFailed, kAbandoned };
[[nodiscard]] const char* jobKindName(JobKind kind);
[[nodiscard]] const char* jobStatusName(JobStatus status);
[[nodiscard]] std::optional<JobKind> parseJobKind(std::string_view name);
[[nodiscard]] std::optional<JobStatus> parseJobStatus(std::string_view name);

struct Job {
  std::string id;  // keyed by certificate ID, so adding the same job twice adds it once
  JobKind kind = JobKind::kIssue;
  std::string tunnelId;  // empty for the API domain's own certificate
  JobStatus status = JobStatus::kPending;
  int attempts = 0;
  int64_t queuedAtMs = 0;
  int64_t nextRunAtMs = 0;
  std::string leaseOwner;  // empty when not leased
  int64_t leaseUntilMs = 0;
  std::string lastError;
};

// A new job, pending and due now (issuance when a CSR is bound or reconciled, renewal, the API
// domain's certificate with an empty tunnel ID). Pure.
[[nodiscard]] Job pendingJob(JobKind kind, std::string id, std::string tunnelId, int64_t nowMs);

// The name a job asks the CA for: <tunnel>.<domain>, or the domain itself for the API domain's
// own certificate; empty for a tunnel job without a tunnel ID. Pure.
[[nodiscard]] std::string jobHostname(const Job& job, const std::string& domain);

struct ServerCertificate {
  std::string domain;
  std::string keyPem;
  std::string csrPem;
  std::string chainPem;
  int64_t notAfterMs = 0;
};

// GCRA: the time at which a key's budget is full again. A request passes while that time is at
// most (burst - 1) * interval ahead of now, and pushes it one interval further.
struct RateDecision {
  bool allowed = false;
  int64_t retryAfterMs = 0;  // when refused
};

// Database connections a store holds (open) and how many are lent to a call right now.
struct PoolStats {
  int64_t open = 0;
  int64_t inUse = 0;
};

// The store's roles. Each consumer names the roles it uses (LocalCa and the cool-down gate take a
// MetaStore, the usage recorder a UsageStore, TunnelService its TunnelServiceStores, ...), so a
// test fake implements those roles alone;
// Store is their union, which SqlStore implements.

// Tunnels. insertTunnel answers kConflict when the ID exists.
class TunnelStore {
 public:
  virtual ~TunnelStore() = default;
  virtual Result<int64_t> insertTunnel(const TunnelRecord& record) = 0;
  virtual Result<std::optional<StoredTunnel>> getTunnel(const std::string& id) = 0;
  // Writes the record if the row is still at expected_revision; kConflict otherwise. Returns the
  // new revision.
  virtual Result<int64_t> updateTunnel(const TunnelRecord& record, int64_t expectedRevision) = 0;
  virtual Result<std::vector<StoredTunnel>> listTunnels(const std::string& afterId, int limit) = 0;
  // Tunnels not deleted whose record may name a direct target (docs/pools-direct.md), by id after
  // `afterId`: a relay that starts a session must hear of them though it holds none of their
  // bridges. The store filters on the record's text, so a caller checks the parsed record.
  virtual Result<std::vector<StoredTunnel>> directTunnels(const std::string& afterId,
                                                          int limit) = 0;
  // Renewal alarms due at or before now. clearAlarm fires an alarm once across processes: it
  // succeeds only if alarm_at still holds the value that was read.
  virtual Result<std::vector<StoredTunnel>> dueAlarms(int64_t nowMs, int limit) = 0;
  virtual Result<bool> clearAlarm(const std::string& id, int64_t alarmAtMs) = 0;
  // Of `ids`, those whose row says the tunnel is deleted, in one query per kDeletedAmongBatch IDs
  // (a mesh link came up: were tunnels with a bridge here deleted while events were lost?). IDs
  // the store does not have are not named: only a deletion it records counts.
  static constexpr size_t kDeletedAmongBatch = 500;
  virtual Result<std::vector<std::string>> deletedAmong(const std::vector<std::string>& ids) = 0;
};

// Certificate jobs. addJob inserts if absent (true when this call added it).
class JobStore {
 public:
  virtual ~JobStore() = default;
  virtual Result<bool> addJob(const Job& job) = 0;
  virtual Result<std::optional<Job>> getJob(const std::string& id) = 0;
  // Claims one due pending job (renewals and server jobs before first issuance unless
  // include_issue is false) with a lease; takes over expired leases.
  virtual Result<std::optional<Job>> claimJob(const std::string& owner, int64_t nowMs,
                                              int64_t leaseMs, bool includeIssue) = 0;
  virtual Result<bool> extendLease(const std::string& jobId, const std::string& owner,
                                   int64_t leaseUntilMs) = 0;
  // Records the outcome only if `owner` still holds the lease (false otherwise).
  virtual Result<bool> finishJob(const Job& job, const std::string& owner) = 0;
  virtual Status releaseLeases(const std::string& owner) = 0;
  // Jobs in `status` whose next_run_at is at or after `since_ms` (0: all). A finished job's
  // next_run_at is when it finished, so this also counts "failed in the last 24 h".
  virtual Result<int64_t> countJobs(JobStatus status, int64_t sinceMs) = 0;
  // Pending jobs whose lease runs past now, on any machine: the attempts running in the cluster.
  // At most `limit`, by ID.
  virtual Result<std::vector<Job>> leasedJobs(int64_t nowMs, int limit) = 0;

  // The reconcile's second chance for first issuance (job_policy.h, requeueable):
  // failed jobs of `kind` whose last_error starts with `errorPrefix` and whose ID sorts after
  // `afterId`, at most `limit`, by ID.
  virtual Result<std::vector<Job>> failedJobs(JobKind kind, const std::string& errorPrefix,
                                              const std::string& afterId, int limit) = 0;
  // Compare-and-set from failed (with exactly `expectedLastError`) to pending: due at now_ms
  // with a fresh retry window (queued_at now, no attempts, no lease) and `lastError`. false
  // when the row is no longer that failed job (another machine requeued it first).
  virtual Result<bool> requeueFailedJob(const std::string& id, const std::string& expectedLastError,
                                        const std::string& lastError, int64_t nowMs) = 0;
};

// Meta: small key/value rows (the local CA, the API certificate's job, cool-downs, leases).
class MetaStore {
 public:
  virtual ~MetaStore() = default;
  virtual Result<std::optional<std::string>> getMeta(const std::string& key) = 0;
  virtual Result<bool> insertMetaIfAbsent(const std::string& key, const std::string& value) = 0;
  virtual Result<bool> compareAndSetMeta(const std::string& key, const std::string& expected,
                                         const std::string& value) = 0;
};

// The API domain's certificate.
class CertificateStore {
 public:
  virtual ~CertificateStore() = default;
  virtual Result<std::optional<ServerCertificate>> getServerCertificate(
      const std::string& domain) = 0;
  virtual Status putServerCertificate(const ServerCertificate& certificate) = 0;
};

// The API's rate limits (GCRA, see RateDecision).
class RateLimitStore {
 public:
  virtual ~RateLimitStore() = default;
  virtual Result<RateDecision> acquireRate(const std::string& key, int64_t nowMs,
                                           int64_t intervalMs, int64_t burst) = 0;
  // Deletes at most `limit` keys whose budget is full again at now_ms (full_at <= now: such a
  // row says what no row says), oldest first; answers how many it deleted.
  virtual Result<int64_t> pruneRates(int64_t nowMs, int limit) = 0;
};

// One tunnel's usage in one UTC hour, as stored.
struct UsageHour {
  int64_t hourStartMs = 0;
  int64_t bytesIn = 0;
  int64_t bytesOut = 0;
  int64_t connections = 0;
  bool operator==(const UsageHour&) const = default;
};

// Hourly usage per tunnel, added to (never overwritten) so several relays can report.
class UsageStore {
 public:
  virtual ~UsageStore() = default;
  virtual Status addUsage(const std::string& tunnelId, int64_t hourStartMs, int64_t bytesIn,
                          int64_t bytesOut, int64_t connections) = 0;
  // The tunnel's hours with from_ms <= hour_start < to_ms, oldest first (GET
  // /api/tunnel/{id}/usage). The caller bounds the window: a row per hour at most.
  virtual Result<std::vector<UsageHour>> usageHours(const std::string& tunnelId, int64_t fromMs,
                                                    int64_t toMs) = 0;
};

// Readiness: whether the database answers at all.
class HealthStore {
 public:
  virtual ~HealthStore() = default;
  // Cheap round trip for readiness checks.
  virtual Status ping() = 0;
};

// Export and import of the tunnels table (controld/admin/backup.h). Not a role of Store's union:
// Store::backupStore() hands it out where the backend has one.
struct RawTunnelRow {
  std::string id;
  std::string recordJson;  // the record column exactly as stored
  int64_t revision = 0;
};
enum class ImportOutcome { kInserted, kRefreshed, kUnchanged, kSkipped };
struct ImportRow {
  TunnelRecord record;   // checked (controld/admin/import_checks.h)
  int64_t revision = 0;  // as the file had it: kept on insert
};
class BackupStore {
 public:
  virtual ~BackupStore() = default;
  // A keyset page: at most `limit` rows whose ID sorts after `afterId`, by ID.
  virtual Result<std::vector<RawTunnelRow>> exportTunnels(const std::string& afterId, int limit,
                                                          bool excludeDeleted) = 0;
  // One batch in one transaction, deadlocks and lock timeouts retried: inserts a row that is
  // absent (local_update 0); otherwise locks it and leaves it when equal (unchanged) or changed
  // by the server since it was imported (local_update 1: skipped), else replaces it with a new
  // revision (refreshed). dry_run reads and counts, writes nothing. One outcome per row.
  virtual Result<std::vector<ImportOutcome>> importTunnels(const std::vector<ImportRow>& rows,
                                                           bool dryRun) = 0;
};

// What the admin stats count, in one read: tunnels by state and jobs by status.
struct RecordCounts {
  int64_t tunnels = 0;  // not deleted
  int64_t deleted = 0;  // kept as tombstones (their IDs stay taken)
  int64_t issuing = 0;  // not deleted, a certificate being issued
  int64_t alarms = 0;   // not deleted, an alarm set (a renewal or a retry due)
  int64_t jobsPending = 0;
  int64_t jobsLeased = 0;  // pending and leased by a machine now
  int64_t jobsDone = 0;
  int64_t jobsFailed = 0;
  int64_t jobsAbandoned = 0;
};

// Counts for operators (POST /api/admin/stats). Aggregates over whole tables: for an operator's
// occasional question, never on a request path.
class StatsStore {
 public:
  virtual ~StatsStore() = default;
  virtual Result<RecordCounts> recordCounts(int64_t nowMs) = 0;
};

class Store : public TunnelStore,
              public JobStore,
              public MetaStore,
              public CertificateStore,
              public RateLimitStore,
              public UsageStore,
              public HealthStore,
              public StatsStore {
 public:
  ~Store() override = default;

  // For the pool gauge; a backend without a pool reports zeros. Never blocks.
  [[nodiscard]] virtual PoolStats poolStats() const { return {}; }
  // Starts the pool's background upkeep (idle sessions kept, topped up, recycled); a backend
  // without a pool has none. Stopped when the store goes.
  virtual void startPoolUpkeep() {}
  // Export/import, where the backend has them (SqlStore does); null otherwise.
  virtual BackupStore* backupStore() { return nullptr; }

  // Creates missing tables and records the schema version; refuses a newer schema; runs no DDL
  // once the database is current.
  virtual Status migrate() = 0;
};

struct StoreOptions {
  std::string url;  // mysql://user:pass@host:port/db or sqlite:/path (empty: sqlite_path)
  std::string sqlitePath = "opentunnel.db";
  // The pool (DATABASE_POOL_SIZE): sessions at most; min_idle of them kept open while idle and
  // topped up every upkeep interval; sessions idle longer than idle_timeout_ms beyond min_idle
  // closed, every session closed (and replaced) once max_lifetime_ms old. SQLite caps the size
  // and the idle minimum (sql_store.h).
  int poolSize = 50;
  int poolMinIdle = 8;
  int64_t poolIdleTimeoutMs = 60'000;
  int64_t poolMaxLifetimeMs = 30 * 60'000;
  int64_t poolUpkeepIntervalMs = 10'000;
  int64_t acquireTimeoutMs = 3000;
  int64_t statementTimeoutMs = 10000;
  int64_t connectTimeoutMs = 20000;
};

// Opens the backend named by the URL. Does not wait for the database: the caller retries
// migrate() with backoff until STARTUP_DB_TIMEOUT_MS. With `metrics` (which must outlive the
// store), every call is timed and its failures counted (store_metrics.h).
[[nodiscard]] Result<std::unique_ptr<Store>> openStore(const StoreOptions& options,
                                                       metrics::Metrics* metrics = nullptr);

}  // namespace ot::controld
