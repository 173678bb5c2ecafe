// LocalBridges (controld/mesh/local_bridges.h) announcing at authorization (docs/mesh.md
// "Announcing this machine's bridges"): an authorized bridge is announced at once and pending;
// relayd's attached report (or a session snapshot carrying it) confirms it without a second
// announcement; a failed attach (detached report, a snapshot or a dropped relay without it, no
// report within the bound) is announced detached. Deltas stay numbered without a gap.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "controld/mesh/local_bridges.h"
#include "controld/relays/bridge_registry.h"

using namespace ot::mesh;
using RegistryEntry = ot::controld::BridgeEntry;

namespace {

RegistryEntry bridge(const std::string& id, const std::string& tunnel, int64_t attachedAtMs,
                     std::vector<std::string> routes = {""}) {
  return RegistryEntry{id, tunnel, std::move(routes), "", "", 0, attachedAtMs, "", 0};
}

LocalChange authorized(const std::string& relay, const RegistryEntry& entry) {
  return {LocalChange::Kind::kAuthorized, relay, {entry}, {}};
}

LocalChange attached(const std::string& relay, const RegistryEntry& entry) {
  return {LocalChange::Kind::kAttached, relay, {entry}, {}};
}

// Every frame's sequence, in order.
std::vector<uint64_t> sequences(const std::vector<FrameBody>& frames) {
  std::vector<uint64_t> out;
  for (const auto& frame : frames) {
    if (const auto* a = std::get_if<Attached>(&frame)) out.push_back(a->sequence);
    if (const auto* d = std::get_if<Detached>(&frame)) out.push_back(d->sequence);
  }
  return out;
}

}  // namespace

