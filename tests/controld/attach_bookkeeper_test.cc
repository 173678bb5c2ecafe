// The bookkeeping after an attach (controld/relays/attach_bookkeeper.h), on SQLite and MariaDB:
// lastConnectedAt written once an attach was reported through the hub and shown by the API, not
// again within the hour (neither by this process nor by another), the renewal check (a due
// certificate gets its renewal job, a lost alarm is armed again), and a store outage that keeps
// the tunnel queued.
#include "controld/relays/attach_bookkeeper.h"

#include <nlohmann/json.hpp>

#include "controld/issuance/job_policy.h"
#include "controld/relays/relay_hub.h"
#include "tests/controld/api_test_support.h"
#include "tests/controld/control_harness.h"

namespace ot::controld {
namespace {

using testing::bearer;
using testing::CountingNotifier;
using testing::kStartMs;
using testing::parseBody;
using testing::TestApi;
using testing::testDatabases;

constexpr int64_t kMinuteMs = 60'000;
constexpr int64_t kBookkeeperDay = 86'400'000;

// A relay session on the hub, as one relayd's Session stream would open it.
RelayHub::SessionPtr openSession(RelayHub& hub) {
  cv1::Hello hello;
  hello.set_machine_id("relay-a");
  hello.set_epoch(1);
  auto session = hub.open(hello, [] {});
  REQUIRE(session != nullptr);
  return session;
}

BridgeEntry bridgeOf(const std::string& tunnelId, const std::string& bridgeId) {
  BridgeEntry bridge;
  bridge.bridgeId = bridgeId;
  bridge.tunnelId = tunnelId;
  bridge.routes = {""};
  return bridge;
}

AttachBookkeeperOptions manualClock(const ManualClock& clock) {
  AttachBookkeeperOptions options;
  options.nowMs = clock.clock();
  return options;
}

TunnelRecord readyRecord(const std::string& id, int64_t notAfterMs) {
  TunnelRecord record;
  record.id = id;
  record.hostname = id + ".tunnel.test";
  record.tokenSha256Hex = std::string(64, 'a');
  record.createdAtMs = kStartMs - kBookkeeperDay;
  record.certificate.id = "cert-" + id;
  record.certificate.state = CertificateState::kReady;
  record.certificate.chainPem = "-----BEGIN CERTIFICATE-----\n(test)\n-----END CERTIFICATE-----\n";
  record.certificate.notAfterMs = notAfterMs;
  return record;
}

}  // namespace

TEST_CASE("attach bookkeeping: lastConnectedAt after an attach, at most once an hour") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    TestApi api(*store);
    RelayHub hub(api.registry);
    AttachBookkeeper bookkeeper(*store, *store, &api.notifier, manualClock(api.clock));
    hub.setAttachedHandler(
        [&](const BridgeEntry& bridge) { bookkeeper.noteAttached(bridge.tunnelId); });
    const auto session = openSession(hub);
    const auto tunnel = api.create();
    auto read = [&] {
      const ApiResponse response =
          api.call("GET", "/api/tunnel/" + tunnel.id, "", bearer(tunnel.token));
      REQUIRE(response.status == 200);
      return parseBody(response);
    };
    CHECK(read()["lastConnectedAt"].is_null());

    api.clock.advance(1000);
    hub.bridgeAttached(session, bridgeOf(tunnel.id, "b1"));
    CHECK(bookkeeper.pending() == 1);
    CHECK(read()["lastConnectedAt"].is_null());  // nothing written on the attach's path
    REQUIRE(bookkeeper.flush().ok());
    auto body = read();
    CHECK(body["state"] == "online");
    CHECK(body["lastConnectedAt"] == "2023-11-14T22:13:21.000Z");
    const StoredTunnel written = api.stored(tunnel.id);
    CHECK(written.record.lastConnectedAtMs == kStartMs + 1000);
    CHECK(bookkeeper.writes() == 1);

    // More attaches within the hour: not even queued, and nothing written.
    api.clock.advance(30 * kMinuteMs);
    hub.bridgeAttached(session, bridgeOf(tunnel.id, "b2"));
    hub.bridgeDetached(session, "b1");
    hub.bridgeAttached(session, bridgeOf(tunnel.id, "b1"));
    CHECK(bookkeeper.pending() == 0);
    REQUIRE(bookkeeper.flush().ok());
    CHECK(api.stored(tunnel.id).revision == written.revision);
    CHECK(bookkeeper.writes() == 1);

    // Another controld (or this one restarted) reads the record and writes nothing either.
    AttachBookkeeper other(*store, *store, nullptr, manualClock(api.clock));
    other.noteAttached(tunnel.id);
    CHECK(other.pending() == 1);
    REQUIRE(other.flush().ok());
    CHECK(other.writes() == 0);
    CHECK(api.stored(tunnel.id).revision == written.revision);

