// The issuance job runner against real storage (SQLite and MariaDB) and the real local CA: jobs
// run once across machines, leases are taken over and respected, failures are classified and
// retried on a manual clock, unwanted and hostile jobs never reach the issuer, renewal alarms fire
// once, and what is issued passes `openssl verify`.
#include "controld/issuance/job_runner.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "controld/domain_cert/server_certificates.h"
#include "controld/issuance/job_policy.h"
#include "tests/controld/issuance_test_support.h"

namespace ot::controld {
namespace {

using issuance_testing::acmeAttempts;
using issuance_testing::bindTunnel;
using issuance_testing::checkVerifies;
using issuance_testing::countAttemptsIn;
using issuance_testing::editTunnel;
using issuance_testing::GateIssuer;
using issuance_testing::hostOf;
using issuance_testing::kDay;
using issuance_testing::kDomain;
using issuance_testing::kHour;
using issuance_testing::kMinute;
using issuance_testing::kStartMs;
using issuance_testing::loadCa;
using issuance_testing::loadJob;
using issuance_testing::loadTunnel;
using issuance_testing::Publisher;
using issuance_testing::runnerConfig;
using issuance_testing::runnerStores;
using issuance_testing::ScriptedIssuer;
using issuance_testing::waitUntil;
using ot::ManualClock;
using testing::testDatabases;

std::vector<JobOutcome> outcomes(const std::vector<JobRun>& runs) {
  std::vector<JobOutcome> out;
  for (const JobRun& run : runs) out.push_back(run.outcome);
  return out;
}

using Outcomes = std::vector<JobOutcome>;

TEST_CASE("job policy: failure classes, backoff, renewal times and job names") {
  CHECK(classifyFailure(ErrorKind::kUnavailable) == FailureClass::kTransient);
  CHECK(classifyFailure(ErrorKind::kTimeout) == FailureClass::kTransient);
  CHECK(classifyFailure(ErrorKind::kInvalid) == FailureClass::kPermanent);
  CHECK(classifyFailure(ErrorKind::kInternal) == FailureClass::kOther);
  CHECK(classifyFailure(ErrorKind::kNotFound) == FailureClass::kOther);
  CHECK(classifyFailure(ErrorKind::kConflict) == FailureClass::kOther);
  CHECK(std::string(failureClassName(FailureClass::kTransient)) == "transient");

  const RetryPolicy policy;  // 30 s base, an hour at most
  CHECK(retryDelayMs(policy, 1, 0.0) == 15'000);
  CHECK(retryDelayMs(policy, 1, 0.5) == 22'500);
  CHECK(retryDelayMs(policy, 1, 1.0) == 30'000);
  CHECK(retryDelayMs(policy, 2, 1.0) == 60'000);
  CHECK(retryDelayMs(policy, 7, 1.0) == 1'920'000);
  CHECK(retryDelayMs(policy, 8, 1.0) == 3'600'000);  // 3,840,000 capped
  CHECK(retryDelayMs(policy, 8, 0.0) == 1'800'000);
  CHECK(retryDelayMs(policy, std::numeric_limits<int>::max(), 1.0) == 3'600'000);
  CHECK(retryDelayMs(policy, 0, 1.0) == 30'000);
  CHECK(retryDelayMs(policy, 1, std::numeric_limits<double>::quiet_NaN()) == 15'000);
  CHECK(retryDelayMs(policy, 1, 7.0) == 30'000);
  RetryPolicy tiny;
  tiny.baseDelayMs = 1;
  CHECK(retryDelayMs(tiny, 1, 0.0) == 1);

  // Permanent: never again. Other: three attempts in all.
  CHECK_FALSE(decideRetry(policy, FailureClass::kPermanent, 1, 0, 0, 0.5).retry);
  RetryDecision other = decideRetry(policy, FailureClass::kOther, 1, 0, 1000, 0.5);
  CHECK(other.retry);
  CHECK(other.nextRunAtMs == 1000 + 22'500);
  CHECK(decideRetry(policy, FailureClass::kOther, 2, 0, 0, 0.5).retry);
  CHECK_FALSE(decideRetry(policy, FailureClass::kOther, 3, 0, 0, 0.5).retry);
  // Transient: while the next run starts within a day of queued_at.
  const RetryDecision transient = decideRetry(policy, FailureClass::kTransient, 1, 0, 0, 0.5);
  CHECK(transient.retry);
  CHECK(transient.nextRunAtMs == 22'500);
  CHECK(decideRetry(policy, FailureClass::kTransient, 1, 0, kDay - 22'500, 0.5).retry);
  CHECK_FALSE(decideRetry(policy, FailureClass::kTransient, 1, 0, kDay - 22'499, 0.5).retry);
  CHECK(decideRetry(policy, FailureClass::kTransient, 40, 0, kDay - kHour, 1.0).retry);
  CHECK_FALSE(decideRetry(policy, FailureClass::kTransient, 40, 0, kDay - kHour + 1, 1.0).retry);

  // 30 days before expiry, or a third of the validity for short-lived certificates.
  CHECK(renewAtMs(0, 90 * kDay) == 60 * kDay);
  CHECK(renewAtMs(5, 5 + 90 * kDay) == 5 + 60 * kDay);
  CHECK(renewAtMs(0, 6 * kDay) == 4 * kDay);
  CHECK(renewAtMs(0, 3 * kHour) == 2 * kHour);
  CHECK(renewAtMs(100, 100) == 100);
  CHECK(renewAtMs(200, 100) == 100);

  CertificateInfo certificate;
  certificate.id = "abc123";
  certificate.notAfterMs = 1'700'000'000'000;
  const std::string renewal = renewalJobId(certificate, 1'690'000'000'000);
  CHECK(renewal == "abc123:renew:1700000000000:1690000000000");
  CHECK(isRenewalOf(renewal, certificate));
  CHECK_FALSE(isRenewalOf("abc123:renew:1700000000000:", certificate));
  CHECK_FALSE(isRenewalOf("abc123", certificate));
  CertificateInfo renewed = certificate;
  renewed.notAfterMs += 1;
  CHECK_FALSE(isRenewalOf(renewal, renewed));
  CertificateInfo rebound = certificate;
  rebound.id = "abc124";
  CHECK_FALSE(isRenewalOf(renewal, rebound));
  CertificateInfo none;
  CHECK_FALSE(isRenewalOf(":renew:0:5", none));

  CHECK(serverJobId("tunnel.test", 7) == "server:tunnel.test:7");
  CHECK(serverJobNumber("server:tunnel.test:7", "tunnel.test") == 7);
  CHECK(serverJobNumber("server:tunnel.test:", "tunnel.test") == std::nullopt);
  CHECK(serverJobNumber("server:tunnel.test:7x", "tunnel.test") == std::nullopt);
  CHECK(serverJobNumber("server:other.test:7", "tunnel.test") == std::nullopt);
  CHECK(serverJobNumber("server:tunnel.test:1234567890123456789", "tunnel.test") == std::nullopt);
  CHECK(serverJobMetaKey("tunnel.test") == "server_job:tunnel.test");
  CHECK(serverKeyMetaKey("tunnel.test") == "server_key:tunnel.test");
}

TEST_CASE("job runner: 30 jobs on two runners are each issued exactly once") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto storeA = db->openMigrated();
    auto storeB = db->open();
    auto caA = loadCa(*storeA);
    auto caB = loadCa(*storeB);
    REQUIRE(caA->caCertificatePem() == caB->caCertificatePem());
    ScriptedIssuer issuerA(caA.get());
    ScriptedIssuer issuerB(caB.get());
    Publisher publisherA;
    Publisher publisherB;

    const int64_t now = unixNowMs();
    std::vector<std::string> ids;
    for (int i = 0; i < 30; ++i) {
      ids.push_back("many" + std::to_string(i));
      bindTunnel(*storeA, ids.back(), now, i % 2 == 0);
    }
    JobRunner a(runnerConfig("machine-a", nullptr), runnerStores(*storeA), issuerA, publisherA);
    JobRunner b(runnerConfig("machine-b", nullptr), runnerStores(*storeB), issuerB, publisherB);
    a.start();
    b.start();
    const bool allDone = waitUntil([&] {
      auto done = storeA->countJobs(JobStatus::kDone, 0);
      return done.ok() && *done == 30;
    });
    a.stop();
    b.stop();
    REQUIRE(allDone);

    CHECK(issuerA.total() + issuerB.total() == 30);
    for (const std::string& id : ids) {
      CAPTURE(id);
      CHECK(issuerA.calls(hostOf(id)) + issuerB.calls(hostOf(id)) == 1);
      const StoredTunnel stored = loadTunnel(*storeA, id);
      CHECK(stored.record.certificate.state == CertificateState::kReady);
      CHECK(stored.record.certificate.error.empty());
      CHECK(stored.record.renewAtMs.has_value());
      const Job job = loadJob(*storeA, stored.record.certificate.id);
      CHECK(job.status == JobStatus::kDone);
      CHECK(job.attempts == 1);
      CHECK(job.leaseOwner.empty());
      CHECK(publisherA.recordsOf(id).size() + publisherB.recordsOf(id).size() == 1);
    }
    CHECK(*storeA->countJobs(JobStatus::kPending, 0) == 0);
    for (size_t i = 0; i < 3; ++i) {
      const StoredTunnel stored = loadTunnel(*storeA, ids[i]);
      checkVerifies(*caA, stored.record.certificate.chainPem, hostOf(ids[i]));
    }
  }
}

TEST_CASE("job runner: an expired lease is taken over by the other runner") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    ManualClock clock(kStartMs);
    auto storeA = db->openMigrated();
    auto storeB = db->open();
    auto ca = loadCa(*storeB, clock.clock());
    ScriptedIssuer issuer(ca.get());
    Publisher publisher;
    const StoredTunnel bound = bindTunnel(*storeA, "crashy", clock.nowMs());
    const std::string jobId = bound.record.certificate.id;

    // Machine A claims the job and "crashes": it never extends nor finishes it.
    auto claimed = storeA->claimJob("machine-a", clock.nowMs(), 2 * kMinute, true);
    REQUIRE(claimed.ok());
    REQUIRE(claimed->has_value());
    CHECK((*claimed)->attempts == 1);

    JobRunner b(runnerConfig("machine-b", &clock), runnerStores(*storeB), issuer, publisher);
    CHECK(b.runDue().empty());  // the lease still holds
    // B runs nothing itself, yet the DNS sweep on B must keep A's challenge name.
    CHECK(b.runningNames().empty());
    CHECK(b.clusterRunningNames().value() == std::set<std::string>{hostOf("crashy")});
    clock.advance(2 * kMinute - 1);
    CHECK(b.runDue().empty());
    CHECK(issuer.total() == 0);

    clock.advance(1);  // the lease has run out
    CHECK(outcomes(b.runDue()) == Outcomes{JobOutcome::kDone});
    CHECK(issuer.calls(hostOf("crashy")) == 1);
    const Job job = loadJob(*storeA, jobId);
    CHECK(job.status == JobStatus::kDone);
    CHECK(job.attempts == 2);
    CHECK(job.leaseOwner.empty());
    CHECK(b.clusterRunningNames().value().empty());

    // A waking up late records nothing.
    Job late = **claimed;
    late.status = JobStatus::kFailed;
    auto finished = storeA->finishJob(late, "machine-a");
    REQUIRE(finished.ok());
    CHECK_FALSE(*finished);
    CHECK(loadJob(*storeA, jobId).status == JobStatus::kDone);

    const StoredTunnel stored = loadTunnel(*storeA, "crashy");
    CHECK(stored.record.certificate.state == CertificateState::kReady);
    checkVerifies(*ca, stored.record.certificate.chainPem, hostOf("crashy"), clock.nowMs());
  }
}

TEST_CASE("job runner: transient failures are retried with backoff, then succeed") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    ManualClock clock(kStartMs);
    auto store = db->openMigrated();
    auto ca = loadCa(*store, clock.clock());
    ScriptedIssuer issuer(ca.get());
    issuer.script({Error{ErrorKind::kUnavailable, "CA unreachable"},
                   Error{ErrorKind::kTimeout, "CA too slow"}});
    Publisher publisher;
    JobRunner runner(runnerConfig("machine-a", &clock), runnerStores(*store), issuer, publisher);
    const int64_t start = clock.nowMs();
    const StoredTunnel bound = bindTunnel(*store, "flaky", start, true);
    const std::string jobId = bound.record.certificate.id;

    CHECK(outcomes(runner.runDue()) == Outcomes{JobOutcome::kRetry});
    Job job = loadJob(*store, jobId);
    CHECK(job.status == JobStatus::kPending);
    CHECK(job.attempts == 1);
    CHECK(job.nextRunAtMs == start + 22'500);  // 30 s, jittered to three quarters
    CHECK(job.lastError == "CA unreachable");
    CHECK(job.leaseOwner.empty());
    CHECK(loadTunnel(*store, "flaky").record.certificate.state == CertificateState::kIssuing);
    CHECK(publisher.records().empty());

    clock.set(start + 22'499);
    CHECK(runner.runDue().empty());
    clock.set(start + 22'500);
    CHECK(outcomes(runner.runDue()) == Outcomes{JobOutcome::kRetry});
    job = loadJob(*store, jobId);
    CHECK(job.attempts == 2);
    CHECK(job.nextRunAtMs == start + 22'500 + 45'000);  // doubled
    CHECK(job.lastError == "CA too slow");

    clock.set(job.nextRunAtMs);
    CHECK(outcomes(runner.runDue()) == Outcomes{JobOutcome::kDone});
    job = loadJob(*store, jobId);
    CHECK(job.status == JobStatus::kDone);
    CHECK(job.attempts == 3);
    CHECK(issuer.calls(hostOf("flaky")) == 3);

    const StoredTunnel stored = loadTunnel(*store, "flaky");
    const CertificateInfo& certificate = stored.record.certificate;
    CHECK(certificate.state == CertificateState::kReady);
    CHECK(certificate.id == jobId);
    auto validity = leafValidity(certificate.chainPem);
    REQUIRE(validity.ok());
    CHECK(certificate.notAfterMs == validity->notAfterMs);
    CHECK(stored.record.renewAtMs == certificate.notAfterMs - 30 * kDay);
    REQUIRE(publisher.recordsOf("flaky").size() == 1);
    CHECK(publisher.recordsOf("flaky")[0].record == stored.record);
    checkVerifies(*ca, certificate.chainPem, hostOf("flaky"), clock.nowMs());
    checkVerifies(*ca, certificate.chainPem, "www." + hostOf("flaky"), clock.nowMs());
  }
}

TEST_CASE("job runner: transient failures give up a day after the job was queued") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    ManualClock clock(kStartMs);
    auto store = db->openMigrated();
    ScriptedIssuer issuer(nullptr);
    issuer.failAlways(Error{ErrorKind::kUnavailable, "CA unreachable"});
    Publisher publisher;
    JobRunnerConfig config = runnerConfig("machine-a", &clock);
    config.jitter = [] { return 1.0; };
    config.retry.baseDelayMs = kHour;  // every wait is the cap: an hour
    JobRunner runner(config, runnerStores(*store), issuer, publisher);
    const int64_t start = clock.nowMs();
    const std::string jobId = bindTunnel(*store, "down", start).record.certificate.id;

    for (int hour = 0; hour < 24; ++hour) {
      CAPTURE(hour);
      clock.set(start + hour * kHour);
      CHECK(outcomes(runner.runDue()) == Outcomes{JobOutcome::kRetry});
    }
    CHECK(loadJob(*store, jobId).nextRunAtMs == start + 24 * kHour);
    clock.set(start + 24 * kHour);
    CHECK(outcomes(runner.runDue()) == Outcomes{JobOutcome::kFailed});
    const Job job = loadJob(*store, jobId);
    CHECK(job.status == JobStatus::kFailed);
    CHECK(job.attempts == 25);
    CHECK(job.lastError == "transient: CA unreachable");  // marked for the reconcile's requeue
    const StoredTunnel stored = loadTunnel(*store, "down");
    CHECK(stored.record.certificate.state == CertificateState::kFailed);
    CHECK(stored.record.certificate.error == "CA unreachable");
    REQUIRE(publisher.recordsOf("down").size() == 1);
    CHECK(publisher.recordsOf("down")[0].record.certificate.state == CertificateState::kFailed);
    CHECK(issuer.total() == 25);
  }
}

TEST_CASE("job runner: other failures get three attempts") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    ManualClock clock(kStartMs);
    auto store = db->openMigrated();
    ScriptedIssuer issuer(nullptr);
    issuer.failAlways(Error{ErrorKind::kInternal, "unreadable answer"});
    Publisher publisher;
    JobRunner runner(runnerConfig("machine-a", &clock), runnerStores(*store), issuer, publisher);
    const std::string jobId = bindTunnel(*store, "odd", clock.nowMs()).record.certificate.id;

    CHECK(outcomes(runner.runDue()) == Outcomes{JobOutcome::kRetry});
    clock.set(loadJob(*store, jobId).nextRunAtMs);
    CHECK(outcomes(runner.runDue()) == Outcomes{JobOutcome::kRetry});
    clock.set(loadJob(*store, jobId).nextRunAtMs);
    CHECK(outcomes(runner.runDue()) == Outcomes{JobOutcome::kFailed});
    CHECK(loadJob(*store, jobId).attempts == 3);
    CHECK(issuer.total() == 3);
    CHECK(loadTunnel(*store, "odd").record.certificate.state == CertificateState::kFailed);
  }
}

TEST_CASE("job runner: a permanent failure fails at once and marks the certificate failed") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    ManualClock clock(kStartMs);
    auto store = db->openMigrated();
    auto ca = loadCa(*store, clock.clock());
    ScriptedIssuer issuer(ca.get());
    issuer.script({Error{ErrorKind::kInvalid, "rejectedIdentifier: no"}});
    Publisher publisher;
    JobRunner runner(runnerConfig("machine-a", &clock), runnerStores(*store), issuer, publisher);
    const std::string jobId = bindTunnel(*store, "nope", clock.nowMs()).record.certificate.id;

    CHECK(outcomes(runner.runDue()) == Outcomes{JobOutcome::kFailed});
    const Job job = loadJob(*store, jobId);
    CHECK(job.status == JobStatus::kFailed);
    CHECK(job.attempts == 1);
    CHECK(job.lastError == "rejectedIdentifier: no");
    CHECK(job.leaseOwner.empty());
    const StoredTunnel stored = loadTunnel(*store, "nope");
    CHECK(stored.record.certificate.state == CertificateState::kFailed);
    CHECK(stored.record.certificate.error == "rejectedIdentifier: no");
    CHECK(stored.record.certificate.chainPem.empty());
    CHECK_FALSE(stored.record.renewAtMs.has_value());
    REQUIRE(publisher.recordsOf("nope").size() == 1);
    CHECK(publisher.recordsOf("nope")[0].record == stored.record);
    // Nothing left to run, however much time passes.
    clock.advance(2 * kDay);
    CHECK(runner.runDue().empty());
    CHECK(issuer.total() == 1);
  }
}

TEST_CASE("job runner: a deleted or rebound tunnel's job ends abandoned") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    ManualClock clock(kStartMs);
    auto store = db->openMigrated();
    auto ca = loadCa(*store, clock.clock());
    ScriptedIssuer issuer(ca.get());
    Publisher publisher;
    JobRunner runner(runnerConfig("machine-a", &clock), runnerStores(*store), issuer, publisher);

    // Deleted before the attempt: the issuer is never asked.
    std::string jobId = bindTunnel(*store, "gone", clock.nowMs()).record.certificate.id;
    editTunnel(*store, "gone", [&](TunnelRecord& record) { record.deletedAtMs = clock.nowMs(); });
    CHECK(outcomes(runner.runDue()) == Outcomes{JobOutcome::kAbandoned});
    CHECK(loadJob(*store, jobId).status == JobStatus::kAbandoned);
    CHECK(loadJob(*store, jobId).lastError == "no longer wanted");
    CHECK(issuer.total() == 0);

    // A new bind replaced the certificate: the old job is not issued.
    jobId = bindTunnel(*store, "rebound", clock.nowMs()).record.certificate.id;
    editTunnel(*store, "rebound",
               [](TunnelRecord& record) { record.certificate.id = "cnewcertificate"; });
    CHECK(outcomes(runner.runDue()) == Outcomes{JobOutcome::kAbandoned});
    CHECK(loadJob(*store, jobId).status == JobStatus::kAbandoned);
    CHECK(issuer.total() == 0);
    CHECK(loadTunnel(*store, "rebound").record.certificate.state == CertificateState::kIssuing);

    // The tunnel row does not exist.
    Job orphan;
    orphan.id = "corphan";
    orphan.tunnelId = "neverexisted";
    orphan.queuedAtMs = clock.nowMs();
    orphan.nextRunAtMs = clock.nowMs();
    REQUIRE(*store->addJob(orphan));
    CHECK(outcomes(runner.runDue()) == Outcomes{JobOutcome::kAbandoned});
    CHECK(issuer.total() == 0);
    CHECK(publisher.records().empty());

    // Deleted while a failing attempt ran: abandoned, not retried.
    jobId = bindTunnel(*store, "vanish", clock.nowMs()).record.certificate.id;
    issuer.script({Error{ErrorKind::kUnavailable, "CA unreachable"}});
    issuer.during([&] {
      editTunnel(*store, "vanish", [](TunnelRecord& record) { record.deletedAtMs = 1; });
    });
    CHECK(outcomes(runner.runDue()) == Outcomes{JobOutcome::kAbandoned});
    CHECK(loadJob(*store, jobId).status == JobStatus::kAbandoned);
    CHECK(issuer.total() == 1);

    // Deleted while a successful attempt ran: nothing is written.
    jobId = bindTunnel(*store, "late", clock.nowMs()).record.certificate.id;
    issuer.during(
        [&] { editTunnel(*store, "late", [](TunnelRecord& record) { record.deletedAtMs = 1; }); });
    CHECK(outcomes(runner.runDue()) == Outcomes{JobOutcome::kAbandoned});
    CHECK(loadJob(*store, jobId).status == JobStatus::kAbandoned);
    CHECK(issuer.total() == 2);
    const StoredTunnel late = loadTunnel(*store, "late");
    CHECK(late.record.certificate.state == CertificateState::kIssuing);
    CHECK(late.record.certificate.chainPem.empty());
    CHECK(publisher.records().empty());
  }
}

TEST_CASE("job runner: hostile records are refused without an issuer call") {
  const std::string victim = hostOf("victim");
  struct Tamper {
    const char* what;
    std::function<void(TunnelRecord&)> change;
  };
  const std::vector<Tamper> tampers = {
      {"a CSR for another tunnel's name, identifiers to match",
       [&](TunnelRecord& record) {
         record.certificate.csrPem = testing::buildCsrPem(testing::hostCsr(victim, true));
         record.certificate.identifiers = {victim, "*." + victim};
       }},
      {"identifiers edited to another tunnel's name",
       [&](TunnelRecord& record) { record.certificate.identifiers = {victim}; }},
      {"a wildcard in the identifiers that the CSR does not ask for",
       [](TunnelRecord& record) {
         record.certificate.identifiers.push_back("*." + record.hostname);
       }},
      {"a CSR that adds the apex wildcard",
       [](TunnelRecord& record) {
         testing::CsrSpec spec = testing::hostCsr(record.hostname);
         spec.dns.push_back(std::string("*.") + kDomain);
         record.certificate.csrPem = testing::buildCsrPem(spec);
         record.certificate.identifiers = {record.hostname, std::string("*.") + kDomain};
       }},
      {"the hostname edited to another tunnel's",
       [&](TunnelRecord& record) { record.hostname = victim; }},
      {"a CSR that is not one", [](TunnelRecord& record) { record.certificate.csrPem = "junk"; }},
  };
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    ManualClock clock(kStartMs);
    auto store = db->openMigrated();
    auto ca = loadCa(*store, clock.clock());
    ScriptedIssuer issuer(ca.get());
    Publisher publisher;
    // Each refusal is counted as ControldServer wires the metrics: through the on_attempt hook.
    metrics::Metrics metrics;
    AcmeMetrics acmeMetrics(metrics);
    JobRunnerConfig config = runnerConfig("machine-a", &clock);
    countAttemptsIn(config, acmeMetrics);
    JobRunner runner(config, runnerStores(*store), issuer, publisher);
    bindTunnel(*store, "victim", clock.nowMs(), true, false);

    for (size_t i = 0; i < tampers.size(); ++i) {
      CAPTURE(tampers[i].what);
      const std::string id = "attacker" + std::to_string(i);
      const std::string jobId = bindTunnel(*store, id, clock.nowMs()).record.certificate.id;
      editTunnel(*store, id, tampers[i].change);

      CHECK(outcomes(runner.runDue()) == Outcomes{JobOutcome::kRefused});
      CHECK(issuer.total() == 0);
      const Job job = loadJob(*store, jobId);
      CHECK(job.status == JobStatus::kFailed);
      CHECK(job.attempts == 1);
      CHECK(job.lastError.rfind("refused: ", 0) == 0);
      const StoredTunnel stored = loadTunnel(*store, id);
      CHECK(stored.record.certificate.state == CertificateState::kFailed);
      CHECK(stored.record.certificate.error == job.lastError);
      CHECK(stored.record.certificate.chainPem.empty());
      REQUIRE(publisher.recordsOf(id).size() == 1);
      CHECK(publisher.recordsOf(id)[0].record.certificate.state == CertificateState::kFailed);
      CHECK(acmeAttempts(metrics, "issue", "refused") == static_cast<double>(i + 1));
    }
    CHECK(acmeAttempts(metrics, "issue", "failed") == 0);
    CHECK(acmeAttempts(metrics, "issue", "success") == 0);
  }
}

TEST_CASE("job runner: an outcome that reached the record but not the job is not issued again") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    ManualClock clock(kStartMs);
    auto store = db->openMigrated();
    ScriptedIssuer issuer(nullptr);
    Publisher publisher;
    JobRunner runner(runnerConfig("machine-b", &clock), runnerStores(*store), issuer, publisher);
    const std::string ready = bindTunnel(*store, "wasready", clock.nowMs()).record.certificate.id;
    const std::string failed = bindTunnel(*store, "wasfailed", clock.nowMs()).record.certificate.id;
    // Machine A claimed both, wrote the records, and stopped before finishing the jobs.
    for (int i = 0; i < 2; ++i) {
      auto claimed = store->claimJob("machine-a", clock.nowMs(), 2 * kMinute, true);
      REQUIRE(claimed.ok());
      REQUIRE(claimed->has_value());
    }
    editTunnel(*store, "wasready", [](TunnelRecord& record) {
      record.certificate.state = CertificateState::kReady;
      record.certificate.chainPem = "chain";
    });
    editTunnel(*store, "wasfailed", [](TunnelRecord& record) {
      record.certificate.state = CertificateState::kFailed;
      record.certificate.error = "rejectedIdentifier";
    });
    clock.advance(2 * kMinute);
    auto runs = runner.runDue();
    REQUIRE(runs.size() == 2);
    CHECK(issuer.total() == 0);
    const Job readyJob = loadJob(*store, ready);
    CHECK(readyJob.status == JobStatus::kDone);
    const Job failedJob = loadJob(*store, failed);
    CHECK(failedJob.status == JobStatus::kFailed);
    CHECK(failedJob.lastError == "rejectedIdentifier");
  }
}

TEST_CASE("job runner: a renewal alarm fires once across two runners and renews") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    ManualClock clock(kStartMs);
    auto storeA = db->openMigrated();
    auto storeB = db->open();
    auto ca = loadCa(*storeA, clock.clock(), 9 * kDay);
    ScriptedIssuer issuer(ca.get());
    Publisher publisherA;
    Publisher publisherB;
    JobRunner a(runnerConfig("machine-a", &clock), runnerStores(*storeA), issuer, publisherA);
    JobRunner b(runnerConfig("machine-b", &clock), runnerStores(*storeB), issuer, publisherB);
    const std::string host = hostOf("renewme");
    bindTunnel(*storeA, "renewme", clock.nowMs(), true);
    CHECK(outcomes(a.runDue()) == Outcomes{JobOutcome::kDone});

