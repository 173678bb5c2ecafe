// The mesh feed to relayd (controld/mesh/route_feed.*, relays/mesh_table_proto.*, the hub's
// gating): the feed observes a real BridgeTable, so every case goes through the table's own
// calls.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "controld/mesh/bridge_table.h"
#include "controld/mesh/route_feed.h"
#include "controld/relays/bridge_registry.h"
#include "controld/relays/mesh_table_proto.h"
#include "controld/relays/relay_hub.h"

using ot::ManualClock;
using ot::mesh::BridgeEntry;
using ot::mesh::BridgeTable;
using ot::mesh::FeedDelta;
using ot::mesh::FeedHolder;
using ot::mesh::FeedPeer;
using ot::mesh::FeedSnapshot;
using ot::mesh::MachineLife;
using ot::mesh::RouteFeed;
using ot::mesh::TableUpdate;

namespace {

constexpr int64_t kNow = 1'800'000'000'000;

MachineLife life(const std::string& id, uint64_t epoch = 1, bool draining = false) {
  MachineLife result;
  result.machineId = id;
  result.epoch = epoch;
  result.startedAtMs = kNow - 60'000 + static_cast<int64_t>(epoch);
  result.internalAddress = "10.0.0." + std::to_string(id.back() - 'A' + 1) + ":9000";
  result.region = "r";
  result.draining = draining;
  return result;
}

BridgeEntry bridge(std::string id, std::string tunnel, std::vector<std::string> routes,
                   int64_t attachedAtMs) {
  BridgeEntry result;
  result.bridgeId = std::move(id);
  result.tunnelId = std::move(tunnel);
  result.routes = std::move(routes);
  result.attachedAtMs = attachedAtMs;
  return result;
}

using Key = std::tuple<std::string, std::string, std::string>;  // tunnel, route, machine
using State = std::map<Key, int64_t>;

// relayd's side, reduced to a map: what the deltas build up.
struct Follower {
  uint64_t version = 0;
  State holders;
  std::vector<FeedPeer> peers;

  void apply(const FeedDelta& delta) {
    REQUIRE(delta.version == version + 1);
    version = delta.version;
    for (const auto& holder : delta.removed) {
      CHECK(holders.erase({holder.tunnelId, holder.route, holder.machineId}) == 1);
    }
    for (const auto& holder : delta.added) {
      holders[{holder.tunnelId, holder.route, holder.machineId}] = holder.attachedAtMs;
    }
    if (delta.peers) peers = *delta.peers;
  }
};

State stateOf(const FeedSnapshot& snapshot) {
  State out;
  for (const auto& holder : snapshot.holders) {
    CHECK(out.emplace(Key{holder.tunnelId, holder.route, holder.machineId}, holder.attachedAtMs)
              .second);
  }
  return out;
}

struct Rig {
  ManualClock clock{kNow};
  BridgeTable table{"SELF", clock.clock()};
  RouteFeed feed;
  Follower follower;

  Rig() { table.setObserver(&feed); }
  ~Rig() { table.setObserver(nullptr); }

  // One batch: what the feed publishes, applied to the follower; the snapshot must then equal it.
  std::optional<FeedDelta> flush() {
    auto delta = feed.takeDelta();
    if (delta) follower.apply(*delta);
    const FeedSnapshot snapshot = feed.snapshot();
    CHECK(snapshot.version == follower.version);
    CHECK(stateOf(snapshot) == follower.holders);
    CHECK(snapshot.peers == follower.peers);
    return delta;
  }
};

}  // namespace

