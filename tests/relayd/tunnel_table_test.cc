#include "relayd/tunnel_table.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/crypto.h"

using namespace ot::relayd;

namespace {

Sha256 hashOf(std::string_view secret) {
  const auto digest = ot::crypto::sha256(secret);
  Sha256 out{};
  std::copy(digest.begin(), digest.end(), out.begin());
  return out;
}

CachedRecord readyRecord(uint64_t revision) {
  CachedRecord record;
  record.revision = revision;
  record.tokenSha256 = hashOf("tk_secret");
  record.certReady = true;
  return record;
}

}  // namespace

TEST_CASE("tunnel table: visitors are refused for the right reason") {
  TunnelTable table(MachineLimits{});
  CHECK(table.pickBridge("t1", "").result == PickResult::kUnknownTunnel);

  CachedRecord notReady = readyRecord(1);
  notReady.certReady = false;
  table.upsertRecord("t1", notReady);
  CHECK(table.pickBridge("t1", "").result == PickResult::kCertNotReady);

  table.upsertRecord("t1", readyRecord(2));
  CHECK(table.pickBridge("t1", "").result == PickResult::kNoBridge);

  table.addBridge("t1", 7, {""}, 4);
  CHECK(table.pickBridge("t1", "api").result == PickResult::kUnknownRoute);
  auto pick = table.pickBridge("t1", "");
  CHECK(pick.result == PickResult::kOk);
  CHECK(pick.bridgeKey == 7);

  table.markDeleted("t1");
  CHECK(table.pickBridge("t1", "").result == PickResult::kUnknownTunnel);
  CHECK_FALSE(table.upsertRecord("t1", readyRecord(99)));  // a deletion is final
}

TEST_CASE("tunnel table: revisions only move forward") {
  TunnelTable table(MachineLimits{});
  CHECK(table.upsertRecord("t1", readyRecord(5)));
  CachedRecord older = readyRecord(4);
  older.certReady = false;
  CHECK_FALSE(table.upsertRecord("t1", older));
  CHECK(table.record("t1")->certReady);
  CHECK(table.upsertRecord("t1", readyRecord(5)));  // the same revision again is harmless
}

TEST_CASE("tunnel table: per-bridge and per-tunnel connection limits") {
  TunnelTable table(
      MachineLimits{.maxConnsPerBridge = 256, .maxConnsPerTunnel = 3, .maxRoutesPerTunnel = 256});
  table.upsertRecord("t1", readyRecord(1));
  CHECK(table.bridgeConnLimit("t1", 2) == 2);
  CHECK(table.bridgeConnLimit("t1", 1000) == 256);
  table.addBridge("t1", 1, {""}, 2);
  table.addBridge("t1", 2, {""}, 2);
  // Least loaded first: the connections alternate between the two bridges.
  CHECK(table.pickBridge("t1", "").bridgeKey == 2);
  CHECK(table.pickBridge("t1", "").bridgeKey == 1);
  CHECK(table.pickBridge("t1", "").result == PickResult::kOk);
  CHECK(table.pickBridge("t1", "").result == PickResult::kTooManyConnections);  // tunnel limit 3
  table.connectionClosed("t1", 1);
  CHECK(table.pickBridge("t1", "").result == PickResult::kOk);

  TunnelTable small(
      MachineLimits{.maxConnsPerBridge = 1, .maxConnsPerTunnel = 100, .maxRoutesPerTunnel = 256});
  small.upsertRecord("t2", readyRecord(1));
  small.addBridge("t2", 9, {""}, small.bridgeConnLimit("t2", 256));
  CHECK(small.pickBridge("t2", "").result == PickResult::kOk);
  CHECK(small.pickBridge("t2", "").result == PickResult::kTooManyConnections);  // bridge limit 1
}

TEST_CASE("tunnel table: draining bridges get no visitors; removal frees routes") {
  TunnelTable table(MachineLimits{});
  table.upsertRecord("t1", readyRecord(1));
  table.addBridge("t1", 1, {"", "api"}, 10);
  table.setDraining("t1", 1);
  CHECK(table.pickBridge("t1", "api").result == PickResult::kNoBridge);
  table.addBridge("t1", 2, {"api"}, 10);
  CHECK(table.pickBridge("t1", "api").bridgeKey == 2);
  table.removeBridge("t1", 1);
  CHECK(table.bridgeCount() == 1);
  CHECK(table.pickBridge("t1", "").result == PickResult::kUnknownRoute);
}