    const StoredTunnel first = loadTunnel(*storeA, "renewme");
    const CertificateInfo& issued = first.record.certificate;
    REQUIRE(issued.state == CertificateState::kReady);
    auto validity = leafValidity(issued.chainPem);
    REQUIRE(validity.ok());
    // Short-lived: renewed a third of its validity before expiry, not 30 days.
    const int64_t renewAt = renewAtMs(validity->notBeforeMs, validity->notAfterMs);
    CHECK(first.record.renewAtMs == renewAt);
    CHECK(renewAt == validity->notAfterMs - (validity->notAfterMs - validity->notBeforeMs) / 3);

    clock.set(renewAt - 1);
    CHECK(*a.runAlarms() == 0);
    CHECK(*b.runAlarms() == 0);
    clock.set(renewAt);
    std::atomic<int> added{0};
    auto fire = [&](JobRunner& runner) {
      auto fired = runner.runAlarms();
      CHECK(fired.ok());
      if (fired.ok()) added += *fired;
    };
    std::thread fireA([&] { fire(a); });
    std::thread fireB([&] { fire(b); });
    fireA.join();
    fireB.join();
    CHECK(added.load() == 1);
    CHECK(*a.runAlarms() == 0);
    CHECK(*b.runAlarms() == 0);

    const std::string renewalId = renewalJobId(issued, renewAt);
    const Job queued = loadJob(*storeA, renewalId);
    CHECK(queued.kind == JobKind::kRenew);
    CHECK(queued.tunnelId == "renewme");
    CHECK(queued.status == JobStatus::kPending);

