// Storage: schema migration, tunnels with revisions, meta and the server certificate, on SQLite
// and MariaDB (see test_database.h).
#include <atomic>
#include <barrier>
#include <thread>

#include "tests/controld/test_database.h"

namespace ot::controld {
namespace {

using testing::countRows;
using testing::sampleTunnel;
using testing::TestDatabase;
using testing::testDatabases;

long long appliedAt(soci::session& sql, int version) {
  long long appliedAt = 0;
  sql << "SELECT applied_at FROM schema_migrations WHERE version = :v", soci::into(appliedAt),
      soci::use(version);
  return appliedAt;
}

bool tableExists(soci::session& sql, SqlDialect dialect, const std::string& table) {
  long long count = 0;
  if (dialect == SqlDialect::kMysql) {
    sql << "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()"
           " AND table_name = :t",
        soci::into(count), soci::use(table);
  } else {
    sql << "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = :t",
        soci::into(count), soci::use(table);
  }
  return count == 1;
}

TEST_CASE("store: migrate creates every table and records the schema version") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->open();
    auto report = store->migrateWithReport();
    REQUIRE(report.ok());
    CHECK(report->foundVersion == 0);
    CHECK(report->recordedVersion);
    std::vector<std::string> all;
    for (const auto& object : schemaObjects(db->dialect())) all.push_back(object.name);
    CHECK(report->created == all);
    auto sql = db->raw();
    for (const auto& object : schemaObjects(db->dialect())) {
      if (object.ddl.find("CREATE TABLE") == std::string::npos) continue;
      CAPTURE(object.name);
      CHECK(tableExists(*sql, db->dialect(), object.name));
    }
    CHECK(recordedSchemaVersion(*sql, db->dialect()) == kSchemaVersion);
    CHECK(report->altered.empty());
    CHECK(countRows(*sql, "schema_migrations") == 1);
  }
}

TEST_CASE("store: a second migrate changes nothing and runs no DDL") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    auto sql = db->raw();
    const long long firstApplied = appliedAt(*sql, kSchemaVersion);
    auto again = store->migrateWithReport();
    REQUIRE(again.ok());
    CHECK(again->foundVersion == kSchemaVersion);
    CHECK(again->created.empty());
    CHECK_FALSE(again->recordedVersion);
    // A second store (another controld) sees a current database too.
    auto other = db->open()->migrateWithReport();
    REQUIRE(other.ok());
    CHECK(other->created.empty());
    CHECK_FALSE(other->recordedVersion);
    CHECK(countRows(*sql, "schema_migrations") == 1);
    CHECK(appliedAt(*sql, kSchemaVersion) == firstApplied);

    if (db->dialect() == SqlDialect::kSqlite) {
      // Another connection holds the write lock: any INSERT (or DDL that changes the schema)
      // would wait and time out; a migration that only reads goes through. (SQLite treats
      // CREATE TABLE IF NOT EXISTS on an existing table as a no-op needing no lock, so for DDL
      // the report above is the evidence; MariaDB below checks it against real privileges.)
      StoreOptions options = db->options();
      options.statementTimeoutMs = 300;
      auto lockedOut = db->open(options);
      *sql << "BEGIN IMMEDIATE";
      const Status migrated = lockedOut->migrate();
      const auto write = lockedOut->insertTunnel(sampleTunnel("blocked"));
      *sql << "ROLLBACK";
      CHECK_MESSAGE(migrated.ok(), (migrated.ok() ? "" : migrated.error().message));
      REQUIRE_FALSE(write.ok());
      CHECK(write.error().kind == ErrorKind::kTimeout);
    } else {
      // A user that may read and write rows but not run DDL (PlanetScale's safe migrations, a
      // locked-down grant) can still start against a current database...
      const std::string user = "ot_nodll_" + testing::randomHex(8);
      const std::string password = testing::randomHex(16);
      auto admin = testing::adminSession(db->server());
      *admin << "CREATE USER '" + user + "'@'%' IDENTIFIED BY '" + password + "'";
      *admin << "GRANT SELECT, INSERT, UPDATE, DELETE ON " + db->database() + ".* TO '" + user +
                    "'@'%'";
      const DatabaseUrl& server = db->server().parsed;
      StoreOptions options = db->options();
      options.url = "mysql://" + user + ":" + password + "@" + server.host + ":" +
                    std::to_string(server.port) + "/" + db->database();
      const Status migrated = db->open(options)->migrate();
      CHECK_MESSAGE(migrated.ok(), (migrated.ok() ? "" : migrated.error().message));

      // ...while the same grant on an empty database cannot create the schema: the check above
      // would have failed had the migration tried any DDL.
      auto empty = TestDatabase::mariadb(db->server());
      *admin << "GRANT SELECT, INSERT, UPDATE, DELETE ON " + empty->database() + ".* TO '" + user +
                    "'@'%'";
      options.url = "mysql://" + user + ":" + password + "@" + server.host + ":" +
                    std::to_string(server.port) + "/" + empty->database();
      CHECK_FALSE(db->open(options)->migrate().ok());
      *admin << "DROP USER '" + user + "'@'%'";
    }
  }
}

