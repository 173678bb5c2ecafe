// SqlStore: export pages and import batches of the tunnels table (controld/admin/backup.h).
// An import batch is the store's one multi-statement transaction: it locks the batch's rows
// (SELECT ... FOR UPDATE on MySQL, which also locks the gaps absent rows would fill; SQLite's
// BEGIN IMMEDIATE already holds the database's one write lock), compares each existing one with
// the file and inserts the absent ones in one statement. So a concurrent API write either lands
// first (the row is local_update = 1 and the import leaves it) or afterwards (its UPDATE names the
// revision it read, which the refresh bumped: it fails, reloads and retries).
#include <soci/soci.h>

#include <algorithm>
#include <chrono>
#include <span>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <vector>

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

// A row as the database holds it when the batch starts (or as this batch left it).
struct Existing {
  std::string json;
  long long revision = 0;
  int localUpdate = 0;
};

// The derived columns of a row to write, kept alive (and unmoved) while statements bind them.
struct PendingRow {
  std::string id;
  std::string json;
  long long revision = 0;
  int deleted = 0;
  int issuing = 0;
  long long alarmAt = 0;
  soci::indicator alarmIndicator = soci::i_null;
};

PendingRow pendingRow(const ImportRow& row) {
  PendingRow p;
  p.id = row.record.id;
  p.json = toJson(row.record);
  p.revision = row.revision < 1 ? 1 : row.revision;
  p.deleted = derivedDeleted(row.record);
  p.issuing = row.record.issuing() ? 1 : 0;
  derivedAlarm(row.record, p.alarmAt, p.alarmIndicator);
  return p;
}

// The batch's rows that exist, in one statement (locked on MySQL unless a dry run). IDs are
// checked DNS labels ([a-z0-9-]), so they are safe as literals in the IN list.
std::unordered_map<std::string, Existing> readExisting(soci::session& sql,
                                                       const std::vector<ImportRow>& rows,
                                                       bool lock) {
  std::string in;
  for (const ImportRow& row : rows) {
    if (!in.empty()) in += ',';
    in += '\'';
    in += row.record.id;
    in += '\'';
  }
  std::unordered_map<std::string, Existing> existing;
  std::string id;
  Existing e;
  soci::statement st =
      (sql.prepare << "SELECT id, record, revision, local_update FROM tunnels WHERE id IN (" + in +
                          ")" + (lock ? " FOR UPDATE" : ""),
       soci::into(id), soci::into(e.json), soci::into(e.revision), soci::into(e.localUpdate));
  st.execute();
  while (st.fetch()) existing[id] = e;
  return existing;
}

// Multi-row INSERTs for the batch's new rows: one round trip instead of one per row on MySQL.
// SQLite has no round trips to save, and binding looks each parameter up by name in a list
// (quadratic in the parameters of one statement), so it takes small statements.
void insertRows(soci::session& sql, bool mysql, std::span<PendingRow> rows) {
  if (rows.empty()) return;
  const size_t perStatement = mysql ? rows.size() : 16;
  if (rows.size() > perStatement) {
    for (size_t at = 0; at < rows.size(); at += perStatement) {
      insertRows(sql, mysql, rows.subspan(at, std::min(perStatement, rows.size() - at)));
    }
    return;
  }
  std::string query = mysql ? "INSERT IGNORE INTO" : "INSERT OR IGNORE INTO";
  query += " tunnels (id, record, revision, deleted, issuing, alarm_at, local_update) VALUES ";
  soci::statement st(sql);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i > 0) query += ',';
    const std::string n = std::to_string(i);
    query += "(:i" + n + ",:r" + n + ",:v" + n + ",:d" + n + ",:s" + n + ",:a" + n + ",0)";
    PendingRow& row = rows[i];
    st.exchange(soci::use(row.id));
    st.exchange(soci::use(row.json));
    st.exchange(soci::use(row.revision));
    st.exchange(soci::use(row.deleted));
    st.exchange(soci::use(row.issuing));
    st.exchange(soci::use(row.alarmAt, row.alarmIndicator));
  }
  st.alloc();
  st.prepare(query);
  st.define_and_bind();
  st.execute(true);
  if (st.get_affected_rows() != static_cast<long long>(rows.size())) {
    // Absent when read under the batch's lock, present now: not possible unless the lock did
    // not hold; start the batch again rather than guess.
    throw RetryBatch("a row of the batch appeared during the import");
  }
}