    std::vector<JobRun> runsA;
    std::vector<JobRun> runsB;
    std::thread runA([&] { runsA = a.runDue(); });
    std::thread runB([&] { runsB = b.runDue(); });
    runA.join();
    runB.join();
    CHECK(runsA.size() + runsB.size() == 1);
    CHECK(issuer.calls(host) == 2);
    CHECK(loadJob(*storeA, renewalId).status == JobStatus::kDone);

    const StoredTunnel renewed = loadTunnel(*storeA, "renewme");
    const CertificateInfo& nowHeld = renewed.record.certificate;
    CHECK(nowHeld.id == issued.id);
    CHECK(nowHeld.state == CertificateState::kReady);
    CHECK(nowHeld.chainPem != issued.chainPem);
    CHECK(nowHeld.notAfterMs > issued.notAfterMs);
    CHECK(nowHeld.csrPem == issued.csrPem);
    CHECK(nowHeld.identifiers == issued.identifiers);
    REQUIRE(renewed.record.renewAtMs.has_value());
    CHECK(*renewed.record.renewAtMs > renewAt);
    CHECK(publisherA.recordsOf("renewme").size() + publisherB.recordsOf("renewme").size() == 2);
    checkVerifies(*ca, nowHeld.chainPem, host, clock.nowMs());
    checkVerifies(*ca, nowHeld.chainPem, "api." + host, clock.nowMs());

