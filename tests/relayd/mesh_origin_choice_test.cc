// The origin chosen over the whole mesh (docs/pools-mesh.md): relayd's mesh table with one holder
// per machine and origin, TunnelTable::pickBridge over local and remote origins (kRemote when the
// chosen origin's links are elsewhere, a forwarded visitor's origin honoured), the forwarder's
// target being a machine holding the chosen origin, and the cost of a pick with remote origins.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/crypto.h"
#include "relayd/mesh_forwarder.h"
#include "relayd/mesh_route_table.h"
#include "relayd/origin_choice.h"
#include "relayd/tunnel_table.h"
#include "tests/relayd/manual_relay_loop.h"

using namespace ot::relayd;

namespace {

CachedRecord ready() {
  CachedRecord record;
  record.revision = 1;
  const auto digest = ot::crypto::sha256("tk_secret");
  std::copy(digest.begin(), digest.end(), record.tokenSha256.begin());
  record.certReady = true;
  return record;
}

// `links` bridges of `origin` on tunnel t1, keys from `firstKey`.
void addLinks(TunnelTable& table, const std::string& origin, uint64_t firstKey, int links = 4) {
  for (int i = 0; i < links; ++i) {
    BridgeOrigin bridgeOrigin;
    bridgeOrigin.origin = origin;
    table.addBridge("t1", firstKey + static_cast<uint64_t>(i), {""}, 1'000'000, bridgeOrigin, 0);
  }
}

std::string visitor(int i) {
  return "127.23." + std::to_string(i / 256) + "." + std::to_string(i % 256);
}

// What every machine should give `key`: the documented choice over the union.
std::string expected(std::string_view key, const std::vector<std::string_view>& origins) {
  std::vector<OriginCandidate> candidates;
  for (const auto name : origins) candidates.push_back({name, 1.0, false});
  const size_t chosen = chooseOrigin(key, candidates);
  REQUIRE(chosen < candidates.size());
  return std::string(candidates[chosen].name);
}

std::vector<MeshPeer> peers() {
  return {{"m-1", "127.0.23.11:9000", true}, {"m-2", "127.0.23.12:9000", true}};
}

}  // namespace

TEST_CASE("mesh origin table: one holder per machine and origin; removing one keeps the rest") {
  MeshRouteTable table;
  table.replace(1, peers(),
                {{"t1", "", "m-1", 100, "a"},
                 {"t1", "", "m-2", 200, "b"},
                 {"t1", "", "m-2", 150, "a"},
                 {"t1", "api", "m-1", 100, ""}});
  std::vector<std::string_view> origins;
  table.originsOf("t1", "", origins);
  CHECK(origins == std::vector<std::string_view>{"b", "a"});   // newest holder first, each once
  CHECK(table.pickOrigin("t1", "", "a")->machineId == "m-2");  // the newer holder of a
  CHECK(table.pickOrigin("t1", "", "a", "m-2")->machineId == "m-1");
  CHECK(table.pickOrigin("t1", "", "a")->origin == "a");
  CHECK(table.pickOrigin("t1", "", "b")->machineId == "m-2");
  CHECK_FALSE(table.pickOrigin("t1", "", "b", "m-2"));
  CHECK_FALSE(table.pickOrigin("t1", "", "c"));
  CHECK(table.pick("t1", "api")->origin.empty());
  // m-2 loses its b bridges: its a holder stays.
  MeshRouteDelta delta;
  delta.version = 2;
  delta.removed = {{"t1", "", "m-2", 0, "b"}};
  REQUIRE(table.apply(delta) == MeshRouteTable::Apply::kApplied);
  origins.clear();
  table.originsOf("t1", "", origins);
  CHECK(origins == std::vector<std::string_view>{"a"});
  CHECK(table.pickOrigin("t1", "", "a")->machineId == "m-2");
  // A holder of an unknown peer names no origin.
  table.replace(3, {{"m-1", "127.0.23.11:9000", true}}, {{"t1", "", "m-9", 100, "z"}});
  origins.clear();
  table.originsOf("t1", "", origins);
  CHECK(origins.empty());
}

TEST_CASE("mesh origin choice: local and remote origins, the same choice as over their union") {
  // Machine 1 holds origin a; the mesh says origin b is on machine 2. Machine 2 is the mirror.
  TunnelTable one(MachineLimits{1'000'000, 1'000'000, 256});
  one.upsertRecord("t1", ready());
  addLinks(one, "a", 100);
  TunnelTable two(MachineLimits{1'000'000, 1'000'000, 256});
  two.upsertRecord("t1", ready());
  addLinks(two, "b", 200);
  const std::vector<std::string_view> remoteOfOne = {"b"};
  const std::vector<std::string_view> remoteOfTwo = {"a"};
  std::map<std::string, int> shares;
  for (int i = 0; i < 1000; ++i) {
    const std::string key = visitor(i);
    const std::string want = expected(key, {"a", "b"});
    ++shares[want];
    const auto atOne = one.pickBridge("t1", "", key, 0, PickOptions{remoteOfOne, {}});
    const auto atTwo = two.pickBridge("t1", "", key, 0, PickOptions{remoteOfTwo, {}});
    if (want == "a") {
      REQUIRE(atOne.result == PickResult::kOk);
      CHECK(atOne.bridgeKey / 100 == 1);
      REQUIRE(atTwo.result == PickResult::kRemote);
      CHECK(atTwo.remoteOrigin == "a");
      one.connectionClosed("t1", atOne.bridgeKey);
    } else {
      REQUIRE(atOne.result == PickResult::kRemote);
      CHECK(atOne.remoteOrigin == "b");
      REQUIRE(atTwo.result == PickResult::kOk);
      CHECK(atTwo.bridgeKey / 100 == 2);
      two.connectionClosed("t1", atTwo.bridgeKey);
    }
  }
  CHECK(shares["a"] > 400);
  CHECK(shares["b"] > 400);
  // Without the mesh's origins a machine keeps everyone (the local-only interface is unchanged).
  CHECK(one.pickBridge("t1", "", visitor(1)).result == PickResult::kOk);
}

