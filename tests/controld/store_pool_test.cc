// The store's connection pool (session_pool.h, sql_store_pool.cc) on SQLite and MariaDB: the
// upkeep keeps the idle minimum open, tops it up after the server killed its connections (KILL
// from a second client), closes sessions idle beyond the minimum and recycles old ones.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/controld/test_database.h"

namespace ot::controld {
namespace {

using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;
using testing::TestDatabase;
using testing::testDatabases;

// The IDs of the server's connections that use the test database (the store's sessions; the
// admin session has no default database).
std::set<long long> sessionIds(soci::session& admin, const TestDatabase& db) {
  std::set<long long> ids;
  long long id = 0;
  const std::string database = db.database();
  soci::statement st = (admin.prepare << "SELECT ID FROM information_schema.PROCESSLIST"
                                         " WHERE DB = :db AND COMMAND <> 'Killed'",
                        soci::into(id), soci::use(database));
  st.execute();
  while (st.fetch()) ids.insert(id);
  return ids;
}

// Waits (bounded) until the server has ended every connection in `ids`.
bool waitGone(soci::session& admin, const TestDatabase& db, const std::set<long long>& ids) {
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::set<long long> now = sessionIds(admin, db);
    if (std::none_of(ids.begin(), ids.end(), [&](long long id) { return now.count(id) != 0; })) {
      return true;
    }
    std::this_thread::yield();
  }
  return false;
}

TEST_CASE("store pool: idle verdicts") {
  PoolLimits limits;
  limits.minIdle = 2;
  const PoolTime t0{};
  PoolSlotTimes times{t0, t0};
  CHECK(idleVerdict(times, t0 + seconds(59), 3, limits) == IdleVerdict::kKeep);
  CHECK(idleVerdict(times, t0 + seconds(60), 3, limits) == IdleVerdict::kCloseIdle);
  CHECK(idleVerdict(times, t0 + seconds(600), 2, limits) == IdleVerdict::kKeep);
  CHECK(idleVerdict(times, t0 + minutes(30), 1, limits) == IdleVerdict::kRecycle);
  times.idleSince = t0 + minutes(5);
  CHECK(idleVerdict(times, t0 + minutes(5) + seconds(30), 9, limits) == IdleVerdict::kKeep);
}

TEST_CASE("store pool: the defaults, and SQLite's smaller pool") {
  const StoreOptions defaults;
  CHECK(defaults.poolSize == 50);
  CHECK(defaults.poolMinIdle == 8);
  CHECK(defaults.poolIdleTimeoutMs == 60'000);
  CHECK(defaults.poolMaxLifetimeMs == 1'800'000);
  CHECK(defaults.poolUpkeepIntervalMs == 10'000);
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    StoreOptions options = db->options();
    options.poolSize = 50;
    options.poolMinIdle = 8;
    auto store = db->open(options);
    const PoolUpkeepReport report = store->maintainPool(std::chrono::steady_clock::now());
    CHECK(report.error.empty());
    const int64_t idle = db->dialect() == SqlDialect::kSqlite ? kSqliteMinIdle : 8;
    CHECK(report.opened == idle);
    CHECK(store->poolStats().open == idle);
    CHECK(store->poolLimits().minIdle == static_cast<std::size_t>(idle));
  }
}

TEST_CASE("store pool: connections killed by the server are replaced by the next upkeep") {
  for (const auto& db : testDatabases()) {
    if (db->dialect() != SqlDialect::kMysql) continue;
    StoreOptions options = db->options();
    options.poolSize = 10;
    options.poolMinIdle = 4;
    auto store = db->open(options);
    REQUIRE(store->migrate().ok());  // opens one session
    PoolUpkeepReport report = store->maintainPool(std::chrono::steady_clock::now());
    CHECK(report.opened == 3);
    auto admin = testing::adminSession(db->server());
    const std::set<long long> before = sessionIds(*admin, *db);
    REQUIRE(before.size() == 4);

    for (long long id : before) *admin << "KILL " + std::to_string(id);
    REQUIRE(waitGone(*admin, *db, before));

    report = store->maintainPool(std::chrono::steady_clock::now());
    CHECK(report.lost == 4);
    CHECK(report.opened == 4);
    CHECK(report.error.empty());
    const std::set<long long> after = sessionIds(*admin, *db);
    CHECK(after.size() == 4);
    for (long long id : after) CHECK(before.count(id) == 0);
    CHECK(store->poolStats().open == 4);
    // The callers after it find live sessions; no statement met a dead one.
    for (int i = 0; i < 8; ++i) CHECK(store->ping().ok());
    CHECK(sessionIds(*admin, *db) == after);
  }
}

TEST_CASE("store pool: idle sessions beyond the minimum close, old ones are recycled") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    StoreOptions options = db->options();
    options.poolSize = 6;
    options.poolMinIdle = 2;
    auto store = db->open(options);
    REQUIRE(store->migrate().ok());
    const auto start = std::chrono::steady_clock::now();
    if (db->dialect() == SqlDialect::kMysql) {
      // Six callers at once, held by a table lock until all six have a session.
      auto locker = db->raw();
      *locker << "LOCK TABLES meta WRITE";
      std::vector<std::thread> callers;
      for (int i = 0; i < 6; ++i) {
        callers.emplace_back([&] { CHECK(store->getMeta("k").ok()); });
      }
      const auto deadline = std::chrono::steady_clock::now() + seconds(10);
      while (store->poolStats().inUse < 6 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::yield();
      }
      CHECK(store->poolStats().inUse == 6);
      *locker << "UNLOCK TABLES";
      for (std::thread& caller : callers) caller.join();
      CHECK(store->poolStats().open == 6);

      // Rounds that find them idle do not make them any less idle.
      const auto idleFrom = std::chrono::steady_clock::now();
      PoolUpkeepReport report = store->maintainPool(idleFrom + seconds(30));
      CHECK(report.idleClosed == 0);
      CHECK(store->maintainPool(idleFrom + seconds(45)).idleClosed == 0);
      report = store->maintainPool(idleFrom + seconds(61));
      CHECK(report.idleClosed == 4);
      CHECK(report.opened == 0);
      CHECK(store->poolStats().open == 2);
    } else {
      CHECK(store->maintainPool(start).opened == 1);
    }
    auto admin = db->dialect() == SqlDialect::kMysql ? testing::adminSession(db->server())
                                                     : std::unique_ptr<soci::session>();
    const std::set<long long> before = admin ? sessionIds(*admin, *db) : std::set<long long>{};
    // Half an hour on, every session is closed and replaced.
    const PoolUpkeepReport report =
        store->maintainPool(std::chrono::steady_clock::now() + minutes(30));
    CHECK(report.recycled == 2);
    CHECK(report.opened == 2);
    CHECK(store->poolStats().open == 2);
    if (admin) {
      REQUIRE(before.size() == 2);
      REQUIRE(waitGone(*admin, *db, before));
      CHECK(sessionIds(*admin, *db).size() == 2);
    }
    CHECK(store->ping().ok());
  }
}

}  // namespace
}  // namespace ot::controld