    // A renewal job for the generation just replaced (an alarm seen late) renews nothing.
    Job stale;
    stale.id = renewalJobId(issued, renewAt + 1);
    stale.kind = JobKind::kRenew;
    stale.tunnelId = "renewme";
    stale.queuedAtMs = clock.nowMs();
    stale.nextRunAtMs = clock.nowMs();
    REQUIRE(*storeA->addJob(stale));
    CHECK(outcomes(a.runDue()) == Outcomes{JobOutcome::kAbandoned});
    CHECK(issuer.calls(host) == 2);
  }
}

TEST_CASE("job runner: a renewal that gives up keeps the certificate and tries again later") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    ManualClock clock(kStartMs);
    auto store = db->openMigrated();
    auto ca = loadCa(*store, clock.clock(), 9 * kDay);
    ScriptedIssuer issuer(ca.get());
    Publisher publisher;
    JobRunner runner(runnerConfig("machine-a", &clock), runnerStores(*store), issuer, publisher);
    bindTunnel(*store, "stubborn", clock.nowMs());
    CHECK(outcomes(runner.runDue()) == Outcomes{JobOutcome::kDone});
    const StoredTunnel first = loadTunnel(*store, "stubborn");
    REQUIRE(first.record.renewAtMs.has_value());

    clock.set(*first.record.renewAtMs);
    issuer.script({Error{ErrorKind::kInvalid, "badCSR"}});
    CHECK(*runner.runAlarms() == 1);
    CHECK(outcomes(runner.runDue()) == Outcomes{JobOutcome::kFailed});
    const StoredTunnel kept = loadTunnel(*store, "stubborn");
    CHECK(kept.record.certificate.state == CertificateState::kReady);
    CHECK(kept.record.certificate.chainPem == first.record.certificate.chainPem);
    CHECK(kept.record.certificate.error == "badCSR");
    CHECK(kept.record.renewAtMs == clock.nowMs() + kDay);
    CHECK(loadJob(*store, renewalJobId(first.record.certificate, *first.record.renewAtMs)).status ==
          JobStatus::kFailed);

    clock.advance(kDay);
    CHECK(*runner.runAlarms() == 1);
    CHECK(outcomes(runner.runDue()) == Outcomes{JobOutcome::kDone});
    const StoredTunnel renewed = loadTunnel(*store, "stubborn");
    CHECK(renewed.record.certificate.state == CertificateState::kReady);
    CHECK(renewed.record.certificate.error.empty());
    CHECK(renewed.record.certificate.notAfterMs > first.record.certificate.notAfterMs);
    CHECK(issuer.total() == 3);
  }
}