    // An hour after the write, the next attach writes again.
    api.clock.advance(30 * kMinuteMs);
    hub.bridgeAttached(session, bridgeOf(tunnel.id, "b3"));
    CHECK(bookkeeper.pending() == 1);
    REQUIRE(bookkeeper.flush().ok());
    CHECK(bookkeeper.writes() == 2);
    const StoredTunnel again = api.stored(tunnel.id);
    CHECK(again.revision == written.revision + 1);
    CHECK(again.record.lastConnectedAtMs == kStartMs + 1000 + 60 * kMinuteMs);
    CHECK(read()["lastConnectedAt"] == "2023-11-14T23:13:21.000Z");
    // The record is not pushed to the relays: nothing they cache changed.
    CHECK(api.publisher.records().size() == 1);  // the create's
  }
}

TEST_CASE("attach bookkeeping: the renewal check on attach") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    ManualClock clock(kStartMs);
    CountingNotifier notifier;
    AttachBookkeeper bookkeeper(*store, *store, &notifier, manualClock(clock));

    // Due: the alarm time has come (the alarm loop may not have run yet).
    TunnelRecord due = readyRecord("due", kStartMs + 10 * kBookkeeperDay);
    due.renewAtMs = kStartMs - 1000;
    // In its renewal window without an alarm (a lost one): renewed from the expiry.
    TunnelRecord lost = readyRecord("lost", kStartMs + 10 * kBookkeeperDay);
    // Not in its window and without an alarm: the alarm is armed again.
    TunnelRecord unarmed = readyRecord("unarmed", kStartMs + 60 * kBookkeeperDay);
    // Neither due nor unarmed; and a first issuance still running.
    TunnelRecord later = readyRecord("later", kStartMs + 40 * kBookkeeperDay);
    later.renewAtMs = kStartMs + 10 * kBookkeeperDay;
    TunnelRecord issuing = readyRecord("issuing", 0);
    issuing.certificate.state = CertificateState::kIssuing;
    for (const TunnelRecord* record : {&due, &lost, &unarmed, &later, &issuing}) {
      REQUIRE(store->insertTunnel(*record).ok());
      bookkeeper.noteAttached(record->id);
    }
    REQUIRE(bookkeeper.flush().ok());

    auto job = store->getJob(renewalJobId(due.certificate, kStartMs - 1000));
    REQUIRE(job.ok());
    REQUIRE(job->has_value());
    CHECK((*job)->kind == JobKind::kRenew);
    CHECK((*job)->status == JobStatus::kPending);
    CHECK((*job)->tunnelId == "due");
    job =
        store->getJob(renewalJobId(lost.certificate, lost.certificate.notAfterMs - kRenewBeforeMs));
    REQUIRE(job.ok());
    CHECK(job->has_value());
    auto pending = store->countJobs(JobStatus::kPending, 0);
    REQUIRE(pending.ok());
    CHECK(*pending == 2);
    CHECK(notifier.count() == 2);

    auto stored = store->getTunnel("unarmed");
    REQUIRE(stored.ok());
    CHECK((*stored)->record.renewAtMs == unarmed.certificate.notAfterMs - kRenewBeforeMs);
    auto alarms = store->dueAlarms(unarmed.certificate.notAfterMs - kRenewBeforeMs, 10);
    REQUIRE(alarms.ok());
    bool armed = false;
    for (const auto& tunnel : *alarms) armed |= tunnel.record.id == "unarmed";
    CHECK(armed);
    stored = store->getTunnel("later");
    REQUIRE(stored.ok());
    CHECK((*stored)->record.renewAtMs == kStartMs + 10 * kBookkeeperDay);

    // The alarm and later attaches find the same job: added once.
    AttachBookkeeper other(*store, *store, &notifier, manualClock(clock));
    other.noteAttached("due");
    REQUIRE(other.flush().ok());
    pending = store->countJobs(JobStatus::kPending, 0);
    REQUIRE(pending.ok());
    CHECK(*pending == 2);
    CHECK(notifier.count() == 2);
  }
}

TEST_CASE("attach bookkeeping: a store outage keeps the tunnel queued, the attach unharmed") {
  testing::TempDir dir;
  auto store = testing::openTestStore(dir.path() / "store.db");
  testing::FlakyStore flaky(*store);
  ManualClock clock(kStartMs);
  AttachBookkeeper bookkeeper(flaky, flaky, nullptr, manualClock(clock));
  REQUIRE(store->insertTunnel(readyRecord("alpha", kStartMs + 60 * kBookkeeperDay)).ok());

  flaky.down = true;
  bookkeeper.noteAttached("alpha");
  CHECK_FALSE(bookkeeper.flush().ok());
  CHECK(bookkeeper.pending() == 1);
  bookkeeper.noteAttached("alpha");  // still queued once
  CHECK(bookkeeper.pending() == 1);

  flaky.down = false;
  REQUIRE(bookkeeper.flush().ok());
  CHECK(bookkeeper.pending() == 0);
  auto stored = store->getTunnel("alpha");
  REQUIRE(stored.ok());
  CHECK((*stored)->record.lastConnectedAtMs == kStartMs);
}

}  // namespace ot::controld
