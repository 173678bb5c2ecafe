// Usage per origin (docs/pools-usage.md) on SQLite and MariaDB: relayd's TunnelCounters.origins
// become rows beside the tunnel's total (origin ""), the total is never a sum of them, schema 1's
// usage_hourly is migrated with its rows kept as totals, and GET /api/tunnel/{id}/usage adds the
// per-origin series (and takes ?range= as well as ?period=).
#include <doctest/doctest.h>

#include "controld/api/usage_series.h"
#include "controld/relays/usage_recorder.h"
#include "tests/controld/api_test_support.h"

namespace ot::controld {
namespace {

using testing::countRows;
using testing::kStartMs;
using testing::parseBody;
using testing::TestApi;
using testing::testDatabases;

namespace v1 = ::opentunnel::control::v1;

constexpr int64_t kUsageHour = 3'600'000;
constexpr int64_t kUsageDay = 24 * kUsageHour;
// 2023-11-14T22:13:20Z: 22:00 is its hour.
constexpr int64_t kUsageNowHour = kStartMs - 13 * 60'000 - 20'000;

v1::Counters counters(int64_t endMs) {
  v1::Counters report;
  report.set_interval_end_unix_ms(endMs);
  v1::TunnelCounters* tunnel = report.add_tunnels();
  tunnel->set_tunnel_id("alpha");
  tunnel->set_bytes_in(130);
  tunnel->set_bytes_out(1300);
  tunnel->set_connections(4);
  auto origin = [tunnel](const std::string& name, uint64_t in, uint64_t out, uint64_t conns) {
    v1::OriginCounters* share = tunnel->add_origins();
    share->set_origin(name);
    share->set_bytes_in(in);
    share->set_bytes_out(out);
    share->set_connections(conns);
  };
  origin("east", 100, 1000, 2);
  origin("west", 20, 200, 1);
  origin("bad name", 5, 5, 1);  // not an origin name: kept out of the split
  origin("idle", 0, 0, 0);
  return report;
}

TEST_CASE("usage per origin: a report gives the total row and one row per named origin") {
  const int64_t end = kUsageNowHour + 5 * 60'000;
  const std::vector<UsageRow> rows = usageRows(counters(end), 0);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0] == UsageRow{"alpha", kUsageNowHour, 130, 1300, 4, ""});
  CHECK(rows[1] == UsageRow{"alpha", kUsageNowHour, 100, 1000, 2, "east"});
  CHECK(rows[2] == UsageRow{"alpha", kUsageNowHour, 20, 200, 1, "west"});
}

TEST_CASE("usage per origin: the recorder writes totals and shares, each added once") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    UsageRecorder recorder(*store);
    recorder.add(counters(kUsageNowHour + 1000));
    recorder.add(counters(kUsageNowHour + 2000));  // the same hour: summed in memory, one row each
    REQUIRE(recorder.pending() == 3);
    REQUIRE(recorder.flush().ok());
    auto sql = db->raw();
    CHECK(countRows(*sql, "usage_hourly") == 3);

    auto totals = store->usageHours("alpha", kUsageNowHour, kUsageNowHour + kUsageHour);
    REQUIRE(totals.ok());
    // The total is relayd's, not the sum of the shares (which leaves out "bad name").
    CHECK(*totals == std::vector<UsageHour>{{kUsageNowHour, 260, 2600, 8}});
    auto shares = store->usageOriginHours("alpha", kUsageNowHour, kUsageNowHour + kUsageHour);
    REQUIRE(shares.ok());
    CHECK(*shares == std::vector<UsageOriginHour>{{"east", kUsageNowHour, 200, 2000, 4},
                                                  {"west", kUsageNowHour, 40, 400, 2}});
  }
}

