// Databases for the storage tests. Every test runs against each backend testDatabases() returns:
// SQLite in a fresh temporary file, and MariaDB in a fresh database (ot_test_<random>) on the
// server whose URL is in the file named by OT_TEST_MYSQL_URL_FILE (the ctest fixture `mariadb`
// writes it). When that variable is set, a missing file or an unreachable server fails the test:
// nothing is skipped quietly. When it is unset (the binary run by hand) a note says so and only
// SQLite runs.
#pragma once

#include <doctest/doctest.h>
#include <soci/mysql/soci-mysql.h>
#include <soci/soci.h>
#include <soci/sqlite3/soci-sqlite3.h>
#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "controld/base/private_files.h"
#include "controld/store/database_url.h"
#include "controld/store/sql_store.h"

namespace ot::controld::testing {

inline std::string randomHex(size_t length) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::random_device device;
  std::string out;
  for (size_t i = 0; i < length; ++i) out.push_back(kDigits[device() % 16]);
  return out;
}

// The fixture's server: its base URL (no database) and the directory mariadb.sh manages.
struct MariadbServer {
  std::string baseUrl;  // mysql://user:pass@127.0.0.1:PORT/
  DatabaseUrl parsed;
  std::string dir;
};

inline std::string readFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// std::nullopt only when OT_TEST_MYSQL_URL_FILE is unset.
inline std::optional<MariadbServer> mariadbServer() {
  const char* file = std::getenv("OT_TEST_MYSQL_URL_FILE");
  if (file == nullptr || *file == '\0') {
    static bool noted = false;
    if (!noted) {
      noted = true;
      std::fprintf(stderr,
                   "NOTE: OT_TEST_MYSQL_URL_FILE is not set, so the storage tests run against "
                   "SQLite only. Run them through ctest (the `mariadb` fixture starts a server) "
                   "to cover MariaDB too.\n");
    }
    return std::nullopt;
  }
  const std::string url = readFirstLine(file);
  INFO("OT_TEST_MYSQL_URL_FILE=" << file);
  REQUIRE_MESSAGE(!url.empty(), "the MariaDB URL file is missing or empty");
  auto parsed = parseDatabaseUrl(url, "");
  REQUIRE_MESSAGE(parsed.ok(), "the MariaDB URL does not parse");
  return MariadbServer{url, parsed.value(), std::filesystem::path(file).parent_path().string()};
}

inline DatabaseTimeouts quickTimeouts() {
  DatabaseTimeouts timeouts;
  timeouts.connectMs = 5000;
  timeouts.readWriteMs = 10000;
  timeouts.busyMs = 5000;
  return timeouts;
}

// A session on the server without a default database, as the fixture's (all-powerful) user.
inline std::unique_ptr<soci::session> adminSession(const MariadbServer& server) {
  DatabaseUrl url = server.parsed;
  url.database.clear();
  try {
    return std::make_unique<soci::session>(soci::mysql, sociConnectString(url, quickTimeouts()));
  } catch (const std::exception& error) {
    FAIL("cannot reach the test MariaDB at " << redactedDatabaseUrl(url) << ": " << error.what());
  }
  return nullptr;
}

// One empty database on one backend; removed again (file or DROP DATABASE) on destruction.
class TestDatabase {
 public:
  TestDatabase(const TestDatabase&) = delete;
  TestDatabase& operator=(const TestDatabase&) = delete;

