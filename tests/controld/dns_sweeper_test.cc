// DnsSweeper with the fake Cloudflare API (dns_fake_cloudflare.h) and a SQLite store: which
// records a sweep deletes, the cap per sweep, the lease that keeps a second machine out, and the
// thread stopping promptly. Plus the pure selection.
#include "controld/acme/dns_sweeper.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/metrics.h"
#include "controld/acme/dns_cloudflare.h"
#include "controld/acme/dns_record_metrics.h"
#include "tests/controld/dns_fake_cloudflare.h"
#include "tests/controld/test_database.h"

namespace ot::controld {
namespace {

using testing::FakeCloudflare;
using testing::TestDatabase;

constexpr const char* kSweeperZone = "0123456789abcdef0123456789abcdef";
constexpr const char* kSweeperToken = "sweeper-token";
constexpr const char* kSweeperValue = "dGhpcyBpcyBhIGNoYWxsZW5nZSB2YWx1ZSBvZiA0Mw_";
constexpr int64_t kNow = 1'800'000'000'000;
constexpr int64_t kSweeperMinute = 60'000;

CloudflareOptions cloudflareOptions(const FakeCloudflare& fake) {
  CloudflareOptions options;
  options.zoneId = kSweeperZone;
  options.apiToken = kSweeperToken;
  options.apiUrl = fake.baseUrl();
  options.pageSize = 4;
  options.sleepMs = [](int64_t) {};
  return options;
}

DnsSweeperOptions sweeperOptions(const std::string& owner, const ManualClock& clock) {
  DnsSweeperOptions options;
  options.domain = "tunnel.test";
  options.owner = owner;
  options.deletesPerSecond = 1000;
  options.nowMs = clock.clock();
  return options;
}

std::set<std::string> remainingNames(FakeCloudflare& fake) {
  std::set<std::string> names;
  for (const auto& [id, record] : fake.records()) names.insert(record.name);
  return names;
}

// The zone of the scenario: four records a sweep deletes and five it keeps.
void seed(FakeCloudflare& fake) {
  fake.addRecord("_acme-challenge.old1.tunnel.test", kSweeperValue, kNow - 120 * kSweeperMinute);
  fake.addRecord("_acme-challenge.old2.tunnel.test", kSweeperValue, kNow - 61 * kSweeperMinute);
  fake.addRecord("_acme-challenge.tunnel.test", kSweeperValue,
                 kNow - 300 * kSweeperMinute);  // API domain
  fake.addRecord("_acme-challenge.old3.tunnel.test", kSweeperValue,
                 kNow - 60 * kSweeperMinute);  // exactly 1 h
  fake.addRecord("_acme-challenge.new.tunnel.test", kSweeperValue, kNow - 30 * kSweeperMinute);
  fake.addRecord("_acme-challenge.text.tunnel.test", "not a challenge value",
                 kNow - 120 * kSweeperMinute);
  fake.addRecord("_acme-challenge.busy.tunnel.test", kSweeperValue, kNow - 120 * kSweeperMinute);
  fake.addRecord("_acme-challenge.x.other.test", kSweeperValue, kNow - 120 * kSweeperMinute);
  fake.addRecord("www.tunnel.test", kSweeperValue, kNow - 120 * kSweeperMinute);
}

const std::set<std::string> kKept = {
    "_acme-challenge.new.tunnel.test", "_acme-challenge.text.tunnel.test",
    "_acme-challenge.busy.tunnel.test", "_acme-challenge.x.other.test", "www.tunnel.test"};

TEST_CASE("dns sweeper: deletes old challenge records, keeps new, foreign and active ones") {
  auto db = TestDatabase::sqlite();
  auto store = db->openMigrated();
  FakeCloudflare fake(kSweeperZone, kSweeperToken);
  seed(fake);
  CloudflareDns dns(cloudflareOptions(fake));
  metrics::Metrics metrics;
  DnsRecordMetrics counters(metrics);
  ManualClock clock(kNow);
  DnsSweeperOptions options = sweeperOptions("machine-a", clock);
  options.activeNames = []() -> Result<std::set<std::string>> {
    return std::set<std::string>{"*.busy.tunnel.test", "gone.tunnel.test"};
  };
  DnsSweeper sweeper(*store, dns, options, &counters);

  auto report = sweeper.sweepOnce();
  REQUIRE_MESSAGE(report.ok(), (report.ok() ? "" : report.error().message));
  CHECK(report->leased);
  CHECK(report->listed == 7);  // the zone's _acme-challenge records under tunnel.test
  CHECK(report->stale == 4);
  CHECK(report->deleted == 4);
  CHECK(report->failed == 0);
  CHECK_FALSE(report->stopped);
  CHECK(remainingNames(fake) == kKept);
  CHECK(counters.swept.Value() == 4);
  CHECK(counters.deleteFailed.Value() == 0);
  CHECK(metrics.render().find("opentunnel_acme_dns_records_total{event=\"swept\"} 4") !=
        std::string::npos);

  auto lease = store->getMeta(kDnsSweeperMetaKey);
  REQUIRE(lease.ok());
  REQUIRE(lease->has_value());
  CHECK(**lease == "machine-a@" + std::to_string(kNow + 10 * kSweeperMinute));

  // A second sweep by the same machine renews its lease and finds nothing more to do.
  clock.advance(10 * kSweeperMinute);
  auto again = sweeper.sweepOnce();
  REQUIRE(again.ok());
  CHECK(again->leased);
  CHECK(again->deleted == 0);
  CHECK(remainingNames(fake).count("_acme-challenge.new.tunnel.test") == 1);
}

// Wraps a provider to wait for its calls and to fail deletes on demand.
class WatchedDns final : public DnsProvider {
 public:
  explicit WatchedDns(DnsProvider& inner) : inner_(inner) {}
  Result<TxtRecord> createTxt(const std::string& name, const std::string& value) override {
    return inner_.createTxt(name, value);
  }
  Status deleteTxt(const TxtRecord& record) override {
    Status status = failDeletes_ ? Status(Error{ErrorKind::kUnavailable, "injected"})
                                 : inner_.deleteTxt(record);
    {
      const std::lock_guard lock(mutex_);
      ++deletes_;
    }
    changed_.notify_all();
    return status;
  }
  Result<std::vector<TxtRecord>> listChallengeRecords(const std::string& domain) override {
    auto listed = inner_.listChallengeRecords(domain);
    {
      const std::lock_guard lock(mutex_);
      ++lists_;
    }
    changed_.notify_all();
    return listed;
  }
  [[nodiscard]] const char* name() const override { return "watched"; }