TEST_CASE("store: a database at a newer schema is refused before anything changes") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto sql = db->raw();
    // Only the version table exists, at a newer version: the refusal must come before any CREATE.
    *sql << "CREATE TABLE schema_migrations (version INT NOT NULL PRIMARY KEY,"
            " applied_at BIGINT NOT NULL)";
    *sql << "INSERT INTO schema_migrations (version, applied_at) VALUES (4, 0)";
    const Status migrated = db->open()->migrate();
    REQUIRE_FALSE(migrated.ok());
    CHECK(migrated.error().kind == ErrorKind::kInvalid);
    CHECK(migrated.error().message == "database schema 4 is newer than this controld (3)");
    CHECK_FALSE(tableExists(*sql, db->dialect(), "tunnels"));
    CHECK(countRows(*sql, "schema_migrations") == 1);
  }
}

TEST_CASE("store: insert, get and update tunnels with revisions") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    auto sql = db->raw();

    TunnelRecord record = sampleTunnel("alpha1");
    record.certificate.state = CertificateState::kIssuing;
    record.certificate.identifiers = {"alpha1.tunnel.test", "*.alpha1.tunnel.test"};
    record.renewAtMs = 1'700'000'100'000;
    auto inserted = store->insertTunnel(record);
    REQUIRE(inserted.ok());
    CHECK(inserted.value() == 1);

    auto duplicate = store->insertTunnel(sampleTunnel("alpha1"));
    REQUIRE_FALSE(duplicate.ok());
    CHECK(duplicate.error().kind == ErrorKind::kConflict);

    auto invalid = store->insertTunnel(sampleTunnel("Not-Valid"));
    REQUIRE_FALSE(invalid.ok());
    CHECK(invalid.error().kind == ErrorKind::kInvalid);

    auto loaded = store->getTunnel("alpha1");
    REQUIRE(loaded.ok());
    REQUIRE(loaded->has_value());
    CHECK((*loaded)->revision == 1);
    CHECK((*loaded)->record == record);

    // The row holds toJson() byte for byte, and the derived columns follow the record.
    {
      std::string json;
      int deleted = -1;
      int issuing = -1;
      long long alarmAt = 0;
      soci::indicator alarmIndicator = soci::i_null;
      *sql << "SELECT record, deleted, issuing, alarm_at FROM tunnels WHERE id = 'alpha1'",
          soci::into(json), soci::into(deleted), soci::into(issuing),
          soci::into(alarmAt, alarmIndicator);
      CHECK(json == toJson(record));
      CHECK(deleted == 0);
      CHECK(issuing == 1);
      REQUIRE(alarmIndicator == soci::i_ok);
      CHECK(alarmAt == 1'700'000'100'000);
    }

    TunnelRecord changed = record;
    changed.certificate.state = CertificateState::kReady;
    changed.lastConnectedAtMs = 1'700'000'200'000;
    auto updated = store->updateTunnel(changed, 1);
    REQUIRE(updated.ok());
    CHECK(updated.value() == 2);

    auto stale = store->updateTunnel(record, 1);
    REQUIRE_FALSE(stale.ok());
    CHECK(stale.error().kind == ErrorKind::kConflict);

    auto reloaded = store->getTunnel("alpha1");
    REQUIRE(reloaded.ok());
    REQUIRE(reloaded->has_value());
    CHECK((*reloaded)->revision == 2);
    CHECK((*reloaded)->record == changed);

    // Deleting clears the alarm column even though the record keeps its renewAt.
    TunnelRecord deleted = changed;
    deleted.deletedAtMs = 1'700'000'300'000;
    REQUIRE(store->updateTunnel(deleted, 2).ok());
    {
      int deletedColumn = -1;
      int issuing = -1;
      long long alarmAt = 0;
      soci::indicator alarmIndicator = soci::i_ok;
      *sql << "SELECT deleted, issuing, alarm_at FROM tunnels WHERE id = 'alpha1'",
          soci::into(deletedColumn), soci::into(issuing), soci::into(alarmAt, alarmIndicator);
      CHECK(deletedColumn == 1);
      CHECK(issuing == 0);
      CHECK(alarmIndicator == soci::i_null);
    }

    auto missing = store->getTunnel("nosuch");
    REQUIRE(missing.ok());
    CHECK_FALSE(missing->has_value());
    auto updateMissing = store->updateTunnel(sampleTunnel("nosuch"), 1);
    REQUIRE_FALSE(updateMissing.ok());
    CHECK(updateMissing.error().kind == ErrorKind::kConflict);
  }
}