TEST_CASE("mesh origin choice: an origin on both machines is served here") {
  TunnelTable table(MachineLimits{1'000'000, 1'000'000, 256});
  table.upsertRecord("t1", ready());
  addLinks(table, "a", 100);
  addLinks(table, "b", 200);
  const std::vector<std::string_view> remote = {"b", "c"};
  int remoteHits = 0;
  for (int i = 0; i < 600; ++i) {
    const std::string key = visitor(i);
    const std::string want = expected(key, {"a", "b", "c"});
    const auto pick = table.pickBridge("t1", "", key, 0, PickOptions{remote, {}});
    if (want == "c") {
      REQUIRE(pick.result == PickResult::kRemote);
      CHECK(pick.remoteOrigin == "c");
      ++remoteHits;
    } else {
      REQUIRE(pick.result == PickResult::kOk);
      CHECK(pick.bridgeKey / 100 == (want == "a" ? 1U : 2U));
      table.connectionClosed("t1", pick.bridgeKey);
    }
  }
  CHECK(remoteHits > 100);
}

TEST_CASE("mesh origin choice: a forwarded visitor's origin is honoured when it has links here") {
  TunnelTable table(MachineLimits{1'000'000, 1'000'000, 256});
  table.upsertRecord("t1", ready());
  addLinks(table, "a", 100);
  addLinks(table, "b", 200);
  for (int i = 0; i < 200; ++i) {
    const std::string key = visitor(i);
    // Named a: a, whatever the hash says here.
    auto pick = table.pickBridge("t1", "", key, 0, PickOptions{{}, "a"});
    REQUIRE(pick.result == PickResult::kOk);
    CHECK(pick.bridgeKey / 100 == 1);
    table.connectionClosed("t1", pick.bridgeKey);
    // Named an origin with no link here: this machine chooses among its own.
    pick = table.pickBridge("t1", "", key, 0, PickOptions{{}, "gone"});
    REQUIRE(pick.result == PickResult::kOk);
    CHECK(pick.bridgeKey / 100 == (expected(key, {"a", "b"}) == "a" ? 1U : 2U));
    table.connectionClosed("t1", pick.bridgeKey);
  }
}

TEST_CASE("mesh origin choice: the forward target is a machine holding the chosen origin") {
  ot::test::ManualRelayLoop rig;
  MeshRouteTable table;
  // No bridge here; a on machine 1, b on machine 2 (and a second, older holder of b on m-1).
  table.replace(
      1, peers(),
      {{"t1", "", "m-1", 100, "a"}, {"t1", "", "m-2", 200, "b"}, {"t1", "", "m-1", 50, "b"}});
  MeshForwarder forwarder(*rig.context, table,
                          MeshForwarderOptions{"m-3", "secret", "127.0.23.13:9000", 3'000},
                          [](ot::TcpStream*, VisitorOutcome, const std::string&) {});
  for (int i = 0; i < 500; ++i) {
    const std::string key = visitor(i);
    const std::string want = expected(key, {"a", "b"});
    const auto target = forwarder.target("t1", "", key, std::nullopt);
    REQUIRE(target);
    CHECK(target->origin == want);
    CHECK(target->machineId == (want == "a" ? "m-1" : "m-2"));
    // The retry without m-2: b's other holder, m-1.
    if (want == "b")
      CHECK(forwarder.target("t1", "", key, std::nullopt, "m-2")->machineId == "m-1");
  }
  // An origin chosen by the caller is kept: b goes to its newest holder.
  CHECK(forwarder.target("t1", "", visitor(0), std::string_view("b"))->machineId == "m-2");
  // Chosen "" (unnamed bridges) is an origin like any other: none here, so the choice decides.
  CHECK(forwarder.target("t1", "", visitor(0), std::string_view(""))->origin ==
        expected(visitor(0), {"a", "b"}));
}

TEST_CASE("mesh origin choice: ns per pick with remote origins (prints)") {
  TunnelTable table(MachineLimits{1'000'000, 1'000'000, 256});
  table.upsertRecord("t1", ready());
  addLinks(table, "a", 100, 8);
  MeshRouteTable mesh;
  mesh.replace(1, peers(), {{"t1", "", "m-1", 100, "b"}, {"t1", "", "m-2", 200, "c"}});
  std::vector<std::string> keys;
  for (int i = 0; i < 4096; ++i) keys.push_back(visitor(i));
  std::vector<std::string_view> remote;
  remote.reserve(8);
  constexpr int kRounds = 200'000;
  int local = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kRounds; ++i) {
    remote.clear();
    mesh.originsOf("t1", "", remote);  // what Relay::route does per visitor
    const auto pick = table.pickBridge("t1", "", keys[static_cast<size_t>(i) % keys.size()], 0,
                                       PickOptions{remote, {}});
    if (pick.result == PickResult::kOk) {
      ++local;
      table.connectionClosed("t1", pick.bridgeKey);
    }
  }
  const double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
      kRounds;
  std::printf(
      "mesh origin choice: %.0f ns per pick (1 local + 2 remote origins, 8 links; "
      "%d of %d local)\n",
      ns, local, kRounds);
  // No bound on the time: it is printed for a reader (a timed check fails on a loaded box, as it
  // did at 41 us under the sanitizers and four parallel tests).
  CHECK(local > kRounds / 5);
}