TEST_CASE("job runner: stop() cancels a slow issue and releases its lease") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    auto ca = loadCa(*store);
    GateIssuer gate(*ca);
    Publisher publisher;
    const std::string jobId = bindTunnel(*store, "slow", unixNowMs()).record.certificate.id;
    {
      JobRunner runner(runnerConfig("machine-a", nullptr), runnerStores(*store), gate, publisher);
      runner.start();
      REQUIRE(gate.waitFor([](const GateIssuer& g) { return g.startedLocked() >= 1; }));
      CHECK(loadJob(*store, jobId).leaseOwner == "machine-a");
      runner.stop();
    }
    CHECK(gate.cancelled() == 1);
    const Job job = loadJob(*store, jobId);
    CHECK(job.status == JobStatus::kPending);
    CHECK(job.leaseOwner.empty());
    CHECK(job.attempts == 1);
    CHECK(loadTunnel(*store, "slow").record.certificate.state == CertificateState::kIssuing);
    CHECK(publisher.records().empty());

    // Another machine resumes it at once.
    ScriptedIssuer plain(ca.get());
    JobRunner other(runnerConfig("machine-b", nullptr), runnerStores(*store), plain, publisher);
    CHECK(outcomes(other.runDue()) == Outcomes{JobOutcome::kDone});
    CHECK(loadJob(*store, jobId).attempts == 2);
  }
}

