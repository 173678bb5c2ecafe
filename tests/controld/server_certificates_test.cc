// The API domain's certificate: made once per database however many controlds check at once,
// issued through a server job by the real local CA (only the domain's own name reaches it),
// picked up by every machine, renewed near expiry on a manual clock; or loaded from files,
// checked, and reloaded when they change. On SQLite and MariaDB.
#include "controld/domain_cert/server_certificates.h"

#include <doctest/doctest.h>

#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "controld/domain_cert/server_key.h"
#include "controld/issuance/job_policy.h"
#include "controld/issuance/job_runner.h"
#include "controld/store/meta_lease.h"
#include "tests/controld/issuance_test_support.h"

namespace ot::controld {
namespace {

using issuance_testing::acmeAttempts;
using issuance_testing::checkVerifies;
using issuance_testing::countAttemptsIn;
using issuance_testing::kDay;
using issuance_testing::kDomain;
using issuance_testing::loadCa;
using issuance_testing::loadJob;
using ot::ManualClock;
using issuance_testing::kStartMs;
using issuance_testing::Notifier;
using issuance_testing::Publisher;
using issuance_testing::runnerConfig;
using issuance_testing::runnerStores;
using issuance_testing::ScriptedIssuer;
using issuance_testing::TempDir;
using issuance_testing::writeFile;
using testing::testDatabases;

// The certificate role of a real store, counting the writes of the server_certificates row.
class CountingStore final : public CertificateStore {
 public:
  explicit CountingStore(CertificateStore& inner) : inner_(inner) {}

  Result<std::optional<ServerCertificate>> getServerCertificate(
      const std::string& domain) override {
    return inner_.getServerCertificate(domain);
  }
  Status putServerCertificate(const ServerCertificate& certificate) override {
    if (certificate.chain_pem.empty()) {
      ++key_writes_;
    } else {
      ++certificate_writes_;
    }
    return inner_.putServerCertificate(certificate);
  }

  [[nodiscard]] int keyWrites() const { return key_writes_.load(); }
  [[nodiscard]] int certificateWrites() const { return certificate_writes_.load(); }

 private:
  CertificateStore& inner_;
  std::atomic<int> key_writes_{0};
  std::atomic<int> certificate_writes_{0};
};

// One store in every role, as controld wires it.
ServerCertificatesStores certificatesStores(Store& store) { return {store, store, store}; }

ServerCertificatesConfig issuedConfig(const std::string& owner, ManualClock& clock) {
  ServerCertificatesConfig config;
  config.domain = kDomain;
  config.owner = owner;
  config.now_ms = clock.clock();
  return config;
}

ServerCertificate storedRow(Store& store) {
  auto row = store.getServerCertificate(kDomain);
  REQUIRE(row.ok());
  REQUIRE(row->has_value());
  return **row;
}

std::string metaValue(Store& store, const std::string& key) {
  auto value = store.getMeta(key);
  REQUIRE(value.ok());
  return value->value_or("");
}

TEST_CASE("server certificates: made once across two machines, issued, renewed near expiry") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    ManualClock clock(kStartMs);
    auto sql_a = db->openMigrated();
    auto sql_b = db->open();
    CountingStore store_a(*sql_a);
    CountingStore store_b(*sql_b);
    auto ca = loadCa(*sql_a, clock.clock());
    ScriptedIssuer issuer(ca.get());
    Publisher publisher_a;
    Publisher publisher_b;
    Notifier notifier_a;
    Notifier notifier_b;
    ServerCertificates certs_a(issuedConfig("machine-a", clock), {store_a, *sql_a, *sql_a},
                               publisher_a, &notifier_a);
    ServerCertificates certs_b(issuedConfig("machine-b", clock), {store_b, *sql_b, *sql_b},
                               publisher_b, &notifier_b);
    CHECK_FALSE(certs_a.usesFiles());