  bool waitFor(int lists, int deletes) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(10),
                             [&] { return lists_ >= lists && deletes_ >= deletes; });
  }
  void failDeletes(bool fail) { failDeletes_ = fail; }
  int deletes() {
    const std::lock_guard lock(mutex_);
    return deletes_;
  }

 private:
  DnsProvider& inner_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int lists_ = 0;
  int deletes_ = 0;
  std::atomic<bool> failDeletes_{false};
};

TEST_CASE("dns sweeper: at most max_deletes per sweep, oldest first; failures are counted") {
  auto db = TestDatabase::sqlite();
  auto store = db->openMigrated();
  FakeCloudflare fake(kSweeperZone, kSweeperToken);
  seed(fake);
  CloudflareDns cloudflare(cloudflareOptions(fake));
  WatchedDns dns(cloudflare);
  metrics::Metrics metrics;
  DnsRecordMetrics counters(metrics);
  ManualClock clock(kNow);
  DnsSweeperOptions options = sweeperOptions("machine-a", clock);
  options.maxDeletes = 2;
  DnsSweeper sweeper(*store, dns, options, &counters);
  auto report = sweeper.sweepOnce();
  REQUIRE(report.ok());
  CHECK(report->stale == 2);
  CHECK(report->deleted == 2);
  // The two oldest: the API domain's (5 h), then old1 (2 h, listed before busy).
  std::set<std::string> expected = kKept;
  expected.insert("_acme-challenge.old2.tunnel.test");
  expected.insert("_acme-challenge.old3.tunnel.test");
  CHECK(remainingNames(fake) == expected);

  // Deletes that fail are counted and reported; the sweep goes on to the next record.
  dns.failDeletes(true);
  clock.advance(10 * kSweeperMinute);
  auto failing = sweeper.sweepOnce();
  REQUIRE(failing.ok());
  CHECK(failing->stale == 2);
  CHECK(failing->deleted == 0);
  CHECK(failing->failed == 2);
  CHECK(counters.deleteFailed.Value() == 2);
  CHECK(counters.swept.Value() == 2);
  CHECK(remainingNames(fake) == expected);
}