TEST_CASE("job runner: a lost lease cancels the running issue and drops its result") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    auto ca = loadCa(*store);
    GateIssuer gate(*ca);
    Publisher publisher;
    const std::string jobId = bindTunnel(*store, "stolen", unixNowMs()).record.certificate.id;
    JobRunnerConfig config = runnerConfig("machine-a", nullptr);
    config.leaseExtendMs = 20;
    JobRunner runner(config, runnerStores(*store), gate, publisher);
    runner.start();
    REQUIRE(gate.waitFor([](const GateIssuer& g) { return g.startedLocked() >= 1; }));
    {
      auto raw = db->raw();
      *raw << "UPDATE jobs SET lease_owner = 'thief' WHERE id = :id", soci::use(jobId);
    }
    CHECK(gate.waitFor([](const GateIssuer& g) { return g.cancelledLocked() == 1; }));
    runner.stop();
    const Job job = loadJob(*store, jobId);
    CHECK(job.status == JobStatus::kPending);
    CHECK(job.leaseOwner == "thief");
    CHECK(loadTunnel(*store, "stolen").record.certificate.state == CertificateState::kIssuing);
    CHECK(publisher.records().empty());
  }
}

TEST_CASE("job runner: first issuance never takes the last slot") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    auto ca = loadCa(*store);
    GateIssuer gate(*ca);
    Publisher publisher;
    const int64_t now = unixNowMs();
    for (const char* id : {"first1", "first2", "first3"}) bindTunnel(*store, id, now);
    JobRunnerConfig config = runnerConfig("machine-a", nullptr);
    config.concurrency = 2;
    JobRunner runner(config, runnerStores(*store), gate, publisher);
    runner.start();
    REQUIRE(gate.waitFor([](const GateIssuer& g) { return g.startedLocked() >= 1; }));
    // Wake the runner a few times: a second first issuance must still not start.
    for (int i = 0; i < 5; ++i) {
      runner.jobAdded();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    CHECK(gate.maxInFlight() == 1);

    // A renewal takes the slot kept free.
    const StoredTunnel ready = bindTunnel(*store, "renewal", now, false, false);
    editTunnel(*store, "renewal", [&](TunnelRecord& record) {
      record.certificate.state = CertificateState::kReady;
      record.certificate.chainPem = "old chain";
      record.certificate.notAfterMs = now + 10 * kDay;
    });
    CertificateInfo held = ready.record.certificate;
    held.notAfterMs = now + 10 * kDay;
    Job renewal;
    renewal.id = renewalJobId(held, now);
    renewal.kind = JobKind::kRenew;
    renewal.tunnelId = "renewal";
    renewal.queuedAtMs = now;
    renewal.nextRunAtMs = now;
    REQUIRE(*store->addJob(renewal));
    runner.jobAdded();
    CHECK(gate.waitFor([&](const GateIssuer& g) {
      const auto& names = g.inFlightLocked();
      return std::find(names.begin(), names.end(), hostOf("renewal")) != names.end();
    }));
    CHECK(gate.maxInFlight() == 2);

    gate.release();
    const bool allDone = waitUntil([&] {
      auto done = store->countJobs(JobStatus::kDone, 0);
      return done.ok() && *done == 4;
    });
    runner.stop();
    CHECK(allDone);
    CHECK(gate.maxInFlight() == 2);
    CHECK(loadTunnel(*store, "renewal").record.certificate.chainPem != "old chain");
  }
}

