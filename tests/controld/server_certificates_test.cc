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
using issuance_testing::kStartMs;
using issuance_testing::loadCa;
using issuance_testing::loadJob;
using issuance_testing::Notifier;
using issuance_testing::Publisher;
using issuance_testing::runnerConfig;
using issuance_testing::runnerStores;
using issuance_testing::ScriptedIssuer;
using issuance_testing::TempDir;
using issuance_testing::writeFile;
using ot::ManualClock;
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
    if (certificate.chainPem.empty()) {
      ++keyWrites_;
    } else {
      ++certificateWrites_;
    }
    return inner_.putServerCertificate(certificate);
  }

  [[nodiscard]] int keyWrites() const { return keyWrites_.load(); }
  [[nodiscard]] int certificateWrites() const { return certificateWrites_.load(); }

 private:
  CertificateStore& inner_;
  std::atomic<int> keyWrites_{0};
  std::atomic<int> certificateWrites_{0};
};

// One store in every role, as controld wires it.
ServerCertificatesStores certificatesStores(Store& store) {
  return {store, store, store};
}

ServerCertificatesConfig issuedConfig(const std::string& owner, ManualClock& clock) {
  ServerCertificatesConfig config;
  config.domain = kDomain;
  config.owner = owner;
  config.nowMs = clock.clock();
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
    auto sqlA = db->openMigrated();
    auto sqlB = db->open();
    CountingStore storeA(*sqlA);
    CountingStore storeB(*sqlB);
    auto ca = loadCa(*sqlA, clock.clock());
    ScriptedIssuer issuer(ca.get());
    Publisher publisherA;
    Publisher publisherB;
    Notifier notifierA;
    Notifier notifierB;
    ServerCertificates certsA(issuedConfig("machine-a", clock), {storeA, *sqlA, *sqlA}, publisherA,
                              &notifierA);
    ServerCertificates certsB(issuedConfig("machine-b", clock), {storeB, *sqlB, *sqlB}, publisherB,
                              &notifierB);
    CHECK_FALSE(certsA.usesFiles());

    // Both start at once.
    std::thread checkA([&] { CHECK(certsA.check().ok()); });
    std::thread checkB([&] { CHECK(certsB.check().ok()); });
    checkA.join();
    checkB.join();
    // The loser of the key claim waits for the winner's row; a second round sees it.
    CHECK(certsA.check().ok());
    CHECK(certsB.check().ok());
    CHECK(storeA.keyWrites() + storeB.keyWrites() == 1);
    const ServerCertificate made = storedRow(*sqlA);
    CHECK_FALSE(made.keyPem.empty());
    CHECK(made.chainPem.empty());
    const std::string firstJob = serverJobId(kDomain, 1);
    CHECK(metaValue(*sqlA, serverJobMetaKey(kDomain)) == firstJob);
    CHECK(loadJob(*sqlA, firstJob).kind == JobKind::kServer);
    CHECK(loadJob(*sqlA, firstJob).status == JobStatus::kPending);
    CHECK(*sqlA->countJobs(JobStatus::kPending, 0) == 1);
    CHECK(notifierA.count() + notifierB.count() == 1);
    CHECK_FALSE(certsA.current().has_value());
    CHECK(certsA.waiting());

    // Machine B's runner issues it; B installs it at once, A at its next check.
    JobRunner runnerA(runnerConfig("machine-a", &clock), {*sqlA, *sqlA, *sqlA, storeA}, issuer,
                      publisherA);
    JobRunner runnerB(runnerConfig("machine-b", &clock), {*sqlB, *sqlB, *sqlB, storeB}, issuer,
                      publisherB);
    runnerA.setServerCertificateHandler(
        [&](const ServerCertificate& certificate) { certsA.adopt(certificate); });
    runnerB.setServerCertificateHandler(
        [&](const ServerCertificate& certificate) { certsB.adopt(certificate); });
    auto runs = runnerB.runDue();
    REQUIRE(runs.size() == 1);
    CHECK(runs[0].outcome == JobOutcome::kDone);
    CHECK(issuer.calls(kDomain) == 1);
    CHECK(issuer.total() == 1);
    CHECK(loadJob(*sqlA, firstJob).status == JobStatus::kDone);
    const ServerCertificate issued = storedRow(*sqlA);
    CHECK(issued.keyPem == made.keyPem);
    CHECK(issued.csrPem == made.csrPem);
    REQUIRE_FALSE(issued.chainPem.empty());
    REQUIRE(certsB.current().has_value());
    CHECK(certsB.current()->chainPem == issued.chainPem);
    CHECK(certsB.current()->keyPem == issued.keyPem);
    CHECK(certsB.current()->notAfterMs == issued.notAfterMs);
    CHECK_FALSE(certsB.waiting());
    REQUIRE(publisherB.api().size() == 1);
    CHECK(publisherB.api()[0].chainPem == issued.chainPem);
    CHECK_FALSE(certsA.current().has_value());
    CHECK(certsA.check().ok());
    REQUIRE(certsA.current().has_value());
    CHECK(certsA.current()->chainPem == issued.chainPem);
    CHECK(publisherA.api().size() == 1);
    CHECK(checkApiCertificate(issued.chainPem, issued.keyPem).ok());
    checkVerifies(*ca, issued.chainPem, kDomain, clock.nowMs());

    // Not due: checks change nothing.
    CHECK(certsA.check().ok());
    CHECK(certsB.check().ok());
    CHECK(metaValue(*sqlA, serverJobMetaKey(kDomain)) == firstJob);
    CHECK(*sqlA->countJobs(JobStatus::kPending, 0) == 0);
    CHECK(publisherA.api().size() == 1);
    CHECK(publisherB.api().size() == 1);

    // 30 days before expiry (90-day certificates), both machines ask; one job is added.
    auto validity = leafValidity(issued.chainPem);
    REQUIRE(validity.ok());
    CHECK(validity->notAfterMs == issued.notAfterMs);
    clock.set(issued.notAfterMs - 30 * kDay - 1);
    CHECK(certsA.check().ok());
    CHECK(*sqlA->countJobs(JobStatus::kPending, 0) == 0);
    clock.set(issued.notAfterMs - 30 * kDay);
    std::thread renewA([&] { CHECK(certsA.check().ok()); });
    std::thread renewB([&] { CHECK(certsB.check().ok()); });
    renewA.join();
    renewB.join();
    const std::string secondJob = serverJobId(kDomain, 2);
    CHECK(metaValue(*sqlA, serverJobMetaKey(kDomain)) == secondJob);
    CHECK(*sqlA->countJobs(JobStatus::kPending, 0) == 1);
    CHECK_FALSE(sqlA->getJob(serverJobId(kDomain, 3))->has_value());
    CHECK(certsA.waiting());

    runs = runnerA.runDue();
    REQUIRE(runs.size() == 1);
    CHECK(runs[0].outcome == JobOutcome::kDone);
    CHECK(issuer.total() == 2);
    const ServerCertificate renewed = storedRow(*sqlA);
    CHECK(renewed.keyPem == made.keyPem);
    CHECK(renewed.notAfterMs > issued.notAfterMs);
    CHECK(renewed.chainPem != issued.chainPem);
    REQUIRE(certsA.current().has_value());
    CHECK(certsA.current()->chainPem == renewed.chainPem);
    CHECK(publisherA.api().size() == 2);
    CHECK(certsB.check().ok());
    CHECK(certsB.current()->chainPem == renewed.chainPem);
    CHECK(publisherB.api().size() == 2);
    // Reading the older row again never goes back.
    certsB.adopt(issued);
    CHECK(certsB.current()->chainPem == renewed.chainPem);
    CHECK(storeA.keyWrites() + storeB.keyWrites() == 1);
    CHECK(storeA.certificateWrites() + storeB.certificateWrites() == 2);
    checkVerifies(*ca, renewed.chainPem, kDomain, clock.nowMs());

    // A job that is no longer the named one ends abandoned without an issuance.
    Job old;
    old.id = firstJob + "0";
    old.kind = JobKind::kServer;
    old.queuedAtMs = clock.nowMs();
    old.nextRunAtMs = clock.nowMs();
    REQUIRE(*sqlA->addJob(old));
    runs = runnerA.runDue();
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
    ServerCertificates certs(issuedConfig("machine-a", clock), certificatesStores(*store),
                             publisher, nullptr);
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
    CHECK(publisher.api()[0].chainPem == storedRow(*store).chainPem);
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
    ServerCertificates certs(issuedConfig("machine-a", clock), certificatesStores(*store),
                             publisher, nullptr);
    CHECK(certs.check().ok());
    // Someone rewrote the row with a CSR for another name.
    ServerCertificate row = storedRow(*store);
    auto evil = makeServerKeyAndCsr("evil.example");
    REQUIRE(evil.ok());
    row.keyPem = evil->keyPem;
    row.csrPem = evil->csrPem;
    REQUIRE(store->putServerCertificate(row).ok());

    metrics::Metrics metrics;
    AcmeMetrics acmeMetrics(metrics);
    JobRunnerConfig config = runnerConfig("machine-a", &clock);
    countAttemptsIn(config, acmeMetrics);
    JobRunner runner(config, runnerStores(*store), issuer, publisher);
    auto runs = runner.runDue();
    REQUIRE(runs.size() == 1);
    CHECK(runs[0].outcome == JobOutcome::kRefused);
    CHECK(issuer.total() == 0);
    CHECK(acmeAttempts(metrics, "server", "refused") == 1);
    const Job job = loadJob(*store, serverJobId(kDomain, 1));
    CHECK(job.status == JobStatus::kFailed);
    CHECK(job.lastError.rfind("refused: ", 0) == 0);
    CHECK(storedRow(*store).chainPem.empty());
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
    ServerCertificates certs(issuedConfig("machine-a", clock), certificatesStores(*store),
                             publisher, nullptr);
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
  const std::atomic<bool> notCancelled{false};
  auto issue = [&](const std::string& name) {
    auto made = makeServerKeyAndCsr(name);
    REQUIRE(made.ok());
    auto issued = ca->issue(IssueRequest{made->csrPem, {name}}, notCancelled);
    REQUIRE(issued.ok());
    return std::make_pair(issued->chainPem, made->keyPem);
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
  auto shortBlock = checkApiCertificate(chain1 + begin + "AAAA\n" + end, key1);
  REQUIRE_FALSE(shortBlock.ok());
  CHECK(shortBlock.error().message == "the chain holds an unreadable certificate");
  auto badBase64 = checkApiCertificate(chain1 + begin + "!!!!\n" + end, key1);
  REQUIRE_FALSE(badBase64.ok());
  CHECK(badBase64.error().message == "the chain holds a broken PEM block");
  CHECK_FALSE(checkApiCertificate(chain1 + begin + "MIIB\n", key1).ok());
  CHECK(checkApiCertificate("text before\n" + chain1 + "\n\n", key1).ok());
  CHECK(leafCoversHost(chain1, kDomain));
  CHECK_FALSE(leafCoversHost(chain1, "other.test"));
  CHECK_FALSE(leafCoversHost("junk", kDomain));

  TempDir dir;
  const std::string certFile = dir.file("cert.pem");
  const std::string keyFile = dir.file("key.pem");
  ServerCertificatesConfig config;
  config.domain = kDomain;
  config.owner = "machine-a";
  config.certFile = certFile;
  config.keyFile = keyFile;
  config.nowMs = clock.clock();
  Publisher publisher;
  Notifier notifier;
  ServerCertificates certs(config, certificatesStores(*store), publisher, &notifier);
  CHECK(certs.usesFiles());

  // Missing files: an error, nothing installed.
  CHECK_FALSE(certs.check().ok());
  CHECK_FALSE(certs.current().has_value());

  writeFile(certFile, chain1);
  writeFile(keyFile, key1);
  CHECK(certs.check().ok());
  REQUIRE(certs.current().has_value());
  CHECK(certs.current()->chainPem == chain1);
  CHECK(certs.current()->keyPem == key1);
  auto validity = leafValidity(chain1);
  REQUIRE(validity.ok());
  CHECK(certs.current()->notAfterMs == validity->notAfterMs);
  CHECK(publisher.api().size() == 1);
  CHECK(certs.check().ok());  // unchanged: nothing published again
  CHECK(publisher.api().size() == 1);

  // Half-replaced (new certificate, old key): refused, the old pair stays.
  writeFile(certFile, chain2);
  CHECK_FALSE(certs.check().ok());
  CHECK(certs.current()->chainPem == chain1);
  CHECK(publisher.api().size() == 1);
  auto again = certs.check();  // the same bad pair: still an error, logged only once
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().message == "the private key does not belong to the certificate");
  CHECK(publisher.api().size() == 1);

  writeFile(keyFile, key2);
  CHECK(certs.check().ok());
  CHECK(certs.current()->chainPem == chain2);
  CHECK(certs.current()->keyPem == key2);
  REQUIRE(publisher.api().size() == 2);
  CHECK(publisher.api()[1].chainPem == chain2);

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
  config.pendingCheckIntervalMs = 10;
  ServerCertificates certs(config, certificatesStores(*store), publisher, &notifier);
  certs.start();
  CHECK(issuance_testing::waitUntil([&] { return notifier.count() == 1; }));
  certs.stop();
  certs.stop();
  CHECK(metaValue(*store, serverJobMetaKey(kDomain)) == serverJobId(kDomain, 1));
}

}  // namespace
}  // namespace ot::controld
