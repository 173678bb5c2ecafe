#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "controld/mesh/bridge_table.h"

using ot::ManualClock;
using ot::mesh::BridgeEntry;
using ot::mesh::BridgeTable;
using ot::mesh::MachineLife;
using ot::mesh::PeerTarget;
using ot::mesh::TableUpdate;

namespace {

constexpr int64_t kNow = 1'800'000'000'000;

MachineLife life(std::string id, uint64_t epoch, int64_t startedAtMs = kNow - 60'000) {
  MachineLife result;
  result.machineId = id;
  result.epoch = epoch;
  result.startedAtMs = startedAtMs;
  result.internalAddress = "127.0.0." + std::to_string(10 + id.back() - '0');
  result.region = "r" + id;
  return result;
}

BridgeEntry bridge(std::string id, std::string tunnel, std::vector<std::string> routes,
                   int64_t attachedAtMs = kNow - 1'000) {
  BridgeEntry result;
  result.bridgeId = std::move(id);
  result.tunnelId = std::move(tunnel);
  result.routes = std::move(routes);
  result.attachedAtMs = attachedAtMs;
  return result;
}

std::vector<std::string> bridgeIds(const BridgeTable& table, const std::string& machine) {
  std::vector<std::string> ids;
  for (const BridgeEntry& entry : table.bridgesOf(machine)) ids.push_back(entry.bridgeId);
  return ids;
}

std::string holderId(const BridgeTable& table, const std::string& tunnel, const std::string& route,
                     const std::string& skip = {}) {
  const std::optional<PeerTarget> target = table.holder(tunnel, route, skip);
  return target ? target->machineId : "none";
}

}  // namespace

TEST_CASE("mesh table: a snapshot replaces the machine's entries whole") {
  ManualClock clock(kNow);
  BridgeTable table("m0", clock.clock());
  REQUIRE(table.applySnapshot(life("m1", 7), 10,
                              {bridge("b1", "alpha", {"web"}),
                               bridge("b2", "beta", {"web", "api"})}) == TableUpdate::kApplied);
  CHECK(bridgeIds(table, "m1") == std::vector<std::string>{"b1", "b2"});
  CHECK(holderId(table, "beta", "api") == "m1");
  CHECK(table.holder("beta", "api")->internalAddress == "127.0.0.11");

  // The same life reconnecting: its new snapshot is the whole truth, old entries go.
  REQUIRE(table.applySnapshot(life("m1", 7), 25, {bridge("b3", "gamma", {"web"})}) ==
          TableUpdate::kApplied);
  CHECK(bridgeIds(table, "m1") == std::vector<std::string>{"b3"});
  CHECK(holderId(table, "beta", "api") == "none");
  CHECK_FALSE(table.onlineElsewhere("alpha"));
  CHECK(table.bridgeCount() == 1);
  CHECK(table.tunnelCount() == 1);
  // The snapshot's sequence is where deltas continue.
  CHECK(table.applyAttached("m1", 7, 11, bridge("b4", "alpha", {"web"})) ==
        TableUpdate::kSequenceGap);
  CHECK(table.applyAttached("m1", 7, 26, bridge("b4", "alpha", {"web"})) == TableUpdate::kApplied);
}

TEST_CASE("mesh table: deltas apply in order and a gap or replay is refused untouched") {
  ManualClock clock(kNow);
  BridgeTable table("m0", clock.clock());
  REQUIRE(table.applySnapshot(life("m1", 7), 0, {}) == TableUpdate::kApplied);
  CHECK(table.applyAttached("m1", 7, 1, bridge("b1", "alpha", {"web"})) == TableUpdate::kApplied);
  CHECK(table.applyAttached("m1", 7, 2, bridge("b2", "alpha", {"api"})) == TableUpdate::kApplied);
  CHECK(table.applyDetached("m1", 7, 3, "b1") == TableUpdate::kApplied);
  CHECK(bridgeIds(table, "m1") == std::vector<std::string>{"b2"});

  CHECK(table.applyAttached("m1", 7, 5, bridge("b5", "alpha", {"web"})) ==
        TableUpdate::kSequenceGap);
  CHECK(table.applyDetached("m1", 7, 3, "b2") == TableUpdate::kSequenceGap);  // a replay
  CHECK(bridgeIds(table, "m1") == std::vector<std::string>{"b2"});
  CHECK(table.machines().front().sequence == 3);

  // A bridge announced again replaces itself; detaching an unknown one only moves the sequence.
  CHECK(table.applyAttached("m1", 7, 4, bridge("b2", "beta", {"web"})) == TableUpdate::kApplied);
  CHECK_FALSE(table.onlineElsewhere("alpha"));
  CHECK(holderId(table, "beta", "web") == "m1");
  CHECK(table.applyDetached("m1", 7, 5, "nope") == TableUpdate::kApplied);
  CHECK(table.bridgeCount() == 1);

  CHECK(table.applyAttached("m9", 1, 1, bridge("b1", "alpha", {"web"})) ==
        TableUpdate::kUnknownMachine);
  CHECK(table.applyAttached("m1", 8, 6, bridge("b1", "alpha", {"web"})) == TableUpdate::kStaleLife);
}

