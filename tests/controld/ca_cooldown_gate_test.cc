// The CA cool-down shared through meta (ca_cooldown_gate.h) on real storage, and the job runner
// obeying it: two machines count one run of failures, a machine reads the row at most every 15 s,
// while it lasts first issuance is not claimed and renewals run one at a time, and a renewal's
// success ends it for everyone.
#include "controld/issuance/ca_cooldown_gate.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "controld/acme/acme_metrics.h"
#include "controld/issuance/job_runner.h"
#include "tests/controld/forwarding_store.h"
#include "tests/controld/issuance_test_support.h"

namespace ot::controld {
namespace {

using issuance_testing::acmeAttempts;
using issuance_testing::bindTunnel;
using issuance_testing::editTunnel;
using issuance_testing::GateIssuer;
using issuance_testing::hostOf;
using issuance_testing::kDay;
using issuance_testing::kMinute;
using issuance_testing::loadCa;
using issuance_testing::loadJob;
using issuance_testing::Publisher;
using issuance_testing::runnerConfig;
using issuance_testing::runnerStores;
using issuance_testing::waitUntil;
using ot::ManualClock;
using testing::testDatabases;

FailureDetail caFailure() {
  FailureDetail detail;
  detail.failure = FailureClass::kTransient;
  detail.reason = "http_5xx";
  detail.pointsAtCa = true;
  detail.httpStatus = 502;
  return detail;
}

// Counts the reads of the cool-down row. The gate uses the meta role alone, so that is all this
// fake implements.
class CountingStore final : public MetaStore {
 public:
  explicit CountingStore(MetaStore& inner) : inner_(inner) {}
  Result<std::optional<std::string>> getMeta(const std::string& key) override {
    if (key == kCaCooldownMetaKey) ++reads;
    return inner_.getMeta(key);
  }
  Result<bool> insertMetaIfAbsent(const std::string& key, const std::string& value) override {
    return inner_.insertMetaIfAbsent(key, value);
  }
  Result<bool> compareAndSetMeta(const std::string& key, const std::string& expected,
                                 const std::string& value) override {
    return inner_.compareAndSetMeta(key, expected, value);
  }
  std::atomic<int> reads{0};

 private:
  MetaStore& inner_;
};

// Fails the next `failures` calls with `detail` (as the ACME issuer reports them), then passes
// calls on to `inner`. Records the first name of every call.
class DetailIssuer final : public Issuer {
 public:
  explicit DetailIssuer(Issuer& inner) : inner_(inner) {}

  void failNext(int failures, FailureDetail detail) {
    const std::lock_guard lock(mutex_);
    failures_ = failures;
    detail_ = detail;
  }
  Result<IssuedCertificate> issue(const IssueRequest& request,
                                  const std::atomic<bool>& cancel) override {
    FailureDetail ignored;
    return issueDetailed(request, cancel, ignored);
  }
  Result<IssuedCertificate> issueDetailed(const IssueRequest& request,
                                          const std::atomic<bool>& cancel,
                                          FailureDetail& detail) override {
    {
      const std::lock_guard lock(mutex_);
      calls_.push_back(request.names.empty() ? "" : request.names.front());
      if (failures_ > 0) {
        --failures_;
        detail = detail_;
        return Error{ErrorKind::kUnavailable, "the CA answered 502"};
      }
    }
    return inner_.issue(request, cancel);
  }
  [[nodiscard]] const char* name() const override { return "detail"; }
  std::vector<std::string> calls() {
    const std::lock_guard lock(mutex_);
    return calls_;
  }

