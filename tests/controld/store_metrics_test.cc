// StoreMetrics (through SqlStore::run) and JobGauges on a real SQLite store: what the scrape shows
// after real calls.
#include "controld/store/store_metrics.h"

#include <string>

#include "common/clock.h"
#include "common/metrics.h"
#include "controld/issuance/job_gauges.h"
#include "controld/store/sql_store.h"
#include "tests/controld/test_database.h"

namespace ot::controld {
namespace {

using testing::sampleTunnel;
using testing::TestDatabase;

bool contains(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST_CASE("store metrics: pool stats count open and leased connections") {
  const auto db = TestDatabase::sqlite();
  metrics::Metrics metrics;
  const auto owned = db->openMigrated(&metrics);
  SqlStore& store = *owned;
  REQUIRE(store.ping().ok());
  // Calls one after another reuse one connection; none is lent out between calls.
  REQUIRE(store.getTunnel("nobody").ok());
  const PoolStats stats = store.poolStats();
  CHECK(stats.open == 1);
  CHECK(stats.inUse == 0);
}

TEST_CASE("store metrics: times each call and counts failures by operation") {
  const auto db = TestDatabase::sqlite();
  metrics::Metrics metrics;
  const auto owned = db->openMigrated(&metrics);
  SqlStore& store = *owned;

  // Every operation is scraped before its first call.
  std::string text = metrics.render();
  CHECK(contains(text, R"(opentunnel_db_query_duration_seconds_count{operation="getTunnel"} 0)"));
  CHECK(contains(text, R"(opentunnel_db_query_duration_seconds_count{operation="addUsage"} 0)"));
  CHECK(contains(text, R"(opentunnel_db_errors_total{operation="insertTunnel"} 0)"));
  CHECK(contains(text, R"(opentunnel_db_errors_total{operation="migrate"} 0)"));

  REQUIRE(store.insertTunnel(sampleTunnel("metrics-one")).ok());
  const auto got = store.getTunnel("metrics-one");
  REQUIRE(got.ok());
  REQUIRE(got->has_value());
  CHECK((*got)->record.id == "metrics-one");
  const auto duplicate = store.insertTunnel(sampleTunnel("metrics-one"));
  REQUIRE_FALSE(duplicate.ok());
  CHECK(duplicate.error().kind == ErrorKind::kConflict);

  text = metrics.render();
  CHECK(contains(text, R"(opentunnel_db_query_duration_seconds_count{operation="getTunnel"} 1)"));
  CHECK(contains(text, R"(opentunnel_db_errors_total{operation="getTunnel"} 0)"));
  CHECK(
      contains(text, R"(opentunnel_db_query_duration_seconds_count{operation="insertTunnel"} 2)"));
  CHECK(contains(text, R"(opentunnel_db_errors_total{operation="insertTunnel"} 1)"));
  CHECK(contains(text, R"(opentunnel_db_query_duration_seconds_count{operation="ping"} 0)"));
  // Labels name the method only, never the tunnel.
  CHECK(text.find("metrics-one") == std::string::npos);
}

TEST_CASE("store metrics: job gauges count pending and failed jobs, keep them on errors") {
  const auto db = TestDatabase::sqlite();
  metrics::Metrics metrics;
  const auto owned = db->openMigrated(&metrics);
  SqlStore& store = *owned;
  JobGauges gauges(store, metrics);

  CHECK(contains(metrics.render(), R"(opentunnel_certificate_jobs{status="pending"} 0)"));
  for (const char* id : {"job-a", "job-b"}) {
    Job job;
    job.id = id;
    job.tunnelId = "t";
    REQUIRE(store.addJob(job).ok());
  }
  // A finished job's next_run_at is when it finished: only failures of the last 24 h count.
  const int64_t nowMs = unixNowMs();
  Job failed;
  failed.id = "job-c";
  failed.tunnelId = "t";
  failed.status = JobStatus::kFailed;
  failed.nextRunAtMs = nowMs - 60'000;
  REQUIRE(store.addJob(failed).ok());
  Job oldFailure = failed;
  oldFailure.id = "job-d";
  oldFailure.nextRunAtMs = nowMs - 25LL * 3600 * 1000;
  REQUIRE(store.addJob(oldFailure).ok());

  gauges.refresh();
  std::string text = metrics.render();
  CHECK(contains(text, R"(opentunnel_certificate_jobs{status="pending"} 2)"));
  CHECK(contains(text, R"(opentunnel_certificate_jobs{status="failed"} 1)"));

  // The counts cannot be read: the gauges keep the last values, and the errors are counted.
  *db->raw() << "DROP TABLE jobs";
  gauges.refresh();
  text = metrics.render();
  CHECK(contains(text, R"(opentunnel_certificate_jobs{status="pending"} 2)"));
  CHECK(contains(text, R"(opentunnel_certificate_jobs{status="failed"} 1)"));
  CHECK(contains(text, R"(opentunnel_db_errors_total{operation="countJobs"} 2)"));

  // The thread reads at start and stops promptly.
  gauges.start();
  gauges.stop();
}

}  // namespace
}  // namespace ot::controld
