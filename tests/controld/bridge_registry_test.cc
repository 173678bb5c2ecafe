#include "controld/relays/bridge_registry.h"

#include <doctest/doctest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

using ot::controld::BridgeEntry;
using ot::controld::BridgeRegistry;

namespace {

BridgeEntry bridge(std::string id, std::string tunnel) {
  BridgeEntry entry;
  entry.bridgeId = std::move(id);
  entry.tunnelId = std::move(tunnel);
  entry.routes = {""};
  return entry;
}

}  // namespace

TEST_CASE("bridge registry: snapshots replace a relay's bridges, deltas adjust them") {
  BridgeRegistry registry;
  registry.replaceRelay("m1/1",
                        {bridge("b1", "alpha"), bridge("b2", "alpha"), bridge("b3", "beta")});
  CHECK(registry.bridgeCount("alpha") == 2);
  CHECK(registry.bridgeCount("beta") == 1);
  CHECK(registry.bridgeCount("gamma") == 0);

  registry.attached("m2/7", bridge("b1", "alpha"));  // same bridge id on another relay is distinct
  CHECK(registry.bridgeCount("alpha") == 3);
  registry.attached("m2/7", bridge("b1", "alpha"));  // a repeated delta does not double count
  CHECK(registry.bridgeCount("alpha") == 3);

  registry.detached("m1/1", "b2");
  registry.detached("m1/1", "unknown");
  CHECK(registry.bridgeCount("alpha") == 2);

  // A new snapshot from m1 replaces all of m1's entries and leaves m2's alone.
  registry.replaceRelay("m1/1", {bridge("b9", "beta")});
  CHECK(registry.bridgeCount("alpha") == 1);
  CHECK(registry.bridgeCount("beta") == 1);
  auto totals = registry.totals();
  CHECK(totals.relays == 2);
  CHECK(totals.bridges == 2);
  CHECK(totals.tunnels == 2);

  registry.dropRelay("m2/7");
  CHECK(registry.bridgeCount("alpha") == 0);
  CHECK(registry.bridgesOf("beta").size() == 1);
  CHECK(registry.bridgesOf("beta").front().bridgeId == "b9");
  CHECK(registry.totals().tunnels == 1);
}

TEST_CASE("bridge registry: an attach that moves a bridge to another tunnel re-indexes it") {
  BridgeRegistry registry;
  registry.attached("m1/1", bridge("b1", "alpha"));
  registry.attached("m1/1", bridge("b1", "beta"));
  CHECK(registry.bridgeCount("alpha") == 0);
  CHECK(registry.bridgeCount("beta") == 1);
}

namespace {

BridgeEntry routed(std::string id, std::string tunnel, std::vector<std::string> routes) {
  BridgeEntry entry = bridge(std::move(id), std::move(tunnel));
  entry.routes = std::move(routes);
  return entry;
}

std::set<std::string> idsOf(const BridgeRegistry& registry, const std::string& tunnel) {
  std::set<std::string> ids;
  for (const auto& entry : registry.bridgesOf(tunnel)) ids.insert(entry.bridgeId);
  return ids;
}

// The registry's answers recomputed from a plain list of every live bridge.
struct Model {
  std::map<std::pair<std::string, std::string>, BridgeEntry> bridges;  // (relay, id) -> entry

  void replace(const std::string& relay, const std::vector<BridgeEntry>& entries) {
    std::erase_if(bridges, [&](const auto& item) { return item.first.first == relay; });
    for (const auto& entry : entries) bridges[{relay, entry.bridgeId}] = entry;
  }
  [[nodiscard]] std::multiset<std::string> ids(const std::string& tunnel) const {
    std::multiset<std::string> out;
    for (const auto& [key, entry] : bridges) {
      if (entry.tunnelId == tunnel) out.insert(entry.bridgeId);
    }
    return out;
  }
  [[nodiscard]] size_t routeCountWith(const std::string& tunnel,
                                      const std::vector<std::string>& requested) const {
    std::set<std::string> routes(requested.begin(), requested.end());
    for (const auto& [key, entry] : bridges) {
      if (entry.tunnelId == tunnel) routes.insert(entry.routes.begin(), entry.routes.end());
    }
    return routes.size();
  }
};

}  // namespace