TEST_CASE("mesh route feed: holders per route across snapshot, attach, detach and drop") {
  Rig rig;
  CHECK_FALSE(rig.feed.pending());
  CHECK_FALSE(rig.flush().has_value());
  CHECK(rig.feed.version() == 0);

  REQUIRE(rig.table.applySnapshot(life("A"), 10,
                                  {bridge("a1", "t1", {"", "web"}, kNow - 5'000),
                                   bridge("a2", "t2", {"api"}, kNow)}) == TableUpdate::kApplied);
  rig.feed.setLinked("A", true);
  auto delta = rig.flush();
  REQUIRE(delta.has_value());
  CHECK(delta->version == 1);
  CHECK(delta->added.size() == 3);
  CHECK(delta->removed.empty());
  REQUIRE(delta->peers.has_value());
  CHECK(*delta->peers == std::vector<FeedPeer>{{"A", "10.0.0.1:9000", true}});
  CHECK(rig.follower.holders == State{{{"t1", "", "A"}, kNow - 5'000},
                                      {{"t1", "web", "A"}, kNow - 5'000},
                                      {{"t2", "api", "A"}, kNow}});

  // A second machine holds t1/web too: one holder each, each at its own newest attach.
  REQUIRE(rig.table.applySnapshot(life("B"), 1, {bridge("b1", "t1", {"web"}, kNow - 100)}) ==
          TableUpdate::kApplied);
  rig.feed.setLinked("B", true);
  delta = rig.flush();
  REQUIRE(delta.has_value());
  CHECK(delta->added == std::vector<FeedHolder>{{"t1", "web", "B", kNow - 100, ""}});
  CHECK(delta->peers->size() == 2);

  // A newer bridge of A on t1/web moves A's holder to that attach; detaching it moves it back.
  REQUIRE(rig.table.applyAttached("A", 1, 11, bridge("a3", "t1", {"web"}, kNow - 50)) ==
          TableUpdate::kApplied);
  delta = rig.flush();
  CHECK(delta->added == std::vector<FeedHolder>{{"t1", "web", "A", kNow - 50, ""}});
  CHECK(delta->removed.empty());
  CHECK_FALSE(delta->peers.has_value());
  REQUIRE(rig.table.applyDetached("A", 1, 12, "a3") == TableUpdate::kApplied);
  delta = rig.flush();
  CHECK(delta->added == std::vector<FeedHolder>{{"t1", "web", "A", kNow - 5'000, ""}});

  // An older second bridge on the route changes nothing relayd sees: no delta, no version.
  REQUIRE(rig.table.applyAttached("A", 1, 13, bridge("a4", "t1", {"web"}, kNow - 9'000)) ==
          TableUpdate::kApplied);
  CHECK(rig.feed.pending());
  CHECK_FALSE(rig.flush().has_value());
  CHECK(rig.feed.version() == 4);
  // Detaching the newest leaves the older one holding the route.
  REQUIRE(rig.table.applyDetached("A", 1, 14, "a1") == TableUpdate::kApplied);
  delta = rig.flush();
  CHECK(delta->added == std::vector<FeedHolder>{{"t1", "web", "A", kNow - 9'000, ""}});
  CHECK(delta->removed == std::vector<FeedHolder>{{"t1", "", "A", 0, ""}});

  // A bridge announced again under its ID replaces its routes.
  REQUIRE(rig.table.applyAttached("A", 1, 15, bridge("a2", "t2", {"www"}, kNow)) ==
          TableUpdate::kApplied);
  delta = rig.flush();
  CHECK(delta->added == std::vector<FeedHolder>{{"t2", "www", "A", kNow, ""}});
  CHECK(delta->removed == std::vector<FeedHolder>{{"t2", "api", "A", 0, ""}});

  // Dropped: every holder of A goes, and A leaves the peers.
  rig.feed.setLinked("A", false);
  CHECK(rig.table.dropMachine("A") == 2);
  delta = rig.flush();
  CHECK(delta->added.empty());
  CHECK(delta->removed.size() == 2);
  CHECK(*delta->peers == std::vector<FeedPeer>{{"B", "10.0.0.2:9000", true}});
  CHECK(rig.follower.holders == State{{{"t1", "web", "B"}, kNow - 100}});
}

TEST_CASE("mesh route feed: a draining machine holds nothing but stays a peer") {
  Rig rig;
  REQUIRE(rig.table.applySnapshot(life("A"), 1, {bridge("a1", "t1", {""}, kNow)}) ==
          TableUpdate::kApplied);
  rig.feed.setLinked("A", true);
  rig.flush();
  REQUIRE(rig.table.setDraining("A", 1, true) == TableUpdate::kApplied);
  auto delta = rig.flush();
  REQUIRE(delta.has_value());
  CHECK(delta->removed == std::vector<FeedHolder>{{"t1", "", "A", 0, ""}});
  CHECK_FALSE(delta->peers.has_value());
  // Its bridges are kept: a later attach of the draining machine is no holder either.
  REQUIRE(rig.table.applyAttached("A", 1, 2, bridge("a2", "t2", {""}, kNow)) ==
          TableUpdate::kApplied);
  CHECK_FALSE(rig.flush().has_value());
  // A new life that is not draining brings its snapshot's bridges back as holders.
  REQUIRE(rig.table.applySnapshot(life("A", 2), 0, {bridge("a9", "t9", {"x"}, kNow)}) ==
          TableUpdate::kApplied);
  delta = rig.flush();
  CHECK(delta->added == std::vector<FeedHolder>{{"t9", "x", "A", kNow, ""}});
  CHECK(rig.follower.holders.size() == 1);
  // A hello that says draining: its snapshot's bridges are no holders.
  REQUIRE(rig.table.applySnapshot(life("A", 3, true), 0, {bridge("a9", "t9", {"x"}, kNow)}) ==
          TableUpdate::kApplied);
  delta = rig.flush();
  CHECK(delta->removed == std::vector<FeedHolder>{{"t9", "x", "A", 0, ""}});
  CHECK(rig.follower.holders.empty());
}

TEST_CASE("mesh route feed: linked follows the links, not the table") {
  Rig rig;
  // Linked before its snapshot: not a peer yet (nothing to forward to or believe).
  rig.feed.setLinked("A", true);
  CHECK_FALSE(rig.flush().has_value());
  REQUIRE(rig.table.applySnapshot(life("A"), 1, {}) == TableUpdate::kApplied);
  auto delta = rig.flush();
  REQUIRE(delta.has_value());
  CHECK(*delta->peers == std::vector<FeedPeer>{{"A", "10.0.0.1:9000", true}});
  // The link ends while the table keeps the machine (the "held" state): linked = false.
  rig.feed.setLinked("A", false);
  delta = rig.flush();
  CHECK(*delta->peers == std::vector<FeedPeer>{{"A", "10.0.0.1:9000", false}});
  // Down and up again within one batch: nothing to tell.
  rig.feed.setLinked("A", true);
  rig.feed.setLinked("A", false);
  CHECK_FALSE(rig.flush().has_value());
}

TEST_CASE("mesh route feed: changes within a batch are one delta; the clamp is the table's") {
  Rig rig;
  REQUIRE(rig.table.applySnapshot(life("A"), 0, {}) == TableUpdate::kApplied);
  rig.flush();
  // 200 attaches and the detach of half of them in one batch: one delta with the survivors.
  for (uint64_t i = 1; i <= 200; ++i) {
    REQUIRE(rig.table.applyAttached(
                "A", 1, i, bridge("b" + std::to_string(i), "t" + std::to_string(i), {""}, kNow)) ==
            TableUpdate::kApplied);
  }
  for (uint64_t i = 1; i <= 100; ++i) {
    REQUIRE(rig.table.applyDetached("A", 1, 200 + i, "b" + std::to_string(i)) ==
            TableUpdate::kApplied);
  }
  const uint64_t before = rig.feed.version();
  auto delta = rig.flush();
  REQUIRE(delta.has_value());
  CHECK(delta->version == before + 1);
  CHECK(delta->added.size() == 100);
  CHECK(delta->removed.empty());
  // An attach time far ahead of this machine's clock is published as the table clamped it.
  REQUIRE(rig.table.applyAttached("A", 1, 301, bridge("f", "tf", {""}, kNow + 3'600'000)) ==
          TableUpdate::kApplied);
  delta = rig.flush();
  CHECK(delta->added == std::vector<FeedHolder>{{"tf", "", "A", kNow, ""}});
}

TEST_CASE("mesh route feed: the snapshot after many random changes equals the deltas' sum") {
  Rig rig;
  uint64_t state = 0x9e3779b97f4a7c15ULL;
  auto next = [&state](uint64_t bound) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state % bound;
  };
  std::map<std::string, uint64_t> sequences;
  std::map<std::string, uint64_t> epochs;
  const std::vector<std::string> machines{"A", "B", "C"};
  for (int round = 0; round < 300; ++round) {
    const std::string& machine = machines[next(3)];
    const uint64_t what = next(10);
    if (what == 0 || !sequences.contains(machine)) {
      const uint64_t epoch = ++epochs[machine];
      std::vector<BridgeEntry> bridges;
      for (uint64_t i = 0, n = next(5); i < n; ++i) {
        bridges.push_back(bridge("x" + std::to_string(next(8)), "t" + std::to_string(next(4)),
                                 {"r" + std::to_string(next(3))},
                                 kNow - static_cast<int64_t>(next(1000))));
      }
      REQUIRE(rig.table.applySnapshot(life(machine, epoch, next(6) == 0), 0, bridges) ==
              TableUpdate::kApplied);
      sequences[machine] = 0;
      rig.feed.setLinked(machine, true);
    } else if (what == 1) {
      rig.table.dropMachine(machine);
      rig.feed.setLinked(machine, false);
      sequences.erase(machine);
    } else if (what == 2) {
      REQUIRE(rig.table.setDraining(machine, epochs[machine], true) == TableUpdate::kApplied);
    } else if (what < 7) {
      REQUIRE(rig.table.applyAttached(
                  machine, epochs[machine], ++sequences[machine],
                  bridge("x" + std::to_string(next(8)), "t" + std::to_string(next(4)),
                         {"r" + std::to_string(next(3)), "r" + std::to_string(next(3))},
                         kNow - static_cast<int64_t>(next(1000)))) == TableUpdate::kApplied);
    } else {
      REQUIRE(rig.table.applyDetached(machine, epochs[machine], ++sequences[machine],
                                      "x" + std::to_string(next(8))) == TableUpdate::kApplied);
    }
    if (next(3) == 0) rig.flush();
  }
  rig.flush();
  // And the feed agrees with the table's own answer for every route it publishes.
  for (const auto& [key, attachedAt] : rig.follower.holders) {
    const auto& [tunnel, route, machine] = key;
    auto holder = rig.table.holder(tunnel, route);
    REQUIRE(holder.has_value());
    CHECK(holder->attachedAtMs >= attachedAt);
  }
}

TEST_CASE("mesh table proto: snapshot parts and deltas carry the feed's values") {
  FeedSnapshot snapshot;
  snapshot.version = 7;
  snapshot.peers = {{"A", "10.0.0.1:9000", true}, {"B", "10.0.0.2:9000", false}};
  for (int i = 0; i < 5; ++i) snapshot.holders.push_back({"t" + std::to_string(i), "", "A", i, ""});
  auto parts = ot::controld::meshSnapshotMessages(snapshot, 2);
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].mesh_snapshot().peers_size() == 2);
  CHECK(parts[1].mesh_snapshot().peers_size() == 0);
  CHECK(parts[2].mesh_snapshot().holders_size() == 1);
  for (size_t i = 0; i < parts.size(); ++i) {
    CHECK(parts[i].mesh_snapshot().version() == 7);
    CHECK(parts[i].mesh_snapshot().last() == (i == 2));
  }
  CHECK(parts[1].mesh_snapshot().holders(1).tunnel_id() == "t3");
  CHECK(parts[1].mesh_snapshot().holders(1).attached_at_unix_ms() == 3);
  auto empty = ot::controld::meshSnapshotMessages(FeedSnapshot{3, {}, {}});
  REQUIRE(empty.size() == 1);
  CHECK(empty[0].mesh_snapshot().last());

  FeedDelta delta{8, {{"t1", "web", "B", 5, ""}}, {{"t2", "", "A", 0, ""}}, std::nullopt};
  auto message = ot::controld::meshDeltaMessage(delta);
  CHECK(message.mesh_delta().version() == 8);
  CHECK(message.mesh_delta().added(0).route() == "web");
  CHECK(message.mesh_delta().removed(0).tunnel_id() == "t2");
  CHECK_FALSE(message.mesh_delta().peers_changed());
  delta.peers = std::vector<FeedPeer>{};
  CHECK(ot::controld::meshDeltaMessage(delta).mesh_delta().peers_changed());
}

TEST_CASE("relay hub: a session gets its mesh snapshot before any delta, and only then deltas") {
  ot::controld::BridgeRegistry registry;
  ot::controld::RelayHub hub(registry);
  std::vector<std::string> wanted;
  hub.setMeshSnapshotHandler([&wanted](const std::string& key) { wanted.push_back(key); });
  opentunnel::control::v1::Hello hello;
  hello.set_machine_id("m1");
  hello.set_epoch(5);
  auto session = hub.open(hello, [] {});
  REQUIRE(session != nullptr);
  CHECK(wanted == std::vector<std::string>{session->relayKey()});
  auto queued = session->outbox().popAll();  // SessionAccepted
  REQUIRE(queued.size() == 1);

  const auto delta = ot::controld::meshDeltaMessage(FeedDelta{4, {{"t", "", "B", 1, ""}}, {}, {}});
  hub.meshDelta(delta);  // before its snapshot: not for this session
  CHECK(session->outbox().size() == 0);
  hub.meshSnapshot(session->relayKey(),
                   ot::controld::meshSnapshotMessages(FeedSnapshot{4, {}, {}}));
  hub.meshDelta(ot::controld::meshDeltaMessage(FeedDelta{5, {{"t", "", "B", 2, ""}}, {}, {}}));
  queued = session->outbox().popAll();
  REQUIRE(queued.size() == 2);
  CHECK(queued[0].mesh_snapshot().version() == 4);
  CHECK(queued[1].mesh_delta().version() == 5);

  // relayd asks again (a gap): the handler hears it; a closed session is asked for nothing.
  hub.meshSnapshotWanted(session);
  CHECK(wanted.size() == 2);
  (void)hub.close(session);
  hub.meshSnapshotWanted(session);
  CHECK(wanted.size() == 2);
  hub.meshSnapshot(session->relayKey(), ot::controld::meshSnapshotMessages(FeedSnapshot{}));
  hub.shutdown();
}
