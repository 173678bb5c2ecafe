// Usage per origin in relayd's tally (TunnelCounters.origins, docs/pools-usage.md): named origins
// get their share beside the tunnel's totals, unnamed bridges count in the totals only, each byte
// once, and the split is bounded and survives a report that could not be sent.
#include <doctest/doctest.h>

#include <string>

#include "relayd/control_mirror.h"

namespace v1 = ::opentunnel::control::v1;
using ot::relayd::UsageTally;

namespace {

const v1::OriginCounters* share(const v1::TunnelCounters& tunnel, const std::string& origin) {
  for (const auto& entry : tunnel.origins()) {
    if (entry.origin() == origin) return &entry;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("usage per origin: named origins split the totals, unnamed bridges only add to them") {
  UsageTally tally;
  tally.add("t1", 100, 1000, 1, 0, "charlie");
  tally.add("t1", 10, 20, 1, 0, "alpha");
  tally.add("t1", 5, 6, 1, 0, "charlie");
  tally.add("t1", 7, 8, 1, 0);           // an unnamed bridge
  tally.add("t1", 0, 0, 0, 3, "alpha");  // rejected visitors have no origin's share
  tally.add("t2", 1, 1, 1, 0, "alpha");
  auto taken = tally.take(1000, 2000);
  REQUIRE(taken.has_value());
  const v1::Counters& counters = taken->counters();
  REQUIRE(counters.tunnels_size() == 2);
  const v1::TunnelCounters& t1 = counters.tunnels(0);
  CHECK(t1.tunnel_id() == "t1");
  CHECK(t1.bytes_in() == 122);
  CHECK(t1.bytes_out() == 1034);
  CHECK(t1.connections() == 4);
  CHECK(t1.rejected_connections() == 3);
  REQUIRE(t1.origins_size() == 2);
  CHECK(t1.origins(0).origin() == "alpha");  // by name, whatever closed first
  CHECK(t1.origins(0).bytes_in() == 10);
  CHECK(t1.origins(0).bytes_out() == 20);
  CHECK(t1.origins(0).connections() == 1);
  CHECK(t1.origins(1).origin() == "charlie");
  CHECK(t1.origins(1).bytes_in() == 105);
  CHECK(t1.origins(1).bytes_out() == 1006);
  CHECK(t1.origins(1).connections() == 2);
  REQUIRE(counters.tunnels(1).origins_size() == 1);
  CHECK(counters.tunnels(1).origins(0).bytes_in() == 1);
  CHECK(tally.empty());
}

TEST_CASE("usage per origin: a report put back keeps its split and counts each byte once") {
  UsageTally tally;
  tally.add("t1", 10, 20, 1, 0, "alpha");
  tally.add("t1", 1, 2, 1, 0);
  auto first = tally.take(1000, 2000);
  REQUIRE(first.has_value());
  tally.add("t1", 5, 5, 1, 0, "alpha");
  tally.add("t1", 3, 3, 1, 0, "bravo");
  tally.restore(first->counters());
  auto again = tally.take(1000, 3000);
  REQUIRE(again.has_value());
  const v1::TunnelCounters& t1 = again->counters().tunnels(0);
  CHECK(t1.bytes_in() == 19);
  CHECK(t1.bytes_out() == 30);
  CHECK(t1.connections() == 4);
  REQUIRE(t1.origins_size() == 2);
  CHECK(share(t1, "alpha")->bytes_in() == 15);
  CHECK(share(t1, "alpha")->bytes_out() == 25);
  CHECK(share(t1, "alpha")->connections() == 2);
  CHECK(share(t1, "bravo")->bytes_in() == 3);
}

TEST_CASE("usage per origin: at most kMaxOriginsPerTunnel shares, the rest in the totals only") {
  UsageTally tally;
  const size_t extra = 3;
  for (size_t i = 0; i < UsageTally::kMaxOriginsPerTunnel + extra; ++i) {
    tally.add("t1", 1, 1, 1, 0, "o" + std::to_string(100 + i));
  }
  tally.add("t1", 1, 1, 1, 0, "o100");  // a kept origin still adds up
  auto taken = tally.take(1, 2);
  REQUIRE(taken.has_value());
  const v1::TunnelCounters& t1 = taken->counters().tunnels(0);
  CHECK(t1.bytes_in() == UsageTally::kMaxOriginsPerTunnel + extra + 1);
  CHECK(static_cast<size_t>(t1.origins_size()) == UsageTally::kMaxOriginsPerTunnel);
  CHECK(share(t1, "o100")->bytes_in() == 2);
  CHECK(share(t1, "o" + std::to_string(100 + UsageTally::kMaxOriginsPerTunnel)) == nullptr);
}