TEST_CASE("job runner: the reconcile adds a missing issuance job once") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    ManualClock clock(kStartMs);
    auto storeA = db->openMigrated();
    auto storeB = db->open();
    auto ca = loadCa(*storeA, clock.clock());
    ScriptedIssuer issuer(ca.get());
    Publisher publisher;
    JobRunner a(runnerConfig("machine-a", &clock), runnerStores(*storeA), issuer, publisher);
    JobRunner b(runnerConfig("machine-b", &clock), runnerStores(*storeB), issuer, publisher);
    const std::string missing =
        bindTunnel(*storeA, "unqueued", clock.nowMs(), false, false).record.certificate.id;
    bindTunnel(*storeA, "queued", clock.nowMs());
    bindTunnel(*storeA, "deleted", clock.nowMs(), false, false);
    editTunnel(*storeA, "deleted", [](TunnelRecord& record) { record.deletedAtMs = 1; });
    REQUIRE(storeA->insertTunnel(testing::sampleTunnel("plain")).ok());

    CHECK(*a.reconcile() == 1);
    CHECK(*b.reconcile() == 0);
    CHECK(*a.reconcile() == 0);
    const Job job = loadJob(*storeA, missing);
    CHECK(job.kind == JobKind::kIssue);
    CHECK(job.tunnelId == "unqueued");
    CHECK(job.status == JobStatus::kPending);
    CHECK(a.runDue().size() == 2);
    CHECK(loadTunnel(*storeA, "unqueued").record.certificate.state == CertificateState::kReady);
  }
}

// Fails every attempt of a first issuance on a transient error for a whole retry window (an hour
// apart, as the test above), so the job gives up.
void failForAWindow(JobRunner& runner, ManualClock& clock) {
  const int64_t start = clock.nowMs();
  for (int hour = 0; hour <= 24; ++hour) {
    CAPTURE(hour);
    clock.set(start + hour * kHour);
    const auto runs = runner.runDue();
    REQUIRE(runs.size() == 1);
    CHECK(runs[0].outcome == (hour < 24 ? JobOutcome::kRetry : JobOutcome::kFailed));
  }
}

