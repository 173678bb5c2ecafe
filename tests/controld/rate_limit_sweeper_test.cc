// The prune of expired rate_limits rows (rate_limit_sweeper.h) on SQLite and MariaDB: expired
// rows go and live ones stay, a pass deletes at most its bound, and of two machines on one
// database only one prunes in a period.
#include "controld/store/rate_limit_sweeper.h"

#include <doctest/doctest.h>

#include <atomic>
#include <string>

#include "common/metrics.h"
#include "tests/controld/test_database.h"

namespace ot::controld {
namespace {

using testing::countRows;
using testing::testDatabases;

constexpr int64_t kNow = 1'750'000'000'000;

// `count` keys whose budget is full again at kNow + full_in_ms, written directly (as many
// acquireRate calls would leave them).
void addBuckets(soci::session& sql, const std::string& prefix, int count, int64_t fullInMs) {
  long long fullAt = kNow + fullInMs;
  for (int i = 0; i < count; ++i) {
    const std::string key = prefix + std::to_string(i);
    sql << "INSERT INTO rate_limits (k, full_at) VALUES (:k, :full_at)", soci::use(key),
        soci::use(fullAt);
  }
}

long long rowsWithPrefix(soci::session& sql, const std::string& prefix) {
  long long count = 0;
  const std::string pattern = prefix + "%";
  sql << "SELECT COUNT(*) FROM rate_limits WHERE k LIKE :p", soci::into(count), soci::use(pattern);
  return count;
}

RateLimitSweeperOptions sweeperOptions(const std::string& owner, std::atomic<int64_t>& clock) {
  RateLimitSweeperOptions options;
  options.owner = owner;
  options.maxRows = 1000;
  options.nowMs = [&clock] { return clock.load(); };
  return options;
}

TEST_CASE("rate limit sweeper: expired buckets go, live ones stay, at most the bound a pass") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    auto sql = db->raw();
    addBuckets(*sql, "create:expired-", 1200, -1);  // full again a moment ago
    addBuckets(*sql, "create:edge-", 3, 0);         // full again exactly now: as good as no row
    addBuckets(*sql, "issue:live-", 50, 60'000);    // a minute of budget still spent

    metrics::Metrics metrics("opentunnel");
    std::atomic<int64_t> clock{kNow};
    RateLimitSweeper sweeper(*store, *store, sweeperOptions("machine-a", clock), &metrics);

    auto first = sweeper.sweepOnce();
    REQUIRE(first.ok());
    CHECK(first->leased);
    CHECK(first->pruned == 1000);  // the bound, although 1203 had expired
    CHECK(countRows(*sql, "rate_limits") == 1253 - 1000);
    CHECK(rowsWithPrefix(*sql, "issue:live-") == 50);

    auto second = sweeper.sweepOnce();
    REQUIRE(second.ok());
    CHECK(second->pruned == 203);
    CHECK(rowsWithPrefix(*sql, "create:") == 0);
    CHECK(rowsWithPrefix(*sql, "issue:live-") == 50);
    const std::string text = metrics.render();
    CHECK(text.find("opentunnel_rate_limit_rows_pruned_total 1203") != std::string::npos);

    // A pruned key starts over with its whole burst; the live ones still count.
    CHECK(store->acquireRate("create:expired-7", kNow, 1000, 1)->allowed);
    CHECK_FALSE(store->acquireRate("issue:live-7", kNow, 60'000, 1)->allowed);

    // Once the live buckets are full again they go too.
    clock = kNow + 60'000;
    auto later = sweeper.sweepOnce();
    REQUIRE(later.ok());
    CHECK(later->pruned == 50 + 1);
    CHECK(countRows(*sql, "rate_limits") == 0);
  }
}

TEST_CASE("rate limit sweeper: two machines on one database prune once a period") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto storeA = db->openMigrated();
    auto storeB = db->open();
    auto sql = db->raw();
    addBuckets(*sql, "create:old-", 30, -1000);

    std::atomic<int64_t> clock{kNow};
    RateLimitSweeperOptions options = sweeperOptions("machine-a", clock);
    options.maxRows = 10;
    RateLimitSweeper a(*storeA, *storeA, options, nullptr);
    options.owner = "machine-b";
    RateLimitSweeper b(*storeB, *storeB, options, nullptr);

    auto byA = a.sweepOnce();
    REQUIRE(byA.ok());
    CHECK(byA->leased);
    CHECK(byA->pruned == 10);
    // B, later in A's period, stays out and deletes nothing.
    clock = kNow + options.intervalMs - 1;
    auto byB = b.sweepOnce();
    REQUIRE(byB.ok());
    CHECK_FALSE(byB->leased);
    CHECK(byB->pruned == 0);
    CHECK(countRows(*sql, "rate_limits") == 20);
    // A keeps its lease pass after pass.
    auto again = a.sweepOnce();
    REQUIRE(again.ok());
    CHECK(again->leased);
    CHECK(again->pruned == 10);

    // A machine gone quiet for a whole period loses the lease to the other.
    clock = kNow + 3 * options.intervalMs;
    auto takeover = b.sweepOnce();
    REQUIRE(takeover.ok());
    CHECK(takeover->leased);
    CHECK(takeover->pruned == 10);
    CHECK_FALSE(a.sweepOnce()->leased);
    CHECK(countRows(*sql, "rate_limits") == 0);
  }
}

}  // namespace
}  // namespace ot::controld
