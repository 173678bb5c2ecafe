// relayd applying controld's mesh table messages (relayd/mesh_feed_receiver.*) to the
// MeshRouteTable it forwards by: snapshots in parts, deltas in order, stale ones ignored, a gap
// asking for a snapshot once while the old copy keeps serving, a new session's snapshot replacing
// the copy whatever its version.
#include "relayd/mesh_feed_receiver.h"

#include <doctest/doctest.h>

#include <string>

#include "opentunnel/control/v1/control.pb.h"
#include "relayd/mesh_route_table.h"

using ot::relayd::MeshFeedReceiver;
using ot::relayd::MeshRouteTable;
namespace v1 = ::opentunnel::control::v1;
using Outcome = MeshFeedReceiver::Outcome;

namespace {

void holder(v1::MeshHolder* out, const std::string& tunnel, const std::string& route,
            const std::string& machine, int64_t at) {
  out->set_tunnel_id(tunnel);
  out->set_route(route);
  out->set_machine_id(machine);
  out->set_attached_at_unix_ms(at);
}

void peer(v1::MeshPeer* out, const std::string& machine, const std::string& address, bool linked) {
  out->set_machine_id(machine);
  out->set_internal_address(address);
  out->set_linked(linked);
}

v1::MeshTableSnapshot part(uint64_t version, bool last) {
  v1::MeshTableSnapshot out;
  out.set_version(version);
  out.set_last(last);
  return out;
}

v1::MeshTableDelta delta(uint64_t version) {
  v1::MeshTableDelta out;
  out.set_version(version);
  return out;
}

std::string target(const MeshRouteTable& table, const std::string& tunnel, const std::string& route,
                   const std::string& skip = {}) {
  auto picked = table.pick(tunnel, route, skip);
  return picked ? picked->machineId + "@" + picked->internalAddress : "-";
}

}  // namespace

TEST_CASE("mesh feed receiver: a snapshot in parts replaces the copy at its last part") {
  MeshRouteTable table;
  MeshFeedReceiver feed(table);
  CHECK(feed.awaitingSnapshot());
  auto first = part(40, false);
  peer(first.add_peers(), "A", "127.0.0.11:9000", true);
  peer(first.add_peers(), "B", "127.0.0.12:9000", false);
  holder(first.add_holders(), "t1", "", "A", 100);
  auto second = part(40, true);
  holder(second.add_holders(), "t1", "", "B", 200);
  holder(second.add_holders(), "t2", "web", "A", 50);

  CHECK(feed.snapshotPart(first) == Outcome::kPartial);
  CHECK(table.empty());  // nothing until the last part
  CHECK(feed.snapshotPart(second) == Outcome::kSnapshotApplied);
  CHECK_FALSE(feed.awaitingSnapshot());
  CHECK(table.version() == 40);
  CHECK(table.routeCount() == 2);
  CHECK(target(table, "t1", "") == "B@127.0.0.12:9000");  // the newest attach first
  CHECK(target(table, "t1", "", "B") == "A@127.0.0.11:9000");
  CHECK(target(table, "t2", "web") == "A@127.0.0.11:9000");
  CHECK(table.linkedFrom("A", "127.0.0.11"));
  CHECK_FALSE(table.linkedFrom("B", "127.0.0.12"));  // held, not linked
}

TEST_CASE("mesh feed receiver: deltas in order, stale ignored, a gap asks once") {
  MeshRouteTable table;
  MeshFeedReceiver feed(table);
  auto snapshot = part(7, true);
  peer(snapshot.add_peers(), "A", "127.0.0.11:9000", true);
  holder(snapshot.add_holders(), "t1", "", "A", 100);
  REQUIRE(feed.snapshotPart(snapshot) == Outcome::kSnapshotApplied);

  auto next = delta(8);
  holder(next.add_added(), "t2", "", "A", 300);
  holder(next.add_removed(), "t1", "", "A", 0);
  CHECK(feed.delta(next) == Outcome::kDeltaApplied);
  CHECK(table.version() == 8);
  CHECK(target(table, "t1", "") == "-");
  CHECK(target(table, "t2", "") == "A@127.0.0.11:9000");
  CHECK(feed.delta(next) == Outcome::kStale);  // a repeat

  // Peers: the whole list when it changed.
  auto peers = delta(9);
  peers.set_peers_changed(true);
  peer(peers.add_peers(), "A", "127.0.0.11:9000", false);
  peer(peers.add_peers(), "C", "127.0.0.13:9000", true);
  holder(peers.add_added(), "t3", "", "C", 10);
  CHECK(feed.delta(peers) == Outcome::kDeltaApplied);
  CHECK_FALSE(table.linkedFrom("A", "127.0.0.11"));
  CHECK(table.linkedFrom("C", "127.0.0.13"));
  CHECK(target(table, "t3", "") == "C@127.0.0.13:9000");

  // 11 after 9: a gap. Asked once; the copy keeps serving; later deltas wait for the snapshot.
  auto skipped = delta(11);
  holder(skipped.add_removed(), "t2", "", "A", 0);
  CHECK(feed.delta(skipped) == Outcome::kGap);
  CHECK(feed.awaitingSnapshot());
  CHECK(feed.delta(delta(12)) == Outcome::kGapWaiting);
  CHECK(feed.delta(delta(10)) == Outcome::kGapWaiting);  // follows on, but a snapshot is due
  CHECK(table.version() == 9);
  CHECK(target(table, "t2", "") == "A@127.0.0.11:9000");

  auto fresh = part(12, true);
  peer(fresh.add_peers(), "C", "127.0.0.13:9000", true);
  holder(fresh.add_holders(), "t3", "", "C", 10);
  CHECK(feed.snapshotPart(fresh) == Outcome::kSnapshotApplied);
  CHECK(target(table, "t2", "") == "-");
  CHECK(feed.delta(delta(12)) == Outcome::kStale);
  CHECK(feed.delta(delta(13)) == Outcome::kDeltaApplied);
}

TEST_CASE("mesh feed receiver: a new session keeps the copy until its snapshot replaces it") {
  MeshRouteTable table;
  MeshFeedReceiver feed(table);
  auto snapshot = part(500, true);
  peer(snapshot.add_peers(), "A", "127.0.0.11:9000", true);
  holder(snapshot.add_holders(), "t1", "", "A", 100);
  REQUIRE(feed.snapshotPart(snapshot) == Outcome::kSnapshotApplied);

  // controld went away: the copy stays in use.
  feed.sessionChanged();
  CHECK(target(table, "t1", "") == "A@127.0.0.11:9000");
  // A half-received snapshot of the old session is dropped with it.
  auto half = part(501, false);
  holder(half.add_holders(), "t9", "", "A", 1);
  CHECK(feed.snapshotPart(half) == Outcome::kPartial);
  feed.sessionChanged();
  // A restarted controld numbers from its own start: its snapshot replaces the copy anyway.
  auto restarted = part(2, true);
  peer(restarted.add_peers(), "A", "127.0.0.11:9000", true);
  holder(restarted.add_holders(), "t5", "", "A", 100);
  CHECK(feed.snapshotPart(restarted) == Outcome::kSnapshotApplied);
  CHECK(table.version() == 2);
  CHECK(target(table, "t1", "") == "-");
  CHECK(target(table, "t9", "") == "-");
  CHECK(target(table, "t5", "") == "A@127.0.0.11:9000");
  CHECK(feed.delta(delta(3)) == Outcome::kDeltaApplied);
}