TEST_CASE("usage per origin: the store keeps shares apart from totals, by origin and hour") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    REQUIRE(store->addUsage("alpha", kUsageNowHour, 30, 300, 3).ok());
    REQUIRE(store->addOriginUsage("alpha", kUsageNowHour, "west", 10, 100, 1).ok());
    REQUIRE(store->addOriginUsage("alpha", kUsageNowHour, "east", 20, 200, 2).ok());
    REQUIRE(store->addOriginUsage("alpha", kUsageNowHour - kUsageHour, "west", 1, 2, 1).ok());
    REQUIRE(
        store->addOriginUsage("alpha", kUsageNowHour, "west", 1, 1, 1).ok());  // a second reporter
    REQUIRE(store->addOriginUsage("alpha", kUsageNowHour - 9 * kUsageHour, "east", 7, 7, 7).ok());
    REQUIRE(store->addOriginUsage("bravo", kUsageNowHour, "east", 5, 5, 5).ok());
    REQUIRE(
        store->addOriginUsage("alpha", kUsageNowHour, "East", 9, 9, 9).ok());  // names are exact

    auto totals =
        store->usageHours("alpha", kUsageNowHour - 2 * kUsageHour, kUsageNowHour + kUsageHour);
    REQUIRE(totals.ok());
    CHECK(*totals == std::vector<UsageHour>{{kUsageNowHour, 30, 300, 3}});
    auto shares = store->usageOriginHours("alpha", kUsageNowHour - 2 * kUsageHour,
                                          kUsageNowHour + kUsageHour);
    REQUIRE(shares.ok());
    CHECK(*shares == std::vector<UsageOriginHour>{{"East", kUsageNowHour, 9, 9, 9},
                                                  {"east", kUsageNowHour, 20, 200, 2},
                                                  {"west", kUsageNowHour - kUsageHour, 1, 2, 1},
                                                  {"west", kUsageNowHour, 11, 101, 2}});
    CHECK(store->usageOriginHours("bravo", 0, kUsageNowHour)->empty());
  }
}

// usage_hourly as schema 1 created it.
void createSchemaOne(soci::session& sql, SqlDialect dialect) {
  if (dialect == SqlDialect::kMysql) {
    sql << "CREATE TABLE usage_hourly (tunnel_id VARCHAR(63) NOT NULL,"
           " hour_start BIGINT NOT NULL, bytes_in BIGINT NOT NULL, bytes_out BIGINT NOT NULL,"
           " connections BIGINT NOT NULL, PRIMARY KEY (tunnel_id, hour_start))"
           " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin";
    sql << "CREATE TABLE schema_migrations (version INT NOT NULL, applied_at BIGINT NOT NULL,"
           " PRIMARY KEY (version)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin";
  } else {
    sql << "CREATE TABLE usage_hourly (tunnel_id TEXT NOT NULL, hour_start INTEGER NOT NULL,"
           " bytes_in INTEGER NOT NULL, bytes_out INTEGER NOT NULL,"
           " connections INTEGER NOT NULL, PRIMARY KEY (tunnel_id, hour_start))";
    sql << "CREATE TABLE schema_migrations (version INTEGER NOT NULL PRIMARY KEY,"
           " applied_at INTEGER NOT NULL)";
  }
  sql << "INSERT INTO schema_migrations (version, applied_at) VALUES (1, 0)";
  sql << "INSERT INTO usage_hourly (tunnel_id, hour_start, bytes_in, bytes_out, connections)"
         " VALUES ('alpha', "
      << kUsageNowHour << ", 100, 1000, 3)";
  sql << "INSERT INTO usage_hourly (tunnel_id, hour_start, bytes_in, bytes_out, connections)"
         " VALUES ('alpha', "
      << kUsageNowHour - kUsageHour << ", 1, 2, 1)";
}

TEST_CASE("usage per origin: schema 1's usage table is migrated, its rows kept as totals") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    {
      auto sql = db->raw();
      createSchemaOne(*sql, db->dialect());
    }
    auto store = db->open();
    auto report = store->migrateWithReport();
    REQUIRE_MESSAGE(report.ok(), (report.ok() ? "" : report.error().message));
    CHECK(report->foundVersion == 1);
    CHECK(report->altered == std::vector<std::string>{"usage_hourly"});
    CHECK(report->recordedVersion);
    auto sql = db->raw();
    CHECK(recordedSchemaVersion(*sql, db->dialect()) == kSchemaVersion);
    CHECK(countRows(*sql, "usage_hourly") == 2);

    auto totals = store->usageHours("alpha", kUsageNowHour - kUsageDay, kUsageNowHour + kUsageHour);
    REQUIRE(totals.ok());
    CHECK(*totals == std::vector<UsageHour>{{kUsageNowHour - kUsageHour, 1, 2, 1},
                                            {kUsageNowHour, 100, 1000, 3}});
    // The old rows are the totals new reports add to; shares go beside them.
    REQUIRE(store->addUsage("alpha", kUsageNowHour, 10, 10, 1).ok());
    REQUIRE(store->addOriginUsage("alpha", kUsageNowHour, "east", 10, 10, 1).ok());
    CHECK(store->usageHours("alpha", kUsageNowHour, kUsageNowHour + kUsageHour)->front() ==
          UsageHour{kUsageNowHour, 110, 1010, 4});
    CHECK(store->usageOriginHours("alpha", kUsageNowHour, kUsageNowHour + kUsageHour)->size() == 1);

    // Another controld starting afterwards finds nothing to do.
    auto again = db->open()->migrateWithReport();
    REQUIRE(again.ok());
    CHECK(again->foundVersion == kSchemaVersion);
    CHECK(again->altered.empty());
    CHECK(again->created.empty());
  }
}

