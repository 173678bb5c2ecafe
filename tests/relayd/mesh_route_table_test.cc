#include "relayd/mesh_route_table.h"

#include <doctest/doctest.h>

namespace ot::relayd {
namespace {

std::vector<MeshPeer> threePeers() {
  return {{"m-b", "127.0.0.12:9000", true},
          {"m-c", "127.0.0.13:9000", true},
          {"m-d", "[::1]:9000", false}};
}

MeshRouteHolder holder(std::string machine, int64_t at, std::string route = "") {
  return {"t1", std::move(route), std::move(machine), at, ""};
}

TEST_CASE("mesh route table: the newest attach is tried first, then the next") {
  MeshRouteTable table;
  table.replace(5, threePeers(),
                {holder("m-b", 100), holder("m-c", 200), holder("m-b", 50, "api")});
  auto first = table.pick("t1", "");
  REQUIRE(first);
  CHECK(first->machineId == "m-c");
  CHECK(first->internalAddress == "127.0.0.13:9000");
  auto second = table.pick("t1", "", "m-c");
  REQUIRE(second);
  CHECK(second->machineId == "m-b");
  CHECK(table.pick("t1", "", "m-b")->machineId == "m-c");
  CHECK(table.pick("t1", "api")->machineId == "m-b");
  CHECK_FALSE(table.pick("t1", "api", "m-b").has_value());
  CHECK_FALSE(table.pick("t2", "").has_value());
  CHECK_FALSE(table.pick("t1", "other").has_value());
}

TEST_CASE("mesh route table: equal attach times go to the lower machine ID") {
  MeshRouteTable table;
  table.replace(1, threePeers(), {holder("m-c", 100), holder("m-b", 100)});
  CHECK(table.pick("t1", "")->machineId == "m-b");
  table.replace(1, threePeers(), {holder("m-b", 100), holder("m-c", 100)});
  CHECK(table.pick("t1", "")->machineId == "m-b");
}

TEST_CASE("mesh route table: deltas apply in order; a gap or an old one is refused") {
  MeshRouteTable table;
  table.replace(10, threePeers(), {holder("m-b", 100)});
  MeshRouteDelta delta;
  delta.version = 11;
  delta.added = {holder("m-c", 300)};
  CHECK(table.apply(delta) == MeshRouteTable::Apply::kApplied);
  CHECK(table.pick("t1", "")->machineId == "m-c");
  CHECK(table.apply(delta) == MeshRouteTable::Apply::kStale);

  MeshRouteDelta skipped;
  skipped.version = 13;
  skipped.removed = {holder("m-c", 0)};
  CHECK(table.apply(skipped) == MeshRouteTable::Apply::kGap);
  CHECK(table.pick("t1", "")->machineId == "m-c");  // nothing of it applied
  CHECK(table.version() == 11);

  MeshRouteDelta next;
  next.version = 12;
  next.removed = {holder("m-c", 0)};
  CHECK(table.apply(next) == MeshRouteTable::Apply::kApplied);
  CHECK(table.pick("t1", "")->machineId == "m-b");

  // A machine's newer attach on the same route replaces its entry rather than adding one.
  MeshRouteDelta moved;
  moved.version = 13;
  moved.added = {holder("m-b", 400)};
  CHECK(table.apply(moved) == MeshRouteTable::Apply::kApplied);
  CHECK(table.routeCount() == 1);
  MeshRouteDelta gone;
  gone.version = 14;
  gone.removed = {holder("m-b", 0)};
  CHECK(table.apply(gone) == MeshRouteTable::Apply::kApplied);
  CHECK(table.empty());
}

TEST_CASE("mesh route table: only known peers are targets, and only linked ones are believed") {
  MeshRouteTable table;
  table.replace(1, threePeers(), {holder("m-e", 900), holder("m-d", 500)});
  // m-e is not a peer: skipped. m-d is held (not linked) but still a target.
  auto target = table.pick("t1", "");
  REQUIRE(target);
  CHECK(target->machineId == "m-d");
  CHECK(table.linkedFrom("m-b", "127.0.0.12"));
  CHECK_FALSE(table.linkedFrom("m-b", "127.0.0.13"));  // linked, but from another address
  CHECK_FALSE(table.linkedFrom("m-d", "::1"));         // known, not linked now
  CHECK_FALSE(table.linkedFrom("m-e", "127.0.0.12"));  // unknown
  CHECK_FALSE(table.linkedFrom("m-b", ""));

  MeshRouteDelta peersChanged;
  peersChanged.version = 2;
  peersChanged.peers = std::vector<MeshPeer>{{"m-d", "[::1]:9000", true}};
  CHECK(table.apply(peersChanged) == MeshRouteTable::Apply::kApplied);
  CHECK(table.linkedFrom("m-d", "::1"));
  CHECK_FALSE(table.linkedFrom("m-b", "127.0.0.12"));
}

TEST_CASE("mesh route table: the host of an internal address") {
  CHECK(hostOfAddress("127.0.0.12:9000") == "127.0.0.12");
  CHECK(hostOfAddress("[::1]:9000") == "::1");
  CHECK(hostOfAddress("[fd00::2]:1") == "fd00::2");
  CHECK(hostOfAddress("nohost") == "");
  CHECK(hostOfAddress(":9000") == "");
}

}  // namespace
}  // namespace ot::relayd