    // Both start at once.
    std::thread check_a([&] { CHECK(certs_a.check().ok()); });
    std::thread check_b([&] { CHECK(certs_b.check().ok()); });
    check_a.join();
    check_b.join();
    // The loser of the key claim waits for the winner's row; a second round sees it.
    CHECK(certs_a.check().ok());
    CHECK(certs_b.check().ok());
    CHECK(store_a.keyWrites() + store_b.keyWrites() == 1);
    const ServerCertificate made = storedRow(*sql_a);
    CHECK_FALSE(made.key_pem.empty());
    CHECK(made.chain_pem.empty());
    const std::string first_job = serverJobId(kDomain, 1);
    CHECK(metaValue(*sql_a, serverJobMetaKey(kDomain)) == first_job);
    CHECK(loadJob(*sql_a, first_job).kind == JobKind::kServer);
    CHECK(loadJob(*sql_a, first_job).status == JobStatus::kPending);
    CHECK(*sql_a->countJobs(JobStatus::kPending, 0) == 1);
    CHECK(notifier_a.count() + notifier_b.count() == 1);
    CHECK_FALSE(certs_a.current().has_value());
    CHECK(certs_a.waiting());

    // Machine B's runner issues it; B installs it at once, A at its next check.
    JobRunner runner_a(runnerConfig("machine-a", &clock), {*sql_a, *sql_a, *sql_a, store_a}, issuer,
                       publisher_a);
    JobRunner runner_b(runnerConfig("machine-b", &clock), {*sql_b, *sql_b, *sql_b, store_b}, issuer,
                       publisher_b);
    runner_a.setServerCertificateHandler(
        [&](const ServerCertificate& certificate) { certs_a.adopt(certificate); });
    runner_b.setServerCertificateHandler(
        [&](const ServerCertificate& certificate) { certs_b.adopt(certificate); });
    auto runs = runner_b.runDue();
    REQUIRE(runs.size() == 1);
    CHECK(runs[0].outcome == JobOutcome::kDone);
    CHECK(issuer.calls(kDomain) == 1);
    CHECK(issuer.total() == 1);
    CHECK(loadJob(*sql_a, first_job).status == JobStatus::kDone);
    const ServerCertificate issued = storedRow(*sql_a);
    CHECK(issued.key_pem == made.key_pem);
    CHECK(issued.csr_pem == made.csr_pem);
    REQUIRE_FALSE(issued.chain_pem.empty());
    REQUIRE(certs_b.current().has_value());
    CHECK(certs_b.current()->chain_pem == issued.chain_pem);
    CHECK(certs_b.current()->key_pem == issued.key_pem);
    CHECK(certs_b.current()->not_after_ms == issued.not_after_ms);
    CHECK_FALSE(certs_b.waiting());
    REQUIRE(publisher_b.api().size() == 1);
    CHECK(publisher_b.api()[0].chain_pem == issued.chain_pem);
    CHECK_FALSE(certs_a.current().has_value());
    CHECK(certs_a.check().ok());
    REQUIRE(certs_a.current().has_value());
    CHECK(certs_a.current()->chain_pem == issued.chain_pem);
    CHECK(publisher_a.api().size() == 1);
    CHECK(checkApiCertificate(issued.chain_pem, issued.key_pem).ok());
    checkVerifies(*ca, issued.chain_pem, kDomain, clock.nowMs());

    // Not due: checks change nothing.
    CHECK(certs_a.check().ok());
    CHECK(certs_b.check().ok());
    CHECK(metaValue(*sql_a, serverJobMetaKey(kDomain)) == first_job);
    CHECK(*sql_a->countJobs(JobStatus::kPending, 0) == 0);
    CHECK(publisher_a.api().size() == 1);
    CHECK(publisher_b.api().size() == 1);

    // 30 days before expiry (90-day certificates), both machines ask; one job is added.
    auto validity = leafValidity(issued.chain_pem);
    REQUIRE(validity.ok());
    CHECK(validity->not_after_ms == issued.not_after_ms);
    clock.set(issued.not_after_ms - 30 * kDay - 1);
    CHECK(certs_a.check().ok());
    CHECK(*sql_a->countJobs(JobStatus::kPending, 0) == 0);
    clock.set(issued.not_after_ms - 30 * kDay);
    std::thread renew_a([&] { CHECK(certs_a.check().ok()); });
    std::thread renew_b([&] { CHECK(certs_b.check().ok()); });
    renew_a.join();
    renew_b.join();
    const std::string second_job = serverJobId(kDomain, 2);
    CHECK(metaValue(*sql_a, serverJobMetaKey(kDomain)) == second_job);
    CHECK(*sql_a->countJobs(JobStatus::kPending, 0) == 1);
    CHECK_FALSE(sql_a->getJob(serverJobId(kDomain, 3))->has_value());
    CHECK(certs_a.waiting());

