// The origin of each bridge across the mesh (docs/pools-mesh.md): the link frames' entry with and
// without `origin` / `profile_index`, the bridge table keeping them, the feed to relayd with one
// holder per machine and origin, relayd's report reaching the registry, and the local announcer.
#include <doctest/doctest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "common/clock.h"
#include "controld/mesh/bridge_table.h"
#include "controld/mesh/link_frames.h"
#include "controld/mesh/local_bridges.h"
#include "controld/mesh/route_feed.h"
#include "controld/relays/bridge_registry.h"
#include "controld/relays/mesh_table_proto.h"
#include "controld/relays/record_convert.h"

using namespace ot::mesh;

namespace {

constexpr int64_t kOriginNow = 1'800'000'000'000;

BridgeEntry originEntry(std::string bridge, std::string origin, uint32_t profileIndex = 0,
                        std::vector<std::string> routes = {""}) {
  BridgeEntry e;
  e.tunnelId = "t1";
  e.bridgeId = std::move(bridge);
  e.routes = std::move(routes);
  e.attachedAtMs = kOriginNow - 1'000;
  e.origin = std::move(origin);
  e.profileIndex = profileIndex;
  return e;
}

// The JSON body of one encoded frame (after its 4-byte length).
nlohmann::json bodyOf(const std::string& encoded) {
  return nlohmann::json::parse(encoded.substr(4));
}

Attached decodeAttached(const std::string& body) {
  auto decoded = decodeFrameBody(body);
  REQUIRE(decoded.ok());
  REQUIRE(decoded->has_value());
  const auto* attached = std::get_if<Attached>(&(*decoded)->body);
  REQUIRE(attached != nullptr);
  return *attached;
}

MachineLife life(const std::string& id) {
  MachineLife result;
  result.machineId = id;
  result.epoch = 1;
  result.startedAtMs = kOriginNow - 60'000;
  result.internalAddress = "10.0.0.2:9000";
  result.region = "r";
  return result;
}

}  // namespace

TEST_CASE("mesh origin: an entry carries origin and profile_index, and reads back") {
  const Frame sent{kOriginNow, Attached{7, originEntry("b1", "alpha", 3)}};
  const std::string encoded = encodeFrame(sent);
  const auto json = bodyOf(encoded);
  CHECK(json["origin"] == "alpha");
  CHECK(json["profile_index"] == 3);
  const Attached got = decodeAttached(encoded.substr(4));
  CHECK(got.bridge.origin == "alpha");
  CHECK(got.bridge.profileIndex == 3);
  CHECK(got.bridge.bridgeId == "b1");
}

TEST_CASE("mesh origin: an entry without an origin is written and read as an old peer's") {
  // Written: no origin, no profile_index (byte for byte what a peer before origins sends).
  const std::string encoded = encodeFrame(Frame{kOriginNow, Attached{7, originEntry("b1", "")}});
  const auto json = bodyOf(encoded);
  CHECK_FALSE(json.contains("origin"));
  CHECK_FALSE(json.contains("profile_index"));
  // Read: an old peer's entry is origin "", profile 0; null counts as absent.
  const Attached old =
      decodeAttached(R"({"type":"attached","sent_at":1,"sequence":2,"tunnel":"t1","bridge":"b1",)"
                     R"("routes":[""],"attached_at":5})");
  CHECK(old.bridge.origin.empty());
  CHECK(old.bridge.profileIndex == 0);
  const Attached nulls =
      decodeAttached(R"({"type":"attached","sent_at":1,"sequence":2,"tunnel":"t1","bridge":"b1",)"
                     R"("routes":[""],"attached_at":5,"origin":null,"profile_index":null})");
  CHECK(nulls.bridge.origin.empty());
  // In a snapshot too.
  auto snapshot = decodeFrameBody(
      R"({"type":"snapshot","sent_at":1,"sequence":2,"part":0,"last":true,"bridges":[)"
      R"({"tunnel":"t1","bridge":"b1","routes":[""],"attached_at":5,"origin":"o.1","profile_index":1},)"
      R"({"tunnel":"t1","bridge":"b2","routes":[""],"attached_at":5}]})");
  REQUIRE(snapshot.ok());
  const auto& part = std::get<SnapshotPart>((*snapshot)->body);
  REQUIRE(part.bridges.size() == 2);
  CHECK(part.bridges[0].origin == "o.1");
  CHECK(part.bridges[0].profileIndex == 1);
  CHECK(part.bridges[1].origin.empty());
}