TEST_CASE("tunnel table: routes per tunnel are capped across bridges") {
  TunnelTable table(
      MachineLimits{.maxConnsPerBridge = 256, .maxConnsPerTunnel = 1024, .maxRoutesPerTunnel = 3});
  table.upsertRecord("t1", readyRecord(1));
  table.addBridge("t1", 1, {"", "a"}, 10);
  CHECK(table.routesFit("t1", {"a", "b"}));        // one new route: 3 in all
  CHECK_FALSE(table.routesFit("t1", {"b", "c"}));  // two new: 4
  CHECK(table.routesFit("t1", {"", "a"}));         // nothing new
}

TEST_CASE("tunnel table: credentials from the cache, in constant time") {
  CachedRecord record = readyRecord(1);
  record.origins.emplace_back("laptop", hashOf("derived-credential"));
  CHECK(TunnelTable::credentialMatches(record, "tk_secret", ""));
  CHECK(TunnelTable::credentialMatches(record, "tk_secret", "anything"));
  CHECK(TunnelTable::credentialMatches(record, "derived-credential", "laptop"));
  CHECK_FALSE(TunnelTable::credentialMatches(record, "derived-credential", "desktop"));
  CHECK_FALSE(TunnelTable::credentialMatches(record, "tk_wrong", ""));
}

TEST_CASE("tunnel table: misses are remembered briefly") {
  TunnelTable table(MachineLimits{});
  table.markMissing("ghost", 1000, 5000);
  CHECK(table.knownMissing("ghost", 1000));
  CHECK(table.knownMissing("ghost", 5999));
  CHECK_FALSE(table.knownMissing("ghost", 6000));
  table.upsertRecord("ghost", readyRecord(1));
  CHECK_FALSE(table.knownMissing("ghost", 1000));
}

TEST_CASE("tunnel table: certificates expiring are counted for tunnels with a bridge here") {
  TunnelTable table({});
  const int64_t deadline = 1'000'000;
  auto withExpiry = [](int64_t notAfterMs) {
    CachedRecord record = readyRecord(1);
    record.certNotAfterMs = notAfterMs;
    return record;
  };
  table.upsertRecord("soon", withExpiry(deadline - 1));
  table.upsertRecord("later", withExpiry(deadline + 1));
  table.upsertRecord("idle", withExpiry(deadline - 1));  // no bridge here
  CachedRecord notReady = withExpiry(deadline - 1);
  notReady.certReady = false;
  table.upsertRecord("notready", notReady);
  table.upsertRecord("gone", withExpiry(deadline - 1));
  CHECK(table.certificatesExpiringBy(deadline) == 0);

  uint64_t key = 1;
  for (const char* id : {"soon", "later", "notready", "gone"}) table.addBridge(id, key++, {""}, 4);
  table.markDeleted("gone");
  CHECK(table.certificatesExpiringBy(deadline) == 1);
  CHECK(table.certificatesExpiringBy(deadline + 1) == 2);
  table.addBridge("soon", key++, {""}, 4);  // a tunnel counts once, whatever its bridges
  CHECK(table.certificatesExpiringBy(deadline) == 1);
  table.removeBridge("soon", 1);
  table.removeBridge("soon", key - 1);
  CHECK(table.certificatesExpiringBy(deadline) == 0);
}

TEST_CASE("tunnel table: every change the expiring count reads moves changes()") {
  TunnelTable table(MachineLimits{});
  uint64_t seen = table.changes();
  auto moved = [&] {
    const bool yes = table.changes() != seen;
    seen = table.changes();
    return yes;
  };
  table.upsertRecord("t", readyRecord(1));
  CHECK(moved());
  table.addBridge("t", 1, {""}, 4);
  CHECK(moved());
  (void)table.certificatesExpiringBy(0);
  (void)table.record("t");
  CHECK_FALSE(moved());  // reads change nothing
  table.removeBridge("t", 1);
  CHECK(moved());
  table.markDeleted("t");
  CHECK(moved());
  table.dropRecord("t");
  CHECK(moved());
  (void)table.sweep(0, true);
  CHECK(moved());
}