Result<std::vector<ImportOutcome>> importBatch(soci::session& sql, SqlDialect dialect,
                                               const std::vector<ImportRow>& rows, bool dryRun) {
  for (const ImportRow& row : rows) {
    if (!isValidTunnelId(row.record.id)) {
      return Error{ErrorKind::kInvalid, "invalid tunnel ID: " + row.record.id};
    }
  }
  const bool mysql = dialect == SqlDialect::kMysql;
  std::vector<ImportOutcome> outcomes;
  outcomes.reserve(rows.size());
  // Refreshes bind these by reference, so they are set before each execute.
  PendingRow r;
  long long expectedRevision = 0;
  soci::statement refresh =
      (sql.prepare << "UPDATE tunnels SET record = :record, revision = revision + 1,"
                      " deleted = :deleted, issuing = :issuing, alarm_at = :alarm_at,"
                      " local_update = 0 WHERE id = :id AND revision = :revision",
       soci::use(r.json), soci::use(r.deleted), soci::use(r.issuing),
       soci::use(r.alarmAt, r.alarmIndicator), soci::use(r.id), soci::use(expectedRevision));

  if (!dryRun) sql << (mysql ? "START TRANSACTION" : "BEGIN IMMEDIATE");
  try {
    // Lock first (the rows that exist, and on MySQL the gaps where absent ones go), then decide
    // each row, then write: new rows in one INSERT, refreshed ones one UPDATE each.
    std::unordered_map<std::string, Existing> existing = readExisting(sql, rows, mysql && !dryRun);
    std::vector<PendingRow> inserts;
    inserts.reserve(rows.size());
    std::unordered_map<std::string, size_t> inserting;  // ID -> index in inserts
    for (const ImportRow& row : rows) {
      PendingRow pending = pendingRow(row);
      const auto insertAt = inserting.find(pending.id);
      if (insertAt != inserting.end()) {
        // The same ID twice in one batch: the later record wins, as a refresh would.
        PendingRow& earlier = inserts[insertAt->second];
        if (earlier.json == pending.json) {
          outcomes.push_back(ImportOutcome::kUnchanged);
        } else {
          pending.revision = earlier.revision + 1;
          earlier = std::move(pending);
          outcomes.push_back(ImportOutcome::kRefreshed);
        }
        continue;
      }
      const auto found = existing.find(pending.id);
      if (found == existing.end()) {
        inserting.emplace(pending.id, inserts.size());
        inserts.push_back(std::move(pending));
        outcomes.push_back(ImportOutcome::kInserted);
        continue;
      }
      Existing& stored = found->second;
      if (stored.json == pending.json) {
        outcomes.push_back(ImportOutcome::kUnchanged);
      } else if (stored.localUpdate != 0) {
        outcomes.push_back(ImportOutcome::kSkipped);
      } else {
        if (!dryRun) {
          r = std::move(pending);
          expectedRevision = stored.revision;
          refresh.execute(true);
          if (refresh.get_affected_rows() != 1) {
            throw RetryBatch("tunnel " + r.id + " changed under its lock");
          }
          stored.json = r.json;
          ++stored.revision;
        }
        outcomes.push_back(ImportOutcome::kRefreshed);
      }
    }
    if (!dryRun) {
      insertRows(sql, mysql, inserts);
      sql << "COMMIT";
    }
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