TEST_CASE("local bridges: an authorized bridge is announced once, relayd's report only confirms") {
  LocalBridges local("m-a");
  auto frames = local.apply(authorized("r1", bridge("b1", "t1", 100)), 1'000);
  REQUIRE(frames.size() == 1);
  CHECK(std::get<Attached>(frames[0]).sequence == 1);
  CHECK(std::get<Attached>(frames[0]).bridge.bridgeId == "b1");
  CHECK(local.pending() == 1);
  CHECK(local.snapshot().size() == 1);  // a new link's snapshot carries it already
  // relayd's attached report, with its own (later) attach time: nothing more to say.
  CHECK(local.apply(attached("r1", bridge("b1", "t1", 150)), 1'050).empty());
  CHECK(local.pending() == 0);
  CHECK(local.sequence() == 1);
  // Confirmed: the bound no longer applies.
  CHECK(local.expirePending(100'000).empty());
  CHECK(local.size() == 1);
}

TEST_CASE("local bridges: a session snapshot carrying a pending bridge confirms it") {
  LocalBridges local("m-a");
  REQUIRE(local.apply(authorized("r1", bridge("b1", "t1", 100)), 1'000).size() == 1);
  CHECK(local.apply({LocalChange::Kind::kReplaced, "r1", {bridge("b1", "t1", 160)}, {}}, 1'100)
            .empty());
  CHECK(local.pending() == 0);
}

TEST_CASE("local bridges: an authorized attach that fails is announced detached") {
  LocalBridges local("m-a");
  SUBCASE("relayd reports it detached") {
    REQUIRE(local.apply(authorized("r1", bridge("b1", "t1", 100)), 1'000).size() == 1);
    const auto frames = local.apply({LocalChange::Kind::kDetached, "r1", {}, "b1"}, 1'010);
    REQUIRE(frames.size() == 1);
    CHECK(std::get<Detached>(frames[0]).bridgeId == "b1");
    CHECK(std::get<Detached>(frames[0]).sequence == 2);
  }
  SUBCASE("the session snapshot does not carry it") {
    REQUIRE(local.apply(authorized("r1", bridge("b1", "t1", 100)), 1'000).size() == 1);
    const auto frames =
        local.apply({LocalChange::Kind::kReplaced, "r1", {bridge("b2", "t2", 5)}, {}}, 1'010);
    REQUIRE(frames.size() == 2);
    CHECK(std::get<Detached>(frames[0]).bridgeId == "b1");
    CHECK(std::get<Attached>(frames[1]).bridge.bridgeId == "b2");
    CHECK(sequences(frames) == std::vector<uint64_t>{2, 3});
  }
  SUBCASE("its relay's session ends") {
    REQUIRE(local.apply(authorized("r1", bridge("b1", "t1", 100)), 1'000).size() == 1);
    const auto frames = local.apply({LocalChange::Kind::kDropped, "r1", {}, {}}, 1'010);
    REQUIRE(frames.size() == 1);
    CHECK(std::get<Detached>(frames[0]).bridgeId == "b1");
  }
  SUBCASE("no attached report within the bound") {
    REQUIRE(local.apply(authorized("r1", bridge("b1", "t1", 100)), 1'000).size() == 1);
    REQUIRE(local.apply(authorized("r1", bridge("b2", "t1", 100)), 5'000).size() == 1);
    CHECK(local.expirePending(1'000 + kPendingAttachMs - 1).empty());
    auto frames = local.expirePending(1'000 + kPendingAttachMs);
    REQUIRE(frames.size() == 1);
    CHECK(std::get<Detached>(frames[0]).bridgeId == "b1");
    CHECK(std::get<Detached>(frames[0]).sequence == 3);
    CHECK(local.pending() == 1);  // b2's bound runs from its own authorization
    frames = local.expirePending(5'000 + kPendingAttachMs);
    REQUIRE(frames.size() == 1);
    CHECK(std::get<Detached>(frames[0]).bridgeId == "b2");
  }
  CHECK(local.size() <= 1);
  CHECK(local.pending() == 0);
}

TEST_CASE("local bridges: a report that differs from the authorization is announced again") {
  LocalBridges local("m-a");
  REQUIRE(local.apply(authorized("r1", bridge("b1", "t1", 100, {"api"})), 1'000).size() == 1);
  const auto frames = local.apply(attached("r1", bridge("b1", "t1", 150, {"www"})), 1'010);
  REQUIRE(frames.size() == 1);
  CHECK(std::get<Attached>(frames[0]).bridge.routes == std::vector<std::string>{"www"});
  CHECK(std::get<Attached>(frames[0]).sequence == 2);
  CHECK(local.pending() == 0);
}

TEST_CASE("local bridges: attaches reported without an authorization behave as before") {
  LocalBridges local("m-a");
  auto frames = local.apply(attached("r1", bridge("b1", "t1", 100)), 1'000);
  REQUIRE(frames.size() == 1);
  CHECK(local.pending() == 0);
  CHECK(local.expirePending(1'000'000).empty());
  // The same report again: nothing; a changed one: announced.
  CHECK(local.apply(attached("r1", bridge("b1", "t1", 100)), 1'001).empty());
  CHECK(local.apply(attached("r1", bridge("b1", "t1", 101)), 1'002).size() == 1);
}

TEST_CASE("local bridges: the pending bound runs from the bridge's latest authorization") {
  LocalBridges local("m-a");
  // Authorized, detached, then authorized again under the same ID with other routes: the first
  // authorization's expiry must not take the second one away.
  REQUIRE(local.apply(authorized("r1", bridge("b1", "t1", 100, {"api"})), 1'000).size() == 1);
  REQUIRE(local.apply({LocalChange::Kind::kDetached, "r1", {}, "b1"}, 1'100).size() == 1);
  REQUIRE(local.apply(authorized("r1", bridge("b1", "t1", 200, {"www"})), 4'000).size() == 1);
  // Re-authorized in place with changed routes (announced again), bound from 6'000.
  REQUIRE(local.apply(authorized("r1", bridge("b2", "t1", 100, {"a"})), 2'000).size() == 1);
  REQUIRE(local.apply(authorized("r1", bridge("b2", "t1", 300, {"b"})), 6'000).size() == 1);
  CHECK(local.pending() == 2);
  CHECK(local.expirePending(1'000 + kPendingAttachMs).empty());
  CHECK(local.expirePending(2'000 + kPendingAttachMs).empty());
  auto frames = local.expirePending(4'000 + kPendingAttachMs);
  REQUIRE(frames.size() == 1);
  CHECK(std::get<Detached>(frames[0]).bridgeId == "b1");
  frames = local.expirePending(6'000 + kPendingAttachMs);
  REQUIRE(frames.size() == 1);
  CHECK(std::get<Detached>(frames[0]).bridgeId == "b2");
  CHECK(local.pending() == 0);
  CHECK(local.size() == 0);
}

TEST_CASE("local bridges: confirmed bridges never expire, and the count follows") {
  LocalBridges local("m-a");
  for (int i = 0; i < 100; ++i) {
    const std::string id = "b" + std::to_string(i);
    REQUIRE(local.apply(authorized("r1", bridge(id, "t1", 100)), 1'000 + i).size() == 1);
    if (i % 2 == 0) CHECK(local.apply(attached("r1", bridge(id, "t1", 150)), 1'000 + i).empty());
  }
  CHECK(local.pending() == 50);
  const auto frames = local.expirePending(1'000 + 99 + kPendingAttachMs);
  CHECK(frames.size() == 50);
  CHECK(local.pending() == 0);
  CHECK(local.size() == 50);
  CHECK(local.expirePending(1'000'000).empty());
}