 private:
  Issuer& inner_;
  std::mutex mutex_;
  int failures_ = 0;
  FailureDetail detail_;
  std::vector<std::string> calls_;
};

CaCooldownState storedState(Store& store) {
  auto stored = store.getMeta(kCaCooldownMetaKey);
  REQUIRE(stored.ok());
  REQUIRE(stored->has_value());
  auto state = decodeCaCooldown(**stored);
  REQUIRE(state.has_value());
  return *state;
}

// A tunnel with a ready certificate expiring in 10 days and its renewal job, due at `now`.
std::string queueRenewal(Store& store, const std::string& id, int64_t now) {
  const StoredTunnel ready = bindTunnel(store, id, now, false, false);
  editTunnel(store, id, [&](TunnelRecord& record) {
    record.certificate.state = CertificateState::kReady;
    record.certificate.chainPem = "old chain";
    record.certificate.notAfterMs = now + 10 * kDay;
  });
  CertificateInfo held = ready.record.certificate;
  held.notAfterMs = now + 10 * kDay;
  Job renewal;
  renewal.id = renewalJobId(held, now);
  renewal.kind = JobKind::kRenew;
  renewal.tunnelId = id;
  renewal.queuedAtMs = now;
  renewal.nextRunAtMs = now;
  auto added = store.addJob(renewal);
  REQUIRE(added.ok());
  REQUIRE(*added);
  return renewal.id;
}

TEST_CASE("ca cooldown: two machines count one run through meta and read it every 15 s") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    ManualClock clock(issuance_testing::kStartMs);
    auto storeA = db->openMigrated();
    auto storeB = db->openMigrated();
    CountingStore countedA(*storeA);
    int startedA = 0;
    int startedB = 0;
    CaCooldownGate a(countedA, {clock.clock(), 15'000, 5, [&] { ++startedA; }});
    CaCooldownGate b(*storeB, {clock.clock(), 15'000, 5, [&] { ++startedB; }});

    CHECK_FALSE(a.pausedUntil().has_value());
    CHECK(countedA.reads == 1);
    CHECK_FALSE(b.pausedUntil().has_value());
    // Failures that are not the CA's touch nothing.
    FailureDetail dns;
    dns.reason = "dns";
    a.recordFailure(dns);
    CHECK(countedA.reads == 1);
    CHECK_FALSE(storeA->getMeta(kCaCooldownMetaKey)->has_value());

    for (int i = 0; i < 4; ++i) a.recordFailure(caFailure());
    CHECK(storedState(*storeA) == CaCooldownState{0, 0, 4});
    // The fifth failure in a row happens on the other machine: it starts the cool-down.
    clock.advance(1000);
    b.recordFailure(caFailure());
    const int64_t until = clock.nowMs() + kMinute;
    CHECK(startedB == 1);
    CHECK(startedA == 0);
    CHECK(storedState(*storeA) == CaCooldownState{until, 1, 0});
    CHECK(b.pausedUntil() == until);

    // Machine a read the row when it last wrote; it looks again only 15 s later.
    const int reads = countedA.reads;
    clock.advance(13'999);
    CHECK_FALSE(a.pausedUntil().has_value());
    CHECK(countedA.reads == reads);
    clock.advance(1);
    CHECK(a.pausedUntil() == until);
    CHECK(countedA.reads == reads + 1);
    CHECK(a.pausedUntil() == until);
    CHECK(countedA.reads == reads + 1);

    // A success on a ends it for everyone; b sees it within 15 s.
    clock.advance(5000);
    a.recordSuccess();
    CHECK(storedState(*storeA) == CaCooldownState{});
    CHECK_FALSE(a.pausedUntil().has_value());
    clock.advance(15'000);
    CHECK_FALSE(b.pausedUntil().has_value());
    CHECK(startedA == 0);
    CHECK(startedB == 1);

    // An unreadable row pauses nothing and is replaced by the next report.
    REQUIRE(*storeA->compareAndSetMeta(kCaCooldownMetaKey, encodeCaCooldown({}), "junk"));
    clock.advance(15'000);
    CHECK_FALSE(a.pausedUntil().has_value());
    a.recordFailure(caFailure());
    CHECK(storedState(*storeA) == CaCooldownState{0, 0, 1});
  }
}

TEST_CASE("job runner: a CA cool-down keeps first issuance out until a renewal succeeds") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    ManualClock clock(issuance_testing::kStartMs);
    auto store = db->openMigrated();
    auto ca = loadCa(*store, clock.clock());
    DetailIssuer issuer(*ca);
    Publisher publisher;
    int started = 0;
    CaCooldownGate gate(*store, {clock.clock(), 15'000, 5, [&] { ++started; }});
    JobRunner runner(runnerConfig("machine-a", &clock), runnerStores(*store), issuer, publisher);
    runner.setCaCooldown(&gate);

    std::vector<std::string> jobs;
    for (int i = 0; i < 6; ++i) {
      jobs.push_back(
          bindTunnel(*store, "first" + std::to_string(i), clock.nowMs()).record.certificate.id);
    }
    issuer.failNext(6, caFailure());
    // Five CA failures start the cool-down; the sixth job is not even claimed.
    auto runs = runner.runDue();
    REQUIRE(runs.size() == 5);
    for (const JobRun& run : runs) CHECK(run.outcome == JobOutcome::kRetry);
    CHECK(started == 1);
    CHECK(storedState(*store) == CaCooldownState{clock.nowMs() + kMinute, 1, 0});
    CHECK(issuer.calls().size() == 5);
    // The one job not claimed (claims among equally due jobs come in no fixed order).
    std::string waiting;
    for (const std::string& id : jobs) {
      bool ran = false;
      for (const JobRun& run : runs) ran |= run.jobId == id;
      if (!ran) waiting = id;
    }
    CHECK(loadJob(*store, waiting).attempts == 0);

    // A renewal still runs, as the probe; it fails too: the cool-down goes on.
    const std::string renewal = queueRenewal(*store, "renewal", clock.nowMs());
    clock.advance(1000);
    runs = runner.runDue();
    REQUIRE(runs.size() == 1);
    CHECK(runs[0].jobId == renewal);
    CHECK(runs[0].outcome == JobOutcome::kRetry);
    CHECK(loadJob(*store, waiting).attempts == 0);
    CHECK(started == 1);

    // Its retry succeeds while the cool-down still lasts: it ends, and first issuance resumes
    // in the same round (the failed jobs are due again by now too).
    clock.advance(30'000);
    REQUIRE(gate.pausedUntil().has_value());
    runs = runner.runDue();
    REQUIRE(runs.size() == 7);
    CHECK(runs[0].jobId == renewal);
    for (const JobRun& run : runs) CHECK(run.outcome == JobOutcome::kDone);
    CHECK(storedState(*store) == CaCooldownState{});
    CHECK(loadJob(*store, waiting).status == JobStatus::kDone);
    CHECK(started == 1);
  }
}

// The ACME metrics as ControldServer wires them (AcmeMetrics::hookInto): a run of CA failures
// counts each failure by its class, times each attempt by outcome, and counts the cool-down it
// starts.
TEST_CASE("job runner: CA failures, their durations and the cool-down they start are counted") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    ManualClock clock(issuance_testing::kStartMs);
    auto store = db->openMigrated();
    auto ca = loadCa(*store, clock.clock());
    DetailIssuer issuer(*ca);
    Publisher publisher;
    metrics::Metrics metrics;
    AcmeMetrics acmeMetrics(metrics);
    CaCooldownGateOptions gateOptions{clock.clock(), 15'000, 5, {}};
    acmeMetrics.hookInto(gateOptions);
    CaCooldownGate gate(*store, gateOptions);
    JobRunnerConfig config = runnerConfig("machine-a", &clock);
    acmeMetrics.hookInto(config);
    JobRunner runner(config, runnerStores(*store), issuer, publisher);
    runner.setCaCooldown(&gate);
    for (int i = 0; i < 5; ++i) bindTunnel(*store, "first" + std::to_string(i), clock.nowMs());
    const auto failures = [&] {
      return metrics
          .counter("opentunnel_acme_failures_total", "", {{"kind", "issue"}, {"class", "http_5xx"}})
          .Value();
    };
    const auto cooldowns = [&] {
      return metrics.counter("opentunnel_acme_cooldowns_total", "").Value();
    };
    const auto timed = [&](const char* outcome) {
      const std::string line =
          std::string(R"(opentunnel_acme_issuance_duration_seconds_count{kind="issue",outcome=")") +
          outcome + "\"} ";
      const std::string text = metrics.render();
      const size_t at = text.find(line);
      REQUIRE(at != std::string::npos);
      return std::stod(text.substr(at + line.size()));
    };
    CHECK(failures() == 0);
    CHECK(cooldowns() == 0);
    CHECK(timed("retry") == 0);

    issuer.failNext(5, caFailure());
    const auto runs = runner.runDue();
    REQUIRE(runs.size() == 5);
    for (const JobRun& run : runs) CHECK(run.outcome == JobOutcome::kRetry);
    CHECK(failures() == 5);
    CHECK(timed("retry") == 5);
    CHECK(cooldowns() == 1);
    CHECK(acmeAttempts(metrics, "issue", "retry") == 5);

    // The cool-down ends when an attempt succeeds: that one is timed under success.
    clock.advance(2 * kMinute);
    const auto done = runner.runDue();
    REQUIRE_FALSE(done.empty());
    CHECK(done[0].outcome == JobOutcome::kDone);
    CHECK(timed("success") >= 1);
    CHECK(failures() == 5);
    CHECK(cooldowns() == 1);
  }
}

TEST_CASE("job runner: during a CA cool-down renewals run one at a time") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    auto ca = loadCa(*store);
    GateIssuer gateIssuer(*ca);
    Publisher publisher;
    const int64_t now = unixNowMs();
    // Another machine started a cool-down that lasts an hour.
    REQUIRE(*store->insertMetaIfAbsent(kCaCooldownMetaKey,
                                       encodeCaCooldown({now + 60 * kMinute, 1, 0})));
    CaCooldownGate gate(*store, {});
    bindTunnel(*store, "fresh", now);
    for (const char* id : {"renew1", "renew2", "renew3"}) queueRenewal(*store, id, now);
    JobRunnerConfig config = runnerConfig("machine-a", nullptr);
    config.concurrency = 4;
    JobRunner runner(config, runnerStores(*store), gateIssuer, publisher);
    runner.setCaCooldown(&gate);
    runner.start();
    REQUIRE(gateIssuer.waitFor([](const GateIssuer& g) { return g.startedLocked() >= 1; }));
    // Wake the runner a few times: nothing else may start while the probe runs.
    for (int i = 0; i < 5; ++i) {
      runner.jobAdded();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    CHECK(gateIssuer.maxInFlight() == 1);
    CHECK(runner.runningNames().size() == 1);
    CHECK(runner.runningNames().count(hostOf("fresh")) == 0);

    // The probe's success ends the cool-down: everything else follows.
    gateIssuer.release();
    const bool allDone = waitUntil([&] {
      auto done = store->countJobs(JobStatus::kDone, 0);
      return done.ok() && *done == 4;
    });
    runner.stop();
    CHECK(allDone);
    CHECK(storedState(*store) == CaCooldownState{});
  }
}

TEST_CASE("job runner: during a CA cool-down two machines run one probe between them") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto storeA = db->openMigrated();
    auto storeB = db->open();
    auto ca = loadCa(*storeA);
    GateIssuer gateIssuer(*ca);  // both machines' attempts pass through it
    Publisher publisher;
    const int64_t now = unixNowMs();
    REQUIRE(*storeA->insertMetaIfAbsent(kCaCooldownMetaKey,
                                        encodeCaCooldown({now + 60 * kMinute, 1, 0})));
    CaCooldownGate gateA(*storeA, {});
    CaCooldownGate gateB(*storeB, {});
    for (const char* id : {"renew1", "renew2", "renew3", "renew4"}) queueRenewal(*storeA, id, now);
    JobRunnerConfig configA = runnerConfig("machine-a", nullptr);
    JobRunnerConfig configB = runnerConfig("machine-b", nullptr);
    configA.concurrency = 4;
    configB.concurrency = 4;
    JobRunner a(configA, runnerStores(*storeA), gateIssuer, publisher);
    JobRunner b(configB, runnerStores(*storeB), gateIssuer, publisher);
    a.setCaCooldown(&gateA);
    b.setCaCooldown(&gateB);
    a.start();
    b.start();
    REQUIRE(gateIssuer.waitFor([](const GateIssuer& g) { return g.startedLocked() >= 1; }));
    // Wake both runners a few times: the machine without the probe must not start another.
    for (int i = 0; i < 5; ++i) {
      a.jobAdded();
      b.jobAdded();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    CHECK(gateIssuer.maxInFlight() == 1);
    CHECK(a.runningNames().size() + b.runningNames().size() == 1);
    CHECK(a.clusterRunningNames().value().size() == 1);
    CHECK(b.clusterRunningNames().value().size() == 1);

    // The probe succeeds: the cool-down ends for both, and the rest run on either machine.
    gateIssuer.release();
    const bool allDone = waitUntil([&] {
      auto done = storeA->countJobs(JobStatus::kDone, 0);
      return done.ok() && *done == 4;
    });
    a.stop();
    b.stop();
    CHECK(allDone);
    CHECK(storedState(*storeA) == CaCooldownState{});
  }
}

}  // namespace
}  // namespace ot::controld
