// Only a tunnel's own names reach the CA, and each refusal is counted: a stored record tampered to
// carry foreign names, or a domain certificate row with a CSR for another domain, ends the job
// as refused without an issuer call, and opentunnel_acme_attempts_total{outcome="refused"} moves
// through the runner's on_attempt hook exactly as main.cc wires it.
#include <doctest/doctest.h>

#include <string>

#include "common/metrics.h"
#include "controld/acme_metrics.h"
#include "controld/job_runner.h"
#include "controld/server_certificates.h"
#include "tests/controld/issuance_test_support.h"

namespace ot::controld {
namespace {

using issuance_testing::bindTunnel;
using issuance_testing::editTunnel;
using issuance_testing::hostOf;
using issuance_testing::kDomain;
using issuance_testing::loadCa;
using issuance_testing::loadJob;
using issuance_testing::loadTunnel;
using issuance_testing::ManualClock;
using issuance_testing::Publisher;
using issuance_testing::runnerConfig;
using issuance_testing::ScriptedIssuer;
using testing::testDatabases;

double attempts(metrics::Metrics& metrics, const char* kind, const char* outcome) {
  return metrics
      .counter("opentunnel_acme_attempts_total", "", {{"kind", kind}, {"outcome", outcome}})
      .Value();
}

TEST_CASE("job runner: foreign names in a stored record are refused and counted as refused") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    ManualClock clock;
    auto store = db->openMigrated();
    auto ca = loadCa(*store, clock.function());
    ScriptedIssuer issuer(ca.get());
    Publisher publisher;
    metrics::Metrics metrics;
    AcmeMetrics acme_metrics(metrics);
    JobRunnerConfig config = runnerConfig("machine-a", &clock);
    config.on_attempt = [&](JobKind kind, JobOutcome outcome, double seconds) {
      acme_metrics.attempt(kind, outcome, seconds);
    };
    JobRunner runner(config, *store, issuer, publisher);

    bindTunnel(*store, "victim", clock.now(), true, false);
    const std::string job_id = bindTunnel(*store, "attacker", clock.now()).record.certificate.id;
    const std::string victim = hostOf("victim");
    editTunnel(*store, "attacker", [&](TunnelRecord& record) {
      record.certificate.csr_pem = testing::buildCsrPem(testing::hostCsr(victim, true));
      record.certificate.identifiers = {victim, "*." + victim};
    });

    auto runs = runner.runDue();
    REQUIRE(runs.size() == 1);
    CHECK(runs[0].outcome == JobOutcome::kRefused);
    CHECK(issuer.total() == 0);
    CHECK(attempts(metrics, "issue", "refused") == 1);
    CHECK(attempts(metrics, "issue", "failed") == 0);
    CHECK(attempts(metrics, "issue", "success") == 0);
    CHECK(loadJob(*store, job_id).status == JobStatus::kFailed);
    const TunnelRecord record = loadTunnel(*store, "attacker").record;
    CHECK(record.certificate.state == CertificateState::kFailed);
    CHECK(record.certificate.error.rfind("refused: ", 0) == 0);

    // A domain certificate job whose stored CSR names another domain.
    ServerCertificate row;
    row.domain = kDomain;
    row.key_pem = "a key that is never used";
    row.csr_pem = testing::buildCsrPem(testing::hostCsr("evil.example"));
    REQUIRE(store->putServerCertificate(row).ok());
    const std::string server_job = serverJobId(kDomain, 1);
    REQUIRE(*store->insertMetaIfAbsent(serverJobMetaKey(kDomain), server_job));
    Job job;
    job.id = server_job;
    job.kind = JobKind::kServer;
    job.queued_at_ms = clock.now();
    job.next_run_at_ms = clock.now();
    REQUIRE(*store->addJob(job));
    runs = runner.runDue();
    REQUIRE(runs.size() == 1);
    CHECK(runs[0].outcome == JobOutcome::kRefused);
    CHECK(issuer.total() == 0);
    CHECK(attempts(metrics, "server", "refused") == 1);
    CHECK(loadJob(*store, server_job).status == JobStatus::kFailed);
  }
}

}  // namespace
}  // namespace ot::controld
