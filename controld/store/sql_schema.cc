#include "controld/store/sql_schema.h"

#include <soci/soci.h>

#include <set>

#include "controld/store/sql_errors.h"

namespace ot::controld {
namespace {

constexpr const char* kMysqlTableOptions =
    " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin";

std::vector<SchemaObject> mysqlObjects() {
  const std::string options = kMysqlTableOptions;
  return {
      {"tunnels",
       "CREATE TABLE IF NOT EXISTS tunnels ("
       " id VARCHAR(63) NOT NULL,"
       " record LONGTEXT NOT NULL,"
       " revision BIGINT NOT NULL,"
       " deleted TINYINT NOT NULL,"
       " issuing TINYINT NOT NULL,"
       " alarm_at BIGINT NULL,"
       " local_update TINYINT NOT NULL,"
       " PRIMARY KEY (id),"
       " KEY tunnels_alarm_at (alarm_at))" +
           options},
      {"jobs",
       "CREATE TABLE IF NOT EXISTS jobs ("
       " id VARCHAR(191) NOT NULL,"
       " kind VARCHAR(16) NOT NULL,"
       " tunnel_id VARCHAR(63) NOT NULL,"
       " status VARCHAR(16) NOT NULL,"
       " attempts INT NOT NULL,"
       " queued_at BIGINT NOT NULL,"
       " next_run_at BIGINT NOT NULL,"
       " lease_owner VARCHAR(191) NOT NULL,"
       " lease_until BIGINT NOT NULL,"
       " last_error TEXT NOT NULL,"
       " PRIMARY KEY (id),"
       " KEY jobs_status_next_run_at (status, next_run_at))" +
           options},
      {"server_certificates",
       "CREATE TABLE IF NOT EXISTS server_certificates ("
       " domain VARCHAR(253) NOT NULL,"
       " key_pem TEXT NOT NULL,"
       " csr_pem TEXT NOT NULL,"
       " chain_pem MEDIUMTEXT NOT NULL,"
       " not_after BIGINT NOT NULL,"
       " PRIMARY KEY (domain))" +
           options},
      {"meta",
       "CREATE TABLE IF NOT EXISTS meta ("
       " k VARCHAR(191) NOT NULL,"
       " v LONGTEXT NOT NULL,"
       " PRIMARY KEY (k))" +
           options},
      {"rate_limits",
       "CREATE TABLE IF NOT EXISTS rate_limits ("
       " k VARCHAR(191) NOT NULL,"
       " full_at BIGINT NOT NULL,"
       " PRIMARY KEY (k),"
       " KEY rate_limits_full_at (full_at))" +
           options},
      {"usage_hourly",
       "CREATE TABLE IF NOT EXISTS usage_hourly ("
       " tunnel_id VARCHAR(63) NOT NULL,"
       " hour_start BIGINT NOT NULL,"
       " origin VARCHAR(64) NOT NULL DEFAULT '',"
       " bytes_in BIGINT NOT NULL,"
       " bytes_out BIGINT NOT NULL,"
       " connections BIGINT NOT NULL,"
       " PRIMARY KEY (tunnel_id, hour_start, origin))" +
           options},
      {"schema_migrations",
       "CREATE TABLE IF NOT EXISTS schema_migrations ("
       " version INT NOT NULL,"
       " applied_at BIGINT NOT NULL,"
       " PRIMARY KEY (version))" +
           options},
  };
}

std::vector<SchemaObject> sqliteObjects() {
  return {
      {"tunnels",
       "CREATE TABLE IF NOT EXISTS tunnels ("
       " id TEXT NOT NULL PRIMARY KEY,"
       " record TEXT NOT NULL,"
       " revision INTEGER NOT NULL,"
       " deleted INTEGER NOT NULL,"
       " issuing INTEGER NOT NULL,"
       " alarm_at INTEGER NULL,"
       " local_update INTEGER NOT NULL)"},
      {"tunnels_alarm_at", "CREATE INDEX IF NOT EXISTS tunnels_alarm_at ON tunnels (alarm_at)"},
      {"jobs",
       "CREATE TABLE IF NOT EXISTS jobs ("
       " id TEXT NOT NULL PRIMARY KEY,"
       " kind TEXT NOT NULL,"
       " tunnel_id TEXT NOT NULL,"
       " status TEXT NOT NULL,"
       " attempts INTEGER NOT NULL,"
       " queued_at INTEGER NOT NULL,"
       " next_run_at INTEGER NOT NULL,"
       " lease_owner TEXT NOT NULL,"
       " lease_until INTEGER NOT NULL,"
       " last_error TEXT NOT NULL)"},
      {"jobs_status_next_run_at",
       "CREATE INDEX IF NOT EXISTS jobs_status_next_run_at ON jobs (status, next_run_at)"},
      {"server_certificates",
       "CREATE TABLE IF NOT EXISTS server_certificates ("
       " domain TEXT NOT NULL PRIMARY KEY,"
       " key_pem TEXT NOT NULL,"
       " csr_pem TEXT NOT NULL,"
       " chain_pem TEXT NOT NULL,"
       " not_after INTEGER NOT NULL)"},
      {"meta",
       "CREATE TABLE IF NOT EXISTS meta ("
       " k TEXT NOT NULL PRIMARY KEY,"
       " v TEXT NOT NULL)"},
      {"rate_limits",
       "CREATE TABLE IF NOT EXISTS rate_limits ("
       " k TEXT NOT NULL PRIMARY KEY,"
       " full_at INTEGER NOT NULL)"},
      {"rate_limits_full_at",
       "CREATE INDEX IF NOT EXISTS rate_limits_full_at ON rate_limits (full_at)"},
      {"usage_hourly",
       "CREATE TABLE IF NOT EXISTS usage_hourly ("
       " tunnel_id TEXT NOT NULL,"
       " hour_start INTEGER NOT NULL,"
       " origin TEXT NOT NULL DEFAULT '',"
       " bytes_in INTEGER NOT NULL,"
       " bytes_out INTEGER NOT NULL,"
       " connections INTEGER NOT NULL,"
       " PRIMARY KEY (tunnel_id, hour_start, origin))"},
      {"schema_migrations",
       "CREATE TABLE IF NOT EXISTS schema_migrations ("
       " version INTEGER NOT NULL PRIMARY KEY,"
       " applied_at INTEGER NOT NULL)"},
  };
}

// Names of the tables (and, for SQLite, indexes) that exist: one SELECT.
std::set<std::string> existingObjects(soci::session& sql, SqlDialect dialect) {
  const char* query =
      dialect == SqlDialect::kMysql
          ? "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()"
          : "SELECT name FROM sqlite_master WHERE type IN ('table', 'index')";
  std::set<std::string> names;
  soci::rowset<std::string> rows = sql.prepare << query;
  for (const auto& name : rows) names.insert(name);
  return names;
}

int readVersion(soci::session& sql) {
  int version = 0;
  soci::indicator indicator = soci::i_null;
  sql << "SELECT MAX(version) FROM schema_migrations", soci::into(version, indicator);
  return indicator == soci::i_ok ? version : 0;
}

bool usageHasOrigin(soci::session& sql, SqlDialect dialect) {
  long long count = 0;
  if (dialect == SqlDialect::kMysql) {
    sql << "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = DATABASE()"
           " AND table_name = 'usage_hourly' AND column_name = 'origin'",
        soci::into(count);
  } else {
    sql << "SELECT COUNT(*) FROM pragma_table_info('usage_hourly') WHERE name = 'origin'",
        soci::into(count);
  }
  return count > 0;
}

// Schema 1 -> 2: usage_hourly gains `origin` (usage per origin, docs/pools-usage.md), part of the
// key. The rows already there are tunnel totals, which is what origin '' means: they keep their
// meaning, so an older controld still running writes correct totals (its INSERT leaves origin
// to the default). Returns whether this run changed the table.
bool addUsageOrigin(soci::session& sql, SqlDialect dialect) {
  if (usageHasOrigin(sql, dialect)) return false;
  if (dialect == SqlDialect::kMysql) {
    try {
      // One statement: InnoDB rebuilds the table once, and no reader sees it half changed.
      sql << "ALTER TABLE usage_hourly ADD COLUMN origin VARCHAR(64) NOT NULL DEFAULT ''"
             " AFTER hour_start, DROP PRIMARY KEY, ADD PRIMARY KEY (tunnel_id, hour_start, origin)";
    } catch (const soci::soci_error&) {
      // Another controld's migration added it first (duplicate column): done all the same.
      if (usageHasOrigin(sql, dialect)) return false;
      throw;
    }
    return true;
  }
  // SQLite cannot change a primary key in place: a new table, the rows copied, swapped in, in one
  // transaction (SQLite's DDL is transactional; the write lock keeps a second migration out).
  soci::transaction transaction(sql);
  if (usageHasOrigin(sql, dialect)) return false;
  sql << "CREATE TABLE usage_hourly_v2 ("
         " tunnel_id TEXT NOT NULL,"
         " hour_start INTEGER NOT NULL,"
         " origin TEXT NOT NULL DEFAULT '',"
         " bytes_in INTEGER NOT NULL,"
         " bytes_out INTEGER NOT NULL,"
         " connections INTEGER NOT NULL,"
         " PRIMARY KEY (tunnel_id, hour_start, origin))";
  sql << "INSERT INTO usage_hourly_v2 (tunnel_id, hour_start, origin, bytes_in, bytes_out,"
         " connections) SELECT tunnel_id, hour_start, '', bytes_in, bytes_out, connections"
         " FROM usage_hourly";
  sql << "DROP TABLE usage_hourly";
  sql << "ALTER TABLE usage_hourly_v2 RENAME TO usage_hourly";
  transaction.commit();
  return true;
}

}  // namespace

std::vector<SchemaObject> schemaObjects(SqlDialect dialect) {
  return dialect == SqlDialect::kMysql ? mysqlObjects() : sqliteObjects();
}

int recordedSchemaVersion(soci::session& sql, SqlDialect dialect) {
  if (existingObjects(sql, dialect).count("schema_migrations") == 0) return 0;
  return readVersion(sql);
}

Result<MigrationReport> migrateSchema(soci::session& sql, SqlDialect dialect, int64_t nowMs) {
  const std::set<std::string> existing = existingObjects(sql, dialect);
  MigrationReport report;
  report.foundVersion = existing.count("schema_migrations") != 0 ? readVersion(sql) : 0;
  if (report.foundVersion > kSchemaVersion) {
    return Error{ErrorKind::kInvalid, "database schema " + std::to_string(report.foundVersion) +
                                          " is newer than this controld (" +
                                          std::to_string(kSchemaVersion) + ")"};
  }
  // Only what is missing: IF NOT EXISTS covers a concurrent migration that created it meanwhile.
  for (const auto& object : schemaObjects(dialect)) {
    if (existing.count(object.name) != 0) continue;
    sql << object.ddl;
    report.created.push_back(object.name);
  }
  // Changes to tables an older schema created; checked only below the current version, so a
  // current database still costs two SELECTs.
  if (report.foundVersion < kSchemaVersion && existing.count("usage_hourly") != 0 &&
      addUsageOrigin(sql, dialect)) {
    report.altered.push_back("usage_hourly");
  }
  if (report.foundVersion < kSchemaVersion) {
    int version = kSchemaVersion;
    long long appliedAt = nowMs;
    try {
      sql << "INSERT INTO schema_migrations (version, applied_at) VALUES (:version, :applied_at)",
          soci::use(version), soci::use(appliedAt);
      report.recordedVersion = true;
    } catch (const soci::soci_error& error) {
      // Another controld recorded the same version first.
      if (!isDuplicateKey(error)) throw;
    }
  }
  return report;
}

}  // namespace ot::controld
