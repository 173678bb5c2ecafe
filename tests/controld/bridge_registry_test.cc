#include "controld/relays/bridge_registry.h"

#include <doctest/doctest.h>

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