    runs = runner_a.runDue();
    REQUIRE(runs.size() == 1);
    CHECK(runs[0].outcome == JobOutcome::kDone);
    CHECK(issuer.total() == 2);
    const ServerCertificate renewed = storedRow(*sql_a);
    CHECK(renewed.key_pem == made.key_pem);
    CHECK(renewed.not_after_ms > issued.not_after_ms);
    CHECK(renewed.chain_pem != issued.chain_pem);
    REQUIRE(certs_a.current().has_value());
    CHECK(certs_a.current()->chain_pem == renewed.chain_pem);
    CHECK(publisher_a.api().size() == 2);
    CHECK(certs_b.check().ok());
    CHECK(certs_b.current()->chain_pem == renewed.chain_pem);
    CHECK(publisher_b.api().size() == 2);
    // Reading the older row again never goes back.
    certs_b.adopt(issued);
    CHECK(certs_b.current()->chain_pem == renewed.chain_pem);
    CHECK(store_a.keyWrites() + store_b.keyWrites() == 1);
    CHECK(store_a.certificateWrites() + store_b.certificateWrites() == 2);
    checkVerifies(*ca, renewed.chain_pem, kDomain, clock.nowMs());

    // A job that is no longer the named one ends abandoned without an issuance.
    Job old;
    old.id = first_job + "0";
    old.kind = JobKind::kServer;
    old.queued_at_ms = clock.nowMs();
    old.next_run_at_ms = clock.nowMs();
    REQUIRE(*sql_a->addJob(old));
    runs = runner_a.runDue();
    REQUIRE(runs.size() == 1);
    CHECK(runs[0].outcome == JobOutcome::kAbandoned);
    CHECK(issuer.total() == 2);
  }
}

TEST_CASE("server certificates: a failed server job is followed by a new one") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    ManualClock clock(kStartMs);
    auto store = db->openMigrated();
    auto ca = loadCa(*store, clock.clock());
    ScriptedIssuer issuer(ca.get());
    issuer.script({Error{ErrorKind::kInvalid, "malformed"}});
    Publisher publisher;
    ServerCertificates certs(issuedConfig("machine-a", clock), certificatesStores(*store), publisher,
                             nullptr);
    JobRunner runner(runnerConfig("machine-a", &clock), runnerStores(*store), issuer, publisher);
    CHECK(certs.check().ok());
    auto runs = runner.runDue();
    REQUIRE(runs.size() == 1);
    CHECK(runs[0].outcome == JobOutcome::kFailed);
    CHECK(loadJob(*store, serverJobId(kDomain, 1)).status == JobStatus::kFailed);
    CHECK_FALSE(certs.current().has_value());

    CHECK(certs.check().ok());
    CHECK(metaValue(*store, serverJobMetaKey(kDomain)) == serverJobId(kDomain, 2));
    runs = runner.runDue();
    REQUIRE(runs.size() == 1);
    CHECK(runs[0].outcome == JobOutcome::kDone);
    // Without a handler the runner publishes the certificate itself.
    REQUIRE(publisher.api().size() == 1);
    CHECK(publisher.api()[0].chain_pem == storedRow(*store).chain_pem);
    CHECK(certs.check().ok());
    CHECK(certs.current().has_value());
  }
}

