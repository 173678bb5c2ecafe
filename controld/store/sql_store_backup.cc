// SqlStore: export pages and import batches of the tunnels table (controld/admin/backup.h).
// An import batch is the store's one multi-statement transaction: it inserts a row when absent
// and otherwise locks it (SELECT ... FOR UPDATE on MySQL; SQLite's BEGIN IMMEDIATE already holds
// the database's one write lock) to compare it with the file, so a concurrent API write either
// lands first (the row is local_update = 1 and the import leaves it) or afterwards (its UPDATE
// names the revision it read, which the refresh bumped: it fails, reloads and retries).
#include <soci/soci.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "controld/store/sql_store.h"

namespace ot::controld {
namespace {

// A race the batch lost in a way no SQL error reports: rolled back and retried like a deadlock.
struct RetryBatch : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Deadlocks and lock timeouts are retried this many times in all, after a short pause.
constexpr int kImportAttempts = 5;

int derivedDeleted(const TunnelRecord& record) {
  return record.deleted() ? 1 : 0;
}

// As sql_store_tunnels.cc derives them: a deleted tunnel renews nothing.
void derivedAlarm(const TunnelRecord& record, long long& alarmAt, soci::indicator& indicator) {
  alarmAt = 0;
  indicator = soci::i_null;
  if (record.renewAtMs && !record.deleted()) {
    alarmAt = *record.renewAtMs;
    indicator = soci::i_ok;
  }
}

struct BatchStatements {
  // Bound by reference: set before each execute.
  std::string id;
  std::string json;
  long long revision = 0;
  int deleted = 0;
  int issuing = 0;
  long long alarmAt = 0;
  soci::indicator alarmIndicator = soci::i_null;
  // Read back.
  std::string storedJson;
  long long storedRevision = 0;
  int storedLocalUpdate = 0;
};

Result<std::vector<ImportOutcome>> importBatch(soci::session& sql, SqlDialect dialect,
                                               const std::vector<ImportRow>& rows, bool dryRun) {
  const bool mysql = dialect == SqlDialect::kMysql;
  std::vector<ImportOutcome> outcomes;
  outcomes.reserve(rows.size());
  BatchStatements b;
  const std::string insertVerb = mysql ? "INSERT IGNORE INTO" : "INSERT OR IGNORE INTO";
  soci::statement insert =
      (sql.prepare << insertVerb +
                          " tunnels (id, record, revision, deleted, issuing, alarm_at,"
                          " local_update) VALUES (:id, :record, :revision, :deleted, :issuing,"
                          " :alarm_at, 0)",
       soci::use(b.id), soci::use(b.json), soci::use(b.revision), soci::use(b.deleted),
       soci::use(b.issuing), soci::use(b.alarmAt, b.alarmIndicator));
  const std::string lock = (mysql && !dryRun) ? " FOR UPDATE" : "";
  soci::statement select =
      (sql.prepare << "SELECT record, revision, local_update FROM tunnels WHERE id = :id" + lock,
       soci::into(b.storedJson), soci::into(b.storedRevision), soci::into(b.storedLocalUpdate),
       soci::use(b.id));
  soci::statement refresh =
      (sql.prepare << "UPDATE tunnels SET record = :record, revision = revision + 1,"
                      " deleted = :deleted, issuing = :issuing, alarm_at = :alarm_at,"
                      " local_update = 0 WHERE id = :id AND revision = :revision",
       soci::use(b.json), soci::use(b.deleted), soci::use(b.issuing),
       soci::use(b.alarmAt, b.alarmIndicator), soci::use(b.id), soci::use(b.storedRevision));

  if (!dryRun) sql << (mysql ? "START TRANSACTION" : "BEGIN IMMEDIATE");
  try {
    for (const ImportRow& row : rows) {
      b.id = row.record.id;
      b.json = toJson(row.record);
      b.revision = row.revision < 1 ? 1 : row.revision;
      b.deleted = derivedDeleted(row.record);
      b.issuing = row.record.issuing() ? 1 : 0;
      derivedAlarm(row.record, b.alarmAt, b.alarmIndicator);
      if (!dryRun) {
        insert.execute(true);
        if (insert.get_affected_rows() == 1) {
          outcomes.push_back(ImportOutcome::kInserted);
          continue;
        }
      }
      if (!select.execute(true)) {
        if (!dryRun) {
          // Present a moment ago (the insert was ignored), gone now: nothing deletes rows, so
          // this is a race to retry rather than a state to decide on.
          throw RetryBatch("tunnel " + b.id + " vanished during the import");
        }
        outcomes.push_back(ImportOutcome::kInserted);
        continue;
      }
      if (b.storedJson == b.json) {
        outcomes.push_back(ImportOutcome::kUnchanged);
      } else if (b.storedLocalUpdate != 0) {
        outcomes.push_back(ImportOutcome::kSkipped);
      } else {
        if (!dryRun) {
          refresh.execute(true);
          if (refresh.get_affected_rows() != 1) {
            throw RetryBatch("tunnel " + b.id + " changed under its lock");
          }
        }
        outcomes.push_back(ImportOutcome::kRefreshed);
      }
    }
    if (!dryRun) sql << "COMMIT";
  } catch (const RetryBatch& race) {
    if (!dryRun) sql << "ROLLBACK";
    return Error{ErrorKind::kConflict, race.what()};
  } catch (...) {
    if (!dryRun) {
      try {
        sql << "ROLLBACK";
      } catch (...) {
        // The connection is broken: the server rolls back when it goes.
      }
    }
    throw;
  }
  return outcomes;
}

}  // namespace

Result<std::vector<RawTunnelRow>> SqlStore::exportTunnels(const std::string& afterId, int limit,
                                                          bool excludeDeleted) {
  if (limit < 1) return Error{ErrorKind::kInvalid, "exportTunnels limit must be >= 1"};
  return run<std::vector<RawTunnelRow>>(
      "exportTunnels", [&](soci::session& sql) -> Result<std::vector<RawTunnelRow>> {
        RawTunnelRow row;
        long long revision = 0;
        const std::string filter = excludeDeleted ? " AND deleted = 0" : "";
        soci::statement st =
            (sql.prepare << "SELECT id, record, revision FROM tunnels WHERE id > :after" + filter +
                                " ORDER BY id LIMIT :limit",
             soci::into(row.id), soci::into(row.recordJson), soci::into(revision),
             soci::use(afterId), soci::use(limit));
        std::vector<RawTunnelRow> rows;
        rows.reserve(static_cast<size_t>(limit));
        st.execute();
        while (st.fetch()) {
          row.revision = revision;
          rows.push_back(row);
        }
        return rows;
      });
}

Result<std::vector<ImportOutcome>> SqlStore::importTunnels(const std::vector<ImportRow>& rows,
                                                           bool dryRun) {
  for (int attempt = 1;; ++attempt) {
    auto outcomes = run<std::vector<ImportOutcome>>(
        "importTunnels", [&](soci::session& sql) -> Result<std::vector<ImportOutcome>> {
          return importBatch(sql, dialect_, rows, dryRun);
        });
    if (outcomes.ok() || attempt >= kImportAttempts) return outcomes;
    const ErrorKind kind = outcomes.error().kind;
    if (kind != ErrorKind::kConflict && kind != ErrorKind::kTimeout) return outcomes;
    // A deadlock's other party is usually done within milliseconds; back off a little more each
    // time so that two importers do not collide in step.
    std::this_thread::sleep_for(std::chrono::milliseconds(5 * attempt * attempt));
  }
}

}  // namespace ot::controld
