// PeerLiveness (controld/mesh/peer_liveness.h): what a machine does with a peer whose link ended,
// driven by a manual clock. Held -> asked at once -> kept while its relayd answers serving or
// control_down (asked again every MESH_PING_MS, a good answer needed every MESH_DEAD_MS) ->
// released by its new link, or dropped (a failing answer, no good answer in time, MESH_HOLD_MS).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/config.h"
#include "common/mesh_proof.h"
#include "controld/mesh/link_gate.h"
#include "controld/mesh/mesh_settings.h"
#include "controld/mesh/peer_liveness.h"

using namespace ot::mesh;

namespace {

constexpr LivenessTimes kTimes{100, 500, 3'000};  // ping, dead, hold

std::vector<std::string> machinesOf(const std::vector<PeerLiveness::Ask>& asks) {
  std::vector<std::string> machines;
  for (const auto& ask : asks) machines.push_back(ask.machine);
  return machines;
}

}  // namespace

TEST_CASE("peer liveness: a held machine is asked at once, once, with the time to its deadline") {
  PeerLiveness liveness(kTimes);
  CHECK_FALSE(liveness.held("m-a"));
  liveness.hold("m-a", "127.0.0.11:9000", 1'000, 1'000);  // the link closed just now
  CHECK(liveness.held("m-a"));
  auto asks = liveness.dueAsks(1'000);
  REQUIRE(asks.size() == 1);
  CHECK(asks[0].machine == "m-a");
  CHECK(asks[0].address == "127.0.0.11:9000");
  CHECK(asks[0].timeoutMs == 500);  // the dead time from the last frame
  CHECK(liveness.asking("m-a"));
  // One question in flight at a time.
  CHECK(liveness.dueAsks(1'050).empty());
  CHECK(liveness.dueAsks(5'000).empty());
}

TEST_CASE(
    "peer liveness: serving and control_down keep the hold and the next question waits a "
    "ping") {
  PeerLiveness liveness(kTimes);
  liveness.hold("m-a", "a:1", 1'000, 1'000);
  REQUIRE(liveness.dueAsks(1'000).size() == 1);
  CHECK(liveness.answered("m-a", AliveCheckResult::kServing, 1'010) ==
        PeerLiveness::Verdict::kKeep);
  CHECK(liveness.held("m-a"));
  CHECK_FALSE(liveness.asking("m-a"));
  // Asked again MESH_PING_MS after the last question went out, not earlier.
  CHECK(liveness.dueAsks(1'099).empty());
  auto asks = liveness.dueAsks(1'100);
  REQUIRE(asks.size() == 1);
  CHECK(asks[0].timeoutMs == 410);  // the good answer at 1'010 moved the deadline to 1'510
  CHECK(liveness.answered("m-a", AliveCheckResult::kControlDown, 1'400) ==
        PeerLiveness::Verdict::kKeep);
  // An answer slower than the ping interval: the next question goes at once.
  REQUIRE(liveness.dueAsks(1'400).size() == 1);
  // The deadline follows the good answers: nothing expires at 1'600 (last good at 1'400).
  CHECK(liveness.expire(1'899).empty());
  CHECK(liveness.held("m-a"));
}

TEST_CASE("peer liveness: every failing answer drops the machine at once") {
  for (const auto result :
       {AliveCheckResult::kDraining, AliveCheckResult::kRefused, AliveCheckResult::kClosed,
        AliveCheckResult::kBadAnswer, AliveCheckResult::kTimeout}) {
    CAPTURE(aliveCheckResultName(result));
    PeerLiveness liveness(kTimes);
    liveness.hold("m-a", "a:1", 1'000, 1'000);
    REQUIRE(liveness.dueAsks(1'000).size() == 1);
    CHECK(liveness.answered("m-a", result, 1'005) == PeerLiveness::Verdict::kDrop);
    CHECK_FALSE(liveness.held("m-a"));
    CHECK(liveness.dueAsks(2'000).empty());
  }
  // Even after good answers.
  PeerLiveness liveness(kTimes);
  liveness.hold("m-a", "a:1", 1'000, 1'000);
  REQUIRE(liveness.dueAsks(1'000).size() == 1);
  REQUIRE(liveness.answered("m-a", AliveCheckResult::kServing, 1'001) ==
          PeerLiveness::Verdict::kKeep);
  REQUIRE(liveness.dueAsks(1'100).size() == 1);
  CHECK(liveness.answered("m-a", AliveCheckResult::kDraining, 1'101) ==
        PeerLiveness::Verdict::kDrop);
  CHECK_FALSE(liveness.held("m-a"));
}

TEST_CASE("peer liveness: no good answer by the deadline drops the machine (timeout)") {
  PeerLiveness liveness(kTimes);
  liveness.hold("m-a", "a:1", 1'000, 1'000);
  REQUIRE(liveness.dueAsks(1'000).size() == 1);  // never answered
  CHECK(liveness.expire(1'499).empty());
  const auto expired = liveness.expire(1'500);
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].machine == "m-a");
  CHECK(expired[0].reason == "timeout");
  CHECK_FALSE(liveness.held("m-a"));
  // A late answer to the forgotten question changes nothing.
  CHECK(liveness.answered("m-a", AliveCheckResult::kServing, 1'600) ==
        PeerLiveness::Verdict::kUnknown);
  CHECK_FALSE(liveness.held("m-a"));
}

TEST_CASE("peer liveness: a link dead for silence gives its relayd one ping interval") {
  PeerLiveness liveness(kTimes);
  // The link was declared dead at 2'000, its last frame at 1'500: the dead time is used up.
  liveness.hold("m-a", "a:1", 1'500, 2'000);
  auto asks = liveness.dueAsks(2'000);
  REQUIRE(asks.size() == 1);
  CHECK(asks[0].timeoutMs == 100);
  CHECK(liveness.expire(2'099).empty());
  const auto expired = liveness.expire(2'100);
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].reason == "timeout");
}

TEST_CASE("peer liveness: MESH_HOLD_MS caps the hold whatever the answers") {
  PeerLiveness liveness(kTimes);
  liveness.hold("m-a", "a:1", 1'000, 1'000);
  int64_t now = 1'000;
  while (now < 3'900) {
    for (const auto& ask : liveness.dueAsks(now)) {
      CHECK(ask.timeoutMs <= 4'000 - now);  // never past the hold's end
      REQUIRE(liveness.answered(ask.machine, AliveCheckResult::kServing, now + 5) ==
              PeerLiveness::Verdict::kKeep);
    }
    REQUIRE(liveness.expire(now).empty());
    now += 50;
  }
  CHECK(liveness.held("m-a"));
  // A good answer at the cap does not extend it...
  for (const auto& ask : liveness.dueAsks(4'000)) {
    CHECK(liveness.answered(ask.machine, AliveCheckResult::kServing, 4'000) ==
          PeerLiveness::Verdict::kDrop);
  }
  CHECK_FALSE(liveness.held("m-a"));
  // ... and without an answer in flight the cap expires it.
  PeerLiveness other(kTimes);
  other.hold("m-b", "b:1", 1'000, 1'000);
  for (int64_t t = 1'000; t < 4'000; t += 100) {
    for (const auto& ask : other.dueAsks(t)) {
      REQUIRE(other.answered(ask.machine, AliveCheckResult::kControlDown, t) ==
              PeerLiveness::Verdict::kKeep);
    }
  }
  const auto expired = other.expire(4'000);
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].reason == "hold_expired");
}

TEST_CASE("peer liveness: the new link's snapshot releases the hold; a late answer is ignored") {
  PeerLiveness liveness(kTimes);
  liveness.hold("m-a", "a:1", 1'000, 1'000);
  REQUIRE(liveness.dueAsks(1'000).size() == 1);
  CHECK(liveness.release("m-a"));
  CHECK_FALSE(liveness.held("m-a"));
  CHECK_FALSE(liveness.release("m-a"));
  CHECK(liveness.answered("m-a", AliveCheckResult::kRefused, 1'010) ==
        PeerLiveness::Verdict::kUnknown);
  CHECK(liveness.expire(10'000).empty());
}

TEST_CASE("peer liveness: a link that ends again before its snapshot does not extend the hold") {
  PeerLiveness liveness(kTimes);
  liveness.hold("m-a", "a:1", 1'000, 1'000);
  REQUIRE(liveness.dueAsks(1'000).size() == 1);
  REQUIRE(liveness.answered("m-a", AliveCheckResult::kServing, 1'010) ==
          PeerLiveness::Verdict::kKeep);
  // It linked (hello) and ended again at 2'500 at a new address, before its snapshot came.
  liveness.hold("m-a", "a:2", 2'500, 2'500);
  CHECK(liveness.size() == 1);
  auto asks = liveness.dueAsks(2'500);
  REQUIRE(asks.size() == 1);
  CHECK(asks[0].address == "a:2");
  // The deadline stayed where the last good answer put it (1'510): no new grace.
  const auto expired = liveness.expire(2'500);
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].reason == "timeout");
}

TEST_CASE("peer liveness: machines are held and asked independently") {
  PeerLiveness liveness(kTimes);
  liveness.hold("m-b", "b:1", 1'000, 1'000);
  liveness.hold("m-a", "a:1", 1'000, 1'020);
  CHECK(liveness.heldMachines() == std::vector<std::string>{"m-a", "m-b"});
  CHECK(machinesOf(liveness.dueAsks(1'020)) == std::vector<std::string>{"m-a", "m-b"});
  CHECK(liveness.answered("m-b", AliveCheckResult::kRefused, 1'021) ==
        PeerLiveness::Verdict::kDrop);
  CHECK(liveness.answered("m-a", AliveCheckResult::kServing, 1'022) ==
        PeerLiveness::Verdict::kKeep);
  CHECK(liveness.heldMachines() == std::vector<std::string>{"m-a"});
  liveness.forget("m-a");
  CHECK(liveness.size() == 0);
}

TEST_CASE("peer liveness: result names are the metric's labels") {
  CHECK(aliveCheckResultName(AliveCheckResult::kServing) == "serving");
  CHECK(aliveCheckResultName(AliveCheckResult::kControlDown) == "control_down");
  CHECK(aliveCheckResultName(AliveCheckResult::kDraining) == "draining");
  CHECK(aliveCheckResultName(AliveCheckResult::kRefused) == "refused");
  CHECK(aliveCheckResultName(AliveCheckResult::kClosed) == "closed");
  CHECK(aliveCheckResultName(AliveCheckResult::kBadAnswer) == "bad_answer");
  CHECK(aliveCheckResultName(AliveCheckResult::kTimeout) == "timeout");
  CHECK(keepsHold(AliveCheckResult::kServing));
  CHECK(keepsHold(AliveCheckResult::kControlDown));
  CHECK_FALSE(keepsHold(AliveCheckResult::kDraining));
}

TEST_CASE("peer liveness: MESH_HOLD_MS defaults to 120 s and must exceed MESH_DEAD_MS") {
  MeshFlags flags;
  flags.internalListen = *ot::config::parseListenAddress("127.0.0.11:9000");
  flags.internalToken = std::string(32, 'k');
  const auto check = [&] { return checkMeshFlags(flags, "m-a", "iad", "/run/control.sock"); };
  auto checked = check();
  REQUIRE(checked.ok());
  CHECK((*checked)->holdMs == 120'000);
  flags.pingMs = 100;
  flags.deadMs = 500;
  flags.holdMs = 500;
  checked = check();
  REQUIRE_FALSE(checked.ok());
  CHECK(checked.error().message.find("MESH_HOLD_MS (500) must be longer than MESH_DEAD_MS (500)") !=
        std::string::npos);
  flags.holdMs = 3'000;
  checked = check();
  REQUIRE(checked.ok());
  CHECK((*checked)->holdMs == 3'000);
}

TEST_CASE("peer liveness: only a lost link is held") {
  for (const char* reason : {"closed", "read_error", "write_error", "dead", "too_far_behind"}) {
    CAPTURE(reason);
    CHECK(lostLink(reason));
  }
  for (const char* reason : {"sequence_gap", "bad_json", "foreign_entry", "stale_life", "shutdown",
                             "replaced", "duplicate", "hello_not_first"}) {
    CAPTURE(reason);
    CHECK_FALSE(lostLink(reason));
  }
}

TEST_CASE("link gate: a new life links after its relayd's first snapshot, or after the wait") {
  LinkGate gate(1'000, 10'000);
  CHECK_FALSE(gate.open());
  CHECK_FALSE(gate.update(5'000, false).has_value());
  // Handed-over links are kept while closed, at most kMaxPreAuthConnections of them.
  for (size_t i = 0; i < kMaxPreAuthConnections; ++i) {
    ReceivedHandoff received;
    received.connectionFd = static_cast<int>(100 + i);
    REQUIRE(gate.defer(received));
  }
  ReceivedHandoff extra;
  extra.connectionFd = 7;
  CHECK_FALSE(gate.defer(extra));
  CHECK(extra.connectionFd == 7);  // still the caller's
  CHECK(gate.deferred() == kMaxPreAuthConnections);

  const auto opened = gate.update(5'001, true);
  REQUIRE(opened.has_value());
  CHECK(*opened == "relay_snapshot");
  CHECK(gate.open());
  const auto kept = gate.takeDeferred();
  REQUIRE(kept.size() == kMaxPreAuthConnections);
  CHECK(kept.front().connectionFd == 100);  // oldest first
  CHECK(gate.deferred() == 0);
  // Open for good: nothing reopens it, nothing is kept any more.
  CHECK_FALSE(gate.update(5'002, true).has_value());
  CHECK_FALSE(gate.defer(extra));

  LinkGate alone(1'000, 10'000);
  CHECK_FALSE(alone.update(10'999, false).has_value());
  const auto waited = alone.update(11'000, false);
  REQUIRE(waited.has_value());
  CHECK(*waited == "no_relay_session");
}