TEST_CASE("dns sweeper: the lease lets one machine sweep at a time") {
  auto db = TestDatabase::sqlite();
  auto storeA = db->openMigrated();
  auto storeB = db->open();
  FakeCloudflare fake(kSweeperZone, kSweeperToken);
  seed(fake);
  CloudflareDns dns(cloudflareOptions(fake));
  ManualClock clock(kNow);
  DnsSweeper a(*storeA, dns, sweeperOptions("machine-a", clock), nullptr);
  DnsSweeper b(*storeB, dns, sweeperOptions("machine-b", clock), nullptr);

  // Both start at the same moment: exactly one takes the lease and deletes each record once.
  std::promise<void> go;
  std::shared_future<void> start = go.get_future().share();
  auto runA = std::async(std::launch::async, [&] {
    start.wait();
    return a.sweepOnce();
  });
  auto runB = std::async(std::launch::async, [&] {
    start.wait();
    return b.sweepOnce();
  });
  go.set_value();
  auto report_a = runA.get();
  auto report_b = runB.get();
  REQUIRE_MESSAGE(report_a.ok(), (report_a.ok() ? "" : report_a.error().message));
  REQUIRE_MESSAGE(report_b.ok(), (report_b.ok() ? "" : report_b.error().message));
  CHECK(report_a->leased != report_b->leased);
  CHECK(report_a->deleted + report_b->deleted == 5);  // busy is not active here
  size_t deletes = 0;
  for (const std::string& request : fake.requests()) deletes += request.rfind("DELETE", 0) == 0;
  CHECK(deletes == 5);
  const bool aWon = report_a->leased;
  DnsSweeper& winner = aWon ? a : b;
  DnsSweeper& loser = aWon ? b : a;

  // While the lease lasts the other machine does nothing, not even list.
  fake.addRecord("_acme-challenge.later.tunnel.test", kSweeperValue, kNow - 120 * kSweeperMinute);
  const size_t requestsBefore = fake.requests().size();
  clock.advance(10 * kSweeperMinute - 1);
  auto refused = loser.sweepOnce();
  REQUIRE(refused.ok());
  CHECK_FALSE(refused->leased);
  CHECK(refused->listed == 0);
  CHECK(fake.requests().size() == requestsBefore);

  // Once it runs out, the other machine takes it over.
  clock.advance(1);
  auto taken = loser.sweepOnce();
  REQUIRE(taken.ok());
  CHECK(taken->leased);
  CHECK(taken->deleted == 1);
  auto lease = storeA->getMeta(kDnsSweeperMetaKey);
  REQUIRE(lease.ok());
  REQUIRE(lease->has_value());
  CHECK(**lease == std::string(aWon ? "machine-b" : "machine-a") + "@" +
                       std::to_string(kNow + 20 * kSweeperMinute));
  auto shutOut = winner.sweepOnce();
  REQUIRE(shutOut.ok());
  CHECK_FALSE(shutOut->leased);
}

