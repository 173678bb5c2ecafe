// Storage: GCRA rate limits (exact budgets, concurrency across stores) and hourly usage, on
// SQLite and MariaDB.
#include <atomic>
#include <barrier>
#include <thread>

#include "tests/controld/test_database.h"

namespace ot::controld {
namespace {

using testing::countRows;
using testing::testDatabases;

constexpr int64_t kLimitsNow = 1'750'000'000'000;

TEST_CASE("store: GCRA allows exactly the burst at once, then one per interval") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    constexpr int64_t kInterval = 1000;
    constexpr int64_t kBurst = 3;
    auto acquire = [&](int64_t now) {
      auto decision = store->acquireRate("create:192.0.2.1", now, kInterval, kBurst);
      REQUIRE(decision.ok());
      return decision.value();
    };
    for (int i = 0; i < kBurst; ++i) CHECK(acquire(kLimitsNow).allowed);
    RateDecision refused = acquire(kLimitsNow);
    CHECK_FALSE(refused.allowed);
    CHECK(refused.retryAfterMs == 1000);
    // A refusal does not spend budget.
    refused = acquire(kLimitsNow + 999);
    CHECK_FALSE(refused.allowed);
    CHECK(refused.retryAfterMs == 1);

    CHECK(acquire(kLimitsNow + 1000).allowed);
    refused = acquire(kLimitsNow + 1000);
    CHECK_FALSE(refused.allowed);
    CHECK(refused.retryAfterMs == 1000);
    CHECK(acquire(kLimitsNow + 2500).allowed);
    CHECK_FALSE(acquire(kLimitsNow + 2500).allowed);

    // After a long quiet spell the whole burst is back, and no more.
    for (int i = 0; i < kBurst; ++i) CHECK(acquire(kLimitsNow + 100'000).allowed);
    CHECK_FALSE(acquire(kLimitsNow + 100'000).allowed);

    // Keys are independent; bad parameters are refused.
    CHECK(store->acquireRate("create:192.0.2.2", kLimitsNow, kInterval, 1).value().allowed);
    CHECK_FALSE(store->acquireRate("create:192.0.2.2", kLimitsNow, kInterval, 1).value().allowed);
    CHECK(store->acquireRate("k", kLimitsNow, 0, 1).error().kind == ErrorKind::kInvalid);
    CHECK(store->acquireRate("k", kLimitsNow, 1000, 0).error().kind == ErrorKind::kInvalid);
  }
}

TEST_CASE("store: concurrent acquireRate from two stores never exceeds the budget") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto first = db->openMigrated();
    auto second = db->open();
    constexpr int64_t kBurst = 10;
    constexpr int kAttemptsEach = 40;

    // A fresh key (both race to INSERT it), then the same key again a quarter of the burst
    // later (both race on the conditional UPDATE).
    for (const int64_t now : {kLimitsNow, kLimitsNow + 2'500}) {
      CAPTURE(now);
      std::atomic<int> allowed{0};
      std::barrier start(2);
      auto hammer = [&](SqlStore& store) {
        start.arrive_and_wait();
        for (int i = 0; i < kAttemptsEach; ++i) {
          auto decision = store.acquireRate("issue:contested", now, 1000, kBurst);
          CHECK(decision.ok());  // not REQUIRE: this runs on its own thread
          if (decision.ok() && decision->allowed) ++allowed;
        }
      };
      std::thread a([&] { hammer(*first); });
      std::thread b([&] { hammer(*second); });
      a.join();
      b.join();
      // At kLimitsNow the whole burst; 2.5 s later, two intervals' worth came back.
      CHECK(allowed.load() == (now == kLimitsNow ? kBurst : 2));
    }
  }
}

TEST_CASE("store: pruning drops only keys whose budget is full again") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    REQUIRE(
        store->acquireRate("short", kLimitsNow, 1000, 5).value().allowed);  // full at kLimitsNow+1s
    REQUIRE(store->acquireRate("long", kLimitsNow, 60'000, 5)
                .value()
                .allowed);  // full at kLimitsNow+60s
    auto pruned = store->pruneRates(kLimitsNow + 1000, 100);
    REQUIRE(pruned.ok());
    CHECK(*pruned == 1);
    CHECK(store->pruneRates(kLimitsNow, 0).error().kind == ErrorKind::kInvalid);
    auto sql = db->raw();
    CHECK(countRows(*sql, "rate_limits") == 1);
    std::string key;
    *sql << "SELECT k FROM rate_limits", soci::into(key);
    CHECK(key == "long");
    // A pruned key starts over with its full burst.
    for (int i = 0; i < 5; ++i)
      CHECK(store->acquireRate("short", kLimitsNow + 1000, 1000, 5)->allowed);
    CHECK_FALSE(store->acquireRate("short", kLimitsNow + 1000, 1000, 5)->allowed);
  }
}

TEST_CASE("store: usage from several reporters adds up per tunnel and hour") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto first = db->openMigrated();
    auto second = db->open();
    constexpr int64_t kHour = 1'749'999'600'000;
    REQUIRE(first->addUsage("alpha", kHour, 100, 1000, 1).ok());
    REQUIRE(second->addUsage("alpha", kHour, 20, 300, 2).ok());
    REQUIRE(first->addUsage("alpha", kHour + 3'600'000, 5, 6, 7).ok());
    REQUIRE(second->addUsage("bravo", kHour, 1, 1, 1).ok());
    // Large values stay exact (64-bit columns).
    REQUIRE(first->addUsage("alpha", kHour, 5'000'000'000'000, 0, 0).ok());

    auto sql = db->raw();
    long long bytesIn = 0;
    long long bytesOut = 0;
    long long connections = 0;
    long long hour = kHour;
    *sql << "SELECT bytes_in, bytes_out, connections FROM usage_hourly"
            " WHERE tunnel_id = 'alpha' AND hour_start = :h",
        soci::into(bytesIn), soci::into(bytesOut), soci::into(connections), soci::use(hour);
    CHECK(bytesIn == 5'000'000'000'120);
    CHECK(bytesOut == 1300);
    CHECK(connections == 3);
    CHECK(countRows(*sql, "usage_hourly") == 3);
  }
}

}  // namespace
}  // namespace ot::controld
