// GET /api/tunnel/{id}/usage (docs/api.md "Usage"): the windows and buckets (usage_series.h), the
// store's range read on SQLite and MariaDB, and the route end to end through the router: the
// token first, the period, hourly and daily sums of what the usage recorder wrote.
#include <doctest/doctest.h>

#include "controld/api/usage_series.h"
#include "tests/controld/api_test_support.h"

namespace ot::controld {
namespace {

using testing::checkError;
using testing::kStartMs;
using testing::parseBody;
using testing::TestApi;
using testing::testDatabases;

constexpr int64_t kHour = 3'600'000;
constexpr int64_t kDay = 24 * kHour;
// 2023-11-14T22:13:20Z: 22:00 is its hour, 2023-11-14 its UTC day.
constexpr int64_t kNowHour = kStartMs - 13 * 60'000 - 20'000;
constexpr int64_t kNowDay = kNowHour - 22 * kHour;

TEST_CASE("usage: periods, query values and windows") {
  CHECK(parseUsagePeriod("24h") == UsagePeriod::kDay);
  CHECK(parseUsagePeriod("30d") == UsagePeriod::kMonth);
  CHECK_FALSE(parseUsagePeriod("7d").has_value());
  CHECK_FALSE(parseUsagePeriod("").has_value());

  CHECK(queryValue("period=30d", "period") == "30d");
  CHECK(queryValue("a=1&period=24h&b", "period") == "24h");
  CHECK(queryValue("periods=1&period", "period") == "");
  CHECK_FALSE(queryValue("", "period").has_value());
  CHECK_FALSE(queryValue("xperiod=1", "period").has_value());

  const UsageWindow day = usageWindow(UsagePeriod::kDay, kStartMs);
  CHECK(day.buckets == 24);
  CHECK(day.bucketMs == kHour);
  CHECK(day.toMs == kNowHour + kHour);  // the current hour is the last bucket
  CHECK(day.fromMs == kNowHour - 23 * kHour);

  const UsageWindow month = usageWindow(UsagePeriod::kMonth, kStartMs);
  CHECK(month.buckets == 30);
  CHECK(month.bucketMs == kDay);
  CHECK(month.toMs == kNowDay + kDay);
  CHECK(month.fromMs == kNowDay - 29 * kDay);
}

TEST_CASE("usage: hours fold into zero-filled buckets; outside the window is ignored") {
  const UsageWindow month = usageWindow(UsagePeriod::kMonth, kStartMs);
  const std::vector<UsageHour> hours = {
      {kNowDay - 30 * kDay, 999, 999, 9},                              // a day before the window
      {kNowDay - 29 * kDay, 1, 2, 1},                                  // the first bucket
      {kNowDay + 3 * kHour, 10, 20, 1},                                // today, twice
      {kNowDay + 22 * kHour, 100, 200, 2}, {kNowDay + kDay, 7, 7, 7},  // tomorrow: after the window
  };
  const std::vector<UsageBucket> buckets = usageBuckets(month, hours);
  REQUIRE(buckets.size() == 30);
  CHECK(buckets.front() == UsageBucket{kNowDay - 29 * kDay, 1, 2, 1});
  CHECK(buckets.back() == UsageBucket{kNowDay, 110, 220, 3});
  for (size_t i = 1; i + 1 < buckets.size(); ++i) {
    CHECK(buckets[i] == UsageBucket{kNowDay - static_cast<int64_t>(29 - i) * kDay, 0, 0, 0});
  }

  const std::vector<UsageBucket> saturated = usageBuckets(
      usageWindow(UsagePeriod::kDay, kStartMs),
      {{kNowHour, INT64_MAX, 1, 1}, {kNowHour, 5, 1, 1}});  // two reporters' rows of one hour
  CHECK(saturated.back().bytesIn == INT64_MAX);
  CHECK(saturated.back().bytesOut == 2);
}

TEST_CASE("usage: the store reads a tunnel's hours in a range, oldest first") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    REQUIRE(store->addUsage("alpha", kNowHour, 100, 1000, 1).ok());
    REQUIRE(store->addUsage("alpha", kNowHour, 5, 6, 1).ok());
    REQUIRE(store->addUsage("alpha", kNowHour - 2 * kHour, 1, 2, 3).ok());
    REQUIRE(store->addUsage("alpha", kNowHour - 5 * kHour, 9, 9, 9).ok());
    REQUIRE(store->addUsage("bravo", kNowHour, 7, 7, 7).ok());

