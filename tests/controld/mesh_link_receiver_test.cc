// The per-link receive rules and the outbound queue (controld/mesh/link_receiver.h,
// outbound_queue.h; docs/mesh.md "Link frames").
#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "controld/mesh/frame_reader.h"
#include "controld/mesh/link_receiver.h"
#include "controld/mesh/outbound_queue.h"
#include "controld/mesh/snapshot_split.h"

using namespace ot::mesh;

namespace {

constexpr const char* kPeer = "m-peer";

BridgeEntry entry(std::string tunnel, std::string bridge) {
  BridgeEntry e;
  e.tunnelId = std::move(tunnel);
  e.bridgeId = std::move(bridge);
  e.routes = {""};
  e.attachedAtMs = 5;
  return e;
}

Frame hello(std::string machine = kPeer, uint32_t version = kLinkFormatVersion) {
  Hello h;
  h.version = version;
  h.machine = std::move(machine);
  h.region = "iad";
  h.address = "127.0.0.12:9000";
  h.epoch = 7;
  h.startedAtMs = 1;
  return Frame{100, h};
}

Frame part(uint64_t sequence, uint32_t index, bool last, std::vector<BridgeEntry> bridges) {
  return Frame{200, SnapshotPart{sequence, index, last, std::move(bridges)}};
}

Frame attached(uint64_t sequence, std::string bridge) {
  return Frame{300, Attached{sequence, entry("alpha", std::move(bridge))}};
}

Frame detached(uint64_t sequence, std::string bridge) {
  return Frame{300, Detached{sequence, "alpha", std::move(bridge)}};
}

// Takes a receiver through hello and a one-part snapshot at `sequence`.
LinkReceiver live(uint64_t sequence) {
  LinkReceiver receiver(kPeer, 0);
  REQUIRE(receiver.receive(hello(), 1).ok());
  REQUIRE(receiver.receive(part(sequence, 0, true, {}), 1).ok());
  REQUIRE(receiver.snapshotComplete());
  return receiver;
}

LinkErrorCode errorOf(LinkReceiver& receiver, Frame frame) {
  auto result = receiver.receive(std::move(frame), 2);
  REQUIRE_FALSE(result.ok());
  return result.error().code;
}

}  // namespace

TEST_CASE("mesh link receiver: hello, a snapshot in parts, deltas, events and pings") {
  LinkReceiver receiver(kPeer, 0);
  auto h = receiver.receive(hello(), 1);
  REQUIRE(h.ok());
  REQUIRE(h.value().has_value());
  CHECK(receiver.hello()->address == "127.0.0.12:9000");

  // Parts are held until the last; then one snapshot with every bridge, the peer's machine set.
  auto p0 = receiver.receive(part(10, 0, false, {entry("alpha", "b1"), entry("beta", "b2")}), 2);
  REQUIRE(p0.ok());
  CHECK_FALSE(p0.value().has_value());
  auto p1 = receiver.receive(part(10, 1, false, {}), 3);
  REQUIRE(p1.ok());
  CHECK_FALSE(p1.value().has_value());
  CHECK_FALSE(receiver.snapshotComplete());
  auto p2 = receiver.receive(part(10, 2, true, {entry("gamma", "b3")}), 4);
  REQUIRE(p2.ok());
  REQUIRE(p2.value().has_value());
  const auto& snapshot = std::get<SnapshotPart>(p2.value()->body);
  CHECK(snapshot.sequence == 10);
  CHECK(snapshot.part == 0);
  CHECK(snapshot.last);
  CHECK(p2.value()->sentAtMs == 200);
  REQUIRE(snapshot.bridges.size() == 3);
  CHECK(snapshot.bridges[2].tunnelId == "gamma");
  for (const auto& bridge : snapshot.bridges) CHECK(bridge.machine == kPeer);
  CHECK(receiver.snapshotComplete());
  CHECK(receiver.sequence() == 10);

  auto a = receiver.receive(attached(11, "b4"), 5);
  REQUIRE(a.ok());
  CHECK(std::get<Attached>(a.value()->body).bridge.machine == kPeer);
  REQUIRE(receiver.receive(detached(12, "b1"), 6).ok());
  CHECK(receiver.sequence() == 12);
  auto event = receiver.receive(Frame{9, TunnelDeleted{"beta"}}, 7);
  REQUIRE(event.ok());
  CHECK(*event.value() == Frame{9, TunnelDeleted{"beta"}});
  REQUIRE(receiver.receive(Frame{9, Ping{}}, 8).ok());
  REQUIRE(receiver.receive(Frame{9, Leaving{}}, 9).ok());
  CHECK(receiver.framesReceived() == 9);
  CHECK(receiver.lastFrameAtMs() == 9);
}