TEST_CASE("bridge registry: the per-tunnel index follows snapshots, deltas and drops") {
  BridgeRegistry registry;
  registry.replaceRelay("m1/1", {routed("b1", "alpha", {"", "api"}), routed("b2", "alpha", {"api"}),
                                 routed("b3", "beta", {"www"})});
  CHECK(idsOf(registry, "alpha") == std::set<std::string>{"b1", "b2"});
  CHECK(registry.routeCountWith("alpha", {}) == 2);
  CHECK(registry.routeCountWith("alpha", {"api", "new", "new"}) == 3);
  CHECK(registry.routeCountWith("gamma", {"a", "b", "a"}) == 2);

  // b1 leaves: "" goes with it, "api" stays claimed by b2.
  registry.detached("m1/1", "b1");
  CHECK(registry.routeCountWith("alpha", {}) == 1);
  CHECK(registry.routeCountWith("alpha", {""}) == 2);
  // b2 is re-reported with other routes: its old claims go.
  registry.attached("m1/1", routed("b2", "alpha", {"x"}));
  CHECK(registry.routeCountWith("alpha", {"api"}) == 2);
  // ... and then moves to beta.
  registry.attached("m1/1", routed("b2", "beta", {"y"}));
  CHECK(registry.bridgesOf("alpha").empty());
  CHECK(registry.routeCountWith("alpha", {}) == 0);
  CHECK(registry.routeCountWith("beta", {}) == 2);
  CHECK(idsOf(registry, "beta") == std::set<std::string>{"b2", "b3"});

  // A snapshot replaces every entry of the relay, and only of that relay.
  registry.attached("m2/1", routed("b2", "beta", {"www", "z"}));
  registry.replaceRelay("m1/1", {routed("b5", "alpha", {"q"})});
  CHECK(idsOf(registry, "beta") == std::set<std::string>{"b2"});
  CHECK(registry.routeCountWith("beta", {}) == 2);
  CHECK(idsOf(registry, "alpha") == std::set<std::string>{"b5"});
  registry.dropRelay("m2/1");
  CHECK(registry.bridgesOf("beta").empty());
  CHECK(registry.routeCountWith("beta", {"www"}) == 1);
  const auto totals = registry.totals();
  CHECK(totals.bridges == 1);
  CHECK(totals.tunnels == 1);
  CHECK(totals.relays == 1);  // m1 (a dropped relay is forgotten)
}

TEST_CASE("bridge registry: random snapshots and deltas agree with a full walk") {
  BridgeRegistry registry;
  Model model;
  std::mt19937 random(7);
  auto pick = [&](size_t n) -> size_t { return random() % n; };
  const std::vector<std::string> relays{"m1/1", "m2/1", "m3/2"};
  const std::vector<std::string> tunnels{"t0", "t1", "t2", "t3"};
  const std::vector<std::string> routes{"", "api", "www", "db"};
  auto randomBridge = [&] {
    std::vector<std::string> claimed;
    for (const auto& route : routes) {
      if (pick(2) == 0) claimed.push_back(route);
    }
    return routed("b" + std::to_string(pick(12)), tunnels[pick(4)], claimed);
  };
  for (int step = 0; step < 3000; ++step) {
    const std::string& relay = relays[pick(3)];
    switch (pick(10)) {
      case 0: {
        std::vector<BridgeEntry> snapshot;
        std::set<std::string> seen;
        for (size_t i = pick(6); i > 0; --i) {
          BridgeEntry entry = randomBridge();
          if (seen.insert(entry.bridgeId).second) snapshot.push_back(entry);
        }
        registry.replaceRelay(relay, snapshot);
        model.replace(relay, snapshot);
        break;
      }
      case 1:
        registry.dropRelay(relay);
        model.replace(relay, {});
        break;
      case 2:
      case 3:
      case 4: {
        const std::string id = "b" + std::to_string(pick(12));
        registry.detached(relay, id);
        model.bridges.erase({relay, id});
        break;
      }
      default: {
        BridgeEntry entry = randomBridge();
        model.bridges[{relay, entry.bridgeId}] = entry;
        registry.attached(relay, entry);
        break;
      }
    }
    for (const auto& tunnel : tunnels) {
      CAPTURE(step);
      CAPTURE(tunnel);
      std::multiset<std::string> ids;
      for (const auto& entry : registry.bridgesOf(tunnel)) ids.insert(entry.bridgeId);
      REQUIRE(ids == model.ids(tunnel));
      REQUIRE(registry.bridgeCount(tunnel) == ids.size());
      REQUIRE(registry.routeCountWith(tunnel, {}) == model.routeCountWith(tunnel, {}));
      REQUIRE(registry.routeCountWith(tunnel, {"db", "new"}) ==
              model.routeCountWith(tunnel, {"db", "new"}));
    }
    REQUIRE(registry.totals().bridges == model.bridges.size());
  }
}
