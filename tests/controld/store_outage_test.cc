// Storage when things go wrong: a pool with no free connection, a database server that goes
// away and comes back, and TLS to MariaDB (certificate chain and name checked).
#include <chrono>
#include <cstdlib>
#include <future>
#include <thread>

#include "controld/store/mysql_tls.h"
#include "tests/controld/test_database.h"

namespace ot::controld {
namespace {

using testing::sampleTunnel;
using testing::TestDatabase;
using testing::testDatabases;

using SteadyClock = std::chrono::steady_clock;

int64_t msSince(SteadyClock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - start).count();
}

// Takes a write lock on the tunnel row `id` from outside the store until release().
class RowLock {
 public:
  RowLock(const TestDatabase& db, const std::string& id) : sql_(db.raw()) {
    if (db.dialect() == SqlDialect::kSqlite) {
      *sql_ << "BEGIN IMMEDIATE";
    } else {
      std::string locked;
      *sql_ << "BEGIN";
      *sql_ << "SELECT id FROM tunnels WHERE id = :id FOR UPDATE", soci::into(locked),
          soci::use(id);
    }
  }
  void release() { *sql_ << "ROLLBACK"; }

 private:
  std::unique_ptr<soci::session> sql_;
};

TEST_CASE("store: with every connection busy, a call gives up after the acquire timeout") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    REQUIRE(db->openMigrated()->insertTunnel(sampleTunnel("locked")).ok());

    StoreOptions options = db->options();
    options.poolSize = 1;
    options.acquireTimeoutMs = 200;
    options.statementTimeoutMs = 3000;
    auto store = db->open(options);
    REQUIRE(store->ping().ok());  // the one connection is open

    RowLock lock(*db, "locked");
    // This write waits for the row lock, holding the pool's only connection meanwhile.
    auto blocked = std::async(std::launch::async,
                              [&] { return store->updateTunnel(sampleTunnel("locked"), 1); });

    // Probe until a call finds the pool empty (the write holds it for ~3 s once it has it). The
    // pause between probes lets the write take the connection: the pool is not fair, and a
    // probe in a tight loop could keep it from ever getting it.
    std::optional<Error> refused;
    int64_t refusedAfterMs = 0;
    const auto deadline = SteadyClock::now() + std::chrono::seconds(3);
    while (!refused && SteadyClock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const auto start = SteadyClock::now();
      auto read = store->getTunnel("locked");
      if (!read.ok()) {
        refused = read.error();
        refusedAfterMs = msSince(start);
      }
    }
    REQUIRE(refused.has_value());
    CHECK(refused->kind == ErrorKind::kUnavailable);
    CHECK(refused->message == "storage unavailable: no free connection");
    CHECK(refusedAfterMs >= 180);
    CHECK(refusedAfterMs < 2500);  // well before the write lets go

    // The write gives up at its own bound, as a timeout.
    const Result<int64_t> write = blocked.get();
    lock.release();
    REQUIRE_FALSE(write.ok());
    CHECK(write.error().kind == ErrorKind::kTimeout);

    // The connection is usable again.
    auto read = store->getTunnel("locked");
    REQUIRE(read.ok());
    CHECK(read->has_value());
    CHECK(store->updateTunnel(sampleTunnel("locked"), 1).ok());
  }
}

// A MariaDB server of its own (the fixture's is shared with tests running in parallel), stopped
// and started again with tests/services/mariadb.sh.
class PrivateServer {
 public:
  PrivateServer() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "ot-mariadb-outage-XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    dir_ = pattern + "/server";
    started_ = run("start") == 0;
    REQUIRE_MESSAGE(started_, "mariadb.sh start failed");
  }
  ~PrivateServer() {
    if (started_) run("stop");
    std::filesystem::remove_all(std::filesystem::path(dir_).parent_path());
  }
  int run(const std::string& command) {
    const std::string line = std::string(OT_MARIADB_SCRIPT) + " " + command + " '" + dir_ + "'";
    return std::system(line.c_str());
  }
  std::string urlFile() const { return dir_ + "/url"; }

 private:
  std::string dir_;
  bool started_ = false;
};

TEST_CASE("store: reconnects by itself after the MariaDB server restarts") {
  if (!testing::mariadbServer()) return;  // SQLite has no server to lose
  PrivateServer server;
  testing::MariadbServer info;
  info.baseUrl = testing::readFirstLine(server.urlFile());
  auto parsed = parseDatabaseUrl(info.baseUrl, "");
  REQUIRE(parsed.ok());
  info.parsed = *parsed;
  auto db = TestDatabase::mariadb(info);

  StoreOptions options = db->options();
  options.poolSize = 2;
  options.connectTimeoutMs = 2000;
  options.statementTimeoutMs = 2000;
  auto store = db->openMigrated();
  store = db->open(options);
  REQUIRE(store->insertTunnel(sampleTunnel("survivor")).ok());
  // Both pooled connections open, so both go stale during the outage.
  {
    auto a = std::async(std::launch::async, [&] { return store->ping(); });
    auto b = std::async(std::launch::async, [&] { return store->ping(); });
    REQUIRE(a.get().ok());
    REQUIRE(b.get().ok());
  }

  REQUIRE(server.run("stop-server") == 0);
  for (int i = 0; i < 4; ++i) {
    auto read = store->getTunnel("survivor");
    REQUIRE_FALSE(read.ok());
    CAPTURE(read.error().message);
    CHECK(
        (read.error().kind == ErrorKind::kUnavailable || read.error().kind == ErrorKind::kTimeout));
  }

  REQUIRE(server.run("start-server") == 0);
  // A session the server ended is found dead before a statement is sent and replaced, so the
  // first call after the restart already succeeds.
  auto read = store->getTunnel("survivor");
  REQUIRE_MESSAGE(read.ok(), (read.ok() ? "" : read.error().message));
  REQUIRE(read.value().has_value());
  CHECK(read.value()->record == sampleTunnel("survivor"));
  // The other pooled connection went stale too; used concurrently, both work at once.
  {
    auto a = std::async(std::launch::async, [&] { return store->ping(); });
    auto b = std::async(std::launch::async, [&] { return store->ping(); });
    CHECK(a.get().ok());
    CHECK(b.get().ok());
  }
  TunnelRecord changed = sampleTunnel("survivor");
  changed.lastConnectedAtMs = 42;
  auto written = store->updateTunnel(changed, 1);
  REQUIRE(written.ok());
  CHECK(written.value() == 2);
}