TEST_CASE("mesh origin: a malformed origin or profile_index ends the link") {
  const char* const bad[] = {
      R"("origin":"")",
      R"("origin":"has space")",
      R"("origin":7)",
      R"("origin":"a","profile_index":-1)",
      R"("origin":"a","profile_index":"1")",
      R"("origin":"a","profile_index":4294967296)",
  };
  for (const char* field : bad) {
    CAPTURE(field);
    const std::string body =
        std::string(R"({"type":"attached","sent_at":1,"sequence":2,"tunnel":"t1","bridge":"b1",)"
                    R"("routes":[""],"attached_at":5,)") +
        field + "}";
    CHECK_FALSE(decodeFrameBody(body).ok());
  }
  const std::string longName(65, 'a');
  CHECK_FALSE(decodeFrameBody(R"({"type":"attached","sent_at":1,"sequence":2,"tunnel":"t1",)"
                              R"("bridge":"b1","routes":[""],"attached_at":5,"origin":")" +
                              longName + "\"}")
                  .ok());
}

TEST_CASE("mesh origin: the bridge table keeps each entry's origin and profile") {
  ot::ManualClock clock{kOriginNow};
  BridgeTable table("SELF", clock.clock());
  REQUIRE(table.applySnapshot(life("B"), 1,
                              {originEntry("b1", "alpha", 0), originEntry("b2", "bravo", 1),
                               originEntry("b3", "")}) == TableUpdate::kApplied);
  auto bridges = table.bridgesOf("B");
  REQUIRE(bridges.size() == 3);
  CHECK(bridges[0].origin == "alpha");
  CHECK(bridges[1].origin == "bravo");
  CHECK(bridges[1].profileIndex == 1);
  CHECK(bridges[2].origin.empty());
  // Origin names are interned and released with their bridges.
  const size_t names = table.routeNameCount();
  CHECK(table.applyDetached("B", 1, 2, "b1") == TableUpdate::kApplied);
  CHECK(table.routeNameCount() == names - 1);
}

TEST_CASE("mesh origin: the feed holds one entry per machine and origin, and names it") {
  ot::ManualClock clock{kOriginNow};
  BridgeTable table("SELF", clock.clock());
  RouteFeed feed;
  table.setObserver(&feed);
  REQUIRE(table.applySnapshot(life("B"), 1,
                              {originEntry("b1", "alpha", 0), originEntry("b2", "alpha", 1),
                               originEntry("b3", "bravo", 0)}) == TableUpdate::kApplied);
  feed.setLinked("B", true);
  auto delta = feed.takeDelta();
  REQUIRE(delta);
  REQUIRE(delta->added.size() == 2);
  std::vector<std::string> origins;
  for (const FeedHolder& holder : delta->added) {
    CHECK(holder.machineId == "B");
    CHECK(holder.tunnelId == "t1");
    origins.push_back(holder.origin);
  }
  std::sort(origins.begin(), origins.end());
  CHECK(origins == std::vector<std::string>{"alpha", "bravo"});
  // bravo's last bridge goes: only bravo's holder is removed; alpha's second bridge going keeps
  // alpha held by the first.
  CHECK(table.applyDetached("B", 1, 2, "b3") == TableUpdate::kApplied);
  CHECK(table.applyDetached("B", 1, 3, "b2") == TableUpdate::kApplied);
  delta = feed.takeDelta();
  REQUIRE(delta);
  CHECK(delta->added.empty());
  REQUIRE(delta->removed.size() == 1);
  CHECK(delta->removed[0].origin == "bravo");
  CHECK(delta->removed[0].machineId == "B");
  // On the control session: MeshHolder.origin.
  const auto message = ot::controld::meshDeltaMessage(*delta);
  REQUIRE(message.mesh_delta().removed_size() == 1);
  CHECK(message.mesh_delta().removed(0).origin() == "bravo");
  const auto parts = ot::controld::meshSnapshotMessages(feed.snapshot());
  REQUIRE(parts.size() == 1);
  REQUIRE(parts[0].mesh_snapshot().holders_size() == 1);
  CHECK(parts[0].mesh_snapshot().holders(0).origin() == "alpha");
  table.setObserver(nullptr);
}

TEST_CASE("mesh origin: relayd's report reaches the registry and this machine's announcement") {
  ot::controld::cv1::Bridge proto;
  proto.set_bridge_id("b1");
  proto.set_tunnel_id("t1");
  proto.add_routes("");
  proto.set_origin("alpha");
  proto.set_profile("v6");
  proto.set_profile_index(2);
  proto.set_attached_at_unix_ms(kOriginNow);
  const ot::controld::BridgeEntry registry = ot::controld::bridgeEntryFromProto(proto);
  CHECK(registry.origin == "alpha");
  CHECK(registry.profileIndex == 2);

  LocalBridges local("m-a");
  LocalChange change{LocalChange::Kind::kAttached, "r1", {registry}, {}};
  const auto frames = local.apply(change, 1'000);
  REQUIRE(frames.size() == 1);
  const auto& attached = std::get<Attached>(frames[0]);
  CHECK(attached.bridge.origin == "alpha");
  CHECK(attached.bridge.profileIndex == 2);
  CHECK(local.snapshot().at(0).origin == "alpha");
}