TEST_CASE("job runner: the reconcile requeues a first issuance failed on a transient error once") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    ManualClock clock(kStartMs);
    auto storeA = db->openMigrated();
    auto storeB = db->open();
    auto ca = loadCa(*storeA, clock.clock());
    ScriptedIssuer issuer(ca.get());
    issuer.failAlways(Error{ErrorKind::kUnavailable, "CA unreachable"});
    Publisher publisher;
    JobRunnerConfig config = runnerConfig("machine-a", &clock);
    config.jitter = [] { return 1.0; };
    config.retry.baseDelayMs = kHour;
    JobRunner a(config, runnerStores(*storeA), issuer, publisher);
    config.owner = "machine-b";
    JobRunner b(config, runnerStores(*storeB), issuer, publisher);
    const std::string jobId = bindTunnel(*storeA, "flaky", clock.nowMs()).record.certificate.id;
    // Failures that are not transient, and a tunnel deleted after it failed, are left alone.
    const std::string refusedId =
        bindTunnel(*storeA, "refused", clock.nowMs()).record.certificate.id;
    const std::string goneId = bindTunnel(*storeA, "gone", clock.nowMs()).record.certificate.id;
    editTunnel(*storeA, "refused", [](TunnelRecord& record) { record.certificate.csrPem = "x"; });
    std::set<std::string> failedAtOnce;
    for (const JobRun& run : a.runDue()) {
      if (run.outcome == JobOutcome::kRefused) failedAtOnce.insert(run.jobId);
    }
    CHECK(failedAtOnce == std::set<std::string>{refusedId});
    const int64_t start = clock.nowMs();
    for (int hour = 0; hour <= 24; ++hour) {
      clock.set(start + hour * kHour);
      (void)a.runDue();
    }
    REQUIRE(loadJob(*storeA, jobId).status == JobStatus::kFailed);
    REQUIRE(loadJob(*storeA, goneId).status == JobStatus::kFailed);
    editTunnel(*storeA, "gone", [](TunnelRecord& record) { record.deletedAtMs = 1; });
    CHECK(loadJob(*storeA, jobId).lastError == "transient: CA unreachable");

    // Once, on one machine of two, with a fresh window; the record shows issuing again.
    const int64_t requeuedAt = clock.nowMs() + kMinute;
    clock.set(requeuedAt);
    const size_t published = publisher.recordsOf("flaky").size();
    CHECK(*a.reconcile() == 1);
    CHECK(*b.reconcile() == 0);
    CHECK(*a.reconcile() == 0);
    Job job = loadJob(*storeA, jobId);
    CHECK(job.status == JobStatus::kPending);
    CHECK(job.queuedAtMs == requeuedAt);
    CHECK(job.nextRunAtMs == requeuedAt);
    CHECK(job.attempts == 0);
    CHECK(job.lastError == "requeued: CA unreachable");
    StoredTunnel stored = loadTunnel(*storeA, "flaky");
    CHECK(stored.record.certificate.state == CertificateState::kIssuing);
    CHECK(stored.record.certificate.error.empty());
    REQUIRE(publisher.recordsOf("flaky").size() == published + 1);
    CHECK(publisher.recordsOf("flaky").back().record.certificate.state ==
          CertificateState::kIssuing);
    CHECK(loadJob(*storeA, refusedId).status == JobStatus::kFailed);
    CHECK(loadJob(*storeA, goneId).status == JobStatus::kFailed);

    // The fresh window is a whole day of retries again; then it gives up for good.
    failForAWindow(b, clock);
    job = loadJob(*storeA, jobId);
    CHECK(job.status == JobStatus::kFailed);
    CHECK(job.attempts == 25);
    CHECK(job.lastError == "requeued: transient: CA unreachable");
    CHECK(loadTunnel(*storeA, "flaky").record.certificate.state == CertificateState::kFailed);
    CHECK(loadTunnel(*storeA, "flaky").record.certificate.error == "CA unreachable");
    clock.set(clock.nowMs() + kDay);
    CHECK(*a.reconcile() == 0);
    CHECK(*b.reconcile() == 0);
    CHECK(loadJob(*storeA, jobId).status == JobStatus::kFailed);
  }
}

TEST_CASE("job runner: a requeued first issuance can succeed; a half-done requeue is finished") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    ManualClock clock(kStartMs);
    auto store = db->openMigrated();
    auto ca = loadCa(*store, clock.clock());
    ScriptedIssuer issuer(ca.get());
    // A day of timeouts (25 attempts an hour apart), then the CA answers.
    issuer.script(std::deque<std::optional<Error>>(25, Error{ErrorKind::kTimeout, "CA timed out"}));
    Publisher publisher;
    JobRunnerConfig config = runnerConfig("machine-a", &clock);
    config.jitter = [] { return 1.0; };
    config.retry.baseDelayMs = kHour;
    JobRunner runner(config, runnerStores(*store), issuer, publisher);
    const std::string jobId = bindTunnel(*store, "later", clock.nowMs()).record.certificate.id;
    failForAWindow(runner, clock);
    REQUIRE(loadJob(*store, jobId).lastError == "transient: CA timed out");
    // A machine that stopped between the record's write and the job's: the record shows
    // issuing, the job is still failed. The next reconcile finishes the requeue.
    editTunnel(*store, "later", [](TunnelRecord& record) {
      record.certificate.state = CertificateState::kIssuing;
      record.certificate.error.clear();
    });
    CHECK(*runner.reconcile() == 1);
    CHECK(loadJob(*store, jobId).status == JobStatus::kPending);

    CHECK(outcomes(runner.runDue()) == Outcomes{JobOutcome::kDone});
    CHECK(loadTunnel(*store, "later").record.certificate.state == CertificateState::kReady);
    CHECK(loadJob(*store, jobId).status == JobStatus::kDone);
  }
}

}  // namespace
}  // namespace ot::controld