TEST_CASE("store: IDs are case-sensitive and listed in byte order, a page at a time") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    for (const char* id : {"delta", "alpha", "charlie", "bravo", "echo"}) {
      REQUIRE(store->insertTunnel(sampleTunnel(id)).ok());
    }
    // Stored IDs are lower case (valid IDs); the database must not fold case when comparing.
    auto upper = store->getTunnel("ALPHA");
    REQUIRE(upper.ok());
    CHECK_FALSE(upper->has_value());

    std::vector<std::string> seen;
    std::string after;
    for (int page = 0; page < 5; ++page) {
      auto tunnels = store->listTunnels(after, 2);
      REQUIRE(tunnels.ok());
      if (tunnels->empty()) break;
      CHECK(tunnels->size() <= 2);
      for (const auto& tunnel : *tunnels) {
        CHECK(tunnel.revision == 1);
        CHECK(tunnel.record == sampleTunnel(tunnel.record.id));
        seen.push_back(tunnel.record.id);
      }
      after = seen.back();
    }
    CHECK(seen == std::vector<std::string>{"alpha", "bravo", "charlie", "delta", "echo"});
    CHECK(store->listTunnels("", 0).error().kind == ErrorKind::kInvalid);
  }
}

TEST_CASE("store: a stored record that is not valid JSON is an internal error, not a crash") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    REQUIRE(store->insertTunnel(sampleTunnel("broken")).ok());
    *db->raw() << "UPDATE tunnels SET record = '{\"id\": 12' WHERE id = 'broken'";
    auto loaded = store->getTunnel("broken");
    REQUIRE_FALSE(loaded.ok());
    CHECK(loaded.error().kind == ErrorKind::kInternal);
  }
}

TEST_CASE("store: of two concurrent updates from one revision, on two stores, exactly one wins") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto first = db->openMigrated();
    auto second = db->open();
    REQUIRE(first->insertTunnel(sampleTunnel("contested")).ok());

    constexpr int kRounds = 20;
    for (int round = 0; round < kRounds; ++round) {
      CAPTURE(round);
      auto current = first->getTunnel("contested");
      REQUIRE(current.ok());
      REQUIRE(current->has_value());
      const int64_t revision = (*current)->revision;

      TunnelRecord from_first = (*current)->record;
      from_first.lastConnectedAtMs = 1000 + round;
      TunnelRecord from_second = (*current)->record;
      from_second.lastConnectedAtMs = 2000 + round;

      std::barrier start(2);
      std::optional<Result<int64_t>> resultFirst;
      std::optional<Result<int64_t>> resultSecond;
      std::thread a([&] {
        start.arrive_and_wait();
        resultFirst.emplace(first->updateTunnel(from_first, revision));
      });
      std::thread b([&] {
        start.arrive_and_wait();
        resultSecond.emplace(second->updateTunnel(from_second, revision));
      });
      a.join();
      b.join();

      const bool firstWon = resultFirst->ok();
      const bool secondWon = resultSecond->ok();
      REQUIRE(firstWon != secondWon);
      const Result<int64_t>& loser = firstWon ? *resultSecond : *resultFirst;
      CHECK(loser.error().kind == ErrorKind::kConflict);

      auto after = second->getTunnel("contested");
      REQUIRE(after.ok());
      REQUIRE(after->has_value());
      CHECK((*after)->revision == revision + 1);
      CHECK((*after)->record == (firstWon ? from_first : from_second));
    }
  }
}