  static std::unique_ptr<TestDatabase> sqlite() {
    auto db = std::unique_ptr<TestDatabase>(new TestDatabase());
    std::string pattern =
        (std::filesystem::temp_directory_path() / "ot-store-test-XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    db->name_ = "sqlite";
    db->dialect_ = SqlDialect::kSqlite;
    db->tempDir_ = pattern;
    db->url_ = "sqlite:" + pattern + "/store.db";
    return db;
  }

  static std::unique_ptr<TestDatabase> mariadb(const MariadbServer& server) {
    auto db = std::unique_ptr<TestDatabase>(new TestDatabase());
    db->name_ = "mariadb";
    db->dialect_ = SqlDialect::kMysql;
    db->server_ = server;
    db->database_ = "ot_test_" + randomHex(16);
    auto admin = adminSession(server);
    *admin << "CREATE DATABASE " + db->database_ + " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin";
    db->url_ = server.baseUrl + db->database_;
    return db;
  }

  ~TestDatabase() {
    try {
      if (dialect_ == SqlDialect::kSqlite) {
        std::filesystem::remove_all(tempDir_);
      } else {
        DatabaseUrl url = server_.parsed;
        url.database.clear();
        soci::session admin(soci::mysql, sociConnectString(url, quickTimeouts()));
        admin << "DROP DATABASE IF EXISTS " + database_;
      }
    } catch (...) {
      // Best effort: the fixture removes the whole server afterwards anyway.
    }
  }

  [[nodiscard]] const std::string& name() const { return name_; }
  [[nodiscard]] SqlDialect dialect() const { return dialect_; }
  [[nodiscard]] const std::string& url() const { return url_; }
  [[nodiscard]] const std::string& database() const { return database_; }
  [[nodiscard]] const MariadbServer& server() const { return server_; }

  [[nodiscard]] StoreOptions options() const {
    StoreOptions options;
    options.url = url_;
    options.poolSize = 4;
    options.acquireTimeoutMs = 5000;
    options.statementTimeoutMs = 5000;
    options.connectTimeoutMs = 5000;
    return options;
  }

  std::unique_ptr<SqlStore> open(const StoreOptions& options,
                                 metrics::Metrics* metrics = nullptr) const {
    auto store = SqlStore::open(options, metrics);
    REQUIRE_MESSAGE(store.ok(), (store.ok() ? "" : store.error().message));
    return std::move(store).value();
  }
  std::unique_ptr<SqlStore> open() const { return open(options()); }

  // A store on this database with the schema in place; with `metrics`, its calls are measured.
  std::unique_ptr<SqlStore> openMigrated(metrics::Metrics* metrics = nullptr) const {
    auto store = open(options(), metrics);
    const Status migrated = store->migrate();
    REQUIRE_MESSAGE(migrated.ok(), (migrated.ok() ? "" : migrated.error().message));
    return store;
  }

  // A plain SOCI session on the same database, for what the Store API does not expose.
  [[nodiscard]] std::unique_ptr<soci::session> raw() const {
    auto url = parseDatabaseUrl(url_, "");
    REQUIRE(url.ok());
    if (dialect_ == SqlDialect::kSqlite) {
      // Made private the way the store makes it, which refuses a file others can read.
      REQUIRE(prepareDatabaseFile(url->sqlitePath).ok());
      auto session =
          std::make_unique<soci::session>(soci::sqlite3, sociConnectString(*url, quickTimeouts()));
      *session << "PRAGMA busy_timeout = 5000";
      return session;
    }
    return std::make_unique<soci::session>(soci::mysql, sociConnectString(*url, quickTimeouts()));
  }

 private:
  TestDatabase() = default;

  std::string name_;
  SqlDialect dialect_ = SqlDialect::kSqlite;
  std::string url_;
  std::string tempDir_;
  std::string database_;
  MariadbServer server_;
};

// Fresh databases for one test: SQLite always, MariaDB when the fixture provides it.
inline std::vector<std::unique_ptr<TestDatabase>> testDatabases() {
  std::vector<std::unique_ptr<TestDatabase>> databases;
  databases.push_back(TestDatabase::sqlite());
  if (auto server = mariadbServer()) databases.push_back(TestDatabase::mariadb(*server));
  return databases;
}

inline TunnelRecord sampleTunnel(const std::string& id) {
  TunnelRecord record;
  record.id = id;
  record.hostname = id + ".tunnel.test";
  record.tokenSha256Hex = std::string(64, 'a');
  record.createdAtMs = 1'700'000'000'000;
  return record;
}

inline long long countRows(soci::session& sql, const std::string& table) {
  long long count = 0;
  sql << "SELECT COUNT(*) FROM " + table, soci::into(count);
  return count;
}

}  // namespace ot::controld::testing