TEST_CASE("mesh table: a restarted machine's new life replaces the old one's entries") {
  ManualClock clock(kNow);
  BridgeTable table("m0", clock.clock());
  REQUIRE(table.applySnapshot(life("m1", 7, kNow - 60'000), 40,
                              {bridge("old1", "alpha", {"web"}),
                               bridge("old2", "beta", {"web"})}) == TableUpdate::kApplied);
  // Newer started_at (any epoch) replaces at once, before any link of the old life closed.
  REQUIRE(table.applySnapshot(life("m1", 3, kNow - 1'000), 0, {bridge("new1", "alpha", {"web"})}) ==
          TableUpdate::kApplied);
  CHECK(bridgeIds(table, "m1") == std::vector<std::string>{"new1"});
  CHECK_FALSE(table.onlineElsewhere("beta"));
  // The old life's lingering link can neither snapshot nor delta over it.
  CHECK(table.applySnapshot(life("m1", 7, kNow - 60'000), 41, {bridge("old3", "beta", {"web"})}) ==
        TableUpdate::kStaleLife);
  CHECK(table.applyAttached("m1", 7, 41, bridge("old3", "beta", {"web"})) ==
        TableUpdate::kStaleLife);
  CHECK(bridgeIds(table, "m1") == std::vector<std::string>{"new1"});
  // Same started_at: the higher epoch is the newer life.
  CHECK(table.applySnapshot(life("m1", 2, kNow - 1'000), 0, {}) == TableUpdate::kStaleLife);
  CHECK(table.applySnapshot(life("m1", 9, kNow - 1'000), 0, {}) == TableUpdate::kApplied);
  CHECK(table.bridgeCount() == 0);
}

TEST_CASE("mesh table: a dropped machine's entries go at once, other machines' stay") {
  ManualClock clock(kNow);
  BridgeTable table("m0", clock.clock());
  REQUIRE(table.applySnapshot(life("m1", 1), 0,
                              {bridge("b1", "alpha", {"web"}), bridge("b2", "beta", {"web"})}) ==
          TableUpdate::kApplied);
  REQUIRE(table.applySnapshot(life("m2", 1), 0, {bridge("b1", "alpha", {"web"})}) ==
          TableUpdate::kApplied);
  CHECK(table.dropMachine("m1") == 2);
  CHECK(table.dropMachine("m1") == 0);
  CHECK(holderId(table, "alpha", "web") == "m2");
  CHECK_FALSE(table.onlineElsewhere("beta"));
  CHECK(table.bridgeCount() == 1);
  CHECK(table.machines().size() == 1);
  CHECK(table.applyAttached("m1", 1, 1, bridge("b3", "alpha", {"web"})) ==
        TableUpdate::kUnknownMachine);
  // It comes back (same life, a new link) with a snapshot, in the slot it left.
  REQUIRE(table.applySnapshot(life("m1", 1), 4, {bridge("b9", "beta", {"web"})}) ==
          TableUpdate::kApplied);
  CHECK(holderId(table, "beta", "web") == "m1");
  CHECK(table.bridgeCount() == 2);
}

TEST_CASE("mesh table: the newest attach wins a route, ties to the lower machine ID") {
  ManualClock clock(kNow);
  BridgeTable table("m0", clock.clock());
  REQUIRE(table.applySnapshot(life("m1", 1), 0, {bridge("b1", "alpha", {"web"}, kNow - 500)}) ==
          TableUpdate::kApplied);
  REQUIRE(table.applySnapshot(life("m2", 1), 0, {bridge("b1", "alpha", {"web"}, kNow - 900)}) ==
          TableUpdate::kApplied);
  CHECK(holderId(table, "alpha", "web") == "m1");
  CHECK(table.holder("alpha", "web")->attachedAtMs == kNow - 500);
  REQUIRE(table.applyAttached("m2", 1, 1, bridge("b2", "alpha", {"web"}, kNow - 100)) ==
          TableUpdate::kApplied);
  CHECK(holderId(table, "alpha", "web") == "m2");
  REQUIRE(table.applyAttached("m3", 1, 1, bridge("x", "alpha", {"web"})) ==
          TableUpdate::kUnknownMachine);
  REQUIRE(table.applySnapshot(life("m3", 1), 0, {bridge("b1", "alpha", {"web"}, kNow - 100)}) ==
          TableUpdate::kApplied);
  CHECK(holderId(table, "alpha", "web") == "m2");  // same instant: the lower ID
  CHECK(holderId(table, "alpha", "api") == "none");
  CHECK(holderId(table, "omega", "web") == "none");
}

TEST_CASE("mesh table: an attach time far in a peer's future counts as now when received") {
  ManualClock clock(kNow);
  BridgeTable table("m0", clock.clock());
  // m1's clock runs an hour ahead; m2's 4 s ahead (inside the allowance, kept as sent).
  REQUIRE(
      table.applySnapshot(life("m1", 1), 0, {bridge("b1", "alpha", {"web"}, kNow + 3'600'000)}) ==
      TableUpdate::kApplied);
  CHECK(table.holder("alpha", "web")->attachedAtMs == kNow);
  REQUIRE(table.applySnapshot(life("m2", 1), 0, {bridge("b1", "beta", {"web"}, kNow + 4'000)}) ==
          TableUpdate::kApplied);
  CHECK(table.holder("beta", "web")->attachedAtMs == kNow + 4'000);
  // Clamped to the time it arrived, not re-clamped on each read: a later honest attach wins.
  clock.advance(10'000);
  REQUIRE(table.applySnapshot(life("m3", 1), 0, {bridge("b1", "alpha", {"web"}, kNow + 2'000)}) ==
          TableUpdate::kApplied);
  CHECK(holderId(table, "alpha", "web") == "m3");
  // The same holds for deltas.
  REQUIRE(table.applyAttached("m1", 1, 1, bridge("b2", "gamma", {"web"}, kNow + 999'999'999)) ==
          TableUpdate::kApplied);
  CHECK(table.holder("gamma", "web")->attachedAtMs == kNow + 10'000);
}

TEST_CASE("mesh table: a draining machine's bridges are no forward targets nor route holders") {
  ManualClock clock(kNow);
  BridgeTable table("m0", clock.clock());
  REQUIRE(table.applySnapshot(life("m1", 1), 0, {bridge("b1", "alpha", {"web"}, kNow - 10)}) ==
          TableUpdate::kApplied);
  REQUIRE(table.applySnapshot(life("m2", 1), 0,
                              {bridge("b1", "alpha", {"web"}, kNow - 900),
                               bridge("b2", "solo", {"web"})}) == TableUpdate::kApplied);
  REQUIRE(table.setDraining("m1", 1, true) == TableUpdate::kApplied);
  CHECK(holderId(table, "alpha", "web") == "m2");
  const std::vector<std::string> web{"web"};
  CHECK(table.routeHolders("alpha", web).size() == 1);
  REQUIRE(table.setDraining("m2", 1, true) == TableUpdate::kApplied);
  CHECK(holderId(table, "alpha", "web") == "none");
  CHECK_FALSE(table.onlineElsewhere("solo"));
  CHECK(table.routeHolders("alpha", web).empty());
  CHECK(table.setDraining("m2", 5, false) == TableUpdate::kStaleLife);
  CHECK(table.setDraining("m7", 1, true) == TableUpdate::kUnknownMachine);
  // Its entries stay for the cluster view until it is dropped.
  CHECK(table.bridgeCount() == 3);
  // A hello that says draining starts the life as draining.
  MachineLife leaving = life("m3", 1);
  leaving.draining = true;
  REQUIRE(table.applySnapshot(leaving, 0, {bridge("b1", "beta", {"web"})}) ==
          TableUpdate::kApplied);
  CHECK(holderId(table, "beta", "web") == "none");
}

TEST_CASE("mesh table: the retry skips the machine that answered 0") {
  ManualClock clock(kNow);
  BridgeTable table("m0", clock.clock());
  REQUIRE(table.applySnapshot(life("m1", 1), 0, {bridge("b1", "alpha", {"web"}, kNow - 10)}) ==
          TableUpdate::kApplied);
  REQUIRE(table.applySnapshot(life("m2", 1), 0, {bridge("b1", "alpha", {"web"}, kNow - 900)}) ==
          TableUpdate::kApplied);
  CHECK(holderId(table, "alpha", "web") == "m1");
  CHECK(holderId(table, "alpha", "web", "m1") == "m2");
  CHECK(holderId(table, "alpha", "web", "m2") == "m1");
  REQUIRE(table.dropMachine("m2") == 1);
  CHECK(holderId(table, "alpha", "web", "m1") == "none");
}

TEST_CASE("mesh table: route holders are the live machines holding any requested route") {
  ManualClock clock(kNow);
  BridgeTable table("m0", clock.clock());
  REQUIRE(table.applySnapshot(life("m1", 1), 0,
                              {bridge("b1", "alpha", {"web", "api"}, kNow - 50),
                               bridge("b2", "alpha", {"web"}, kNow - 20)}) ==
          TableUpdate::kApplied);
  REQUIRE(table.applySnapshot(life("m2", 1), 0, {bridge("b1", "alpha", {"ssh"})}) ==
          TableUpdate::kApplied);
  REQUIRE(table.applySnapshot(life("m3", 1), 0, {bridge("b1", "beta", {"web"})}) ==
          TableUpdate::kApplied);

  const std::vector<std::string> webApi{"api", "web"};
  std::vector<PeerTarget> holders = table.routeHolders("alpha", webApi);
  REQUIRE(holders.size() == 1);  // one row per machine, however many of its bridges match
  CHECK(holders[0].machineId == "m1");
  CHECK(holders[0].internalAddress == "127.0.0.11");
  CHECK(holders[0].attachedAtMs == kNow - 20);

  const std::vector<std::string> mixed{"ssh", "api", "unknown"};
  holders = table.routeHolders("alpha", mixed);
  REQUIRE(holders.size() == 2);
  CHECK(holders[0].machineId == "m1");
  CHECK(holders[1].machineId == "m2");

  const std::vector<std::string> none{"ftp"};
  CHECK(table.routeHolders("alpha", none).empty());
  CHECK(table.routeHolders("gamma", webApi).empty());
  // Different machines holding different routes of one tunnel each get that route's visitors.
  CHECK(holderId(table, "alpha", "ssh") == "m2");
  CHECK(holderId(table, "alpha", "api") == "m1");
}

TEST_CASE("mesh table: entries never claim another machine, and this machine is never a peer") {
  ManualClock clock(kNow);
  BridgeTable table("m0", clock.clock());
  BridgeEntry stranger = bridge("b1", "alpha", {"web"});
  stranger.machine = "m2";
  CHECK(table.applySnapshot(life("m1", 1), 0, {bridge("b0", "beta", {"web"}), stranger}) ==
        TableUpdate::kForeignEntry);
  CHECK(table.bridgeCount() == 0);
  CHECK(table.applySnapshot(life("m0", 1), 0, {bridge("b0", "beta", {"web"})}) ==
        TableUpdate::kForeignEntry);
  REQUIRE(table.applySnapshot(life("m1", 1), 0, {}) == TableUpdate::kApplied);
  CHECK(table.applyAttached("m1", 1, 1, stranger) == TableUpdate::kForeignEntry);
  CHECK(table.machines().front().sequence == 0);  // refused whole: the sequence did not move
  stranger.machine = "m1";
  CHECK(table.applyAttached("m1", 1, 1, stranger) == TableUpdate::kApplied);
  CHECK(table.bridgesOf("m1").front().machine == "m1");
}

TEST_CASE("mesh table: interned tunnels and routes are released with their last entry") {
  ManualClock clock(kNow);
  BridgeTable table("m0", clock.clock());
  REQUIRE(table.applySnapshot(life("m1", 1), 0,
                              {bridge("b1", "alpha", {"web", "web", "api"}),
                               bridge("b2", "beta", {"web", "a", "b", "c", "d"})}) ==
          TableUpdate::kApplied);
  const std::vector<BridgeEntry> listed = table.bridgesOf("m1");
  REQUIRE(listed.size() == 2);
  CHECK(listed[0].routes == std::vector<std::string>{"web", "api"});  // a repeat counts once
  CHECK(listed[1].routes == std::vector<std::string>{"web", "a", "b", "c", "d"});
  CHECK(holderId(table, "beta", "d") == "m1");
  const auto summary = table.machines().front();
  CHECK(summary.bridges == 2);
  CHECK(summary.tunnels == 2);
  CHECK(summary.routes == 7);
  CHECK(table.routeNameCount() == 6);  // web, api, a, b, c, d
  REQUIRE(table.applyDetached("m1", 1, 1, "b2") == TableUpdate::kApplied);
  CHECK(holderId(table, "beta", "d") == "none");
  CHECK(table.tunnelCount() == 1);
  CHECK(table.routeNameCount() == 2);  // only alpha's web and api are still named
  // Many churns reuse the freed slots and leave the lookups right.
  uint64_t sequence = 1;
  for (int round = 0; round < 200; ++round) {
    const std::string tunnel = "t" + std::to_string(round % 7);
    REQUIRE(table.applyAttached("m1", 1, ++sequence,
                                bridge("c", tunnel, {"r" + std::to_string(round)})) ==
            TableUpdate::kApplied);
  }
  CHECK(table.bridgeCount() == 2);
  CHECK(table.tunnelCount() == 2);
  CHECK(holderId(table, "t3", "r199") == "m1");
  CHECK(holderId(table, "t3", "r198") == "none");
  CHECK(holderId(table, "alpha", "api") == "m1");
  CHECK(table.routeNameCount() == 3);  // web, api and the last churned route
  REQUIRE(table.dropMachine("m1") == 2);
  CHECK(table.routeNameCount() == 0);
  CHECK(table.tunnelCount() == 0);
}