    auto hours = store->usageHours("alpha", kNowHour - 4 * kHour, kNowHour + kHour);
    REQUIRE(hours.ok());
    CHECK(*hours ==
          std::vector<UsageHour>{{kNowHour - 2 * kHour, 1, 2, 3}, {kNowHour, 105, 1006, 2}});
    CHECK(store->usageHours("alpha", kNowHour + kHour, kNowHour + 2 * kHour)->empty());
    CHECK(store->usageHours("ALPHA", 0, kNowHour + kHour)->empty());  // IDs are case-sensitive
  }
}

ApiResponse usageCall(const TestApi& api, const std::string& id, const std::string& token,
                      const std::string& query = "") {
  ApiRequest request;
  request.method = "GET";
  request.path = "/api/tunnel/" + id + "/usage";
  request.query = query;
  if (!token.empty()) request.headers.emplace_back("Authorization", "Bearer " + token);
  request.clientAddress = testing::kClient;
  return api.router().handle(request);
}

TEST_CASE("usage: the route answers the tunnel's buckets with its token only") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    TestApi api(*store);
    const auto tunnel = api.create();
    const auto other = api.create();
    REQUIRE(store->addUsage(tunnel.id, kNowHour, 4096, 65536, 2).ok());
    REQUIRE(store->addUsage(tunnel.id, kNowHour - 3 * kHour, 10, 20, 1).ok());
    REQUIRE(store->addUsage(tunnel.id, kNowDay - 10 * kDay, 1000, 2000, 5).ok());
    REQUIRE(store->addUsage(other.id, kNowHour, 1, 1, 1).ok());

    const ApiResponse day = usageCall(api, tunnel.id, tunnel.token);
    REQUIRE(day.status == 200);
    const auto body = parseBody(day);
    CHECK(body["id"] == tunnel.id);
    CHECK(body["period"] == "24h");
    CHECK(body["bucketSeconds"] == 3600);
    CHECK(body["from"] == "2023-11-13T23:00:00.000Z");
    CHECK(body["to"] == "2023-11-14T23:00:00.000Z");
    REQUIRE(body["buckets"].size() == 24);
    CHECK(body["buckets"][23] == nlohmann::ordered_json{{"start", "2023-11-14T22:00:00.000Z"},
                                                        {"bytesIn", 4096},
                                                        {"bytesOut", 65536},
                                                        {"connections", 2}});
    CHECK(body["buckets"][20]["bytesOut"] == 20);
    CHECK(body["buckets"][0]["bytesOut"] == 0);
    CHECK(body["total"] ==
          nlohmann::ordered_json{{"bytesIn", 4106}, {"bytesOut", 65556}, {"connections", 3}});

    const ApiResponse month = usageCall(api, tunnel.id, tunnel.token, "period=30d");
    REQUIRE(month.status == 200);
    const auto monthBody = parseBody(month);
    CHECK(monthBody["bucketSeconds"] == 86400);
    REQUIRE(monthBody["buckets"].size() == 30);
    CHECK(monthBody["buckets"][29]["bytesIn"] == 4106);
    CHECK(monthBody["buckets"][19]["start"] == "2023-11-04T00:00:00.000Z");
    CHECK(monthBody["buckets"][19]["bytesIn"] == 1000);
    CHECK(monthBody["total"]["connections"] == 8);

    // The clock moves on: the window follows it.
    api.clock.advance(2 * kHour);
    CHECK(parseBody(usageCall(api, tunnel.id, tunnel.token))["buckets"][21]["bytesIn"] == 4096);

    checkError(usageCall(api, tunnel.id, tunnel.token, "period=1y"), 400, "BadRequestError");
    checkError(usageCall(api, tunnel.id, ""), 401, "UnauthorizedError");
    checkError(usageCall(api, tunnel.id, other.token), 401, "UnauthorizedError");
    // Without a valid token, a bad period is not even looked at.
    checkError(usageCall(api, tunnel.id, other.token, "period=1y"), 401, "UnauthorizedError");
    checkError(usageCall(api, "nosuchtunnel", tunnel.token), 404, "NotFoundError");
    REQUIRE(
        api.call("DELETE", "/api/tunnel/" + tunnel.id, "", testing::bearer(tunnel.token)).status ==
        200);
    checkError(usageCall(api, tunnel.id, tunnel.token), 404, "NotFoundError");
    CHECK(api.router()
              .handle(ApiRequest{
                  "POST", "/api/tunnel/" + other.id + "/usage", "", {}, "", testing::kClient})
              .status == 405);
  }
}

}  // namespace
}  // namespace ot::controld
