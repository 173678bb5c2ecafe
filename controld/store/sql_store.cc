// SqlStore: opening, connections, migration, meta and the server certificate. Tunnels, jobs and
// limits live in sql_store_tunnels.cc, sql_store_jobs.cc and sql_store_limits.cc.
#include "controld/store/sql_store.h"

#include <soci/mysql/soci-mysql.h>
#include <soci/soci.h>
#include <soci/sqlite3/soci-sqlite3.h>

#include <chrono>
#include <cstdio>

#include "common/clock.h"
#include "controld/base/private_files.h"
#include "controld/store/mysql_tls.h"

namespace ot::controld {
namespace {

int64_t ceilSeconds(int64_t ms) {
  return std::max<int64_t>(1, (ms + 999) / 1000);
}

// "12.345": MariaDB's max_statement_time takes (fractional) seconds.
std::string decimalSeconds(int64_t ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%lld.%03lld", static_cast<long long>(ms / 1000),
                static_cast<long long>(ms % 1000));
  return text;
}

PoolLimits poolLimitsFor(const StoreOptions& options, SqlDialect dialect) {
  const int size = dialect == SqlDialect::kSqlite ? std::min(options.poolSize, kSqlitePoolLimit)
                                                  : options.poolSize;
  int minIdle = std::clamp(options.poolMinIdle, 0, size);
  if (dialect == SqlDialect::kSqlite) minIdle = std::min(minIdle, kSqliteMinIdle);
  PoolLimits limits;
  limits.minIdle = static_cast<std::size_t>(minIdle);
  limits.idleTimeout = std::chrono::milliseconds(options.poolIdleTimeoutMs);
  limits.maxLifetime = std::chrono::milliseconds(options.poolMaxLifetimeMs);
  return limits;
}

DatabaseTimeouts timeoutsFor(const StoreOptions& options) {
  DatabaseTimeouts timeouts;
  timeouts.connectMs = options.connectTimeoutMs;
  // The server's own statement limit normally ends a slow statement first, with a clean error on
  // a usable connection; the client's read/write timeout is the backstop for a server that
  // stopped answering altogether.
  timeouts.readWriteMs = options.statementTimeoutMs + 2000;
  timeouts.busyMs = options.statementTimeoutMs;
  return timeouts;
}

}  // namespace

Result<std::unique_ptr<SqlStore>> SqlStore::open(const StoreOptions& options,
                                                 metrics::Metrics* metrics) {
  auto url = parseDatabaseUrl(options.url, options.sqlitePath);
  if (!url) return url.error();
  if (options.poolSize < 1) return Error{ErrorKind::kInvalid, "database pool size must be >= 1"};
  if (options.poolMinIdle < 0 || options.poolIdleTimeoutMs < 1 || options.poolMaxLifetimeMs < 1 ||
      options.poolUpkeepIntervalMs < 1) {
    return Error{ErrorKind::kInvalid, "database pool upkeep settings must be positive"};
  }
  if (options.acquireTimeoutMs < 0 || options.statementTimeoutMs < 1 ||
      options.connectTimeoutMs < 1) {
    return Error{ErrorKind::kInvalid, "database timeouts must be positive"};
  }
  if (url->backend == DatabaseBackend::kMysql && url->database.empty()) {
    return Error{ErrorKind::kInvalid, "database URL names no database (mysql://.../<database>)"};
  }
  if (url->tls == DatabaseTls::kVerifyIdentity && !serverNameCheckInstalled()) {
    return Error{ErrorKind::kInternal,
                 "this binary cannot verify the database server's certificate name (the "
                 "mysql_ssl_set override is not in effect); refusing to connect over TLS"};
  }
  return std::make_unique<SqlStore>(*url, options, metrics);
}

SqlStore::SqlStore(const DatabaseUrl& url, const StoreOptions& options, metrics::Metrics* metrics)
    : url_(url),
      dialect_(url.backend == DatabaseBackend::kMysql ? SqlDialect::kMysql : SqlDialect::kSqlite),
      connectString_(sociConnectString(url, timeoutsFor(options))),
      redactedUrl_(redactedDatabaseUrl(url)),
      options_(options),
      limits_(poolLimitsFor(options, dialect_)),
      pool_(static_cast<std::size_t>(dialect_ == SqlDialect::kSqlite
                                         ? std::min(options.poolSize, kSqlitePoolLimit)
                                         : options.poolSize)),
      metrics_(metrics != nullptr ? std::make_unique<StoreMetrics>(*metrics) : nullptr),
      upkeep_([this] { return upkeepRound(); }) {}

SqlStore::~SqlStore() {
  upkeep_.stop();
}

Status SqlStore::connect(soci::session& sql) {
  try {
    if (dialect_ == SqlDialect::kMysql) {
      sql.open(soci::mysql, connectString_);
      if (url_.tls == DatabaseTls::kVerifyIdentity) {
        if (Status tls = checkMysqlTls(sql); !tls) {
          sql.close();
          return tls;
        }
      }
      std::string version;
      sql << "SELECT VERSION()", soci::into(version);
      const int64_t statementMs = options_.statementTimeoutMs;
      const std::string lockWait = std::to_string(ceilSeconds(statementMs));
      if (version.find("MariaDB") != std::string::npos) {
        sql << "SET SESSION max_statement_time = " + decimalSeconds(statementMs) +
                   ", innodb_lock_wait_timeout = " + lockWait;
      } else {
        // MySQL bounds only SELECTs this way; writes are bounded by the lock wait and the
        // client's read timeout.
        sql << "SET SESSION max_execution_time = " + std::to_string(statementMs) +
                   ", innodb_lock_wait_timeout = " + lockWait;
      }
    } else {
      // Before SQLite would create the file with the umask's mode (its -wal and -shm copy the
      // file's mode); and a file others can read is refused (kInvalid: start-up gives up).
      if (Status prepared = prepareDatabaseFile(url_.sqlitePath); !prepared.ok()) return prepared;
      sql.open(soci::sqlite3, connectString_);
      // Millisecond precision (the connect string's timeout is whole seconds), then WAL so that
      // readers do not wait for writers.
      sql << "PRAGMA busy_timeout = " + std::to_string(options_.statementTimeoutMs);
      sql << "PRAGMA journal_mode = WAL";
      sql << "PRAGMA synchronous = NORMAL";
    }
  } catch (...) {
    sql.close();
    throw;
  }
  return Ok{};
}