TEST_CASE("store: meta insert-if-absent and compare-and-set are exact") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    auto other = db->open();

    auto absent = store->getMeta("ca_cooldown");
    REQUIRE(absent.ok());
    CHECK_FALSE(absent->has_value());

    CHECK(store->insertMetaIfAbsent("ca_cooldown", "v1").value() == true);
    CHECK(other->insertMetaIfAbsent("ca_cooldown", "other").value() == false);
    CHECK(store->getMeta("ca_cooldown").value() == std::optional<std::string>("v1"));

    CHECK(other->compareAndSetMeta("ca_cooldown", "v0", "v2").value() == false);
    // MySQL's utf8mb4_bin pads with spaces when comparing; the store must not.
    CHECK(other->compareAndSetMeta("ca_cooldown", "v1 ", "v2").value() == false);
    CHECK(store->getMeta("ca_cooldown").value() == std::optional<std::string>("v1"));
    CHECK(other->compareAndSetMeta("ca_cooldown", "v1", "v2").value() == true);
    CHECK(store->compareAndSetMeta("ca_cooldown", "v1", "v3").value() == false);
    CHECK(store->getMeta("ca_cooldown").value() == std::optional<std::string>("v2"));
    CHECK(store->compareAndSetMeta("missing", "", "x").value() == false);

    // Values keep every byte: multi-byte UTF-8 and a long PEM-sized text.
    const std::string text = "caf\xc3\xa9 \xf0\x9f\x94\x92 " + std::string(100'000, 'k');
    CHECK(store->insertMetaIfAbsent("local_ca", text).value() == true);
    CHECK(other->getMeta("local_ca").value() == std::optional<std::string>(text));
  }
}

TEST_CASE("store: the server certificate is stored and replaced") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    auto none = store->getServerCertificate("tunnel.test");
    REQUIRE(none.ok());
    CHECK_FALSE(none->has_value());

    ServerCertificate certificate{"tunnel.test", "KEY", "CSR", "CHAIN", 1'800'000'000'000};
    REQUIRE(store->putServerCertificate(certificate).ok());
    auto loaded = store->getServerCertificate("tunnel.test");
    REQUIRE(loaded.ok());
    REQUIRE(loaded->has_value());
    CHECK((*loaded)->domain == "tunnel.test");
    CHECK((*loaded)->keyPem == "KEY");
    CHECK((*loaded)->chainPem == "CHAIN");
    CHECK((*loaded)->notAfterMs == 1'800'000'000'000);

    certificate.chainPem = "NEW CHAIN";
    certificate.notAfterMs = 1'900'000'000'000;
    REQUIRE(store->putServerCertificate(certificate).ok());
    auto replaced = store->getServerCertificate("tunnel.test");
    REQUIRE(replaced.ok());
    REQUIRE(replaced->has_value());
    CHECK((*replaced)->chainPem == "NEW CHAIN");
    CHECK((*replaced)->csrPem == "CSR");
    CHECK((*replaced)->notAfterMs == 1'900'000'000'000);
    CHECK(countRows(*db->raw(), "server_certificates") == 1);
  }
}

TEST_CASE("store: openStore validates its options and connects lazily") {
  StoreOptions options;
  options.url = "mysql://u:p@db.example.com/opentunnel";
  CHECK(openStore(options).error().kind == ErrorKind::kInvalid);  // remote without TLS
  options.url = "mysql://u:p@127.0.0.1:9/";
  CHECK(openStore(options).error().kind == ErrorKind::kInvalid);  // no database
  options.url = "sqlite:/tmp/x.db";
  options.poolSize = 0;
  CHECK(openStore(options).error().kind == ErrorKind::kInvalid);

  // Nothing listens on port 9: opening succeeds, the first use reports the outage.
  options.poolSize = 1;
  options.url = "mysql://u:p@127.0.0.1:9/opentunnel";
  options.connectTimeoutMs = 2000;
  auto store = openStore(options);
  REQUIRE(store.ok());
  const Status pinged = (*store)->ping();
  REQUIRE_FALSE(pinged.ok());
  CHECK(pinged.error().kind == ErrorKind::kUnavailable);
}

}  // namespace
}  // namespace ot::controld