TEST_CASE("server certificates: a server job for other names never reaches the issuer") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    ManualClock clock(kStartMs);
    auto store = db->openMigrated();
    auto ca = loadCa(*store, clock.clock());
    ScriptedIssuer issuer(ca.get());
    Publisher publisher;
    ServerCertificates certs(issuedConfig("machine-a", clock), certificatesStores(*store), publisher,
                             nullptr);
    CHECK(certs.check().ok());
    // Someone rewrote the row with a CSR for another name.
    ServerCertificate row = storedRow(*store);
    auto evil = makeServerKeyAndCsr("evil.example");
    REQUIRE(evil.ok());
    row.key_pem = evil->key_pem;
    row.csr_pem = evil->csr_pem;
    REQUIRE(store->putServerCertificate(row).ok());

    metrics::Metrics metrics;
    AcmeMetrics acme_metrics(metrics);
    JobRunnerConfig config = runnerConfig("machine-a", &clock);
    countAttemptsIn(config, acme_metrics);
    JobRunner runner(config, runnerStores(*store), issuer, publisher);
    auto runs = runner.runDue();
    REQUIRE(runs.size() == 1);
    CHECK(runs[0].outcome == JobOutcome::kRefused);
    CHECK(issuer.total() == 0);
    CHECK(acmeAttempts(metrics, "server", "refused") == 1);
    const Job job = loadJob(*store, serverJobId(kDomain, 1));
    CHECK(job.status == JobStatus::kFailed);
    CHECK(job.last_error.rfind("refused: ", 0) == 0);
    CHECK(storedRow(*store).chain_pem.empty());
    CHECK(publisher.api().empty());
  }
}