Result<MigrationReport> SqlStore::migrateWithReport() {
  return run<MigrationReport>(
      "migrate", [&](soci::session& sql) { return migrateSchema(sql, dialect_, unixNowMs()); });
}

Status SqlStore::migrate() {
  auto report = migrateWithReport();
  if (!report) return report.error();
  return Ok{};
}

Status SqlStore::ping() {
  return run<Ok>("ping", [](soci::session& sql) -> Result<Ok> {
    int one = 0;
    sql << "SELECT 1", soci::into(one);
    return Ok{};
  });
}

Result<std::optional<std::string>> SqlStore::getMeta(const std::string& key) {
  return run<std::optional<std::string>>(
      "getMeta", [&](soci::session& sql) -> Result<std::optional<std::string>> {
        std::string value;
        soci::statement st =
            (sql.prepare << "SELECT v FROM meta WHERE k = :k", soci::into(value), soci::use(key));
        if (!st.execute(true)) return std::optional<std::string>{};
        return std::optional<std::string>{std::move(value)};
      });
}

Result<bool> SqlStore::insertMetaIfAbsent(const std::string& key, const std::string& value) {
  return run<bool>("insertMetaIfAbsent", [&](soci::session& sql) -> Result<bool> {
    try {
      sql << "INSERT INTO meta (k, v) VALUES (:k, :v)", soci::use(key), soci::use(value);
    } catch (const soci::soci_error& error) {
      if (isDuplicateKey(error)) return false;
      throw;
    }
    return true;
  });
}

Result<bool> SqlStore::compareAndSetMeta(const std::string& key, const std::string& expected,
                                         const std::string& value) {
  return run<bool>("compareAndSetMeta", [&](soci::session& sql) -> Result<bool> {
    // MySQL's utf8mb4_bin ignores trailing spaces in '=' (PAD SPACE); the length check makes the
    // comparison exact.
    soci::statement st =
        (sql.prepare << "UPDATE meta SET v = :v WHERE k = :k AND v = :expected"
                        " AND LENGTH(v) = LENGTH(:expected_again)",
         soci::use(value), soci::use(key), soci::use(expected), soci::use(expected));
    st.execute(true);
    return st.get_affected_rows() == 1;
  });
}

Result<std::optional<ServerCertificate>> SqlStore::getServerCertificate(const std::string& domain) {
  return run<std::optional<ServerCertificate>>(
      "getServerCertificate", [&](soci::session& sql) -> Result<std::optional<ServerCertificate>> {
        ServerCertificate certificate;
        long long notAfter = 0;
        soci::statement st =
            (sql.prepare << "SELECT key_pem, csr_pem, chain_pem, not_after"
                            " FROM server_certificates WHERE domain = :domain",
             soci::into(certificate.keyPem), soci::into(certificate.csrPem),
             soci::into(certificate.chainPem), soci::into(notAfter), soci::use(domain));
        if (!st.execute(true)) return std::optional<ServerCertificate>{};
        certificate.domain = domain;
        certificate.notAfterMs = notAfter;
        return std::optional<ServerCertificate>{std::move(certificate)};
      });
}

Status SqlStore::putServerCertificate(const ServerCertificate& certificate) {
  return run<Ok>("putServerCertificate", [&](soci::session& sql) -> Result<Ok> {
    const char* upsert =
        dialect_ == SqlDialect::kMysql
            ? "INSERT INTO server_certificates (domain, key_pem, csr_pem, chain_pem, not_after)"
              " VALUES (:domain, :key_pem, :csr_pem, :chain_pem, :not_after)"
              " ON DUPLICATE KEY UPDATE key_pem = VALUES(key_pem), csr_pem = VALUES(csr_pem),"
              " chain_pem = VALUES(chain_pem), not_after = VALUES(not_after)"
            : "INSERT INTO server_certificates (domain, key_pem, csr_pem, chain_pem, not_after)"
              " VALUES (:domain, :key_pem, :csr_pem, :chain_pem, :not_after)"
              " ON CONFLICT (domain) DO UPDATE SET key_pem = excluded.key_pem,"
              " csr_pem = excluded.csr_pem, chain_pem = excluded.chain_pem,"
              " not_after = excluded.not_after";
    long long notAfter = certificate.notAfterMs;
    sql << upsert, soci::use(certificate.domain), soci::use(certificate.keyPem),
        soci::use(certificate.csrPem), soci::use(certificate.chainPem), soci::use(notAfter);
    return Ok{};
  });
}

Result<std::unique_ptr<Store>> openStore(const StoreOptions& options, metrics::Metrics* metrics) {
  auto store = SqlStore::open(options, metrics);
  if (!store) return store.error();
  return std::unique_ptr<Store>(std::move(store).value());
}

}  // namespace ot::controld