TEST_CASE("store: a statement whose connection dies after it was sent is not run again") {
  // "Lost connection during query" does not say whether the server ran the statement, so the
  // store must report it, not send it again on a new connection.
  auto server = testing::mariadbServer();
  if (!server) return;
  auto db = TestDatabase::mariadb(*server);
  StoreOptions options = db->options();
  options.poolSize = 1;
  options.statementTimeoutMs = 10'000;
  auto store = db->openMigrated();
  store = db->open(options);
  REQUIRE(store->insertTunnel(sampleTunnel("in-flight")).ok());

  RowLock lock(*db, "in-flight");
  TunnelRecord changed = sampleTunnel("in-flight");
  changed.lastConnectedAtMs = 7;
  auto write = std::async(std::launch::async, [&] { return store->updateTunnel(changed, 1); });

  // The store's connection, found while its UPDATE waits for the row lock, is killed by the
  // server; the lock is let go at once, so a second attempt would go through.
  auto admin = db->raw();
  int64_t victim = 0;
  const auto deadline = SteadyClock::now() + std::chrono::seconds(10);
  while (victim == 0 && SteadyClock::now() < deadline) {
    soci::indicator found = soci::i_null;
    *admin << "SELECT MAX(id) FROM information_schema.processlist"
              " WHERE db = :db AND info LIKE 'UPDATE tunnels SET record%'",
        soci::use(db->database()), soci::into(victim, found);
    if (found != soci::i_ok) {
      victim = 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  REQUIRE(victim != 0);
  *admin << "KILL CONNECTION " + std::to_string(victim);
  lock.release();

  const Result<int64_t> written = write.get();
  REQUIRE_FALSE(written.ok());
  CAPTURE(written.error().message);
  CHECK(written.error().kind == ErrorKind::kUnavailable);
  auto read = store->getTunnel("in-flight");
  REQUIRE(read.ok());
  REQUIRE(read.value().has_value());
  CHECK(read.value()->revision == 1);
  CHECK(read.value()->record == sampleTunnel("in-flight"));
}

TEST_CASE("store: TLS to MariaDB verifies the server's chain and name") {
  auto server = testing::mariadbServer();
  if (!server) return;
  REQUIRE(serverNameCheckInstalled());
  auto db = TestDatabase::mariadb(*server);
  const std::string tlsDir = server->dir + "/tls";
  const DatabaseUrl& base = server->parsed;
  auto urlFor = [&](const std::string& host, const std::string& ca) {
    return "mysql://" + base.user + ":" + base.password + "@" + host + ":" +
           std::to_string(base.port) + "/" + db->database() + "?ssl-ca=" + ca;
  };
  StoreOptions options = db->options();
  options.poolSize = 1;

  SUBCASE("the right CA and host") {
    options.url = urlFor("127.0.0.1", tlsDir + "/ca.pem");
    auto store = db->open(options);
    const Status migrated = store->migrate();
    REQUIRE_MESSAGE(migrated.ok(), (migrated.ok() ? "" : migrated.error().message));
    REQUIRE(store->insertTunnel(sampleTunnel("overtls")).ok());

    // The same connect string, opened by hand, really runs over TLS with verification on.
    auto parsed = parseDatabaseUrl(options.url, "");
    REQUIRE(parsed.ok());
    soci::session sql(soci::mysql, sociConnectString(*parsed, testing::quickTimeouts()));
    CHECK(checkMysqlTls(sql).ok());
    std::string name;
    std::string cipher;
    sql << "SHOW SESSION STATUS LIKE 'Ssl_cipher'", soci::into(name), soci::into(cipher);
    CHECK_FALSE(cipher.empty());
  }
  SUBCASE("a certificate from another CA is refused") {
    options.url = urlFor("127.0.0.1", tlsDir + "/other-ca.pem");
    const Status pinged = db->open(options)->ping();
    REQUIRE_FALSE(pinged.ok());
    CHECK(pinged.error().kind == ErrorKind::kUnavailable);
  }
  SUBCASE("a certificate that does not name the host is refused") {
    // The server also listens on 127.0.0.2; its certificate names 127.0.0.1 only.
    options.url = urlFor("127.0.0.2", tlsDir + "/ca.pem");
    const Status pinged = db->open(options)->ping();
    REQUIRE_FALSE(pinged.ok());
    CHECK(pinged.error().kind == ErrorKind::kUnavailable);
  }
  SUBCASE("a plain connection is not mistaken for a verified one") {
    soci::session sql(soci::mysql, sociConnectString(base, testing::quickTimeouts()));
    const Status tls = checkMysqlTls(sql);
    REQUIRE_FALSE(tls.ok());
    CHECK(tls.error().message == "the database connection does not use TLS");
  }
}

}  // namespace
}  // namespace ot::controld