TEST_CASE("tunnel table: a link coming up forgets misses and re-reads not-ready records") {
  TunnelTable table(MachineLimits{});
  table.markMissing("ghost", 1000, 5000);
  CachedRecord notReady = readyRecord(1);
  notReady.certReady = false;
  table.upsertRecord("pending", notReady);  // no bridge here
  table.upsertRecord("served", notReady);   // a bridge here (a renewal not done yet, say)
  table.addBridge("served", 1, {""}, 4);
  table.upsertRecord("ready", readyRecord(1));
  table.upsertRecord("gone", readyRecord(1));
  table.markDeleted("gone");

  CHECK(table.recheckNegative() == std::vector<std::string>{"served"});
  CHECK_FALSE(table.knownMissing("ghost", 1000));  // the next upgrade asks controld
  CHECK(table.record("pending") == nullptr);       // read afresh on its next use
  REQUIRE(table.record("served") != nullptr);      // its bridge's visitors still need it
  CHECK(table.record("ready") != nullptr);
  REQUIRE(table.record("gone") != nullptr);
  CHECK(table.record("gone")->deleted);  // a deletion is never forgotten by a recheck
  CHECK(table.bridgeCountOf("served") == 1);
}

TEST_CASE("tunnel table: records unused for 30 s without a bridge here are dropped") {
  TunnelTable table(MachineLimits{});
  table.upsertRecord("idle", readyRecord(1));
  table.upsertRecord("busy", readyRecord(1));
  table.upsertRecord("bridged", readyRecord(1));
  table.addBridge("bridged", 1, {""}, 4);

  uint64_t now = 0;
  CHECK(table.sweep(now).dropped == 0);  // used since the last sweep: idle from now
  for (; now < TunnelTable::kIdleDropMs - 5'000; now += 5'000) {
    (void)table.record("busy");  // an upgrade read it
    CHECK(table.sweep(now + 5'000).dropped == 0);
  }
  now += 5'000;
  (void)table.pickBridge("busy", "");  // a visitor counts as a use too
  CHECK(table.sweep(now).dropped == 1);
  CHECK(table.record("idle") == nullptr);
  CHECK(table.record("busy") != nullptr);
  CHECK(table.record("bridged") != nullptr);

  // While controld is away nothing is dropped: the cached copies are all there is.
  CHECK(table.sweep(now + 60'000, false).dropped == 0);
  CHECK(table.record("bridged") != nullptr);
  CHECK(table.recordCount() == 2);
  // The last bridge gone: its idle time starts then. ("busy" was read by the checks above: idle
  // from the sweep at now + 60 s.)
  table.removeBridge("bridged", 1);
  CHECK(table.sweep(now + 65'000).dropped == 0);
  CHECK(table.sweep(now + 60'000 + TunnelTable::kIdleDropMs).dropped == 1);  // "busy"
  CHECK(table.sweep(now + 65'000 + TunnelTable::kIdleDropMs - 1).dropped == 0);
  CHECK(table.sweep(now + 65'000 + TunnelTable::kIdleDropMs).dropped == 1);  // "bridged"
  CHECK(table.recordCount() == 0);
}

TEST_CASE("tunnel table: a not-ready record with a bridge here is re-read after the safety TTL") {
  TunnelTable table(MachineLimits{});
  CachedRecord notReady = readyRecord(1);
  notReady.certReady = false;
  table.upsertRecord("served", notReady);
  table.addBridge("served", 1, {""}, 4);
  table.upsertRecord("ready", readyRecord(1));
  table.addBridge("ready", 2, {""}, 4);

  CHECK(table.sweep(0).reread.empty());  // stored since the last sweep: fresh from now
  CHECK(table.sweep(TunnelTable::kRereadNotReadyMs - 1).reread.empty());
  CHECK(table.sweep(TunnelTable::kRereadNotReadyMs).reread == std::vector<std::string>{"served"});
  CHECK(table.sweep(TunnelTable::kRereadNotReadyMs + 5'000).reread.empty());  // once per TTL
  table.upsertRecord("served", notReady);  // the answer: still not ready, stored again
  CHECK(table.sweep(2 * TunnelTable::kRereadNotReadyMs).reread.empty());
  CHECK(table.sweep(3 * TunnelTable::kRereadNotReadyMs).reread ==
        std::vector<std::string>{"served"});
}