TEST_CASE("server certificates: a key claim left by a dead machine is taken over") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    ManualClock clock(kStartMs);
    auto store = db->openMigrated();
    Publisher publisher;
    // Claimed by a machine that died before writing the key; its claim runs 5 minutes.
    REQUIRE(*store->insertMetaIfAbsent(serverKeyMetaKey(kDomain),
                                       encodeMetaLease({"machine-dead", clock.nowMs() + 300'000})));
    ServerCertificates certs(issuedConfig("machine-a", clock), certificatesStores(*store), publisher,
                             nullptr);
    CHECK(certs.check().ok());
    CHECK_FALSE(store->getServerCertificate(kDomain)->has_value());
    CHECK(*store->countJobs(JobStatus::kPending, 0) == 0);
    clock.advance(5 * 60'000);
    CHECK(certs.check().ok());
    CHECK(store->getServerCertificate(kDomain)->has_value());
    CHECK(metaValue(*store, serverKeyMetaKey(kDomain)).rfind("machine-a@", 0) == 0);
    CHECK(*store->countJobs(JobStatus::kPending, 0) == 1);
  }
}

TEST_CASE("server certificates: files are checked, loaded, and reloaded when they change") {
  ManualClock clock(kStartMs);
  auto dbs = testDatabases();
  const auto& db = dbs.front();
  auto store = db->openMigrated();
  auto ca = loadCa(*store, clock.clock());
  const std::atomic<bool> not_cancelled{false};
  auto issue = [&](const std::string& name) {
    auto made = makeServerKeyAndCsr(name);
    REQUIRE(made.ok());
    auto issued = ca->issue(IssueRequest{made->csr_pem, {name}}, not_cancelled);
    REQUIRE(issued.ok());
    return std::make_pair(issued->chain_pem, made->key_pem);
  };
  const auto [chain1, key1] = issue(kDomain);
  const auto [chain2, key2] = issue(kDomain);

  // The pure checks.
  CHECK(checkApiCertificate(chain1, key1).ok());
  auto mismatch = checkApiCertificate(chain1, key2);
  REQUIRE_FALSE(mismatch.ok());
  CHECK(mismatch.error().kind == ErrorKind::kInvalid);
  CHECK(mismatch.error().message == "the private key does not belong to the certificate");
  CHECK_FALSE(checkApiCertificate("", key1).ok());
  CHECK_FALSE(checkApiCertificate(chain1, "").ok());
  CHECK_FALSE(checkApiCertificate(chain1 + key1, key1).ok());  // a key inside the chain
  CHECK_FALSE(checkApiCertificate(chain1, chain1).ok());
  CHECK(checkApiCertificate(chain1 + chain2, key1).ok());  // leaf first, then others
  CHECK_FALSE(checkApiCertificate(chain2 + chain1, key1).ok());
  // Broken blocks after a good leaf are refused, not ignored.
  const std::string begin = "-----BEGIN CERTIFICATE-----\n";
  const std::string end = "-----END CERTIFICATE-----\n";
  auto short_block = checkApiCertificate(chain1 + begin + "AAAA\n" + end, key1);
  REQUIRE_FALSE(short_block.ok());
  CHECK(short_block.error().message == "the chain holds an unreadable certificate");
  auto bad_base64 = checkApiCertificate(chain1 + begin + "!!!!\n" + end, key1);
  REQUIRE_FALSE(bad_base64.ok());
  CHECK(bad_base64.error().message == "the chain holds a broken PEM block");
  CHECK_FALSE(checkApiCertificate(chain1 + begin + "MIIB\n", key1).ok());
  CHECK(checkApiCertificate("text before\n" + chain1 + "\n\n", key1).ok());
  CHECK(leafCoversHost(chain1, kDomain));
  CHECK_FALSE(leafCoversHost(chain1, "other.test"));
  CHECK_FALSE(leafCoversHost("junk", kDomain));

  TempDir dir;
  const std::string cert_file = dir.file("cert.pem");
  const std::string key_file = dir.file("key.pem");
  ServerCertificatesConfig config;
  config.domain = kDomain;
  config.owner = "machine-a";
  config.cert_file = cert_file;
  config.key_file = key_file;
  config.now_ms = clock.clock();
  Publisher publisher;
  Notifier notifier;
  ServerCertificates certs(config, certificatesStores(*store), publisher, &notifier);
  CHECK(certs.usesFiles());

  // Missing files: an error, nothing installed.
  CHECK_FALSE(certs.check().ok());
  CHECK_FALSE(certs.current().has_value());

  writeFile(cert_file, chain1);
  writeFile(key_file, key1);
  CHECK(certs.check().ok());
  REQUIRE(certs.current().has_value());
  CHECK(certs.current()->chain_pem == chain1);
  CHECK(certs.current()->key_pem == key1);
  auto validity = leafValidity(chain1);
  REQUIRE(validity.ok());
  CHECK(certs.current()->not_after_ms == validity->not_after_ms);
  CHECK(publisher.api().size() == 1);
  CHECK(certs.check().ok());  // unchanged: nothing published again
  CHECK(publisher.api().size() == 1);

  // Half-replaced (new certificate, old key): refused, the old pair stays.
  writeFile(cert_file, chain2);
  CHECK_FALSE(certs.check().ok());
  CHECK(certs.current()->chain_pem == chain1);
  CHECK(publisher.api().size() == 1);
  auto again = certs.check();  // the same bad pair: still an error, logged only once
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().message == "the private key does not belong to the certificate");
  CHECK(publisher.api().size() == 1);

  writeFile(key_file, key2);
  CHECK(certs.check().ok());
  CHECK(certs.current()->chain_pem == chain2);
  CHECK(certs.current()->key_pem == key2);
  REQUIRE(publisher.api().size() == 2);
  CHECK(publisher.api()[1].chain_pem == chain2);

  // Files never touch the database's issuance.
  CHECK_FALSE(store->getServerCertificate(kDomain)->has_value());
  CHECK(*store->countJobs(JobStatus::kPending, 0) == 0);
  CHECK(notifier.count() == 0);
}

TEST_CASE("server certificates: start() checks on its own thread and stop() ends it") {
  ManualClock clock(kStartMs);
  auto dbs = testDatabases();
  auto store = dbs.front()->openMigrated();
  Publisher publisher;
  Notifier notifier;
  ServerCertificatesConfig config = issuedConfig("machine-a", clock);
  config.pending_check_interval_ms = 10;
  ServerCertificates certs(config, certificatesStores(*store), publisher, &notifier);
  certs.start();
  CHECK(issuance_testing::waitUntil([&] { return notifier.count() == 1; }));
  certs.stop();
  certs.stop();
  CHECK(metaValue(*store, serverJobMetaKey(kDomain)) == serverJobId(kDomain, 1));
}

}  // namespace
}  // namespace ot::controld