TEST_CASE("usage per origin: the API adds each origin's series beside the tunnel's") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    TestApi api(*store);
    const auto tunnel = api.create();
    REQUIRE(store->addUsage(tunnel.id, kUsageNowHour, 40, 400, 4).ok());
    REQUIRE(store->addOriginUsage(tunnel.id, kUsageNowHour, "west", 30, 300, 2).ok());
    REQUIRE(store->addUsage(tunnel.id, kUsageNowHour - 2 * kUsageHour, 5, 6, 1).ok());
    REQUIRE(store->addOriginUsage(tunnel.id, kUsageNowHour - 2 * kUsageHour, "east", 5, 6, 1).ok());
    REQUIRE(store->addOriginUsage(tunnel.id, kUsageNowHour - 3 * kUsageDay, "north", 7, 7, 7).ok());

    auto call = [&](const std::string& query) {
      ApiRequest request;
      request.method = "GET";
      request.path = "/api/tunnel/" + tunnel.id + "/usage";
      request.query = query;
      request.headers.emplace_back("Authorization", "Bearer " + tunnel.token);
      request.clientAddress = testing::kClient;
      return api.router().handle(request);
    };
    const ApiResponse day = call("");
    REQUIRE(day.status == 200);
    const auto body = parseBody(day);
    CHECK(body["total"] ==
          nlohmann::ordered_json{{"bytesIn", 45}, {"bytesOut", 406}, {"connections", 5}});
    REQUIRE(body["origins"].size() == 2);  // north's usage is outside the 24 hours
    CHECK(body["origins"][0]["origin"] == "east");
    CHECK(body["origins"][0]["buckets"].size() == 24);
    CHECK(body["origins"][0]["buckets"][21]["bytesOut"] == 6);
    CHECK(body["origins"][0]["buckets"][21]["start"] == body["buckets"][21]["start"]);
    CHECK(body["origins"][0]["total"] ==
          nlohmann::ordered_json{{"bytesIn", 5}, {"bytesOut", 6}, {"connections", 1}});
    CHECK(body["origins"][1]["origin"] == "west");
    CHECK(body["origins"][1]["buckets"][23]["bytesIn"] == 30);
    CHECK(body["origins"][1]["total"]["connections"] == 2);

    for (const char* query : {"period=30d", "range=30d"}) {
      CAPTURE(query);
      const auto month = parseBody(call(query));
      CHECK(month["period"] == "30d");
      REQUIRE(month["origins"].size() == 3);
      CHECK(month["origins"][1]["origin"] == "north");
      CHECK(month["origins"][1]["buckets"][26]["bytesIn"] == 7);
      CHECK(month["total"]["bytesIn"] == 45);  // north's share is not added to the total
    }
    CHECK(call("range=1y").status == 400);
    CHECK(parseBody(call("period=24h&range=30d"))["period"] == "24h");  // period wins

    // A tunnel without origins: an empty list, the rest as before.
    const auto plain = api.create();
    REQUIRE(store->addUsage(plain.id, kUsageNowHour, 1, 1, 1).ok());
    ApiRequest request;
    request.method = "GET";
    request.path = "/api/tunnel/" + plain.id + "/usage";
    request.headers.emplace_back("Authorization", "Bearer " + plain.token);
    request.clientAddress = testing::kClient;
    const auto plainBody = parseBody(api.router().handle(request));
    CHECK(plainBody["origins"] == nlohmann::ordered_json::array());
    CHECK(plainBody["total"]["bytesIn"] == 1);
  }
}

TEST_CASE("usage per origin: rows group per origin by name") {
  const std::vector<OriginUsage> grouped =
      usageByOrigin({{"west", kUsageNowHour, 1, 1, 1},
                     {"east", kUsageNowHour, 2, 2, 2},
                     {"west", kUsageNowHour - kUsageHour, 3, 3, 3}});
  REQUIRE(grouped.size() == 2);
  CHECK(grouped[0].origin == "east");
  CHECK(grouped[1].origin == "west");
  CHECK(grouped[1].hours ==
        std::vector<UsageHour>{{kUsageNowHour, 1, 1, 1}, {kUsageNowHour - kUsageHour, 3, 3, 3}});
}

}  // namespace
}  // namespace ot::controld