TEST_CASE("dns sweeper: the thread sweeps after its delay and stops promptly mid-sweep") {
  auto db = TestDatabase::sqlite();
  auto store = db->openMigrated();
  FakeCloudflare fake(kSweeperZone, kSweeperToken);
  seed(fake);
  CloudflareDns cloudflare(cloudflareOptions(fake));
  WatchedDns dns(cloudflare);
  ManualClock clock(kNow);
  DnsSweeperOptions options = sweeperOptions("machine-a", clock);
  options.initialDelayMs = 0;
  options.intervalMs = 3'600'000;
  options.deletesPerSecond = 0.001;  // 1,000 s between deletes: the sweep is still running
  DnsSweeper sweeper(*store, dns, options, nullptr);
  sweeper.start();
  REQUIRE(dns.waitFor(1, 1));
  const auto before = std::chrono::steady_clock::now();
  sweeper.stop();
  const auto took = std::chrono::steady_clock::now() - before;
  CHECK(took < std::chrono::seconds(2));
  CHECK(dns.deletes() == 1);
  CHECK(remainingNames(fake).size() == 8);
  // A stopped sweeper does not sweep again.
  auto after = sweeper.sweepOnce();
  REQUIRE(after.ok());
  CHECK(after->stopped);
  CHECK_FALSE(after->leased);
}

TEST_CASE("dns sweeper: an active-names failure skips the sweep") {
  auto db = TestDatabase::sqlite();
  auto store = db->openMigrated();
  FakeCloudflare fake(kSweeperZone, kSweeperToken);
  seed(fake);
  CloudflareDns dns(cloudflareOptions(fake));
  ManualClock clock(kNow);
  DnsSweeperOptions options = sweeperOptions("machine-a", clock);
  options.activeNames = []() -> Result<std::set<std::string>> {
    return Error{ErrorKind::kUnavailable, "database down"};
  };
  DnsSweeper sweeper(*store, dns, options, nullptr);
  auto report = sweeper.sweepOnce();
  REQUIRE_FALSE(report.ok());
  CHECK(report.error().message == "database down");
  CHECK(remainingNames(fake).size() == 9);
}

TEST_CASE("dns sweeper: selection rules") {
  CHECK(looksLikeChallengeValue(kSweeperValue));
  CHECK_FALSE(looksLikeChallengeValue(std::string(kSweeperValue) + "A"));
  CHECK_FALSE(looksLikeChallengeValue(std::string(kSweeperValue).substr(1)));
  CHECK_FALSE(looksLikeChallengeValue("dGhpcyBpcyBhIGNoYWxsZW5nZSB2YWx1ZSBvZiA0Mw="));
  CHECK_FALSE(looksLikeChallengeValue("dGhpcyBpcyBhIGNoYWxsZW5nZSB2YWx1ZSBvZiA0Mw+"));

  const int64_t old = kNow - 2 * 60 * kSweeperMinute;
  const std::vector<TxtRecord> records = {
      {"1", "_acme-challenge.A.Tunnel.Test", kSweeperValue, old},      // case does not matter
      {"2", "_acme-challenge.b.tunnel.test", kSweeperValue, 0},        // unknown age: kept
      {"3", "_acme-challenge.c.eviltunnel.test", kSweeperValue, old},  // not under the domain
      {"4", "_acme-challenge.d.tunnel.test", kSweeperValue, old + 1},
      {"5", "_acme-challenge.e.tunnel.test", kSweeperValue, old - 1},
      {"6", "acme-challenge.f.tunnel.test", kSweeperValue, old},  // not a challenge name
      {"7", "_acme-challenge.busy.tunnel.test", kSweeperValue, old},
  };
  const auto stale =
      staleChallengeRecords(records, "tunnel.test.", {"_acme-challenge.busy.tunnel.test."}, kNow,
                            60 * kSweeperMinute, 10);
  std::vector<std::string> ids;
  for (const TxtRecord& record : stale) ids.push_back(record.id);
  CHECK(ids == std::vector<std::string>{"5", "1", "4"});
  const auto capped =
      staleChallengeRecords(records, "tunnel.test", {}, kNow, 60 * kSweeperMinute, 2);
  REQUIRE(capped.size() == 2);
  CHECK(capped[0].id == "5");
  CHECK(capped[1].id == "1");
  CHECK(staleChallengeRecords(records, "", {}, kNow, 60 * kSweeperMinute, 10).empty());
}

}  // namespace
}  // namespace ot::controld