TEST_CASE("mesh link receiver: the hello comes first, once, from the proven machine") {
  SUBCASE("anything before the hello") {
    LinkReceiver receiver(kPeer, 0);
    CHECK(errorOf(receiver, Frame{1, Ping{}}) == LinkErrorCode::kHelloNotFirst);
    // Failed for good: even a hello now answers the same error.
    CHECK(errorOf(receiver, hello()) == LinkErrorCode::kHelloNotFirst);
  }
  SUBCASE("a snapshot before the hello") {
    LinkReceiver receiver(kPeer, 0);
    CHECK(errorOf(receiver, part(1, 0, true, {})) == LinkErrorCode::kHelloNotFirst);
  }
  SUBCASE("a second hello") {
    LinkReceiver receiver(kPeer, 0);
    REQUIRE(receiver.receive(hello(), 1).ok());
    CHECK(errorOf(receiver, hello()) == LinkErrorCode::kHelloTwice);
    auto after = live(3);
    CHECK(errorOf(after, hello()) == LinkErrorCode::kHelloTwice);
  }
  SUBCASE("a hello naming another machine") {
    LinkReceiver receiver(kPeer, 0);
    CHECK(errorOf(receiver, hello("m-other")) == LinkErrorCode::kWrongMachine);
  }
  SUBCASE("a hello of another format version") {
    LinkReceiver receiver(kPeer, 0);
    CHECK(errorOf(receiver, hello(kPeer, 2)) == LinkErrorCode::kUnsupportedVersion);
  }
}

TEST_CASE("mesh link receiver: snapshot parts in order, one snapshot per link") {
  SUBCASE("the first part is not part 0") {
    LinkReceiver receiver(kPeer, 0);
    REQUIRE(receiver.receive(hello(), 1).ok());
    CHECK(errorOf(receiver, part(4, 1, true, {})) == LinkErrorCode::kSnapshotOutOfOrder);
  }
  SUBCASE("a part skipped") {
    LinkReceiver receiver(kPeer, 0);
    REQUIRE(receiver.receive(hello(), 1).ok());
    REQUIRE(receiver.receive(part(4, 0, false, {}), 1).ok());
    CHECK(errorOf(receiver, part(4, 2, true, {})) == LinkErrorCode::kSnapshotOutOfOrder);
  }
  SUBCASE("a part of another sequence") {
    LinkReceiver receiver(kPeer, 0);
    REQUIRE(receiver.receive(hello(), 1).ok());
    REQUIRE(receiver.receive(part(4, 0, false, {}), 1).ok());
    CHECK(errorOf(receiver, part(5, 1, true, {})) == LinkErrorCode::kSnapshotOutOfOrder);
  }
  SUBCASE("an event between parts") {
    LinkReceiver receiver(kPeer, 0);
    REQUIRE(receiver.receive(hello(), 1).ok());
    REQUIRE(receiver.receive(part(4, 0, false, {}), 1).ok());
    CHECK(errorOf(receiver, Frame{1, Ping{}}) == LinkErrorCode::kSnapshotOutOfOrder);
  }
  SUBCASE("a second snapshot") {
    auto receiver = live(4);
    CHECK(errorOf(receiver, part(4, 0, true, {})) == LinkErrorCode::kSnapshotOutOfOrder);
  }
  SUBCASE("parts that together hold more bridges than the receiver takes") {
    LinkReceiver receiver(kPeer, 0, 3);
    REQUIRE(receiver.receive(hello(), 1).ok());
    REQUIRE(receiver.receive(part(4, 0, false, {entry("t", "b1"), entry("t", "b2")}), 1).ok());
    CHECK(errorOf(receiver, part(4, 1, false, {entry("t", "b3"), entry("t", "b4")})) ==
          LinkErrorCode::kSnapshotTooLarge);
    CHECK(linkErrorCodeName(LinkErrorCode::kSnapshotTooLarge) == "snapshot_too_large");
  }
  SUBCASE("a snapshot of exactly the cap is taken") {
    LinkReceiver receiver(kPeer, 0, 3);
    REQUIRE(receiver.receive(hello(), 1).ok());
    REQUIRE(receiver.receive(part(4, 0, false, {entry("t", "b1"), entry("t", "b2")}), 1).ok());
    const auto whole = receiver.receive(part(4, 1, true, {entry("t", "b3")}), 1);
    REQUIRE(whole.ok());
    REQUIRE(whole->has_value());
    CHECK(std::get<SnapshotPart>((*whole)->body).bridges.size() == 3);
  }
  SUBCASE("events before the snapshot are fine") {
    LinkReceiver receiver(kPeer, 0);
    REQUIRE(receiver.receive(hello(), 1).ok());
    CHECK(receiver.receive(Frame{1, JobEnqueued{}}, 1).ok());
    CHECK(receiver.receive(part(4, 0, true, {}), 1).ok());
  }
}

TEST_CASE("mesh link receiver: deltas follow the snapshot's sequence with no gap") {
  SUBCASE("a delta before the snapshot") {
    LinkReceiver receiver(kPeer, 0);
    REQUIRE(receiver.receive(hello(), 1).ok());
    CHECK(errorOf(receiver, attached(1, "b")) == LinkErrorCode::kDeltaBeforeSnapshot);
  }
  SUBCASE("a delta between parts") {
    LinkReceiver receiver(kPeer, 0);
    REQUIRE(receiver.receive(hello(), 1).ok());
    REQUIRE(receiver.receive(part(4, 0, false, {}), 1).ok());
    CHECK(errorOf(receiver, attached(5, "b")) == LinkErrorCode::kDeltaBeforeSnapshot);
  }
  SUBCASE("the first delta is the snapshot's sequence + 1") {
    auto receiver = live(100);
    CHECK(receiver.receive(attached(101, "b"), 2).ok());
    CHECK(receiver.receive(detached(102, "b"), 2).ok());
    CHECK(receiver.receive(attached(103, "c"), 2).ok());
  }
  SUBCASE("a gap") {
    auto receiver = live(100);
    REQUIRE(receiver.receive(attached(101, "b"), 2).ok());
    CHECK(errorOf(receiver, detached(103, "b")) == LinkErrorCode::kSequenceGap);
    CHECK(errorOf(receiver, detached(102, "b")) == LinkErrorCode::kSequenceGap);  // failed for good
  }
  SUBCASE("a gap right after the snapshot") {
    auto receiver = live(100);
    CHECK(errorOf(receiver, attached(102, "b")) == LinkErrorCode::kSequenceGap);
  }
  SUBCASE("a repeat") {
    auto receiver = live(100);
    REQUIRE(receiver.receive(attached(101, "b"), 2).ok());
    CHECK(errorOf(receiver, attached(101, "b")) == LinkErrorCode::kSequenceGap);
  }
  SUBCASE("going back") {
    auto receiver = live(100);
    CHECK(errorOf(receiver, attached(100, "b")) == LinkErrorCode::kSequenceGap);
  }
}

TEST_CASE("mesh link receiver: a peer silent for MESH_DEAD_MS is dead") {
  constexpr int64_t kDeadMs = 500;
  LinkReceiver receiver(kPeer, 1000);
  CHECK_FALSE(receiver.isDead(1000 + kDeadMs - 1, kDeadMs));
  CHECK(receiver.isDead(1000 + kDeadMs, kDeadMs));  // silent since the link came up
  REQUIRE(receiver.receive(hello(), 1400).ok());
  CHECK_FALSE(receiver.isDead(1400 + kDeadMs - 1, kDeadMs));
  CHECK(receiver.isDead(1400 + kDeadMs, kDeadMs));
  REQUIRE(receiver.receive(Frame{1, Ping{}}, 1850).ok());  // a ping keeps it alive
  CHECK_FALSE(receiver.isDead(1850 + kDeadMs - 1, kDeadMs));
}

TEST_CASE("mesh link receiver: a real stream from the encoder through the reader") {
  std::vector<BridgeEntry> bridges;
  for (int i = 0; i < 50; ++i) bridges.push_back(entry("t" + std::to_string(i), "b"));
  std::string bytes = encodeFrame(hello());
  for (const auto& f : encodeSnapshot(bridges, 7, 1, 300)) bytes += f;
  bytes += encodeFrame(attached(8, "x")) + encodeFrame(detached(9, "x"));
  FrameReader reader;
  reader.feed(bytes);
  LinkReceiver receiver(kPeer, 0);
  std::vector<Frame> applied;
  for (auto result = reader.next(); result.status == ReadStatus::kFrame; result = reader.next()) {
    auto step = receiver.receive(std::move(result.frame), 1);
    REQUIRE(step.ok());
    if (step.value()) applied.push_back(std::move(*step.value()));
  }
  REQUIRE(applied.size() == 4);  // hello, the whole snapshot, two deltas
  CHECK(std::get<SnapshotPart>(applied[1].body).bridges.size() == 50);
  CHECK(receiver.sequence() == 9);
}

TEST_CASE("mesh outbound queue: a peer that falls too far behind is disconnected") {
  OutboundQueue queue(0, 3);
  CHECK(queue.push("aaaa", 1));
  CHECK(queue.push("bb", 2));
  CHECK(queue.push("c", 3));
  CHECK(queue.frames() == 3);
  CHECK(queue.bytes() == 7);
  CHECK_FALSE(queue.push("d", 4));  // the fourth waiting frame is one too many
  CHECK(queue.overflowed());
  CHECK(queue.frames() == 3);
  CHECK(queue.front() == "aaaa");
  queue.pop();
  CHECK(queue.bytes() == 3);
  CHECK_FALSE(queue.push("e", 5));       // overflow is for good: the link closes
  CHECK(OutboundQueue(0).push("x", 0));  // the default bound is the spec's
  OutboundQueue full(0);
  for (size_t i = 0; i < kMaxFramesBehind; ++i) REQUIRE(full.push(std::string(), 0));
  CHECK_FALSE(full.push(std::string(), 0));
}

TEST_CASE("mesh outbound queue: a ping is due after MESH_PING_MS without a push") {
  constexpr int64_t kPingMs = 100;
  OutboundQueue queue(1000);
  CHECK_FALSE(queue.pingDue(1000 + kPingMs - 1, kPingMs));
  CHECK(queue.pingDue(1000 + kPingMs, kPingMs));
  REQUIRE(queue.push("x", 1050));
  CHECK_FALSE(queue.pingDue(1050 + kPingMs - 1, kPingMs));
  CHECK(queue.pingDue(1050 + kPingMs, kPingMs));
}
